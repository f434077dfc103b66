//! A scrape round of `/metrics` against the bare download of the same bytes from the same sender: how close a round
//! (fetch, streaming parse, snapshot) comes to the limit the network and the HTTP client set. The sender is another
//! process serving the body by sendfile(2) on loopback, so it is not what is measured. Two baselines: the daemon's own
//! HTTP client dropping the body (the strict one) and `curl -o /dev/null` (issue 20's).
//!
//! The same for a round over a Prometheus holding 100 clusters of 3 replicas (458k APF series; a fake in the child
//! process, answering as Prometheus would): the round's queries, JSON decoding and snapshots of the 300 replicas,
//! against the bare download of the same answers.
//!
//! And the parse alone, in memory: the same bodies in each format into a snapshot (`parse-in-memory`).
//!
//! Run: `cargo bench --bench round -- --warm-up-time 1 --measurement-time 5`

use std::hint::black_box;
use std::time::Duration;

use apf_monitor::scrape::prometheus::{read_round, ObjectCounts, PrometheusSource};
use apf_monitor::scrape::{scrape_replica, Endpoint, ScrapePlan};
use apf_monitor::targets::{build_static, PrometheusTarget, StaticTarget};
use apf_monitor::values::parse_target_url;
use criterion::{criterion_group, Criterion, Throughput};
use futures_util::StreamExt;

mod common;

fn bench(c: &mut Criterion) {
    let rt = apf_monitor::daemon::runtime().unwrap_or_else(|e| panic!("runtime: {e}"));
    // The text groups ask for text only; the protobuf ones ask as the daemon does by default, and the sender answers
    // the same families in protobuf, as kube-apiserver does: the baseline downloads the same bytes, asked the same way.
    for (name, body, protobuf) in [
        ("capture-3.4MB", "capture", false),
        ("100MB", "100MB", false),
        ("capture-protobuf", "capture", true),
        ("100MB-protobuf", "100MB", true),
    ] {
        let text = common::body(body);
        let len = if protobuf {
            common::protobuf_of(&text).len() as u64
        } else {
            text.len() as u64
        };
        let senders = common::spawn_senders(body, 1);
        let url = senders.urls[0].clone();
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
            flows_per_schema: None,
            protobuf,
        };
        let accept = protobuf.then_some(apf::parse::protobuf::ACCEPT);
        let client = reqwest::Client::new();
        let scrape_client = common::scrape_client(&url);
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(len));
        group.sample_size(10);
        // The daemon's own HTTP client (hyper, read buffers up to 128 KiB), the body dropped as it arrives.
        group.bench_function("bare download (baseline)", |b| {
            b.iter(|| {
                let client = scrape_client.clone();
                let n = on_worker(&rt, async move { common::download(&client, accept).await });
                black_box(n.unwrap_or_else(|e| panic!("GET: {e}")))
            })
        });
        // reqwest's (hyper's default read buffers, up to ~400 KiB): the client the daemon used before.
        group.bench_function("bare download, reqwest", |b| {
            b.iter(|| {
                let (client, url) = (client.clone(), url.clone());
                on_worker(&rt, async move {
                    let mut request = client.get(format!("{url}/metrics"));
                    if let Some(accept) = accept {
                        request = request.header(reqwest::header::ACCEPT, accept);
                    }
                    let response = request.send().await.unwrap_or_else(|e| panic!("GET: {e}"));
                    let mut stream = response.bytes_stream();
                    let mut n = 0usize;
                    while let Some(chunk) = stream.next().await {
                        n += chunk.map(|c| c.len()).unwrap_or(0);
                    }
                    black_box(n)
                })
            })
        });
        // `curl -o /dev/null`, the baseline issue 20 names: a process of its own (its start included, as typed),
        // libcurl's 16 KiB reads. Skipped where there is no curl.
        if curl_found() {
            group.bench_function("curl -o /dev/null", |b| {
                b.iter(|| {
                    let mut curl = std::process::Command::new("curl");
                    curl.args(["--silent", "--fail", "--output", "/dev/null"]);
                    if let Some(accept) = accept {
                        curl.args(["--header", &format!("Accept: {accept}")]);
                    }
                    let status = curl
                        .arg(format!("{url}/metrics"))
                        .status()
                        .unwrap_or_else(|e| panic!("curl: {e}"));
                    assert!(status.success(), "curl: {status}");
                })
            });
        }
        group.bench_function("scrape round", |b| {
            b.iter(|| {
                let (target, plan) = (target.clone(), plan.clone());
                let round = on_worker(&rt, async move { scrape_replica(&target, &plan).await });
                black_box(round.snapshot.map(|s| s.levels.len()))
            })
        });
        group.finish();
    }
    fleet(c, &rt);
    in_memory(c);
}

/// Runs `work` as the daemon runs a replica's scrape: in a task on the runtime's workers, whose threads also wait on
/// the sockets. A future given to `block_on` runs on the bench's own thread instead, woken by a worker's at each read
/// that finds the socket empty: a hop between threads the daemon does not make.
fn on_worker<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    rt.block_on(rt.spawn(work))
        .unwrap_or_else(|e| panic!("the task: {e}"))
}

/// Whether `curl` runs here.
fn curl_found() -> bool {
    std::process::Command::new("curl")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The parse alone, with no network: each body in 64 KiB chunks (as a download delivers it) into a snapshot, the
/// daemon's filter, in each format.
fn in_memory(c: &mut Criterion) {
    use apf::model::{is_wanted_sample, SnapshotBuilder};
    use apf::parse::MetricsParser;
    let mut group = c.benchmark_group("parse-in-memory");
    group.sample_size(10);
    for (name, body) in [("capture", "capture"), ("100MB", "100MB")] {
        let text = common::body(body);
        let protobuf = common::protobuf_of(&text);
        for (format, bytes, content_type) in [
            ("text", &text, "text/plain"),
            ("protobuf", &protobuf, apf::parse::protobuf::CONTENT_TYPE),
        ] {
            group.throughput(Throughput::Bytes(bytes.len() as u64));
            group.bench_function(format!("{name}, {format}"), |b| {
                b.iter(|| {
                    let mut builder = SnapshotBuilder::new();
                    let mut parser =
                        MetricsParser::new(Some(content_type), is_wanted_sample, 1 << 20);
                    for chunk in bytes.chunks(64 << 10) {
                        parser.feed(chunk, &mut builder);
                    }
                    let stats = parser.finish(&mut builder);
                    black_box((builder.finish().levels.len(), stats.samples))
                })
            });
        }
    }
    group.finish();
}

fn fleet(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let senders = common::spawn_prometheus(100);
    let url = senders.urls[0].clone();
    let (cluster_label, apiserver_label) = common::FLEET_LABELS;
    let config = PrometheusTarget {
        cluster_label: cluster_label.into(),
        apiserver_label: apiserver_label.into(),
        ..PrometheusTarget::from_url(
            parse_target_url(&url).unwrap_or_else(|e| panic!("{url}: {e}")),
        )
    };
    let source = PrometheusSource::build(&config, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("source: {e}"));
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default()
    };
    // The first round makes the answers the download reads back.
    let first = rt
        .block_on(read_round(
            &source,
            now(),
            60.0,
            |_| false,
            &mut ObjectCounts::default(),
        ))
        .unwrap_or_else(|e| panic!("round: {e}"));
    assert_eq!(first.replicas.len(), 300, "every replica of the fleet");
    let client = reqwest::Client::new();
    let mut group = c.benchmark_group("prometheus-100x3");
    group.sample_size(10);
    group.bench_function("bare download of the answers (baseline)", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut n = 0usize;
                // As the round does, 8 answers in flight.
                let downloads = (0..).map(|i| {
                    let client = &client;
                    let url = &url;
                    async move {
                        let response =
                            client.get(format!("{url}/answers/{i}")).send().await.ok()?;
                        if !response.status().is_success() {
                            return None;
                        }
                        response.bytes().await.ok().map(|b| b.len())
                    }
                });
                let mut answers = futures_util::stream::iter(downloads).buffered(8);
                while let Some(Some(len)) = answers.next().await {
                    n += len;
                }
                black_box(n)
            })
        })
    });
    group.bench_function("round", |b| {
        b.iter(|| {
            let round = rt.block_on(read_round(
                &source,
                now(),
                60.0,
                |_| false,
                &mut ObjectCounts::default(),
            ));
            black_box(round.map(|r| r.replicas.len()).unwrap_or(0))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    // Run again as the sender, this program serves and never returns.
    common::serve_if_sender();
    // The daemon's allocator settings (one arena, a fixed mmap threshold): its rounds are what is measured.
    benches();
    Criterion::default().configure_from_args().final_summary();
}
