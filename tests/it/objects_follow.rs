//! The flowcontrol objects in force, followed within seconds of a change: watched on the simulated cluster while
//! kubectl applies the fix, and, where the watch is refused (RBAC without `watch`), listed again as soon as a
//! replica's `/metrics` reports a priority level the objects lack. Who got the 429s and the configuration review
//! follow them; the periodic list (`scrape.objects_interval`, ten minutes in both) plays no part.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{json, Value};

use crate::audit_daemon::{event, level_users, user};
use crate::common::{self, eventually, get_text};
use apf_monitor::values::{DurationValue, Interval};
use apf_sim::Scenario;

/// How soon a change must show: well under a round of the periodic list.
const FOLLOWED_WITHIN: Duration = Duration::from_secs(5);
const AGENT: &str = "system:serviceaccount:monitoring:agent";
const NEW_LEVEL: &str = "isolate-monitoring-agent";

async fn status(url: &str) -> Option<Value> {
    serde_json::from_str(&get_text(&format!("{url}/api/v1/status")).await?).ok()
}

/// The review says no FlowSchema points to the new level.
fn unreachable(s: &Value) -> bool {
    s["config_findings"].as_array().is_some_and(|f| {
        f.iter().any(|f| {
            f["check"] == "unreachable_priority_level"
                && f["object"] == format!("PriorityLevelConfiguration/{NEW_LEVEL}")
        })
    })
}

/// The agent's rejections blamed on `level`.
fn rejected_in(s: &Value, level: &str) -> Option<u64> {
    user(level_users(s, level)?, AGENT)?["rejected"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_got_the_429s_follows_the_objects_applied_with_kubectl() {
    let scenario = Scenario::from_yaml(&format!(
        "duration: 600s\nflows:\n\
         - {{name: agents, flow_schema: service-accounts, user: \"{AGENT}\", verb: list, resource: pods, seats: 10, \
            duration: 2s, rate: [{{at: 0s, rps: 90}}]}}\n"
    ))
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let monitor = format!("http://{}", listener.local_addr().unwrap());
    let (_cluster, dir, kubeconfig) = common::sim_cluster(apf_sim::ClusterOptions {
        replicas: 2,
        audit: Some(apf_sim::AuditOptions {
            log: None,
            webhook: Some(apf_sim::AuditWebhookOptions::new(format!(
                "{monitor}/api/v1/audit"
            ))),
        }),
        ..apf_sim::ClusterOptions::new(apf_sim::KubeVersion::new(34, 0), scenario)
    })
    .await;
    let mut config = apf_monitor::config::Config::default();
    config.scrape.interval = Interval(Duration::from_secs(1));
    config.scrape.timeout = Interval(Duration::from_secs(1));
    config.scrape.objects_interval = DurationValue(Duration::from_secs(600));
    config.analysis.window = Interval(Duration::from_secs(60));
    config.targets.kubernetes.kubeconfig = Some(kubeconfig.clone());
    let loader: apf_monitor::daemon::Loader = Arc::new(move || Ok(config.clone()));
    let _daemon = apf_monitor::daemon::Daemon::start(loader, listener)
        .await
        .unwrap();
    eventually(Duration::from_secs(60), || async {
        (rejected_in(&status(&monitor).await?, "workload-low")? > 0).then_some(())
    })
    .await
    .expect("the agent answered 429 in workload-low");

    let apply = |name: &'static str, manifest: &'static str| {
        let file = dir.path().join(name);
        let kubeconfig = kubeconfig.clone();
        async move {
            std::fs::write(&file, manifest).unwrap();
            let (ok, out, err) =
                crate::sim_cluster::kubectl(&kubeconfig, &["apply", "-f", file.to_str().unwrap()])
                    .await;
            assert!(ok, "kubectl apply: {out}{err}");
            std::time::Instant::now()
        }
    };

    // A level alone: no FlowSchema sends it anything yet, which the review says.
    let applied = apply(
        "level.yaml",
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n\
         metadata: {name: isolate-monitoring-agent}\n\
         spec: {type: Limited, limited: {nominalConcurrencyShares: 5, limitResponse: {type: Reject}}}\n",
    )
    .await;
    eventually(FOLLOWED_WITHIN, || async {
        unreachable(&status(&monitor).await?).then_some(())
    })
    .await
    .expect("the review names the new level no FlowSchema points to, within seconds");
    eprintln!(
        "the new level reviewed {:?} after the apply",
        applied.elapsed()
    );

    // Its FlowSchema, for a level apf-monitor already knows: only the watch tells. The agent's requests go there,
    // and are turned away there at once (type Reject).
    let applied = apply(
        "schema.yaml",
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: isolate-monitoring-agent}\n\
         spec:\n  priorityLevelConfiguration: {name: isolate-monitoring-agent}\n  matchingPrecedence: 800\n  \
         distinguisherMethod: {type: ByUser}\n  rules:\n  - subjects: [{kind: ServiceAccount, serviceAccount: \
         {name: agent, namespace: monitoring}}]\n    resourceRules: [{verbs: [\"*\"], apiGroups: [\"*\"], \
         resources: [\"*\"], clusterScope: true, namespaces: [\"*\"]}]\n",
    )
    .await;
    let s = eventually(FOLLOWED_WITHIN, || async {
        let s = status(&monitor).await?;
        (rejected_in(&s, NEW_LEVEL)? > 0 && !unreachable(&s)).then_some(s)
    })
    .await
    .unwrap_or_else(|| {
        panic!("the agent's 429s are not blamed on {NEW_LEVEL} within {FOLLOWED_WITHIN:?}")
    });
    eprintln!(
        "the 429s blamed on the new level {:?} after the apply",
        applied.elapsed()
    );
    let u = user(level_users(&s, NEW_LEVEL).unwrap(), AGENT).unwrap();
    assert_eq!(u["flow_schema"], NEW_LEVEL);
    // What waited in workload-low when the fix came is turned away there as its wait runs out (time-out, up to
    // 15 s on): those 429s are that level's, each request classified on the objects in force when it came in, not
    // when its event arrived.
    let waited = rejected_in(&s, "workload-low").unwrap_or(0);
    eventually(Duration::from_secs(25), || async {
        (rejected_in(&status(&monitor).await?, "workload-low")? > waited).then_some(())
    })
    .await
    .expect("the 429s of the requests workload-low held at the apply are blamed on workload-low");
    eprintln!(
        "the time-outs of workload-low blamed on it {:?} after the apply",
        applied.elapsed()
    );
    // Followed all along: the objects are as fresh as the last round, though they were listed at the start only.
    let body = get_text(&format!("{monitor}/metrics")).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let ages: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with("apf_monitor_last_scrape_success_timestamp_seconds{"))
        .filter(|l| l.contains("endpoint=\"priority_level_configurations\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|t| now - t)
        .collect();
    assert!(
        ages.len() == 2 && ages.iter().all(|a| *a < 5.0),
        "ages {ages:?}"
    );
}

/// A replica whose RBAC grants `list` but not `watch` on the flowcontrol objects: what it serves, and what it was
/// asked.
#[derive(Default)]
struct Replica {
    /// The new level and its FlowSchema are in force.
    fixed: AtomicBool,
    lists: AtomicUsize,
    watches: AtomicUsize,
}

fn level(name: &str, shares: u32) -> Value {
    json!({"metadata": {"name": name}, "spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": shares, "limitResponse": {"type": "Reject"}}}})
}

fn schema(name: &str, level: &str, precedence: u32, subject: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": {
        "priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{"subjects": [subject], "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
            "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}})
}

impl Replica {
    fn levels(&self) -> Vec<&'static str> {
        let mut levels = vec!["catch-all", "workload-low"];
        if self.fixed.load(Ordering::SeqCst) {
            levels.push(NEW_LEVEL);
        }
        levels
    }

    fn metrics(&self) -> String {
        self.levels()
            .iter()
            .map(|l| {
                format!(
                    "apiserver_flowcontrol_current_limit_seats{{priority_level=\"{l}\"}} 100\n\
                     apiserver_flowcontrol_nominal_limit_seats{{priority_level=\"{l}\"}} 100\n"
                )
            })
            .collect()
    }

    fn list(&self, resource: &str) -> Value {
        let fixed = self.fixed.load(Ordering::SeqCst);
        let group = |name: &str| json!({"kind": "Group", "group": {"name": name}});
        let items: Vec<Value> = if resource == "prioritylevelconfigurations" {
            self.levels().iter().map(|l| level(l, 20)).collect()
        } else {
            let mut items = vec![
                schema(
                    "catch-all",
                    "catch-all",
                    10000,
                    group("system:authenticated"),
                ),
                schema(
                    "service-accounts",
                    "workload-low",
                    9000,
                    group("system:serviceaccounts"),
                ),
            ];
            if fixed {
                items.push(schema(
                    NEW_LEVEL,
                    NEW_LEVEL,
                    800,
                    json!({"kind": "ServiceAccount",
                           "serviceAccount": {"name": "agent", "namespace": "monitoring"}}),
                ));
            }
            items
        };
        json!({"metadata": {"resourceVersion": if fixed { "2" } else { "1" }}, "items": items})
    }
}

async fn replica_refusing_watch() -> (String, Arc<Replica>) {
    let replica = Arc::new(Replica::default());
    let app = axum::Router::new()
        .fallback(|State(r): State<Arc<Replica>>, uri: Uri| async move {
            let resource = uri.path().rsplit('/').next().unwrap_or_default().to_string();
            if uri.path() == "/metrics" {
                return r.metrics().into_response();
            }
            let flowcontrol = uri.path().starts_with("/apis/flowcontrol.apiserver.k8s.io/v1/");
            if !flowcontrol {
                return (StatusCode::NOT_FOUND, "{\"kind\":\"Status\",\"code\":404}").into_response();
            }
            if uri.query().is_some_and(|q| q.contains("watch=true")) {
                r.watches.fetch_add(1, Ordering::SeqCst);
                let message = format!(
                    "{resource}.flowcontrol.apiserver.k8s.io is forbidden: User \"apf-monitor\" cannot watch \
                     resource \"{resource}\" in API group \"flowcontrol.apiserver.k8s.io\" at the cluster scope"
                );
                let status = json!({"kind": "Status", "status": "Failure", "message": message,
                                    "reason": "Forbidden", "code": 403});
                return (StatusCode::FORBIDDEN, status.to_string()).into_response();
            }
            r.lists.fetch_add(1, Ordering::SeqCst);
            r.list(&resource).to_string().into_response()
        })
        .with_state(replica.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), replica)
}

/// Where the watch is refused: tried once, not again in a loop; the level the replica reports once the fix is in
/// force makes apf-monitor list the objects in the same round, and the 429s are blamed on it from there on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_the_watch_is_refused_a_level_new_in_metrics_lists_the_objects_again() {
    let (url, replica) = replica_refusing_watch().await;
    let mut config = common::fast_config(&url);
    config.scrape.interval = Interval(Duration::from_millis(500));
    config.scrape.timeout = Interval(Duration::from_millis(500));
    config.scrape.objects_interval = DurationValue(Duration::from_secs(600));
    config.analysis.window = Interval(Duration::from_secs(60));
    let monitor = common::start_monitor(&config).await;
    let client = reqwest::Client::new();
    let rejected = || {
        let items: Vec<Value> = (0..3)
            .map(|_| event("ResponseComplete", AGENT, "list", "pods", 429))
            .collect();
        let request = client.post(format!("{monitor}/api/v1/audit")).body(
            json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items})
                .to_string(),
        );
        async move {
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    eventually(Duration::from_secs(20), || async {
        rejected().await;
        (rejected_in(&status(&monitor.url).await?, "workload-low")? > 0).then_some(())
    })
    .await
    .expect("the agent's 429s in workload-low");
    assert_eq!(
        replica.lists.load(Ordering::SeqCst),
        2,
        "one list of each resource"
    );

    replica.fixed.store(true, Ordering::SeqCst);
    let fixed = std::time::Instant::now();
    eventually(FOLLOWED_WITHIN, || async {
        rejected().await;
        (rejected_in(&status(&monitor.url).await?, NEW_LEVEL)? > 0).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!("the agent's 429s are not blamed on {NEW_LEVEL} within {FOLLOWED_WITHIN:?}")
    });
    eprintln!(
        "the 429s blamed on the new level {:?} after the fix",
        fixed.elapsed()
    );
    // One more list of each, and then none: the level is known now; the refused watch was asked for once (of
    // either resource, or of both at once), not again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(replica.lists.load(Ordering::SeqCst), 4);
    let watches = replica.watches.load(Ordering::SeqCst);
    assert!((1..=2).contains(&watches), "{watches} watches");
    // The refusal counted where the endpoint's errors are: once, one watch of the objects ended.
    let body = get_text(&format!("{monitor}/metrics")).await.unwrap();
    let refused = common::sample_value(
        &body,
        "apf_monitor_scrape_errors_total",
        &[
            ("endpoint", "priority_level_configurations"),
            ("reason", "http_4xx"),
        ],
    );
    assert_eq!(refused, Some(1.0));
}
