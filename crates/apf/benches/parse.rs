//! Throughput of the exposition parser on the biggest real capture, against prometheus-parse.
//!
//! Run: `cargo bench --bench parse -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::io::Read;

use apf::model::{is_wanted_sample, ReplicaSnapshot, SnapshotBuilder};
use apf::parse::exposition::{parse_all, ExpositionParser, ParseStats, Sample};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// The daemon's parse: the model's filter, the body in `chunk`s.
fn daemon_parse(input: &[u8], chunk: usize) -> (u64, ParseStats) {
    let mut n = 0u64;
    let mut sink = |_: &Sample<'_>| n += 1;
    let mut parser = ExpositionParser::new(is_wanted_sample, 1 << 20);
    for chunk in input.chunks(chunk) {
        parser.feed(chunk, &mut sink);
    }
    let stats = parser.finish(&mut sink);
    (n, stats)
}

/// What a scrape does with `/metrics`: the model's filter, every wanted sample into the replica's snapshot.
fn snapshot_parse(input: &[u8], chunk: usize) -> (ReplicaSnapshot, ParseStats) {
    let mut builder = SnapshotBuilder::new();
    let mut parser = ExpositionParser::new(is_wanted_sample, 1 << 20);
    for chunk in input.chunks(chunk) {
        parser.feed(chunk, &mut builder);
    }
    let stats = parser.finish(&mut builder);
    (builder.finish(), stats)
}

fn capture() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/metrics-v1.34.txt.gz"
    );
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    out
}

fn bench(c: &mut Criterion) {
    let input = capture();
    let text = String::from_utf8(input.clone()).unwrap_or_else(|e| panic!("capture: {e}"));

    let mut group = c.benchmark_group("metrics-v1.34");
    group.throughput(Throughput::Bytes(input.len() as u64));
    group.bench_function("ours, the families the daemon reads", |b| {
        b.iter(|| black_box(daemon_parse(black_box(&input), usize::MAX)))
    });
    group.bench_function("ours, into a snapshot", |b| {
        b.iter(|| black_box(snapshot_parse(black_box(&input), usize::MAX)))
    });
    group.bench_function("ours, no filter", |b| {
        b.iter(|| {
            let mut labels = 0usize;
            let stats = parse_all(black_box(&input), |_| true, &mut |s: &Sample<'_>| {
                labels += s.labels.len()
            });
            black_box((labels, stats))
        })
    });
    group.bench_function("prometheus-parse (baseline)", |b| {
        b.iter(|| {
            let lines = black_box(text.as_str())
                .lines()
                .map(|l| Ok::<_, std::io::Error>(l.to_owned()));
            black_box(prometheus_parse::Scrape::parse(lines).map(|s| s.samples.len()))
        })
    });
    group.finish();

    // A very large cluster's scrape: the capture repeated to ~100 MB, streamed in 64 KiB chunks.
    let copies = (100 << 20) / input.len() + 1;
    let big: Vec<u8> = input.repeat(copies);
    let mut group = c.benchmark_group("100MB");
    group.throughput(Throughput::Bytes(big.len() as u64));
    group.sample_size(10);
    group.bench_function("ours, the families the daemon reads, 64 KiB chunks", |b| {
        b.iter(|| black_box(daemon_parse(black_box(&big), 64 << 10)))
    });
    group.bench_function("ours, into a snapshot, 64 KiB chunks", |b| {
        b.iter(|| black_box(snapshot_parse(black_box(&big), 64 << 10)))
    });
    // As a scrape meets them: each 128 KiB read (the client's buffer) just copied in by the kernel, in cache.
    let mut read_buffer = vec![0u8; 128 << 10];
    group.bench_function("each read copied in, the copies alone (baseline)", |b| {
        b.iter(|| {
            for chunk in black_box(&big).chunks(128 << 10) {
                read_buffer[..chunk.len()].copy_from_slice(chunk);
                black_box(&read_buffer);
            }
        })
    });
    group.bench_function(
        "ours, the families the daemon reads, each read copied in first",
        |b| {
            b.iter(|| {
                let mut n = 0u64;
                let mut sink = |_: &Sample<'_>| n += 1;
                let mut parser = ExpositionParser::new(is_wanted_sample, 1 << 20);
                for chunk in black_box(&big).chunks(128 << 10) {
                    read_buffer[..chunk.len()].copy_from_slice(chunk);
                    parser.feed(&read_buffer[..chunk.len()], &mut sink);
                }
                let stats = parser.finish(&mut sink);
                black_box((n, stats))
            })
        },
    );
    group.bench_function("ours, no filter, 64 KiB chunks", |b| {
        b.iter(|| {
            let mut labels = 0usize;
            let mut sink = |s: &Sample<'_>| labels += s.labels.len();
            let mut parser = ExpositionParser::new(|_: &str| true, 1 << 20);
            for chunk in black_box(&big).chunks(64 << 10) {
                parser.feed(chunk, &mut sink);
            }
            let stats = parser.finish(&mut sink);
            black_box((labels, stats))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
