//! `serve` with audit events: a followed log file and kube-apiserver's webhook batches, classified on the FlowSchemas
//! the (simulated) replica serves; who got the 429s in `/api/v1/status` and `/metrics`, event for event.
use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{self, eventually, get_text, sample_value};
use apf_monitor::values::Interval;
use apf_sim::{Scenario, ScenarioSource};

/// An Event as kube-apiserver writes it at level Metadata, with the groups its authenticators give the user (a
/// service account's included: the groups recorded are the ones APF matched).
pub(crate) fn event(stage: &str, user: &str, verb: &str, resource: &str, code: u16) -> Value {
    json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": "x", "stage": stage,
        "requestURI": format!("/api/v1/{resource}"), "verb": verb,
        "user": {"username": user, "groups": apf::matching::implied_groups(user)},
        "userAgent": format!("{}/1.0", user.rsplit(':').next().unwrap_or(user)),
        "objectRef": {"resource": resource, "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": code},
        "stageTimestamp": "2026-11-25T07:00:00.000000Z",
    })
}

pub(crate) fn level_users<'a>(status: &'a Value, level: &str) -> Option<&'a Vec<Value>> {
    status["audit"][0]["levels"]
        .as_array()?
        .iter()
        .find(|l| l["priority_level"] == level)?["users"]
        .as_array()
}

pub(crate) fn user<'a>(users: &'a [Value], name: &str) -> Option<&'a Value> {
    users.iter().find(|u| u["user"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_got_the_429s_from_a_followed_log_and_the_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    // What is in the log before the start is the past: not counted.
    std::fs::write(
        &log,
        format!(
            "{}\n",
            event("ResponseComplete", "old", "list", "pods", 429)
        ),
    )
    .unwrap();
    let (_sim, url) =
        common::paused_sim(33, Scenario::load(&ScenarioSource::Idle).unwrap(), 1).await;
    let mut config = common::fast_config(&url);
    config.analysis.window = Interval(Duration::from_secs(120));
    config.audit.files = vec![dir.path().join("audit*.log")];
    let monitor = common::start_monitor(&config).await;
    let status_url = format!("{monitor}/api/v1/status");
    // The objects are read with the first rounds.
    eventually(Duration::from_secs(20), || async {
        let s: Value = serde_json::from_str(&get_text(&status_url).await?).ok()?;
        s["config_findings"].as_array().map(|_| ())
    })
    .await
    .expect("the replica's objects are read");
    // Let the follower take the file's end before anything is appended.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let agent = "system:serviceaccount:monitoring:agent";
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    for i in 0..30 {
        writeln!(
            f,
            "{}\n{}",
            event("RequestReceived", agent, "list", "pods", 0),
            event(
                "ResponseComplete",
                agent,
                "list",
                "pods",
                if i % 3 == 0 { 429 } else { 200 }
            )
        )
        .unwrap();
    }
    writeln!(f, "{{\"kind\":\"Event\",").unwrap();
    drop(f);

    let cert_manager = "system:serviceaccount:cert-manager:cert-manager";
    let items: Vec<Value> = (0..5)
        .map(|i| {
            event(
                "ResponseComplete",
                cert_manager,
                "get",
                "secrets",
                if i < 2 { 429 } else { 200 },
            )
        })
        .collect();
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{monitor}/api/v1/audit"))
        .header("content-type", "application/json")
        .body(
            json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .post(format!("{monitor}/api/v1/audit"))
        .body("{\"kind\":\"Status\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("EventList"));

    let status = eventually(Duration::from_secs(20), || async {
        let s: Value = serde_json::from_str(&get_text(&status_url).await?).ok()?;
        let users = level_users(&s, "workload-low")?;
        let done = user(users, agent)?["requests"] == 30 && user(users, cert_manager).is_some();
        done.then_some(s)
    })
    .await
    .expect("the audited users in the status");
    let audit = &status["audit"][0];
    assert_eq!(audit["requests"], 35);
    assert_eq!(audit["rejected"], 12);
    assert_eq!(audit["levels"][0]["priority_level"], "workload-low");
    let users = level_users(&status, "workload-low").unwrap();
    // Worst first.
    assert_eq!(users[0]["user"], agent);
    assert_eq!(users[0]["flow_schema"], "service-accounts");
    assert_eq!(users[0]["rejected"], 10);
    assert_eq!(users[0]["user_agent"], "agent/1.0");
    let cm = user(users, cert_manager).unwrap();
    assert_eq!((&cm["requests"], &cm["rejected"]), (&json!(5), &json!(2)));
    assert!(user(users, "old").is_none());

    // The status page names them.
    let page = get_text(&format!("{monitor}/")).await.unwrap();
    assert!(page.contains("Who got 429s"), "{page}");
    assert!(page.contains(&format!("<b>{agent}</b>")), "{page}");

    // The file's cut line is counted when the follower reaches it, which may be a round after the status showed
    // the events before it.
    let events_of = |metrics: &str, outcome: &str| {
        sample_value(
            metrics,
            "apf_monitor_audit_events_total",
            &[("outcome", outcome)],
        )
    };
    let metrics = eventually(Duration::from_secs(20), || async {
        let metrics = get_text(&format!("{monitor}/metrics")).await?;
        (events_of(&metrics, "counted") == Some(35.0)
            && events_of(&metrics, "malformed") == Some(2.0))
        .then_some(metrics)
    })
    .await
    .expect("the audit events counted by outcome");
    let labels = [
        ("user", agent),
        ("flow_schema", "service-accounts"),
        ("priority_level", "workload-low"),
    ];
    let rejected = sample_value(&metrics, "apf_user_rejected_per_second", &labels).unwrap();
    let requests = sample_value(&metrics, "apf_user_requests_per_second", &labels).unwrap();
    // The same window divides both: their ratio is the counts'.
    assert!(
        (rejected / requests - 10.0 / 30.0).abs() < 1e-9,
        "{rejected} {requests}"
    );
    let events = |outcome: &str| events_of(&metrics, outcome);
    assert_eq!(events("counted"), Some(35.0));
    assert_eq!(events("skipped"), Some(30.0));
    // The cut line in the file and the body that was not an EventList.
    assert_eq!(events("malformed"), Some(2.0));
}

/// `check` with `audit.files`: one look at the logs, the requests of the last window (older ones and those of the
/// rotated, gzipped file alike), listed under the levels and in the JSON.
#[test]
fn check_lists_who_got_429s_in_the_window() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = common::sim_on(&rt, 33, ScenarioSource::Idle, false);
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now();
    let at =
        |ago: u64| humantime::format_rfc3339_micros(now - Duration::from_secs(ago)).to_string();
    let agent = "system:serviceaccount:monitoring:agent";
    let mut live = String::new();
    for i in 0..12 {
        let mut e = event(
            "ResponseComplete",
            agent,
            "list",
            "pods",
            if i < 4 { 429 } else { 200 },
        );
        e["stageTimestamp"] = json!(at(5));
        live.push_str(&format!("{e}\n"));
    }
    // An hour ago: outside the window.
    let mut old = event("ResponseComplete", "old-user", "list", "pods", 429);
    old["stageTimestamp"] = json!(at(3600));
    live.push_str(&format!("{old}\n"));
    std::fs::write(dir.path().join("audit.log"), live).unwrap();
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(dir.path().join("audit-2026-11-25T00-00-00.000.log.gz")).unwrap(),
        flate2::Compression::fast(),
    );
    let mut rotated = event("ResponseComplete", agent, "list", "pods", 429);
    rotated["stageTimestamp"] = json!(at(30));
    writeln!(gz, "{rotated}").unwrap();
    gz.finish().unwrap();
    let config = dir.path().join("apf-monitor.yaml");
    std::fs::write(
        &config,
        format!(
            "analysis: {{window: 2m}}\naudit:\n  files: [\"{}/audit*\"]\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let check = |output: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["check", "--target", &url, "--config"])
            .arg(&config)
            .args(["--output", output])
            .output()
            .unwrap()
    };
    let out = check("json");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let audit = &v["audit"][0];
    assert_eq!(
        (&audit["requests"], &audit["rejected"]),
        (&json!(13), &json!(5))
    );
    let users = level_users(&v, "workload-low").unwrap();
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0]["user"], agent);
    assert_eq!(users[0]["rejected"], 5);
    let table = String::from_utf8(check("table").stdout).unwrap();
    assert!(
        table.contains("Who got 429s (audit events, last 120s): 13 requests, 5 answered 429"),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "  workload-low {agent}: 0.04/s answered 429 of 0.11/s (service-accounts, agent/1.0)"
        )),
        "{table}"
    );
}

/// The simulated cluster as kube-apiserver with both audit backends: its replicas post their events to `serve`'s
/// webhook and write them to a log, which `apf-monitor audit` reads on the cluster's own objects. Under the storm
/// the agent is answered 429 in workload-low, in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_cluster_audits_to_the_webhook_and_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let monitor = format!("http://{}", listener.local_addr().unwrap());
    let (_cluster, _kdir, kubeconfig) = common::sim_cluster(apf_sim::ClusterOptions {
        replicas: 2,
        audit: Some(apf_sim::AuditOptions {
            log: Some(apf_sim::AuditLogOptions {
                path: log.clone(),
                max_size_mb: 0,
                max_backups: 0,
                compress: false,
            }),
            webhook: Some(apf_sim::AuditWebhookOptions::new(format!(
                "{monitor}/api/v1/audit"
            ))),
        }),
        ..apf_sim::ClusterOptions::new(
            apf_sim::KubeVersion::new(34, 0),
            Scenario::load(&ScenarioSource::Storm).unwrap(),
        )
    })
    .await;
    let mut config = apf_monitor::config::Config::default();
    config.scrape.interval = Interval(Duration::from_secs(1));
    config.scrape.timeout = Interval(Duration::from_secs(1));
    config.analysis.window = Interval(Duration::from_secs(60));
    config.targets.kubernetes.kubeconfig = Some(kubeconfig.clone());
    let loader: apf_monitor::daemon::Loader = std::sync::Arc::new(move || Ok(config.clone()));
    let _daemon = apf_monitor::daemon::Daemon::start(loader, listener)
        .await
        .unwrap();

    let agent = "system:serviceaccount:monitoring:agent";
    let status_url = format!("{monitor}/api/v1/status");
    let users = eventually(Duration::from_secs(60), || async {
        let s: Value = serde_json::from_str(&get_text(&status_url).await?).ok()?;
        let users = level_users(&s, "workload-low")?.clone();
        (user(&users, agent)?["rejected"].as_u64()? > 0).then_some(users)
    })
    .await
    .expect("the agent's 429s, from the replicas' webhook");
    assert_eq!(
        user(&users, agent).unwrap()["flow_schema"],
        "service-accounts"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["audit", "--output", "json", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--file")
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["malformed_lines"], 0);
    let a = user(v["users"].as_array().unwrap(), agent).unwrap();
    assert_eq!(a["priority_level"], "workload-low");
    assert!(a["rejected"].as_u64().unwrap() > 0);
    // 1.34 annotates the slow requests with their queue wait.
    assert!(v["users"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["queue_waits"].as_u64() > Some(0)));
}
