//! Rate advice on every surface, over the simulator's storm: the daemon's `/api/v1/status` clients, its `/metrics`
//! and its page, and `apf-monitor advise` watching the replica itself or reading the daemon, all agreeing.
use crate::common;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// `apf-monitor advise ARGS`, run off the runtime: (exit code, stdout, stderr).
async fn advise(args: Vec<String>) -> (Option<i32>, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .arg("advise")
            .args(&args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

fn num(c: &Value, key: &str) -> f64 {
    c[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {c}"))
}

/// The figures of one client hang together as docs/guides/rate-advice.md says: the share over what a request costs, QPS under it.
fn assert_consistent(c: &Value) {
    let share = num(c, "fair_share_seats");
    let limit = num(c, "limit_seats");
    let flows = num(c, "active_flows");
    assert!((share - limit / flows).abs() <= 0.01 * share + 0.01, "{c}");
    let sustainable = num(c, "sustainable_requests_per_second");
    let cost = num(c, "seats_per_request") * num(c, "seconds_per_request");
    // The JSON rounds each figure to 3 decimals.
    assert!(
        (sustainable - share / cost).abs() <= 0.02 * sustainable + 0.01,
        "{c}"
    );
    let qps = num(c, "recommended_qps");
    assert!(qps > 0.0 && qps <= sustainable, "{c}");
    let concurrency = num(c, "recommended_concurrency");
    assert!(
        concurrency >= 1.0 && concurrency <= (share / num(c, "seats_per_request")).max(1.0) + 1e-9,
        "{c}"
    );
    assert!(
        c["advice"]
            .as_str()
            .is_some_and(|a| a.contains("Per replica")),
        "{c}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_surface_tells_a_flow_above_its_share_what_it_may_send() {
    use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
    let sim = Simulator::try_new(SimOptions::new(
        KubeVersion::new(34, 0),
        Scenario::load(&ScenarioSource::Storm).unwrap(),
    ))
    .unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;
    let monitor = common::start_monitor(&common::fast_config(&sim_url)).await;

    // The storm's agents LIST far past their share of workload-low: once the window holds it, the daemon says so.
    let status_url = format!("{monitor}/api/v1/status");
    let agent = common::eventually(Duration::from_secs(120), || async {
        let status: Value = serde_json::from_str(&common::get_text(&status_url).await?).ok()?;
        let clients = status["clients"].as_array()?.clone();
        clients.into_iter().find(|c| {
            let above = match (
                c["observed_requests_per_second"].as_f64(),
                c["sustainable_requests_per_second"].as_f64(),
            ) {
                (Some(o), Some(s)) => o > s,
                _ => false,
            };
            c["user"] == "system:serviceaccount:monitoring:agent" && above
        })
    })
    .await
    .expect("the agent's flow never showed above its share in /api/v1/status clients");
    assert_consistent(&agent);
    assert_eq!(agent["priority_level"], "workload-low");
    assert_eq!(agent["flow_schema"], "service-accounts");
    assert!(
        num(&agent, "seats_per_request") > 1.0,
        "its LISTs are wide: {agent}"
    );

    // The alert on the level ends its fix with the rate the flow it names should stay under, and the flag.
    let alert = common::eventually(Duration::from_secs(120), || async {
        let status: Value = serde_json::from_str(&common::get_text(&status_url).await?).ok()?;
        status["alerts"].as_array()?.iter().find_map(|a| {
            let fix = a["annotations"]["remediation"].as_str()?;
            (a["labels"]["priority_level"] == "workload-low"
                && fix.contains("Its client should stay under"))
            .then(|| fix.to_string())
        })
    })
    .await
    .expect("no alert on workload-low ended its fix with a rate");
    assert!(alert.contains("--kube-api-qps="), "{alert}");

    // The same flow in /metrics, and on the page against its rate.
    let metrics = common::get_text(&format!("{monitor}/metrics"))
        .await
        .unwrap();
    let flow = agent["flow"].as_str().unwrap();
    let labels = [
        ("priority_level", "workload-low"),
        ("flow_schema", "service-accounts"),
        ("flow", flow),
    ];
    assert!(
        common::sample_value(
            &metrics,
            "apf_flow_sustainable_requests_per_second",
            &labels
        )
        .is_some_and(|v| v > 0.0),
        "no sustainable rate exported for {flow}"
    );
    assert!(
        common::sample_value(&metrics, "apf_flow_observed_requests_per_second", &labels).is_some()
    );
    let page = common::get_text(&format!("{monitor}/")).await.unwrap();
    assert!(
        page.contains("/s sustainable</span>"),
        "the page shows no rate against the share"
    );

    // `advise --daemon` reads the same clients; `--user` takes a service account's name alone.
    let (code, out, err) = advise(vec![
        "--daemon".into(),
        monitor.url.clone(),
        "--user".into(),
        "agent".into(),
        "--output".into(),
        "json".into(),
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    let read: Value = serde_json::from_str(&out).unwrap();
    let clients = read["clients"].as_array().unwrap();
    assert!(!clients.is_empty());
    assert!(
        clients
            .iter()
            .all(|c| c["user"] == "system:serviceaccount:monitoring:agent"),
        "{out}"
    );
    assert_consistent(&clients[0]);

    // `advise --target` watches the replica itself for its window, saying so, and tells the agent the same story.
    let (code, out, err) = advise(vec![
        "--target".into(),
        sim_url.clone(),
        "--window".into(),
        "5s".into(),
        "--interval".into(),
        "1s".into(),
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("watching 1 replica for 5s"), "{err}");
    assert!(out.starts_with("CLIENT "), "{out}");
    let agent_line = out
        .lines()
        .find(|l| l.starts_with("system:serviceaccount:monitoring:agent "))
        .unwrap_or_else(|| panic!("no row for the agent:\n{out}"));
    assert!(agent_line.contains("workload-low"), "{agent_line}");
    assert!(out.contains("client-go: set QPS="), "{out}");

    // Piped into a reader that has gone, it ends as every command does: by SIGPIPE.
    let closed = common::closed_pipe();
    let url = monitor.url.clone();
    let (status, err) = tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["advise", "--daemon", &url])
            .stdout(std::process::Stdio::from(closed.try_clone().unwrap()))
            .output()
            .unwrap();
        (out.status, out.stderr)
    })
    .await
    .unwrap();
    common::assert_ended_by_sigpipe("advise --daemon", status, &err);

    // A client nobody saw is an error that says why.
    let (code, _, err) = advise(vec![
        "--daemon".into(),
        monitor.url.clone(),
        "--user".into(),
        "nobody".into(),
    ])
    .await;
    assert_eq!(code, Some(1));
    assert!(err.contains("no client of user nobody"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_protects_its_reads_is_read_with_a_token_from_a_file() {
    use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "reader-token\n").unwrap();
    let mut config = apf_monitor::config::Config::from_yaml(&format!(
        "web: {{auth: {{mode: tokens, tokens_file: {}, protect_reads: true}}}}\n",
        tokens.display()
    ))
    .unwrap();
    let sim = Simulator::try_new(SimOptions::new(
        KubeVersion::new(34, 0),
        Scenario::load(&ScenarioSource::Idle).unwrap(),
    ))
    .unwrap();
    config.targets.static_targets = vec![common::sim_target(&common::serve_sim(&sim).await)];
    let monitor = common::start_monitor(&config).await;

    let (code, _, err) = advise(vec!["--daemon".into(), monitor.url.clone()]).await;
    assert_eq!(code, Some(1));
    assert!(
        err.contains("protects its reads") && err.contains("--token-file"),
        "{err}"
    );

    let token = dir.path().join("token");
    std::fs::write(&token, "reader-token\n").unwrap();
    let (code, out, err) = advise(vec![
        "--daemon".into(),
        monitor.url.clone(),
        "--token-file".into(),
        token.display().to_string(),
        "--output".into(),
        "json".into(),
    ])
    .await;
    // Let in: the idle cluster's clients, or none yet (said as such), never the refusal.
    assert!(!err.contains("protects its reads"), "{err}");
    assert!(
        code == Some(0) && out.contains("\"clients\"") || err.contains("no client"),
        "{code:?} {out} {err}"
    );
}
