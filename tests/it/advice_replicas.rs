//! Rate advice over the demo's three unevenly loaded replicas (issue 50): each replica's row tells what the client
//! sends to that replica, the client gets one recommendation with its reason, and an idle client is told a ceiling,
//! not a setting.
//!
//! `apf-monitor demo` runs a flat scenario with evenly spaced arrivals, so what each replica receives is known: the
//! scenario's rate, once per replica for the cluster, split 50/33/17 % (`apf_sim::load_shares`), which is what the
//! replica's own dispatched and rejected counters count.
use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The agent LISTs at 12/s per replica of load (36/s for the cluster, 18 on the hot replica): above the rate its
/// share there recommends. alice's GETs are far under hers.
const SCENARIO: &str = "duration: 600s
flows:
  - {name: agents, flow_schema: service-accounts, user: \"system:serviceaccount:monitoring:agent\", verb: list, \
     resource: pods, namespace: \"\", seats: 10, duration: 2s, rate: [{at: 0s, rps: 12}], arrivals: even}
  - {name: operator, flow_schema: global-default, user: alice, verb: get, resource: configmaps, namespace: default, \
     duration: 50ms, rate: [{at: 0s, rps: 3}], arrivals: even}
";
const AGENT: &str = "system:serviceaccount:monitoring:agent";

/// `apf-monitor advise --daemon URL --output json`, parsed.
fn advise(url: &str) -> Option<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["advise", "--daemon", url, "--output", "json"])
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

#[test]
fn each_replica_tells_the_clients_own_rate_and_the_client_gets_one_recommendation() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("flat.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let mut demo = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["demo", "--listen", "127.0.0.1:0", "--interval", "1s"])
        .args(["--duration", "300s", "--scenario"])
        .arg(&scenario)
        // Killed at the end, it cannot remove its kubeconfig: written here, it goes with the directory.
        .env("TMPDIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = common::stdout_lines(&mut demo);
    // The replicas in the order of their load, and the daemon's address.
    let mut replicas: Vec<(String, f64)> = Vec::new();
    let mut daemon = None;
    let started = Instant::now();
    while daemon.is_none() && started.elapsed() < Duration::from_secs(60) {
        let Ok(line) = lines.recv_timeout(Duration::from_secs(60)) else {
            break;
        };
        if let Some(rest) = line.trim().strip_prefix("replica ") {
            let mut words = rest.split_whitespace();
            let addr = words.next().unwrap().to_string();
            let share: f64 = words.next().unwrap().trim_end_matches('%').parse().unwrap();
            replicas.push((addr, share / 100.0));
        }
        if let Some(url) = line.split("status page:").nth(1) {
            daemon = Some(url.trim().trim_end_matches('/').to_string());
        }
    }
    let daemon = daemon.expect("the demo never said where its status page is");
    assert_eq!(replicas.len(), 3);
    let shares = apf_sim::load_shares(3);

    // Once a window of the flat load is in: the agent on each replica within 10 % of what that replica receives.
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(180);
    let read = loop {
        assert!(
            Instant::now() < deadline,
            "the agent's rates never matched the replicas' own:\n{last:#}"
        );
        std::thread::sleep(Duration::from_secs(2));
        let Some(read) = advise(&daemon) else {
            continue;
        };
        last = read.clone();
        let rows: Vec<&Value> = read["clients"]
            .as_array()
            .map(|c| c.iter().filter(|c| c["user"] == AGENT).collect())
            .unwrap_or_default();
        let matched = replicas.iter().zip(&shares).all(|((addr, _), share)| {
            let expected = 12.0 * 3.0 * share;
            rows.iter().any(|r| {
                r["apiserver"] == addr.as_str()
                    && r["observed_requests_per_second"]
                        .as_f64()
                        .is_some_and(|o| (o - expected).abs() <= 0.1 * expected)
            })
        });
        if matched && rows.len() == 3 {
            break read;
        }
    };
    let _ = demo.kill();
    let _ = demo.wait();

    // The per-replica rows are worst first by their own rates: the coolest replica, whose share is the smallest and
    // whose rate is a sixth of the cluster's, is not told the cluster's rate.
    let rows: Vec<&Value> = read["clients"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["user"] == AGENT)
        .collect();
    let pressure = |r: &Value| {
        r["observed_requests_per_second"].as_f64().unwrap()
            / r["sustainable_requests_per_second"].as_f64().unwrap()
    };
    for pair in rows.windows(2) {
        assert!(pressure(pair[0]) >= pressure(pair[1]), "{read:#}");
    }

    // One recommendation for the agent, from the replica that sustains the least for it, a change with its reason.
    let recs = read["recommendations"].as_array().unwrap();
    let agent: Vec<&Value> = recs.iter().filter(|r| r["client"] == AGENT).collect();
    assert_eq!(agent.len(), 1, "{read:#}");
    let agent = agent[0];
    let tightest = rows
        .iter()
        .min_by(|a, b| {
            let s = |r: &Value| r["sustainable_requests_per_second"].as_f64().unwrap();
            s(a).total_cmp(&s(b))
        })
        .unwrap();
    assert_eq!(
        agent["tightest_apiserver"], tightest["apiserver"],
        "{read:#}"
    );
    assert_eq!(agent["recommended_qps"], tightest["recommended_qps"]);
    assert_eq!(agent["replicas"].as_array().unwrap().len(), 3);
    assert_eq!(agent["change"], true, "{read:#}");
    let advice = agent["advice"].as_str().unwrap();
    assert!(advice.contains("client-go: set QPS="), "{advice}");
    assert!(advice.contains("Why: "), "{advice}");

    // alice sends a few GETs a second where her share sustains hundreds: a ceiling, no setting, on every surface.
    let alice = recs
        .iter()
        .find(|r| r["client"] == "alice")
        .unwrap_or_else(|| panic!("no recommendation for alice:\n{read:#}"));
    assert_eq!(alice["change"], false, "{alice:#}");
    assert!(
        alice["advice"]
            .as_str()
            .unwrap()
            .contains("within its share: no change needed. A ceiling, not a setting"),
        "{alice:#}"
    );
    for row in read["clients"].as_array().unwrap() {
        if row["user"] == "alice" {
            let advice = row["advice"].as_str().unwrap();
            assert!(!advice.contains(" set "), "{advice}");
        }
    }
}
