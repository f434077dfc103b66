//! A scrape round of `/metrics` against the bare download of the same bytes from the same sender: how close a round
//! (fetch, streaming parse, snapshot) comes to the limit the network and the HTTP client set. The sender is an axum
//! server on loopback serving the body from memory, so it is not what is measured.
//!
//! Run: `cargo bench --bench round -- --warm-up-time 1 --measurement-time 5`

use std::hint::black_box;
use std::time::Duration;

use apf_monitor::scrape::{scrape_replica, Endpoint, ScrapePlan};
use apf_monitor::targets::{build_static, StaticTarget};
use apf_monitor::values::parse_target_url;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::StreamExt;

mod common;
use common::{capture, hundred_mb, sender};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let one = capture();
    let big = hundred_mb(&one);
    for (name, body) in [("capture-3.4MB", one), ("100MB", big)] {
        let len = body.len() as u64;
        let url = rt.block_on(sender(bytes::Bytes::from(body)));
        let target = build_static(
            &[StaticTarget::from_url(
                parse_target_url(&url).unwrap_or_else(|e| panic!("{url}: {e}")),
            )],
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("target: {e}"))
        .remove(0);
        let plan = ScrapePlan {
            endpoints: vec![Endpoint::Metrics],
            request_details: false,
            max_body_bytes: 1 << 30,
            max_line_bytes: 1 << 20,
        };
        let client = reqwest::Client::new();
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(len));
        group.sample_size(10);
        group.bench_function("bare download (baseline)", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let response = client
                        .get(format!("{url}/metrics"))
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("GET: {e}"));
                    let mut stream = response.bytes_stream();
                    let mut n = 0usize;
                    while let Some(chunk) = stream.next().await {
                        n += chunk.map(|c| c.len()).unwrap_or(0);
                    }
                    black_box(n)
                })
            })
        });
        group.bench_function("scrape round", |b| {
            b.iter(|| {
                let round = rt.block_on(scrape_replica(&target, &plan));
                black_box(round.snapshot.map(|s| s.levels.len()))
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
