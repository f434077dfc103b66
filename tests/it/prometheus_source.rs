//! `check --prometheus`: a real Prometheus (Debian's `prometheus`) scrapes three simulated apiservers of two
//! versions, labelled with two clusters; apf-monitor reads them through Prometheus' HTTP API and reports, per
//! cluster and replica, exactly the limits and seats each simulator serves, worst first, with the worst exit status.
use crate::common;

use std::process::Command;
use std::time::Duration;

use crate::common::external;
use apf_monitor::sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
use serde_json::Value;

fn sim(minor: u32, scenario: ScenarioSource) -> Simulator {
    Simulator::try_new(SimOptions::new(
        KubeVersion::new(minor, 0),
        Scenario::load(&scenario).unwrap(),
    ))
    .unwrap()
}

fn check(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("check")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_a_fleet_through_prometheus() {
    // Cluster a: one 1.34 replica under a storm. Cluster b: two idle 1.29 replicas.
    let (storm, idle1, idle2) = (
        sim(34, ScenarioSource::Storm),
        sim(29, ScenarioSource::Idle),
        sim(29, ScenarioSource::Idle),
    );
    let _clock = storm.spawn_clock(Duration::from_millis(100));
    let urls = [
        common::serve_sim(&storm).await,
        common::serve_sim(&idle1).await,
        common::serve_sim(&idle2).await,
    ];
    let host = |u: &str| u.trim_start_matches("http://").to_string();
    let scrape_configs = format!(
        "  - job_name: apiserver\n    static_configs:\n      - targets: ['{}']\n        labels: {{cluster: a}}\n      \
         - targets: ['{}', '{}']\n        labels: {{cluster: b}}\n",
        host(&urls[0]),
        host(&urls[1]),
        host(&urls[2])
    );
    let prom = external::prometheus_with(&scrape_configs, "groups: []\n").await;
    // Two scrapes of each target, for rates.
    let ready = common::eventually(Duration::from_secs(60), || async {
        let up =
            external::prom_query(&prom, r#"count_over_time(up{job="apiserver"}[1m]) >= 3"#).await;
        (up.len() == 3).then_some(())
    })
    .await;
    assert!(
        ready.is_some(),
        "Prometheus did not scrape the three replicas:\n{}",
        prom.log()
    );

    let (code, out) = check(&["--prometheus", &prom.url, "--output", "json"]);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    // The storm makes cluster a critical: the worst status, and its replica first.
    assert_eq!(code, Some(2), "{out}");
    let apiservers = report["apiservers"].as_array().unwrap();
    assert_eq!(apiservers.len(), 3, "{out}");
    assert_eq!(apiservers[0]["cluster"], "a", "{out}");
    assert_eq!(apiservers[0]["apiserver"], host(&urls[0]));
    let clusters: Vec<&str> = apiservers
        .iter()
        .map(|a| a["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(
        clusters.iter().filter(|c| **c == "b").count(),
        2,
        "{clusters:?}"
    );
    // Exactly what each simulator serves: limit, seats in use, headroom.
    for (a, sim) in [(&apiservers[1], &idle1), (&apiservers[2], &idle2)] {
        let truth = sim.truth();
        for level in a["levels"].as_array().unwrap() {
            let name = level["priority_level"].as_str().unwrap();
            let Some(t) = truth.iter().find(|t| t.priority_level == name) else {
                continue;
            };
            if t.exempt {
                continue;
            }
            assert_eq!(
                level["limit_seats"].as_f64(),
                Some(f64::from(t.current_limit_seats)),
                "{name}"
            );
            assert_eq!(
                level["executing_seats"].as_f64(),
                Some(f64::from(t.executing_seats)),
                "{name}"
            );
        }
        assert_eq!(a["kubernetes_version"], "v1.29.0");
    }
    // The storm's rejections come as rates from Prometheus' own counters, at the first round.
    let wl = apiservers[0]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["priority_level"] == "workload-low")
        .unwrap();
    let rejected: f64 = wl["rejected_per_second"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_f64)
        .sum();
    assert!(rejected > 0.0, "{wl}");

    // The table names the cluster of each replica.
    let (_, table) = check(&["--prometheus", &prom.url]);
    assert!(
        table.contains(&format!(
            "apiserver {} (v1.34.0) in cluster a",
            host(&urls[0])
        )),
        "{table}"
    );
    // Another cluster label: none of these series has it, so no replica names a cluster.
    let (_, out) = check(&[
        "--prometheus",
        &prom.url,
        "--cluster-label",
        "region",
        "--output",
        "json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let apiservers = report["apiservers"].as_array().unwrap();
    assert_eq!(apiservers.len(), 3, "{out}");
    assert!(
        apiservers.iter().all(|a| a.get("cluster").is_none()),
        "{out}"
    );
    // A selector that matches nothing, and a Prometheus that is not there: clear errors, UNKNOWN.
    let (code, out) = check(&[
        "--prometheus",
        &prom.url,
        "--selector",
        r#"{job="nothing"}"#,
    ]);
    assert_eq!(code, Some(3), "{out}");
    let dead = format!("http://127.0.0.1:{}", external::free_port());
    let (code, out) = check(&["--prometheus", &dead]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("cannot reach"), "{out}");
}
