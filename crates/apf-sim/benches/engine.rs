//! What the simulator's engine costs:
//! - `virtual-run`: `simulate --run` of 300 s of 1.34's 8 priority levels under 2,000 requests/s (issue 51 asks
//!   under 5 s);
//! - `serve-300s`: a served replica's work over 5 minutes of the ramp: the clock stepping every 100 ms and a
//!   scrape of `/metrics` every second, as `simulate` and a scraper do.
//!
//! - `predict`: one prediction of `plan --load` (issue 52 asks under 2 s): 50 flows over 1.34's 8 levels, about
//!   1,100 requests/s with workload-low overloaded, replayed through the default objects and through workload-low
//!   at 300 shares (3 seeds each, 30 s of lead-in, 20 s of warm-up and 2 minutes measured, as `plan --load` does).
//!
//! Run: `cargo bench -p apf-sim --bench engine -- --warm-up-time 1 --measurement-time 10`

use std::hint::black_box;
use std::time::Duration;

use apf_sim::{KubeVersion, ObservedFlow, Replay, Scenario, ScenarioSource, SimOptions, Simulator};
use criterion::{criterion_group, criterion_main, Criterion};

/// 2,000 requests/s over the version's levels: 7 of its 8 take a flow (catch-all takes what no other FlowSchema
/// matches: nothing here), each landing by its user and verb.
fn eight_levels() -> Scenario {
    let flows = [
        // (name, flow schema, user, groups, verb, resource, namespace, seats, duration, rps)
        (
            "admin",
            "exempt",
            "system:admin",
            "[system:masters]",
            "get",
            "pods",
            "",
            1,
            "20ms",
            100,
        ),
        (
            "kubelet",
            "system-nodes",
            "system:node:n1",
            "[system:nodes]",
            "get",
            "pods",
            "",
            1,
            "20ms",
            300,
        ),
        (
            "node-high",
            "system-node-high",
            "system:node:n1",
            "[system:nodes]",
            "update",
            "nodes",
            "",
            1,
            "10ms",
            200,
        ),
        (
            "leases",
            "system-leader-election",
            "system:kube-scheduler",
            "[]",
            "update",
            "leases",
            "kube-system",
            1,
            "10ms",
            100,
        ),
        (
            "kcm",
            "kube-controller-manager",
            "system:kube-controller-manager",
            "[]",
            "list",
            "endpoints",
            "kube-system",
            1,
            "40ms",
            400,
        ),
        (
            "agents",
            "service-accounts",
            "system:serviceaccount:monitoring:agent",
            "[]",
            "list",
            "pods",
            "",
            10,
            "2s",
            30,
        ),
        (
            "operator",
            "global-default",
            "alice",
            "[]",
            "get",
            "configmaps",
            "default",
            1,
            "30ms",
            800,
        ),
        (
            "other",
            "service-accounts",
            "system:serviceaccount:ci:runner",
            "[]",
            "get",
            "configmaps",
            "ci",
            1,
            "50ms",
            70,
        ),
    ];
    let mut yaml = String::from("duration: 300s\nflows:\n");
    for (name, fs, user, groups, verb, resource, ns, seats, dur, rps) in flows {
        yaml += &format!(
            "- {{name: {name}, flow_schema: {fs}, user: \"{user}\", groups: {groups}, verb: {verb}, resource: \
             {resource}, namespace: \"{ns}\", seats: {seats}, duration: {dur}, rate: [{{at: 0s, rps: {rps}}}]}}\n"
        );
    }
    Scenario::from_yaml(&yaml).unwrap_or_else(|e| panic!("scenario: {e}"))
}

/// 50 flows of a replica as `plan --load` observes them: each flow schema's load split over several flows (their
/// distinguishers), and a flood of 10-seat LISTs in workload-low.
fn observed_load() -> Vec<ObservedFlow> {
    // (flow schema, flows, requests/s of each, seats, execution in ms)
    let schemas = [
        ("exempt", 4, 25.0, 1, 20),
        ("system-nodes", 10, 30.0, 1, 20),
        ("system-node-high", 6, 30.0, 1, 10),
        ("system-leader-election", 4, 5.0, 1, 10),
        ("kube-controller-manager", 6, 10.0, 1, 300),
        ("service-accounts", 10, 30.0, 1, 50),
        ("global-default", 9, 10.0, 1, 100),
    ];
    let mut flows: Vec<ObservedFlow> = schemas
        .iter()
        .flat_map(|&(schema, n, rps, seats, ms)| {
            (0..n).map(move |i| ObservedFlow {
                name: format!("{schema}/{i}"),
                flow_schema: schema.to_string(),
                flow: format!("user-{i}"),
                request: None,
                requests_per_second: rps,
                seats,
                execution: Duration::from_millis(ms),
                profile: Vec::new(),
            })
        })
        .collect();
    flows.push(ObservedFlow {
        name: "agent".into(),
        flow_schema: "service-accounts".into(),
        flow: "agent".into(),
        request: None,
        requests_per_second: 30.0,
        seats: 10,
        execution: Duration::from_secs(2),
        profile: Vec::new(),
    });
    flows
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.sample_size(10);
    let scenario = eight_levels();
    group.bench_function("virtual-run 300s, 8 levels, 2000 rps", |b| {
        b.iter(|| {
            let report = apf_sim::run(SimOptions::new(KubeVersion::new(34, 0), scenario.clone()))
                .unwrap_or_else(|e| panic!("run: {e}"));
            black_box(report.flows.len())
        })
    });
    let ramp = Scenario::load(&ScenarioSource::Ramp).unwrap_or_else(|e| panic!("ramp: {e}"));
    group.bench_function("serve-300s ramp, 100 ms clock, scraped every second", |b| {
        b.iter(|| {
            let sim = Simulator::new(SimOptions::new(KubeVersion::new(34, 0), ramp.clone()));
            let mut bytes = 0;
            for _second in 0..300 {
                for _ in 0..10 {
                    sim.step(Duration::from_millis(100));
                }
                bytes += sim.render_metrics().len();
            }
            black_box(bytes)
        })
    });
    let v = KubeVersion::new(34, 0);
    let (schemas, levels) = apf_sim::default_configuration(v);
    let mut more = levels.clone();
    for l in more.iter_mut().filter(|l| l.name == "workload-low") {
        l.shares = Some(300);
    }
    let replay = Replay::new(v, 600, observed_load());
    group.bench_function("predict: 50 flows, 8 levels, before and after", |b| {
        b.iter(|| {
            let before =
                apf_sim::replay(&replay, &schemas, &levels).unwrap_or_else(|e| panic!("{e}"));
            let after = apf_sim::replay(&replay, &schemas, &more).unwrap_or_else(|e| panic!("{e}"));
            black_box(before.len() + after.len())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
