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
