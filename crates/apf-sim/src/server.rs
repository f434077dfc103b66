//! The HTTP surface of one simulated apiserver (axum): what is its own (`/metrics`, the APF dumps, `/version`,
//! `/healthz`) and, through [`super::api`], the cluster's API.

use super::api::{self, ApiContext};
use super::objects;
use super::render::{git_commit, go_version, protobuf};
use super::simulator::Simulator;
use super::status::ApiError;
use super::store::Store;
use super::{controller, openapi};
use apf::endpoints::{self, Dump, REQUEST_DETAILS_PARAM};
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;
use tokio_util::sync::CancellationToken;

const TEXT: &str = "text/plain; charset=utf-8";

/// One apiserver on its own: its routes and the API of a cluster of one, whose store holds the namespaces and the
/// default flowcontrol objects (no `kubernetes` endpoints: the address it is served on is not known here), and the
/// controller that puts the flowcontrol objects written through that API in force. Needs a tokio runtime.
pub(super) fn router(sim: Simulator, stop: CancellationToken) -> Router {
    let version = sim.lock().version;
    let store = Store::new();
    objects::seed(&store, version);
    controller::spawn(store.clone(), version, sim.clone(), stop.clone());
    replica_routes(sim)
        .merge(api::routes(ApiContext::new(store, version, None, stop)))
        .merge(openapi::routes(version))
}

/// Serves one simulated apiserver on `listener` until the future is dropped.
pub async fn serve(listener: tokio::net::TcpListener, sim: Simulator) -> std::io::Result<()> {
    let stop = CancellationToken::new();
    // Dropping the future stops the controller too.
    let _stop = stop.clone().drop_guard();
    axum::serve(listener, router(sim, stop)).await
}

/// What is each replica's own: `/metrics`, the three APF dumps, `/version`, `/healthz`, `/livez`, `/readyz`; any
/// other path not under `/api` or `/apis` is a 404 Status.
pub(super) fn replica_routes(sim: Simulator) -> Router {
    Router::new()
        .route(endpoints::METRICS_PATH, get(metrics))
        .route(Dump::PriorityLevels.path(), get(dump_priority_levels))
        .route(Dump::Queues.path(), get(dump_queues))
        .route(Dump::Requests.path(), get(dump_requests))
        .route("/version", get(version))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .fallback(|| async { ApiError::no_such_path().into_response() })
        .with_state(sim)
}

async fn ok() -> Response {
    ([(header::CONTENT_TYPE, TEXT)], "ok").into_response()
}

/// The text format, or the protobuf one when the scrape's `Accept` asks for it first, as client_golang's handler
/// negotiates (`render/protobuf.rs`).
async fn metrics(State(sim): State<Simulator>, headers: header::HeaderMap) -> Response {
    let text = sim.render_metrics();
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if protobuf::negotiate(accept) {
        let body = protobuf::from_text(text.as_bytes(), Some(protobuf::CREATED));
        return ([(header::CONTENT_TYPE, protobuf::CONTENT_TYPE)], body).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::ScenarioSource;
    use crate::simulator::tests::sim;
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
