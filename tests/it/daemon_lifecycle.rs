//! The daemon's life as a platform team lives it, through the real binary: SIGHUP and `POST /-/reload` change the
//! replicas without a restart (alert state kept), a bad config is refused while scraping goes on, a removed
//! replica's series go and its alerts are notified resolved, SIGTERM delivers every owed notification to a slow
//! receiver before exiting 0, and the Lease is released at the stop. Also `serve --check-config`, and `daemon::run`'s
//! own shutdown future.
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apf_sim::{ClusterOptions, KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::Value;

use crate::common::{self, external, get_text, sample_value};

type Payloads = Arc<Mutex<Vec<Value>>>;

/// A webhook receiver that takes `delay` to answer each request, recording the payloads it accepted.
async fn slow_webhook(delay: Duration) -> (String, Payloads) {
    let got: Payloads = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: String| {
            let g = g.clone();
            async move {
                tokio::time::sleep(delay).await;
                g.lock()
                    .unwrap()
                    .push(serde_json::from_str(&body).unwrap_or(Value::Null));
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook"), got)
}

/// A simulated apiserver under a LIST storm (requests wait in workload-low within seconds), on a loopback port.
async fn storm() -> (Simulator, String) {
    let scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(33, 0), scenario)).unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let url = common::serve_sim(&sim).await;
    (sim, url)
}

/// The config the test rewrites: `targets` are (name, url) pairs; `extra` is appended verbatim.
fn write_config(path: &Path, listen: &str, hook: &str, targets: &[(&str, &str)], extra: &str) {
    let targets: String = targets
        .iter()
        .map(|(name, url)| format!("    - {{url: \"{url}\", name: {name}}}\n"))
        .collect();
    let yaml = format!(
        r#"listen: {listen}
shutdown_timeout: 25s
scrape: {{interval: 500ms, timeout: 500ms, objects_interval: 0s}}
analysis: {{window: 10s}}
targets:
  static:
{targets}rules:
  APFHeadroomExhausted: {{for: 0s, keep_firing_for: 10m}}
  APFHeadroomLow: {{disabled: true}}
  APFQueueNearFull: {{disabled: true}}
  APFExhaustionPredicted: {{disabled: true}}
  APFRequestsRejected: {{disabled: true}}
  APFScrapeFailing: {{disabled: true}}
receivers:
  - {{name: hook, webhook: {{url: "{hook}"}}}}
route: {{group_by: [alertname, apiserver, priority_level], group_wait: 1s, group_interval: 1m, repeat_interval: 1h}}
alerting:
  leader_election: {{enabled: false}}
{extra}"#
    );
    std::fs::write(path, yaml).unwrap();
}

struct Serve {
    child: Child,
    url: String,
    log: std::path::PathBuf,
}

impl Serve {
    fn start(config: &Path, listen: &str, env: &[(&str, &str)]) -> Serve {
        let log = config.with_extension("log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["serve", "--config"])
            .arg(config)
            .envs(env.iter().copied())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        Serve {
            child,
            url: format!("http://{listen}"),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the exit; its status code.
    async fn exit(mut self, patience: Duration) -> (Option<i32>, String) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), self.log());
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("still running after {patience:?}; its log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn status(&self) -> Value {
        get_text(&format!("{}/api/v1/status", self.url))
            .await
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null)
    }

    async fn metrics(&self) -> String {
        get_text(&format!("{}/metrics", self.url))
            .await
            .unwrap_or_default()
    }

    /// Polls until `f` says yes, or fails with the log.
    async fn until<T>(
        &self,
        what: &str,
        secs: u64,
        mut f: impl AsyncFnMut(&Serve) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f(self).await {
                return v;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "timed out waiting for {what}; the daemon's log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The alerts of `/api/v1/status` on replica `apiserver`: labels → (state, active_since).
fn alerts_of(status: &Value, apiserver: &str) -> BTreeMap<String, (String, String)> {
    status["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["labels"]["apiserver"] == apiserver)
        .map(|a| {
            (
                a["labels"].to_string(),
                (
                    a["state"].as_str().unwrap_or("").to_string(),
                    a["active_since"].as_str().unwrap_or("").to_string(),
                ),
            )
        })
        .collect()
}

/// (status of the notification, priority level) of every payload about replica `apiserver`.
fn notified(payloads: &Payloads, apiserver: &str) -> Vec<(String, String)> {
    payloads
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p["groupLabels"]["apiserver"] == apiserver)
        .map(|p| {
            (
                p["status"].as_str().unwrap_or("").to_string(),
                p["groupLabels"]["priority_level"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_come_and_go_by_reload_and_sigterm_delivers_every_resolution() {
    let (_sim_a, a) = storm().await;
    let (_sim_b, b) = storm().await;
    // Each notification takes 1.5 s to be accepted.
    let (hook, payloads) = slow_webhook(Duration::from_millis(1500)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("apf-monitor.yaml");
    let listen = format!("127.0.0.1:{}", external::free_port());
    write_config(&config, &listen, &hook, &[("a", &a)], "");
    let mut serve = Serve::start(&config, &listen, &[]);

    // Replica a fires, and its groups are notified once each.
    let before = serve
        .until("an alert firing on a", 60, async |s| {
            let alerts = alerts_of(&s.status().await, "a");
            (!alerts.is_empty() && alerts.values().all(|(state, _)| state == "firing"))
                .then_some(alerts)
        })
        .await;
    serve
        .until("a's firing notification", 30, async |_| {
            (!notified(&payloads, "a").is_empty()).then_some(())
        })
        .await;

    // SIGHUP with replica b added: b's series appear, in the same process.
    write_config(&config, &listen, &hook, &[("a", &a), ("b", &b)], "");
    serve.signal("HUP");
    serve
        .until("b's series", 30, async |s| {
            let m = s.metrics().await;
            sample_value(&m, "apf_priority_level_limit_seats", &[("apiserver", "b")]).map(|_| ())
        })
        .await;
    assert!(serve.running(), "SIGHUP reloads, it does not restart");
    // b's own alerts are notified (so group_wait has passed) while a's are not notified again, and keep starting
    // where they started.
    serve
        .until("b's firing notification", 30, async |_| {
            (!notified(&payloads, "b").is_empty()).then_some(())
        })
        .await;
    let after = alerts_of(&serve.status().await, "a");
    for (labels, (_, since)) in &before {
        assert_eq!(
            after.get(labels).map(|(_, s)| s),
            Some(since),
            "{labels}: the reload kept the alert and its startsAt"
        );
    }
    let a_firing = notified(&payloads, "a");
    assert!(
        a_firing.iter().all(|(status, _)| status == "firing"),
        "{a_firing:?}"
    );
    let groups: std::collections::BTreeSet<&String> = a_firing.iter().map(|(_, pl)| pl).collect();
    assert_eq!(
        groups.len(),
        a_firing.len(),
        "each of a's groups notified once, not again after the reload: {a_firing:?}"
    );

    // A config with an unknown key: refused by SIGHUP and by POST /-/reload, naming the key and its line; the
    // running config goes on scraping.
    write_config(
        &config,
        &listen,
        &hook,
        &[("a", &a), ("b", &b)],
        "scrape_intervall: 1s\n",
    );
    serve.signal("HUP");
    serve
        .until("the refusal in the log", 20, async |s| {
            s.log().contains("config not reloaded").then_some(())
        })
        .await;
    let reply = reqwest::Client::new()
        .post(format!("{}/-/reload", serve.url))
        .send()
        .await
        .unwrap();
    let code = reply.status();
    let text = reply.text().await.unwrap();
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{text}");
    let line = std::fs::read_to_string(&config)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("scrape_intervall"))
        .unwrap()
        + 1;
    assert!(
        text.contains("unknown field `scrape_intervall`")
            && text.contains(&format!("at line {line}")),
        "{text}"
    );
    let success = |m: &str| {
        sample_value(
            m,
            "apf_monitor_last_scrape_success_timestamp_seconds",
            &[("apiserver", "a"), ("endpoint", "metrics")],
        )
        .unwrap_or(0.0)
    };
    let m = serve.metrics().await;
    assert_eq!(
        sample_value(&m, "apf_monitor_config_last_reload_successful", &[]),
        Some(0.0)
    );
    let then = success(&m);
    serve
        .until("a scraped after the refusal", 20, async |s| {
            (success(&s.metrics().await) > then).then_some(())
        })
        .await;
    assert!(serve.running());

    // Replica a removed: its series and report go, and its alerts resolve.
    write_config(&config, &listen, &hook, &[("b", &b)], "");
    let reply = reqwest::Client::new()
        .post(format!("{}/-/reload", serve.url))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    serve
        .until("a gone, its alerts resolved", 30, async |s| {
            let status = s.status().await;
            let gone = status["apiservers"]
                .as_array()
                .is_some_and(|list| list.iter().all(|r| r["apiserver"] != "a"));
            let alerts = alerts_of(&status, "a");
            let resolved =
                !alerts.is_empty() && alerts.values().all(|(state, _)| state == "resolved");
            let m = s.metrics().await;
            let series = m
                .lines()
                .any(|l| !l.starts_with('#') && l.contains("apiserver=\"a\""));
            (gone && resolved && !series).then_some(())
        })
        .await;
    let m = serve.metrics().await;
    assert_eq!(
        sample_value(&m, "apf_monitor_config_last_reload_successful", &[]),
        Some(1.0)
    );

    // SIGTERM right then: the resolutions are owed (group_interval is a minute away), and the receiver takes 1.5 s
    // each; they are all delivered before the process exits 0.
    serve.signal("TERM");
    let (code, log) = serve.exit(Duration::from_secs(40)).await;
    assert_eq!(code, Some(0), "{log}");
    let a_notices = notified(&payloads, "a");
    for pl in groups {
        assert!(
            a_notices.contains(&("resolved".to_string(), pl.clone())),
            "{pl}: no resolved notification before the exit: {a_notices:?}\n{log}"
        );
    }
}

#[tokio::test]
async fn check_config_says_ok_or_names_the_key_and_serve_exits_1_on_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "targets:\n  static:\n    - {url: \"http://127.0.0.1:8001\"}\nreceivers:\n  - {name: c, console: {}}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["serve", "--check-config", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("config OK: 1 static target(s), alerts to c (console)"),
        "{text}"
    );
    // The shipped example watches the simulated cluster (docs/guides/simulator.md) through the kubeconfig `simulate` writes where it runs:
    // without it, the check names the file; with it, every replica is discovered through it, alerts to the console.
    // Checked, not contacted.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/apf-monitor.example.yaml"
    );
    let here = tempfile::tempdir().unwrap();
    let check_example = || {
        Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["serve", "--check-config", "--config", example])
            .current_dir(here.path())
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let out = check_example();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("apf-monitor-sim.kubeconfig"), "{err}");
    let (apiserver, url) = common::untouched_apiserver();
    std::fs::rename(
        common::kubeconfig(here.path(), &url),
        here.path().join("apf-monitor-sim.kubeconfig"),
    )
    .unwrap();
    let out = check_example();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "every replica of the Service default/kubernetes through {url}/"
        )) && text.contains("alerts to console (console)"),
        "{text}"
    );
    common::assert_untouched(&apiserver);
    // No receiver: the alerts are logged, and the check says so.
    let bare = dir.path().join("bare.yaml");
    std::fs::write(
        &bare,
        "targets:\n  static:\n    - {url: \"http://127.0.0.1:8001\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["serve", "--check-config", "--config"])
        .arg(&bare)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("alerts to console (no receiver configured)"),
        "{text}"
    );

    // No static target: the replicas are discovered through the kubeconfig's apiserver access, which must exist.
    // Checked, not contacted.
    let (apiserver, url) = common::untouched_apiserver();
    let kubeconfig = common::kubeconfig(dir.path(), &url);
    let discover = |kubeconfig: &Path| {
        Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["serve", "--check-config", "--kubeconfig"])
            .arg(kubeconfig)
            .output()
            .unwrap()
    };
    let out = discover(&kubeconfig);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "every replica of the Service default/kubernetes through {url}/"
        )),
        "{text}"
    );
    common::assert_untouched(&apiserver);
    let out = discover(&dir.path().join("missing-kubeconfig"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("targets.kubernetes: cannot read the kubeconfig")
            && err.contains("missing-kubeconfig"),
        "{err}"
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "rules:\n  APFQueueNearFull: {threshold: 0.8, clear_threshold: 0.9}\n",
    )
    .unwrap();
    for args in [
        vec!["serve", "--check-config", "--config"],
        vec!["serve", "--config"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(&args)
            .arg(&bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("rules.APFQueueNearFull.clear_threshold: 0.9 must be <= threshold 0.8")
                && err.contains("at line 2"),
            "{args:?}: {err}"
        );
    }
}

/// One `--check-config` says every problem the loader finds, each with its line: here discovery without a
/// kubeconfig and two receivers' URLs without a scheme, each named at its `url:` line, not its receiver's.
#[test]
fn check_config_lists_every_problem_each_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("apf-monitor.yaml");
    std::fs::write(
        &config,
        "receivers:\n  - name: ok\n    webhook:\n      url: http://127.0.0.1:9/ok\n  - name: hook\n    webhook:\n\
         \x20     url: 127.0.0.1:9/x\n  - name: s\n    slack: {webhook_url: hooks.slack.com/services/T0/B0/SECRET}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["serve", "--check-config", "--config"])
        .arg(&config)
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env("HOME", dir.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("3 problems:\n"), "{err}");
    for problem in [
        "\n  - targets.kubernetes: no apiserver access",
        "\n  - receivers[1] (hook): receiver \"hook\": webhook: url: the URL must start with http:// or https:// \
         at line 7\n",
        "\n  - receivers[2] (s): receiver \"s\": slack: webhook_url: the URL must start with http:// or https:// \
         at line 9",
    ] {
        assert!(err.contains(problem), "{problem:?} in:\n{err}");
    }
    assert!(!err.contains("SECRET"), "{err}");
}

/// Leader election forced on reaches the Lease with discovery's apiserver access: `--check-config` refuses a config
/// without it as `serve` does, with the same message, and passes one with it without contacting the apiserver.
#[tokio::test]
async fn check_config_refuses_leader_election_without_apiserver_access_as_serve_does() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("apf-monitor.yaml");
    std::fs::write(
        &config,
        "listen: 127.0.0.1:0\ntargets:\n  static:\n    - {url: \"http://127.0.0.1:8001\"}\n\
         alerting:\n  leader_election: {enabled: true}\n",
    )
    .unwrap();
    let run = |args: &[&str], kubeconfig: &Path| {
        Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(args)
            .arg(&config)
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", dir.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap()
    };
    let missing = dir.path().join("no-kubeconfig");
    for args in [
        &["serve", "--check-config", "--config"][..],
        &["serve", "--config"][..],
    ] {
        let out = run(args, &missing);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("leader election needs apiserver access")
                && err.contains("alerting.leader_election.enabled: false")
                && err.contains("no-kubeconfig"),
            "{args:?}: {err}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("config OK"),
            "{args:?}"
        );
    }
    let (apiserver, url) = common::untouched_apiserver();
    let out = run(
        &["serve", "--check-config", "--config"],
        &common::kubeconfig(dir.path(), &url),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("config OK: 1 static target(s)"), "{text}");
    common::assert_untouched(&apiserver);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_after_its_shutdown_future_with_owed_notifications_delivered() {
    let (_sim, url) = storm().await;
    let (hook, payloads) = slow_webhook(Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    let listen = format!("127.0.0.1:{}", external::free_port());
    // group_wait 10 min: nothing would be sent before the stop but for the stop's flush.
    write_config(&path, &listen, &hook, &[("a", &url)], "");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("group_wait: 1s", "group_wait: 10m");
    let config = apf_monitor::config::Config::from_yaml(&text).unwrap();
    let setup = apf_monitor::daemon::Setup::build(config.clone())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (_reload, reloads) = tokio::sync::mpsc::channel(1);
    let loader: apf_monitor::daemon::Loader = Arc::new(move || Ok(config.clone()));
    let run = tokio::spawn(apf_monitor::daemon::run(
        setup,
        loader,
        listener,
        async move {
            let _ = stopped.await;
        },
        reloads,
    ));
    let base = format!("http://{listen}");
    let firing = common::eventually(Duration::from_secs(60), || async {
        let status: Value =
            serde_json::from_str(&get_text(&format!("{base}/api/v1/status")).await?).ok()?;
        (!alerts_of(&status, "a").is_empty()).then_some(())
    })
    .await;
    assert!(firing.is_some(), "no alert fired");
    assert!(payloads.lock().unwrap().is_empty(), "group_wait holds it");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("run returns")
        .unwrap()
        .unwrap();
    assert!(
        notified(&payloads, "a").iter().any(|(s, _)| s == "firing"),
        "the stop's flush delivered the firing notification"
    );
    assert!(
        get_text(&format!("{base}/healthz")).await.is_none(),
        "the HTTP server is down after run returns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_releases_the_lease() {
    // The Lease lives in the simulated cluster's API, reached through its kubeconfig.
    let (cluster, dir, kubeconfig) = common::sim_cluster(ClusterOptions::new(
        KubeVersion::new(34, 0),
        Scenario::load(&ScenarioSource::Idle).unwrap(),
    ))
    .await;
    let api = cluster.replica_urls()[0].clone();
    let (_sim, url) = storm().await;
    let (hook, _payloads) = slow_webhook(Duration::ZERO).await;
    let config = dir.path().join("apf-monitor.yaml");
    let listen = format!("127.0.0.1:{}", external::free_port());
    write_config(&config, &listen, &hook, &[("a", &url)], "");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "leader_election: {enabled: false}",
        "leader_election: {enabled: true, namespace: default, lease_duration: 15s}",
    );
    std::fs::write(&config, text).unwrap();
    let serve = Serve::start(
        &config,
        &listen,
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    serve
        .until("the Lease held", 30, async |_| {
            common::lease_holder(&api).await
        })
        .await;
    serve.signal("TERM");
    let (code, log) = serve.exit(Duration::from_secs(40)).await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(
        common::lease_holder(&api).await,
        None,
        "the Lease is released at the stop:\n{log}"
    );
    cluster.stop().await;
}

/// `serve` with no receiver configured: the alerts are logged by a console receiver rather than sent nowhere, and the
/// start-up log says so and how to add a receiver.
#[tokio::test]
async fn with_no_receiver_the_alerts_are_logged_and_the_log_says_how_to_add_one() {
    let (_sim, url) = storm().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", external::free_port());
    let config = dir.path().join("apf-monitor.yaml");
    std::fs::write(
        &config,
        format!(
            r#"listen: {listen}
scrape: {{interval: 500ms, timeout: 500ms, objects_interval: 0s}}
analysis: {{window: 10s}}
targets:
  static:
    - {{url: "{url}", name: storm}}
rules:
  APFHeadroomExhausted: {{for: 0s}}
route: {{group_wait: 1s}}
alerting:
  leader_election: {{enabled: false}}
"#
        ),
    )
    .unwrap();
    let mut serve = Serve::start(&config, &listen, &[]);
    let fired = common::eventually(Duration::from_secs(60), || {
        let log = serve.log();
        async move {
            log.lines()
                .any(|l| l.contains("FIRING APFHeadroomExhausted") && l.contains("storm"))
                .then_some(())
        }
    })
    .await;
    assert!(serve.running());
    let log = serve.log();
    assert!(fired.is_some(), "no alert was logged:\n{log}");
    assert!(
        log.contains("receivers=console (no receiver configured)")
            && log.contains("no receiver is configured: alerts are logged here")
            && log.contains("add one under `receivers:`"),
        "{log}"
    );
    assert!(log.contains("remediation:"), "{log}");
    // The log is a file, not a terminal: no colour codes in it.
    assert!(!log.contains('\x1b'), "{log}");
    serve.signal("TERM");
    let (code, log) = serve.exit(Duration::from_secs(40)).await;
    assert_eq!(code, Some(0), "{log}");
}
