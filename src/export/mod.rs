//! What apf-monitor serves: `/metrics`, `/healthz`, `/readyz`, `/api/v1/status` and the status page `/`.
mod page;
mod prometheus;

pub use prometheus::{render as render_metrics, SelfMetrics};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::analyze::StatusReport;

/// What the scrape loop writes and the HTTP handlers read.
#[derive(Default)]
pub struct ExportState {
    pub report: RwLock<StatusReport>,
    pub self_metrics: Mutex<SelfMetrics>,
    /// Set once any target's `/metrics` was scraped successfully.
    pub ready: AtomicBool,
    /// `apf_monitor_notifications_total`, kept by the receivers' deliveries.
    pub notifications: crate::notify::NotifyMetrics,
    /// The alerting stage, once built: silences are read and written through it.
    pub alerting: std::sync::OnceLock<Arc<Mutex<crate::alert::Alerting>>>,
}

impl ExportState {
    pub fn report(&self) -> StatusReport {
        self.report
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

pub fn router(state: Arc<ExportState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/status", get(status))
        .route("/", get(page_handler))
        .route("/api/v1/silences", get(list_silences).post(add_silence))
        .route(
            "/api/v1/silences/{id}",
            get(get_silence).delete(expire_silence),
        )
        .with_state(state)
}

async fn metrics(State(state): State<Arc<ExportState>>) -> Response {
    let text = {
        let report = state.report.read().unwrap_or_else(|p| p.into_inner());
        let self_metrics = state.self_metrics.lock().unwrap_or_else(|p| p.into_inner());
        render_metrics(&report, &self_metrics, &state.notifications.snapshot())
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn readyz(State(state): State<Arc<ExportState>>) -> Response {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no target has been scraped successfully yet\n",
        )
            .into_response()
    }
}

async fn status(State(state): State<Arc<ExportState>>) -> Response {
    axum::Json(state.report()).into_response()
}

async fn page_handler(State(state): State<Arc<ExportState>>) -> Html<String> {
    Html(page::render(&state.report()))
}

fn no_alerting() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({"error": "alerting is not running in this process"})),
    )
        .into_response()
}

fn json_error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (
        status,
        axum::Json(serde_json::json!({"error": message.to_string()})),
    )
        .into_response()
}

async fn list_silences(State(state): State<Arc<ExportState>>) -> Response {
    let Some(alerting) = state.alerting.get() else {
        return no_alerting();
    };
    let a = alerting.lock().unwrap_or_else(|p| p.into_inner());
    axum::Json(a.silences.list(std::time::SystemTime::now())).into_response()
}

async fn get_silence(
    State(state): State<Arc<ExportState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let Some(alerting) = state.alerting.get() else {
        return no_alerting();
    };
    let a = alerting.lock().unwrap_or_else(|p| p.into_inner());
    match a.silences.get(&id, std::time::SystemTime::now()) {
        Some(s) => axum::Json(s).into_response(),
        None => json_error(StatusCode::NOT_FOUND, format!("no silence {id}")),
    }
}

/// Alertmanager's shape: `{"matchers": [{"name", "value", "isRegex", "isEqual"}], "startsAt", "endsAt", "createdBy",
/// "comment"}`; answers `{"silenceID": "..."}`.
async fn add_silence(State(state): State<Arc<ExportState>>, body: axum::body::Bytes) -> Response {
    let Some(alerting) = state.alerting.get() else {
        return no_alerting();
    };
    let input: crate::alert::SilenceInput = match serde_json::from_slice(&body) {
        Ok(i) => i,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, format!("invalid silence: {e}")),
    };
    let mut a = alerting.lock().unwrap_or_else(|p| p.into_inner());
    match a.silences.add(input, std::time::SystemTime::now()) {
        Ok(id) => {
            tracing::info!(silence = %id, "silence added");
            axum::Json(serde_json::json!({"silenceID": id})).into_response()
        }
        Err(e) => json_error(StatusCode::BAD_REQUEST, e),
    }
}

async fn expire_silence(
    State(state): State<Arc<ExportState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let Some(alerting) = state.alerting.get() else {
        return no_alerting();
    };
    let mut a = alerting.lock().unwrap_or_else(|p| p.into_inner());
    match a.silences.expire(&id, std::time::SystemTime::now()) {
        Ok(()) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({"expired": id})),
        )
            .into_response(),
        Err(e) => json_error(StatusCode::NOT_FOUND, e),
    }
}
