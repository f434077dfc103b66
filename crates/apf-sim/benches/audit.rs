//! What auditing costs the simulator: a minute of the storm scenario simulated (10 ms ticks), without audit events
//! and with every request's event noted and rendered as the cluster's sink does each second.
//!
//! Run: `cargo bench -p apf-sim --bench audit -- --warm-up-time 1 --measurement-time 5`

use std::hint::black_box;
use std::time::Duration;

use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
use criterion::{criterion_group, criterion_main, Criterion};

fn storm() -> Simulator {
    let scenario = Scenario::load(&ScenarioSource::Storm).unwrap_or_else(|e| panic!("storm: {e}"));
    Simulator::new(SimOptions::new(KubeVersion::new(34, 0), scenario))
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("storm-60s");
    group.sample_size(10);
    group.bench_function("no audit (baseline)", |b| {
        b.iter(|| {
            let sim = storm();
            for _ in 0..60 {
                sim.step(Duration::from_secs(1));
            }
            black_box(sim.truth().len())
        })
    });
    group.bench_function("audit events noted and rendered", |b| {
        b.iter(|| {
            let sim = storm();
            sim.enable_audit();
            let mut bytes = 0;
            for _ in 0..60 {
                sim.step(Duration::from_secs(1));
                bytes += sim
                    .drain_audit_events()
                    .iter()
                    .map(|l| l.len() + 1)
                    .sum::<usize>();
            }
            black_box(bytes)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
