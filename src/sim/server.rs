//! The HTTP surface of the simulated apiserver (axum).

use super::objects::{self, Distinguisher};
use super::render::{git_commit, go_version};
use super::Simulator;
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
        .route("/metrics", get(metrics))
        .route(
            "/debug/api_priority_and_fairness/dump_priority_levels",
            get(dump_priority_levels),
        )
        .route(
            "/debug/api_priority_and_fairness/dump_queues",
            get(dump_queues),
        )
        .route(
            "/debug/api_priority_and_fairness/dump_requests",
            get(dump_requests),
        )
        .route("/version", get(version))
        .route(
            "/healthz",
            get(|| async { ([(header::CONTENT_TYPE, TEXT)], "ok") }),
        )
        .route(
            "/apis/flowcontrol.apiserver.k8s.io/{version}/{resource}",
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
    let details = q
        .get("includeRequestDetails")
        .is_some_and(|v| !v.is_empty());
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

async fn flowcontrol_list(
    State(sim): State<Simulator>,
    Path((api, resource)): Path<(String, String)>,
) -> Response {
    let v = sim.lock().version;
    if !objects::served_api_versions(v).contains(&api.as_str()) {
        return not_found();
    }
    let new_names = api == "v1" || api == "v1beta3";
    let api_version = format!("flowcontrol.apiserver.k8s.io/{api}");
    let server_cl = sim.lock().server_cl;
    let (kind, items): (&str, Vec<Value>) = match resource.as_str() {
        "prioritylevelconfigurations" => {
            let pls = objects::default_priority_levels(v);
            let sum: u32 = pls.iter().map(|p| p.shares).sum();
            let items = pls
                .iter()
                .map(|p| {
                    let mut spec = serde_json::Map::new();
                    if p.exempt {
                        spec.insert("type".into(), json!("Exempt"));
                        if v.at_least(28) {
                            spec.insert("exempt".into(), json!({"nominalConcurrencyShares": 0, "lendablePercent": 0}));
                        }
                    } else {
                        spec.insert("type".into(), json!("Limited"));
                        let mut limited = serde_json::Map::new();
                        let key = if new_names { "nominalConcurrencyShares" } else { "assuredConcurrencyShares" };
                        limited.insert(key.into(), json!(p.shares));
                        if v.at_least(26) {
                            limited.insert("lendablePercent".into(), json!(p.lendable_percent));
                        }
                        let lr = if p.reject {
                            json!({"type": "Reject"})
                        } else {
                            json!({"type": "Queue", "queuing": {"queues": p.queues, "handSize": p.hand_size, "queueLengthLimit": p.queue_length_limit}})
                        };
                        limited.insert("limitResponse".into(), lr);
                        spec.insert("limited".into(), Value::Object(limited));
                    }
                    let _ = objects::nominal_limit(server_cl, p.shares, sum);
                    json!({
                        "metadata": metadata("PriorityLevelConfiguration", p.name),
                        "spec": spec,
                        "status": {"conditions": []},
                    })
                })
                .collect();
            ("PriorityLevelConfigurationList", items)
        }
        "flowschemas" => {
            let items = objects::default_flow_schemas(v)
                .iter()
                .map(|f| {
                    let mut spec = json!({
                        "priorityLevelConfiguration": {"name": f.priority_level},
                        "matchingPrecedence": f.precedence,
                        "rules": [{
                            "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
                        }],
                    });
                    let d = match f.distinguisher {
                        Distinguisher::None => None,
                        Distinguisher::ByUser => Some("ByUser"),
                        Distinguisher::ByNamespace => Some("ByNamespace"),
                    };
                    if let (Some(d), Some(obj)) = (d, spec.as_object_mut()) {
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
