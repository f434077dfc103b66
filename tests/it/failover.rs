//! Two replicas, one voice: processes of apf-monitor sharing the simulated cluster's Lease, a webhook receiver
//! counting what each alert was told, and the holder killed (SIGKILL) right after it notified, killed before its
//! notification was confirmed, or the replicas rolled (SIGTERM one at a time, each replaced by a new process). In
//! each case every alert gets one FIRING and, once it ends, one RESOLVED: none lost, none twice.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apf_monitor::alert::{NotificationLog, RuleName};
use apf_sim::{Cluster, ClusterOptions, KubeVersion, Scenario};
use axum::routing::post;
use tokio::time::Instant;

/// What the receiver accepted, per alert (its labels): the statuses in order and who sent each.
type Heard = Arc<Mutex<BTreeMap<String, Vec<(String, String)>>>>;

struct Receiver {
    url: String,
    heard: Heard,
    /// While set, every delivery is refused (503): a notification the holder never gets confirmed.
    refuse: Arc<AtomicBool>,
    refused: Arc<Mutex<usize>>,
}

async fn receiver() -> Receiver {
    let heard: Heard = Arc::default();
    let refuse = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(Mutex::new(0));
    let (h, r, n) = (heard.clone(), refuse.clone(), refused.clone());
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: String| {
            let (h, r, n) = (h.clone(), r.clone(), n.clone());
            async move {
                if r.load(Ordering::SeqCst) {
                    *n.lock().unwrap() += 1;
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                }
                let payload: serde_json::Value = serde_json::from_str(&body).unwrap();
                let from = payload["externalURL"].as_str().unwrap_or("").to_string();
                for a in payload["alerts"].as_array().unwrap() {
                    h.lock()
                        .unwrap()
                        .entry(a["labels"].to_string())
                        .or_default()
                        .push((a["status"].as_str().unwrap().to_string(), from.clone()));
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver {
        url,
        heard,
        refuse,
        refused,
    }
}

impl Receiver {
    fn heard(&self) -> BTreeMap<String, Vec<(String, String)>> {
        self.heard.lock().unwrap().clone()
    }

    /// The alerts whose last word was FIRING.
    fn firing(&self) -> Vec<String> {
        self.heard()
            .into_iter()
            .filter(|(_, said)| said.last().is_some_and(|(s, _)| s == "firing"))
            .map(|(labels, _)| labels)
            .collect()
    }
}

/// One cluster whose workload-low runs out while the test says so, its Lease, and the apf-monitor processes.
struct Setup {
    cluster: Cluster,
    api: String,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    hook: String,
    lease_seconds: u64,
}

/// A process of apf-monitor, named by its external URL (`http://NAME`) and its pod name (`apf-NAME`).
struct Replica {
    name: String,
    child: Child,
    url: String,
}

impl Setup {
    async fn new(hook: &str, lease_seconds: u64) -> Setup {
        // Wide LISTs of a service account: far more seats than workload-low has, while the load is on.
        let scenario = Scenario::from_yaml(
            "duration: 600s\nflows:\n\
             - {name: agents, flow_schema: service-accounts, user: \"system:serviceaccount:agents:agent\", \
                verb: list, resource: pods, namespace: agents, seats: 10, duration: 2s, rate: [{at: 0s, rps: 60}]}\n",
        )
        .unwrap();
        let (cluster, dir, kubeconfig) =
            common::sim_cluster(ClusterOptions::new(KubeVersion::new(34, 0), scenario)).await;
        cluster.set_load(0.0);
        let api = cluster.replica_urls()[0].clone();
        Setup {
            cluster,
            api,
            dir,
            kubeconfig,
            hook: hook.to_string(),
            lease_seconds,
        }
    }

    /// Starts a process: one rule (APFHeadroomExhausted), each alert its own group, no repeat within the test.
    fn start(&self, name: &str) -> Replica {
        let port = common::external::free_port();
        let config = self.dir.path().join(format!("{name}.yaml"));
        let others: String = RuleName::ALL
            .into_iter()
            .filter(|r| *r != RuleName::APFHeadroomExhausted)
            .map(|r| format!("  {}: {{disabled: true}}\n", r.as_str()))
            .collect();
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nscrape: {{interval: 500ms, timeout: 500ms, objects_interval: 0s}}\n\
                 analysis: {{window: 5s}}\ntargets: {{kubernetes: {{kubeconfig: \"{kubeconfig}\"}}}}\n\
                 rules:\n  APFHeadroomExhausted: {{for: 4s, keep_firing_for: 3s}}\n{others}\
                 receivers:\n  - {{name: hook, webhook: {{url: \"{hook}\"}}, delivery: {{max_retry_duration: 10m}}}}\n\
                 route: {{group_by: ['...'], group_wait: 1s, group_interval: 1s, repeat_interval: 1h}}\n\
                 alerting: {{external_url: \"http://{name}\", state_file: \"{state}\", leader_election: \
                 {{enabled: true, namespace: default, lease_duration: {lease}s}}}}\n",
                kubeconfig = self.kubeconfig.display(),
                hook = self.hook,
                state = self.dir.path().join(format!("{name}.state")).display(),
                lease = self.lease_seconds,
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.log_path(name)).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["serve", "--config"])
            .arg(&config)
            .env("HOSTNAME", format!("apf-{name}"))
            .env("RUST_LOG", "info")
            .env_remove("KUBECONFIG")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        Replica {
            name: name.to_string(),
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// Every process' log, for a failure's message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                out += &format!("--- {}\n{}\n", path.display(), read(&path));
            }
        }
        out
    }

    /// `apf-NAME` holds the Lease.
    async fn held_by(&self, name: &str, secs: u64) {
        let prefix = format!("apf-{name}-");
        common::until(
            &format!("{name} holds the Lease"),
            secs,
            || self.logs(),
            || async {
                common::lease_holder(&self.api)
                    .await
                    .filter(|h| h.starts_with(&prefix))
            },
        )
        .await;
    }

    /// The notification log in the Lease.
    async fn lease_log(&self) -> Option<NotificationLog> {
        let text = common::get_text(&format!(
            "{}/apis/coordination.k8s.io/v1/namespaces/default/leases/apf-monitor-notifier",
            self.api
        ))
        .await?;
        let lease: serde_json::Value = serde_json::from_str(&text).ok()?;
        let log = lease["metadata"]["annotations"]["apf-monitor.io/notification-log"].as_str()?;
        NotificationLog::decode(log).ok()
    }

    /// The holder's FIRING reached the receiver, and the log in the Lease says so.
    async fn notified_and_logged(&self, hook: &Receiver) {
        common::until(
            "the holder notified, and logged it in the Lease",
            60,
            || self.logs(),
            || async {
                let firing = hook.firing();
                (!firing.is_empty() && self.logged_firing().await == firing).then_some(())
            },
        )
        .await;
    }

    /// The alerts (labels as JSON) the log in the Lease has as delivered firing.
    async fn logged_firing(&self) -> Vec<String> {
        let Some(log) = self.lease_log().await else {
            return Vec::new();
        };
        let mut out: Vec<String> = log
            .groups
            .values()
            .flat_map(|g| g.receivers.values())
            .flat_map(|d| &d.firing)
            .map(|a| serde_json::to_value(&a.labels).unwrap().to_string())
            .collect();
        out.sort();
        out
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The replica's alerts in the given state, from its `/api/v1/status`.
async fn alerts_in(replica: &Replica, state: &str) -> Option<usize> {
    let text = common::get_text(&format!("{}/api/v1/status", replica.url)).await?;
    let status: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(
        status["alerts"]
            .as_array()?
            .iter()
            .filter(|a| a["state"] == state)
            .count(),
    )
}

fn kill(mut r: Replica) {
    r.child.kill().unwrap();
    r.child.wait().unwrap();
}

/// The end of every test: the load off, every alert resolved at the holder and at the receiver; then each alert
/// was told FIRING once and RESOLVED once, in that order.
async fn ends_with_one_firing_and_one_resolved(setup: &Setup, hook: &Receiver, holder: &Replica) {
    setup.cluster.set_load(0.0);
    common::until(
        "every alert resolved at the receiver",
        60,
        || setup.logs(),
        || async {
            (hook.firing().is_empty()
                && alerts_in(holder, "firing").await == Some(0)
                && !hook.heard().is_empty())
            .then_some(())
        },
    )
    .await;
    // Nothing more comes: a late duplicate would show within a few group intervals.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let heard = hook.heard();
    for (alert, said) in &heard {
        let statuses: Vec<&str> = said.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            statuses,
            ["firing", "resolved"],
            "{alert}: {said:?}\n{}",
            setup.logs()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_killed_right_after_it_notified_is_not_repeated() {
    let hook = receiver().await;
    let setup = Setup::new(&hook.url, 4).await;
    let a = setup.start("a");
    setup.held_by("a", 30).await;
    let b = setup.start("b");
    // b stands by and knows who leads.
    common::until(
        "b names a as the leader",
        30,
        || setup.logs(),
        || async {
            let text = common::get_text(&format!("{}/api/v1/status", b.url)).await?;
            let status: serde_json::Value = serde_json::from_str(&text).ok()?;
            let n = &status["notifier"];
            (n["leading"] == false && n["leader"].as_str()?.starts_with("apf-a-")).then_some(())
        },
    )
    .await;

    setup.cluster.set_load(1.0);
    // a announced the alert and its log in the Lease says so: killed right after.
    setup.notified_and_logged(&hook).await;
    let announced = hook.heard();
    assert!(announced
        .values()
        .flatten()
        .all(|(_, from)| from == "http://a"));
    kill(a);
    let killed = Instant::now();

    setup.held_by("b", 30).await;
    let took = killed.elapsed();
    eprintln!("failover: b took the Lease {took:?} after the SIGKILL of a (lease duration 4 s)");
    assert!(
        took <= Duration::from_secs(4 + 3),
        "b took over {took:?} after a died (lease duration 4s)"
    );
    // b leads with the alert still firing and says nothing of it...
    common::until(
        "b says it leads",
        30,
        || setup.logs(),
        || async {
            let text = common::get_text(&format!("{}/metrics", b.url)).await?;
            text.lines()
                .filter_map(|l| l.strip_prefix("apf_monitor_leader "))
                .any(|v| v.parse::<f64>() == Ok(1.0))
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(hook.heard(), announced, "{}", setup.logs());
    // ...until it ends: then b sends its one RESOLVED.
    ends_with_one_firing_and_one_resolved(&setup, &hook, &b).await;
    let resolved_by_b = hook
        .heard()
        .values()
        .all(|said| said.last().is_some_and(|(_, from)| from == "http://b"));
    assert!(resolved_by_b, "{:?}", hook.heard());
    kill(b);
    setup.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_killed_before_its_notification_was_confirmed_loses_nothing() {
    let hook = receiver().await;
    hook.refuse.store(true, Ordering::SeqCst);
    let setup = Setup::new(&hook.url, 4).await;
    let a = setup.start("a");
    setup.held_by("a", 30).await;
    let b = setup.start("b");
    setup.cluster.set_load(1.0);
    // a's alert fires and a tries to tell the receiver, which refuses: nothing is confirmed, nothing logged.
    common::until(
        "a tried to notify",
        60,
        || setup.logs(),
        || async {
            (*hook.refused.lock().unwrap() > 0 && alerts_in(&a, "firing").await > Some(0))
                .then_some(())
        },
    )
    .await;
    assert!(setup.logged_firing().await.is_empty());
    kill(a);
    hook.refuse.store(false, Ordering::SeqCst);

    // b takes over and sends what a never got confirmed.
    setup.held_by("b", 30).await;
    common::until(
        "b announced the alert",
        30,
        || setup.logs(),
        || async { (!hook.firing().is_empty()).then_some(()) },
    )
    .await;
    assert!(hook
        .heard()
        .values()
        .flatten()
        .all(|(_, from)| from == "http://b"));
    ends_with_one_firing_and_one_resolved(&setup, &hook, &b).await;
    kill(b);
    setup.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_hands_over_without_a_word_twice() {
    let hook = receiver().await;
    // A long Lease: a take-over within it can only come from a release.
    let setup = Setup::new(&hook.url, 15).await;
    let a = setup.start("a");
    setup.held_by("a", 40).await;
    let b = setup.start("b");
    setup.cluster.set_load(1.0);
    setup.notified_and_logged(&hook).await;

    // The rollout, each new process taking over while it is still cold (its rule's `for` of 4 s not yet run): c
    // comes up, b and then the holder a stop, and c is the only one left to take the Lease; then d comes up and c
    // stops.
    let rounds: [(&str, &[&str]); 2] = [("c", &["b", "a"]), ("d", &["c"])];
    let mut running = vec![a, b];
    for (new, stop) in rounds {
        let fresh = setup.start(new);
        common::until(
            &format!("{new} is ready"),
            30,
            || setup.logs(),
            || async {
                let text = common::get_text(&format!("{}/readyz", fresh.url)).await?;
                text.starts_with("ready").then_some(())
            },
        )
        .await;
        let stopped = Instant::now();
        for name in stop {
            let old = running.remove(running.iter().position(|r| r.name == *name).unwrap());
            assert_eq!(
                common::terminate(old.child).await,
                Some(0),
                "{}",
                setup.logs()
            );
        }
        running.push(fresh);
        // Released on the way out: taken long before the 15 s Lease would have expired.
        setup.held_by(new, 30).await;
        eprintln!(
            "failover: {new} took the Lease {:?} after the SIGTERM of {stop:?} (lease duration 15 s)",
            stopped.elapsed()
        );
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "{new} took over {:?} after the SIGTERM of {stop:?}\n{}",
            stopped.elapsed(),
            setup.logs()
        );
        // The new holder says nothing of the alert that is still firing.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let heard = hook.heard();
        assert!(
            heard.values().all(|said| said.len() == 1),
            "after {stop:?} stopped: {heard:?}\n{}",
            setup.logs()
        );
    }
    let leader = running.pop().unwrap();
    ends_with_one_firing_and_one_resolved(&setup, &hook, &leader).await;
    kill(leader);
    setup.cluster.stop().await;
}
