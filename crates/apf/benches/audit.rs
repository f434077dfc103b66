//! Throughput of "who got the 429s": audit events read (`parse_event`) and classified and counted
//! (`Ledger::classify`) on the default objects of 1.33, against reading the same lines as untyped JSON (the least a
//! reader of them must do).
//!
//! Run: `cargo bench -p apf --bench audit -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::io::Read;

use apf::audit::{Ledger, Limits};
use apf::parse::audit::parse_event;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn objects() -> apf::model::FlowcontrolObjects {
    let mut text = String::new();
    for kind in ["flowschemas", "prioritylevelconfigurations"] {
        let path = format!(
            "{}/../../tests/fixtures/defaults-1.33-{kind}.yaml.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        text.push_str("\n---\n");
    }
    apf::model::parse_flowcontrol_documents(&text).unwrap_or_else(|e| panic!("objects: {e}"))
}

/// 10,000 events at level Metadata as kube-apiserver writes them: 200 service accounts listing pods (a third
/// answered 429, with the queue-wait annotation), nodes, and controllers.
fn events() -> Vec<String> {
    (0..10_000)
        .map(|i| {
            let (user, groups) = match i % 4 {
                0 | 1 => (
                    format!("system:serviceaccount:team-{}:agent", i % 200),
                    format!(r#"["system:serviceaccounts","system:serviceaccounts:team-{}","system:authenticated"]"#, i % 200),
                ),
                2 => (format!("system:node:node-{}", i % 50), r#"["system:nodes","system:authenticated"]"#.to_string()),
                _ => ("system:kube-controller-manager".to_string(), r#"["system:authenticated"]"#.to_string()),
            };
            let code = if i % 3 == 0 { 429 } else { 200 };
            format!(
                r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5a1a3b5e-0c2d-4d4f-9c59-{i:012}","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/team-{ns}/pods?limit=500","verb":"list","user":{{"username":"{user}","uid":"3c5b","groups":{groups}}},"sourceIPs":["10.0.3.7"],"userAgent":"agent/1.4 (linux/amd64) kubernetes/abc","objectRef":{{"resource":"pods","namespace":"team-{ns}","apiVersion":"v1"}},"responseStatus":{{"metadata":{{}},"code":{code}}},"requestReceivedTimestamp":"2026-11-24T10:00:01.000100Z","stageTimestamp":"2026-11-24T10:00:01.250200Z","annotations":{{"apiserver.latency.k8s.io/apf-queue-wait":"12.345678ms","authorization.k8s.io/decision":"allow"}}}}"#,
                ns = i % 200
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let objects = objects();
    let lines = events();
    let mut group = c.benchmark_group("audit-10k-events");
    group.throughput(Throughput::Elements(lines.len() as u64));
    group.bench_function("parse_event + classify", |b| {
        b.iter(|| {
            let mut ledger = Ledger::new(Limits::default());
            for l in &lines {
                if let Ok(Some(r)) = parse_event(black_box(l.as_bytes())) {
                    let _ = ledger.classify(&r, &objects.flow_schemas, &objects.priority_levels);
                }
            }
            black_box(ledger.counts())
        })
    });
    group.bench_function("parse_event", |b| {
        b.iter(|| {
            let n = lines
                .iter()
                .filter(|l| matches!(parse_event(black_box(l.as_bytes())), Ok(Some(_))))
                .count();
            black_box(n)
        })
    });
    group.bench_function("serde_json::Value (baseline)", |b| {
        b.iter(|| {
            let n = lines
                .iter()
                .filter(|l| {
                    serde_json::from_slice::<serde_json::Value>(black_box(l.as_bytes())).is_ok()
                })
                .count();
            black_box(n)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
