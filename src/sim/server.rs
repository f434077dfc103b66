//! The HTTP surface of the simulated apiserver (axum).

use super::render::{git_commit, go_version};
use super::Simulator;
use crate::apf::defaults::{default_flow_schemas, default_priority_levels};
use crate::apf::endpoints::{self, Dump, REQUEST_DETAILS_PARAM};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;

const TEXT: &str = "text/plain; charset=utf-8";

/// Routes: `/metrics`, the three APF dumps, `/version`, the flowcontrol API lists, `/healthz`.
pub fn router(sim: Simulator) -> Router {
    Router::new()
        .route(endpoints::METRICS_PATH, get(metrics))
        .route(Dump::PriorityLevels.path(), get(dump_priority_levels))
        .route(Dump::Queues.path(), get(dump_queues))
        .route(Dump::Requests.path(), get(dump_requests))
        .route("/version", get(version))
        .route(
            "/healthz",
            get(|| async { ([(header::CONTENT_TYPE, TEXT)], "ok") }),
        )
        .route(
            &endpoints::flowcontrol_path("{version}", "{resource}"),
            get(flowcontrol_list),
        )
        .fallback(|| async { not_found() })
        .with_state(sim)
}

/// Serves `router(sim)` on `listener` until the future is dropped.
pub async fn serve(listener: tokio::net::TcpListener, sim: Simulator) -> std::io::Result<()> {
    axum::serve(listener, router(sim)).await
}

async fn metrics(State(sim): State<Simulator>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        sim.render_metrics(),
    )
        .into_response()
}

async fn dump_priority_levels(State(sim): State<Simulator>) -> Response {
    (
        [(header::CONTENT_TYPE, TEXT)],
        sim.render_dump_priority_levels(),
    )
        .into_response()
}

async fn dump_queues(State(sim): State<Simulator>) -> Response {
    ([(header::CONTENT_TYPE, TEXT)], sim.render_dump_queues()).into_response()
}

async fn dump_requests(
    State(sim): State<Simulator>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    // Any non-empty value enables details, as in D.
    let details = q.get(REQUEST_DETAILS_PARAM).is_some_and(|v| !v.is_empty());
    (
        [(header::CONTENT_TYPE, TEXT)],
        sim.render_dump_requests(details),
    )
        .into_response()
}

async fn version(State(sim): State<Simulator>) -> Json<Value> {
    let v = sim.lock().version;
    Json(json!({
        "major": "1",
        "minor": v.minor.to_string(),
        "gitVersion": v.git_version(),
        "gitCommit": git_commit(v.minor, v.patch),
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": go_version(v.minor),
        "compiler": "gc",
        "platform": "linux/amd64",
    }))
}

fn not_found() -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    });
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// A stable UID per object name.
fn uid(kind: &str, name: &str) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in kind.bytes().chain(name.bytes()) {
        h ^= b as u128;
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    let s = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &s[0..8],
        &s[8..12],
        &s[12..16],
        &s[16..20],
        &s[20..32]
    )
}

fn metadata(kind: &str, name: &str) -> Value {
    json!({
        "name": name,
        "uid": uid(kind, name),
        "resourceVersion": "42",
        "generation": 1,
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"},
    })
}

/// The rules of the default FlowSchemas (B), close enough for a reader of subjects and resources.
fn flow_schema_rules(name: &str) -> Value {
    let user = |n: &str| json!({"kind": "User", "user": {"name": n}});
    let group = |n: &str| json!({"kind": "Group", "group": {"name": n}});
    let sa = |ns: &str, n: &str| json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": ns, "name": n}});
    let all_resources = json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]);
    let all_urls = json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]);
    let leases = json!([{"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]);
    let everyone = vec![
        group("system:unauthenticated"),
        group("system:authenticated"),
    ];
    let (subjects, resource_rules, non_resource_rules) = match name {
        "exempt" => (vec![group("system:masters")], all_resources, all_urls),
        "probes" => (
            everyone,
            json!([]),
            json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]),
        ),
        "system-leader-election" => (
            vec![
                user("system:kube-controller-manager"),
                user("system:kube-scheduler"),
                sa("kube-system", "*"),
            ],
            leases,
            json!([]),
        ),
        "workload-leader-election" => (vec![sa("kube-system", "*")], leases, json!([])),
        "endpoint-controller" => (
            vec![
                user("system:kube-controller-manager"),
                sa("kube-system", "endpoint-controller"),
            ],
            json!([{"verbs": ["get", "create", "update"], "apiGroups": [""], "resources": ["endpoints"], "namespaces": ["*"]}]),
            json!([]),
        ),
        "system-node-high" => (
            vec![group("system:nodes")],
            json!([{"verbs": ["*"], "apiGroups": ["", "coordination.k8s.io"], "resources": ["nodes", "nodes/status", "leases"], "clusterScope": true, "namespaces": ["*"]}]),
            json!([]),
        ),
        "system-nodes" => (vec![group("system:nodes")], all_resources, all_urls),
        "kube-controller-manager" => (
            vec![user("system:kube-controller-manager")],
            all_resources,
            all_urls,
        ),
        "kube-scheduler" => (vec![user("system:kube-scheduler")], all_resources, all_urls),
        "kube-system-service-accounts" => (vec![sa("kube-system", "*")], all_resources, all_urls),
        "service-accounts" => (
            vec![group("system:serviceaccounts")],
            all_resources,
            all_urls,
        ),
        _ => (everyone, all_resources, all_urls),
    };
    let mut rule = serde_json::Map::new();
    rule.insert("subjects".into(), Value::Array(subjects));
    if resource_rules.as_array().is_some_and(|a| !a.is_empty()) {
        rule.insert("resourceRules".into(), resource_rules);
    }
    if non_resource_rules.as_array().is_some_and(|a| !a.is_empty()) {
        rule.insert("nonResourceRules".into(), non_resource_rules);
    }
    json!([rule])
}

async fn flowcontrol_list(
    State(sim): State<Simulator>,
    Path((api, resource)): Path<(String, String)>,
) -> Response {
    let v = sim.lock().version;
    if !endpoints::served_api_versions(v).contains(&api.as_str()) {
        return not_found();
    }
    let new_names = api == "v1" || api == "v1beta3";
    let api_version = endpoints::flowcontrol_api_version(&api);
    let (kind, items): (&str, Vec<Value>) = match resource.as_str() {
        endpoints::PRIORITY_LEVEL_CONFIGURATIONS => {
            let items = default_priority_levels(v)
                .iter()
                .map(|p| {
                    let mut spec = serde_json::Map::new();
                    if p.exempt {
                        spec.insert("type".into(), json!("Exempt"));
                        // The exempt spec has fields from 1.28 (the table leaves them out before).
                        if let (Some(shares), Some(lendable)) = (p.shares, p.lendable_percent) {
                            spec.insert("exempt".into(), json!({"nominalConcurrencyShares": shares, "lendablePercent": lendable}));
                        }
                    } else {
                        spec.insert("type".into(), json!("Limited"));
                        let mut limited = serde_json::Map::new();
                        let key = if new_names { "nominalConcurrencyShares" } else { "assuredConcurrencyShares" };
                        limited.insert(key.into(), json!(p.shares));
                        if let Some(lendable) = p.lendable_percent {
                            limited.insert("lendablePercent".into(), json!(lendable));
                        }
                        let lr = if p.rejects() {
                            json!({"type": "Reject"})
                        } else {
                            json!({"type": "Queue", "queuing": {"queues": p.queues, "handSize": p.hand_size, "queueLengthLimit": p.queue_length_limit}})
                        };
                        limited.insert("limitResponse".into(), lr);
                        spec.insert("limited".into(), Value::Object(limited));
                    }
                    json!({
                        "metadata": metadata("PriorityLevelConfiguration", &p.name),
                        "spec": spec,
                        "status": {"conditions": []},
                    })
                })
                .collect();
            ("PriorityLevelConfigurationList", items)
        }
        endpoints::FLOW_SCHEMAS => {
            let items = default_flow_schemas(v)
                .iter()
                .map(|f| {
                    let mut spec = json!({
                        "priorityLevelConfiguration": {"name": f.priority_level},
                        "matchingPrecedence": f.precedence,
                        "rules": flow_schema_rules(f.name),
                    });
                    if let (Some(d), Some(obj)) = (f.distinguisher.method_type(), spec.as_object_mut()) {
                        obj.insert("distinguisherMethod".into(), json!({"type": d}));
                    }
                    json!({
                        "metadata": metadata("FlowSchema", f.name),
                        "spec": spec,
                        "status": {"conditions": [{"type": "Dangling", "status": "False", "reason": "Found"}]},
                    })
                })
                .collect();
            ("FlowSchemaList", items)
        }
        _ => return not_found(),
    };
    Json(json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {"resourceVersion": "42"},
        "items": items,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::apf::tests::sim;
    use crate::sim::ScenarioSource;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(minor: u32) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
        let s = sim(minor, ScenarioSource::Storm, 1);
        s.step(Duration::from_secs(20));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (format!("http://{addr}"), tokio::spawn(serve(listener, s)))
    }

    async fn get(url: &str) -> (u16, String, String) {
        let resp = reqwest::get(url).await.unwrap();
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        (status, ct, resp.text().await.unwrap())
    }

    #[tokio::test]
    async fn serves_metrics_dumps_and_health() {
        let (base, server) = start(29).await;
        let (status, ct, body) = get(&format!("{base}/metrics")).await;
        assert_eq!(status, 200);
        assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
        assert!(body.contains(
            "apiserver_flowcontrol_current_limit_seats{priority_level=\"workload-low\"}"
        ));
        let (status, _, body) = get(&format!("{base}/healthz")).await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        let (_, _, body) = get(&format!(
            "{base}/debug/api_priority_and_fairness/dump_priority_levels"
        ))
        .await;
        assert!(body.starts_with("PriorityLevelName, ActiveQueues,"));
        let (_, _, body) = get(&format!(
            "{base}/debug/api_priority_and_fairness/dump_queues"
        ))
        .await;
        assert!(body.contains("NextDispatchR"));
        let (_, _, plain) = get(&format!(
            "{base}/debug/api_priority_and_fairness/dump_requests"
        ))
        .await;
        assert!(!plain.lines().next().unwrap().contains("UserName"));
        let (_, _, detailed) = get(&format!(
            "{base}/debug/api_priority_and_fairness/dump_requests?includeRequestDetails=1"
        ))
        .await;
        assert!(detailed.lines().next().unwrap().contains("UserName"));
        let (_, _, empty) = get(&format!(
            "{base}/debug/api_priority_and_fairness/dump_requests?includeRequestDetails="
        ))
        .await;
        assert!(!empty.lines().next().unwrap().contains("UserName"));
        let (status, _, body) = get(&format!("{base}/nope")).await;
        assert_eq!(status, 404);
        assert!(body.contains("\"kind\":\"Status\""));
        server.abort();
    }

    #[tokio::test]
    async fn serves_version_and_flowcontrol_objects() {
        let (base, server) = start(29).await;
        let (_, _, body) = get(&format!("{base}/version")).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["gitVersion"], "v1.29.0");
        assert_eq!(v["minor"], "29");
        let (status, _, body) = get(&format!(
            "{base}/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations"
        ))
        .await;
        assert_eq!(status, 200);
        let list: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list["kind"], "PriorityLevelConfigurationList");
        assert_eq!(list["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
        let wl = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "workload-low")
            .unwrap();
        assert_eq!(wl["spec"]["limited"]["nominalConcurrencyShares"], 100);
        assert_eq!(wl["spec"]["limited"]["lendablePercent"], 90);
        assert_eq!(
            wl["spec"]["limited"]["limitResponse"]["queuing"]["queues"],
            128
        );
        assert!(wl["metadata"]["uid"].as_str().unwrap().len() == 36);
        let exempt = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "exempt")
            .unwrap();
        assert_eq!(exempt["spec"]["exempt"]["nominalConcurrencyShares"], 0);
        let (status, _, body) = get(&format!(
            "{base}/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"
        ))
        .await;
        assert_eq!(status, 200);
        let list: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list["kind"], "FlowSchemaList");
        let sa = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "service-accounts")
            .unwrap();
        assert_eq!(
            sa["spec"]["priorityLevelConfiguration"]["name"],
            "workload-low"
        );
        assert_eq!(sa["spec"]["matchingPrecedence"], 9000);
        assert_eq!(sa["spec"]["distinguisherMethod"]["type"], "ByUser");
        assert_eq!(
            sa["spec"]["rules"][0]["subjects"][0]["group"]["name"],
            "system:serviceaccounts"
        );
        let probes = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "probes")
            .unwrap();
        assert!(probes["spec"].get("distinguisherMethod").is_none());
        assert!(probes["spec"]["rules"][0].get("resourceRules").is_none());
        let (status, _, body) = get(&format!(
            "{base}/apis/flowcontrol.apiserver.k8s.io/v1beta2/flowschemas"
        ))
        .await;
        assert_eq!(status, 404);
        assert!(body.contains("NotFound"));
        server.abort();
    }

    #[tokio::test]
    async fn old_api_spelling() {
        let (base, server) = start(24).await;
        let (status, _, body) = get(&format!(
            "{base}/apis/flowcontrol.apiserver.k8s.io/v1beta2/prioritylevelconfigurations"
        ))
        .await;
        assert_eq!(status, 200);
        assert!(body.contains("assuredConcurrencyShares") && !body.contains("lendablePercent"));
        assert!(!body.contains("\"exempt\":{"));
        let (status, _, _) = get(&format!(
            "{base}/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas"
        ))
        .await;
        assert_eq!(status, 404);
        server.abort();
    }

    #[tokio::test]
    async fn raw_http_get() {
        let (base, server) = start(35).await;
        let addr = base.trim_start_matches("http://");
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = String::new();
        conn.read_to_string(&mut buf).await.unwrap();
        assert!(buf.starts_with("HTTP/1.1 200 OK"));
        assert!(buf.ends_with("\r\n\r\nok"));
        server.abort();
    }

    #[tokio::test]
    async fn clock_advances_with_wall_time() {
        let s = sim(29, ScenarioSource::Idle, 1);
        let clock = s.spawn_clock(Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(200)).await;
        clock.abort();
        assert!(s.elapsed() >= Duration::from_millis(100));
    }
}
