//! The second look: what apf-monitor says once a person has done what it told them. The agent floods workload-low
//! of a simulated cluster; the alerts propose isolating it; `check --output manifests`, applied with kubectl, puts
//! the isolation in force; a webhook receiver records every notification. Afterwards no alert proposes the isolation
//! again or a share move that undoes it, every number in a remediation is possible, and workload-low, recovered,
//! begins no new alert (its window still holds the pressure from before for a minute).
use crate::common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apf_monitor::config::Config;
use apf_monitor::notify::WebhookConfig;
use apf_monitor::values::{DurationValue, Interval};
use apf_sim::{ClusterOptions, KubeVersion, Scenario};
use axum::routing::post;
use serde_json::Value;

const AGENT: &str = "system:serviceaccount:monitoring:agent";
const ISOLATED: &str = "isolate-monitoring-agent";

/// One alert of one notification, as the receiver got it: seconds since the test began, and the alert.
type Received = Arc<Mutex<Vec<(f64, Value)>>>;

/// A webhook receiver on loopback recording every alert of every notification; its URL.
async fn receiver(start: Instant, got: Received) -> String {
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: String| {
            let got = got.clone();
            async move {
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                let at = start.elapsed().as_secs_f64();
                for a in v["alerts"].as_array().into_iter().flatten() {
                    got.lock().unwrap().push((at, a.clone()));
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

fn label<'a>(a: &'a Value, name: &str) -> &'a str {
    a["labels"][name].as_str().unwrap_or_default()
}

/// The alert's identity: its labels.
fn identity(a: &Value) -> String {
    a["labels"].to_string()
}

/// Every "N share(s) from LEVEL" and "about N more seats" a remediation says, checked against the shares the
/// simulated cluster's levels have (1.34's defaults, and 5 for the isolated level) and its 600 seats.
fn impossible_numbers(remediation: &str) -> Vec<String> {
    let shares =
        |level: &str| apf::defaults::default_shares(level).or((level == ISOLATED).then_some(5));
    let words: Vec<&str> = remediation
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .map(|w| w.trim_end_matches(['.', ';', ':']))
        .filter(|w| !w.is_empty())
        .collect();
    let mut wrong = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let Ok(n) = w.parse::<u32>() else {
            continue;
        };
        let next = &words[i + 1..];
        let from = match next {
            ["shares" | "share", "from", level, ..] | ["from", level, ..] => Some(*level),
            _ => None,
        };
        if let Some(level) = from {
            match shares(level) {
                Some(has) if n < has => {}
                _ => wrong.push(format!("{n} shares from {level}")),
            }
        }
        if matches!(next, ["more", "seats", ..]) && (n == 0 || n > 600) {
            wrong.push(format!("{n} more seats"));
        }
    }
    wrong
}

#[test]
fn impossible_numbers_are_found() {
    assert_eq!(
        impossible_numbers(
            "Raise the shares of x: move 3309 shares from node-high (it keeps) so it gets about 8107 more seats."
        ),
        ["3309 shares from node-high", "8107 more seats"]
    );
    assert!(impossible_numbers(
        "move 20 shares from workload-high and 10 from node-high so it gets about 74 more seats"
    )
    .is_empty());
    assert_eq!(
        impossible_numbers("move 100 shares from workload-low"),
        ["100 shares from workload-low"]
    );
}

/// A simulated cluster of one 1.34 replica under `scenario`, apf-monitor watching it with the rules and the window
/// as shipped (notifications sent at once, not batched for minutes) and a webhook receiver recording every alert.
struct Run {
    start: Instant,
    got: Received,
    cluster: apf_sim::Cluster,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    monitor: common::Monitor,
}

impl Run {
    async fn start(scenario: &str) -> Run {
        let start = Instant::now();
        let (cluster, dir, kubeconfig) = common::sim_cluster(ClusterOptions {
            replicas: 1,
            listen_port: 0,
            clock_tick: Some(Duration::from_millis(20)),
            ..ClusterOptions::new(
                KubeVersion::new(34, 0),
                Scenario::from_yaml(scenario).unwrap(),
            )
        })
        .await;
        let got: Received = Arc::default();
        let hook = receiver(start, got.clone()).await;
        let mut config = Config::default();
        config.scrape.interval = Interval(Duration::from_secs(1));
        config.scrape.timeout = Interval(Duration::from_secs(1));
        config.targets.kubernetes.kubeconfig = Some(kubeconfig.clone());
        config.route.group_wait = DurationValue(Duration::from_secs(1));
        config.route.group_interval = Interval(Duration::from_secs(1));
        config.route.repeat_interval = Interval(Duration::from_secs(3600));
        let mut hook_receiver = common::receiver("hook");
        hook_receiver.webhook = Some(WebhookConfig {
            url: Some(hook),
            url_file: None,
            bearer_token_file: None,
            max_alerts: 0,
        });
        config.receivers = vec![hook_receiver];
        let monitor = common::start_monitor(&config).await;
        Run {
            start,
            got,
            cluster,
            dir,
            kubeconfig,
            monitor,
        }
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn received(&self) -> Vec<(f64, Value)> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until the daemon's status has an alert `name` on `level` in a state `state` accepts.
    async fn until_alert(&self, name: &str, level: &str, state: impl Fn(&str) -> bool) -> bool {
        let status_url = format!("{}/api/v1/status", self.monitor);
        common::eventually(Duration::from_secs(150), || async {
            let s: Value = serde_json::from_str(&common::get_text(&status_url).await?).ok()?;
            s["alerts"]
                .as_array()?
                .iter()
                .any(|a| {
                    label(a, "alertname") == name
                        && label(a, "priority_level") == level
                        && state(a["state"].as_str().unwrap_or_default())
                })
                .then_some(())
        })
        .await
        .is_some()
    }

    /// What a person does: `check --output manifests | kubectl apply -f -`. When it was done.
    async fn apply_the_fix(&self) -> f64 {
        let manifests = common::proposed_manifests(&self.kubeconfig).await;
        let file = self.dir.path().join("fix.yaml");
        std::fs::write(&file, &manifests.stdout).unwrap();
        let applied = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["apply", "-f"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            applied.status.success() && String::from_utf8_lossy(&applied.stdout).contains(ISOLATED),
            "{}{}{}",
            String::from_utf8_lossy(&manifests.stderr),
            String::from_utf8_lossy(&applied.stdout),
            String::from_utf8_lossy(&applied.stderr)
        );
        self.now()
    }

    /// Runs until `until` seconds since the start; what the receiver got, its timeline printed (shown when the test
    /// fails).
    async fn finish(self, fixed_at: f64, until: f64) -> Vec<(f64, Value)> {
        while self.now() < until {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let got = self.received();
        println!("fix applied at {fixed_at:.0}s");
        for (at, a) in &got {
            println!(
                "{at:>5.0}s {} {} {}: {} | {}",
                a["status"].as_str().unwrap_or_default(),
                label(a, "alertname"),
                label(a, "priority_level"),
                a["annotations"]["summary"].as_str().unwrap_or_default(),
                a["annotations"]["remediation"].as_str().unwrap_or_default(),
            );
        }
        drop(self.monitor);
        self.cluster.stop().await;
        got
    }
}

/// The agent floods workload-low with 10-seat LISTs; once isolated it floods its own 12-seat level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_fix_no_alert_proposes_it_again_or_undoes_it_and_every_number_is_possible() {
    let run = Run::start(common::AGENT_FLOOD).await;
    // The alerts on workload-low propose isolating the agent.
    let proposed = common::eventually(Duration::from_secs(150), || async {
        run.received()
            .iter()
            .any(|(_, a)| {
                label(a, "priority_level") == "workload-low"
                    && a["annotations"]["remediation"]
                        .as_str()
                        .is_some_and(|r| r.starts_with(&format!("Isolate flow {AGENT}")))
            })
            .then_some(())
    })
    .await;
    assert!(
        proposed.is_some(),
        "no isolation proposed: {:#?}",
        run.received()
    );
    let fixed_at = run.apply_the_fix().await;
    // The agent now floods its own level.
    assert!(
        run.until_alert("APFRequestsRejected", ISOLATED, |_| true)
            .await,
        "no alert on the agent's own level after the fix"
    );
    let got = run.finish(fixed_at, fixed_at + 60.0).await;
    let mut wrong = Vec::new();
    for (at, a) in &got {
        let level = label(a, "priority_level");
        let name = label(a, "alertname");
        let remediation = a["annotations"]["remediation"].as_str().unwrap_or_default();
        for w in impossible_numbers(remediation) {
            wrong.push(format!(
                "{at:.0}s {name} on {level}: impossible {w}: {remediation}"
            ));
        }
        if a["status"] != "firing" || *at < fixed_at + 5.0 {
            continue;
        }
        if level == ISOLATED
            && !remediation.starts_with(&format!("{ISOLATED} already holds one client alone"))
        {
            wrong.push(format!(
                "{at:.0}s {name} on the agent's own level proposes: {remediation}"
            ));
        }
        if remediation.contains(&format!("Isolate flow {AGENT}")) {
            wrong.push(format!(
                "{at:.0}s {name} on {level} proposes the isolation again: {remediation}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The agent's small LISTs keep workload-low busy past 80 % of its limit without queueing: APFHeadroomLow goes
/// pending, and the fix comes before its minute is up. Recovered, workload-low begins no alert, though its window
/// holds the pressure from before for a minute more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_that_recovered_before_its_warning_fired_stays_quiet() {
    let run = Run::start(
        "duration: 900s\nflows:\n\
         - {name: agents, flow_schema: service-accounts, user: \"system:serviceaccount:monitoring:agent\", verb: list, \
            resource: pods, seats: 1, duration: 1s, rate: [{at: 0s, rps: 0}, {at: 20s, rps: 320}]}\n",
    )
    .await;
    assert!(
        run.until_alert("APFHeadroomLow", "workload-low", |s| s == "pending")
            .await,
        "workload-low never got busy: {:#?}",
        run.received()
    );
    // Pressure for a share of the window first.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let fixed_at = run.apply_the_fix().await;
    let notified_before: Vec<String> = run
        .received()
        .iter()
        .filter(|(_, a)| label(a, "priority_level") == "workload-low")
        .map(|(_, a)| identity(a))
        .collect();
    let got = run.finish(fixed_at, fixed_at + 75.0).await;
    let began: Vec<String> = got
        .iter()
        .filter(|(at, a)| {
            *at > fixed_at
                && a["status"] == "firing"
                && label(a, "priority_level") == "workload-low"
                && !notified_before.contains(&identity(a))
        })
        .map(|(at, a)| {
            format!(
                "{at:.0}s (fix at {fixed_at:.0}s) {}: {}",
                label(a, "alertname"),
                a["annotations"]["summary"]
            )
        })
        .collect();
    assert!(
        began.is_empty(),
        "began on recovered workload-low:\n{}",
        began.join("\n")
    );
}
