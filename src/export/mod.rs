//! What apf-monitor serves over HTTP: `/metrics`, `/healthz`, `/readyz`, `/api/v1/status`, the status page `/`,
//! `/api/v1/silences`, `POST /-/reload` and `POST /api/v1/audit` (kube-apiserver's audit webhook), each behind the
//! guard of `web.auth` ([`auth`]).
//!
//! Export owns no state: it serves what the daemon hands it ([`Surfaces`]): the analysis' latest report and the
//! alerting stage's view (watch channels), the metric registry, and request channels. Silences belong to the
//! alerting stage and the config to the daemon, so their endpoints send a request and wait for the answer; audit
//! batches go to the analysis stage, which counts them.
pub mod auth;
mod listener;
mod page;
mod prometheus;
mod settings;
mod tls;

pub use auth::Guard;
pub use listener::{serve, HANDSHAKE_TIMEOUT, HEADER_READ_TIMEOUT, MAX_BODY, MAX_CONNECTIONS};
pub use prometheus::DerivedMetrics;
pub use settings::{AuthConfig, AuthMode, WebConfig};
pub use tls::{acceptor as tls_acceptor, TlsError, TlsFiles};

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot, watch};

use crate::alert::{AlertView, SilenceError, SilenceInput, SilenceView};
use crate::analyze::StatusReport;

/// `POST /-/reload` and SIGHUP: re-read the config file. The answer says whether the new config runs now.
pub struct ReloadRequest {
    pub reply: Option<oneshot::Sender<Result<(), String>>>,
}

/// The silences API, answered by the alerting stage that owns the silences.
pub enum SilenceRequest {
    List(oneshot::Sender<Vec<SilenceView>>),
    Get(String, oneshot::Sender<Option<SilenceView>>),
    Add(SilenceInput, oneshot::Sender<Result<String, SilenceError>>),
    Expire(String, oneshot::Sender<Result<(), SilenceError>>),
}

/// Everything the HTTP surfaces read or ask; cloned into each handler.
#[derive(Clone)]
pub struct Surfaces {
    /// The analysis' latest report (without alerts: those come from `alerts`).
    pub report: watch::Receiver<Arc<StatusReport>>,
    /// True once any replica's `/metrics` was scraped successfully.
    pub ready: watch::Receiver<bool>,
    pub alerts: watch::Receiver<Arc<AlertView>>,
    /// Derived metrics (a collector over the report) and every self-metric family.
    pub registry: Arc<Registry>,
    pub reload: mpsc::Sender<ReloadRequest>,
    pub silences: mpsc::Sender<SilenceRequest>,
    /// kube-apiserver's audit webhook; `None` when `audit.webhook` is off.
    pub audit: Option<crate::audit::AuditIntake>,
    /// The length of the last `/metrics`: the next is written into that much room (and an eighth more), not into
    /// a string that doubles as it grows (a fleet's is tens of MiB, and a doubling holds both copies at once).
    pub metrics_bytes: Arc<std::sync::atomic::AtomicUsize>,
}

impl Surfaces {
    /// The report with the alerts and each level's status from the rules: what `/api/v1/status` serves.
    pub fn status(&self) -> StatusReport {
        status_of(&self.report.borrow(), &self.alerts.borrow())
    }
}

/// A report of the analysis with the alerting stage's view put in.
pub fn status_of(report: &StatusReport, alerts: &AlertView) -> StatusReport {
    let mut status = report.clone();
    alerts.apply(&mut status);
    status
}

/// The routes, each behind `guard`.
pub fn router(surfaces: Surfaces, guard: Arc<Guard>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/status", get(status))
        .route("/", get(page_handler))
        .route("/-/reload", post(reload))
        .route("/api/v1/silences", get(list_silences).post(add_silence))
        .route(
            "/api/v1/silences/{id}",
            get(get_silence).delete(expire_silence),
        )
        .route(
            "/api/v1/audit",
            post(audit_webhook).layer(axum::extract::DefaultBodyLimit::max(AUDIT_MAX_BODY)),
        )
        .layer(axum::middleware::from_fn_with_state(guard, auth::guard))
        .with_state(surfaces)
}

async fn metrics(State(s): State<Surfaces>) -> Response {
    use std::sync::atomic::Ordering;
    let last = s.metrics_bytes.load(Ordering::Relaxed).max(16 * 1024);
    let mut text = String::with_capacity(last + last / 8);
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &s.registry) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {e}\n"),
        )
            .into_response();
    }
    s.metrics_bytes.store(text.len(), Ordering::Relaxed);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn readyz(State(s): State<Surfaces>) -> Response {
    if *s.ready.borrow() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no target has been scraped successfully yet\n",
        )
            .into_response()
    }
}

async fn status(State(s): State<Surfaces>) -> Response {
    axum::Json(s.status()).into_response()
}

async fn page_handler(State(s): State<Surfaces>) -> Html<String> {
    Html(page::render(&s.status()))
}

fn json_error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (
        status,
        axum::Json(serde_json::json!({"error": message.to_string()})),
    )
        .into_response()
}

/// How long an HTTP request waits for a stage's answer before saying it is busy.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends a request to a stage and waits for its answer; `None` when the stage is gone (shutting down) or does not
/// answer in time.
async fn ask<T, R>(tx: &mpsc::Sender<R>, make: impl FnOnce(oneshot::Sender<T>) -> R) -> Option<T> {
    let (reply, answer) = oneshot::channel();
    let exchange = async {
        tx.send(make(reply)).await.ok()?;
        answer.await.ok()
    };
    tokio::time::timeout(ANSWER_TIMEOUT, exchange).await.ok()?
}

fn unavailable(what: &str) -> Response {
    json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what} is not answering (apf-monitor is shutting down or overloaded); try again"),
    )
}

/// Prometheus' convention: 200 when the new config runs, 500 with the error (key, line, fix) when it was refused
/// and the running config goes on.
async fn reload(State(s): State<Surfaces>) -> Response {
    match ask(&s.reload, |reply| ReloadRequest { reply: Some(reply) }).await {
        Some(Ok(())) => (StatusCode::OK, "config reloaded\n").into_response(),
        Some(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("config not reloaded, the running config goes on: {e}\n"),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "config reload is not answering (apf-monitor is shutting down); try again\n",
        )
            .into_response(),
    }
}

async fn list_silences(State(s): State<Surfaces>) -> Response {
    match ask(&s.silences, SilenceRequest::List).await {
        Some(list) => axum::Json(list).into_response(),
        None => unavailable("the alerting stage"),
    }
}

async fn get_silence(
    State(s): State<Surfaces>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    match ask(&s.silences, |r| SilenceRequest::Get(id.clone(), r)).await {
        Some(Some(silence)) => axum::Json(silence).into_response(),
        Some(None) => json_error(StatusCode::NOT_FOUND, format!("no silence {id}")),
        None => unavailable("the alerting stage"),
    }
}

/// Alertmanager's shape: `{"matchers": [{"name", "value", "isRegex", "isEqual"}], "startsAt", "endsAt", "createdBy",
/// "comment"}`; answers `{"silenceID": "..."}`.
async fn add_silence(State(s): State<Surfaces>, body: axum::body::Bytes) -> Response {
    let input: SilenceInput = match serde_json::from_slice(&body) {
        Ok(i) => i,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, format!("invalid silence: {e}")),
    };
    match ask(&s.silences, |r| SilenceRequest::Add(input, r)).await {
        Some(Ok(id)) => {
            tracing::info!(silence = %id, "silence added");
            axum::Json(serde_json::json!({"silenceID": id})).into_response()
        }
        Some(Err(e)) => json_error(StatusCode::BAD_REQUEST, e),
        None => unavailable("the alerting stage"),
    }
}

async fn expire_silence(
    State(s): State<Surfaces>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    match ask(&s.silences, |r| SilenceRequest::Expire(id.clone(), r)).await {
        Some(Ok(())) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({"expired": id})),
        )
            .into_response(),
        Some(Err(e)) => json_error(StatusCode::NOT_FOUND, e),
        None => unavailable("the alerting stage"),
    }
}

/// The largest webhook batch taken: kube-apiserver sends at most `--audit-webhook-batch-max-size` events (400 by
/// default), a few KiB each at level Metadata.
pub const AUDIT_MAX_BODY: usize = 16 << 20;

#[derive(serde::Deserialize)]
struct AuditQuery {
    /// The cluster whose apiserver sends the batch, when apf-monitor watches several.
    cluster: Option<String>,
}

/// kube-apiserver's webhook backend: an `EventList` per POST. 200 once the batch is taken; 400 for a body that is
/// not one; 429 with `Retry-After` when the analysis is behind, which kube-apiserver's webhook client retries with
/// back-off (k8s.io/apiserver `pkg/util/webhook` `DefaultShouldRetry`) rather than the batch being lost.
async fn audit_webhook(
    State(s): State<Surfaces>,
    axum::extract::Query(q): axum::extract::Query<AuditQuery>,
    body: axum::body::Bytes,
) -> Response {
    use crate::audit::read::{parse_batch, Tally};
    let Some(intake) = &s.audit else {
        return json_error(
            StatusCode::NOT_FOUND,
            "the audit webhook is off (audit.webhook: false in the config)",
        );
    };
    let mut tally = Tally::default();
    let requests = match parse_batch(&body, &mut tally) {
        Ok(r) => r,
        Err(e) => {
            intake.metrics.add(&tally);
            return json_error(
                StatusCode::BAD_REQUEST,
                format!("not an audit.k8s.io/v1 EventList: {e}"),
            );
        }
    };
    let batch = crate::audit::AuditBatch {
        cluster: q.cluster.filter(|c| !c.is_empty()),
        requests,
    };
    match intake.tx.try_send(batch) {
        Ok(()) => {
            intake.metrics.add(&tally);
            (StatusCode::OK, axum::Json(serde_json::json!({}))).into_response()
        }
        Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
            let mut r = json_error(
                StatusCode::TOO_MANY_REQUESTS,
                "the analysis of audit events is behind; retry the batch",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            r
        }
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
            unavailable("the analysis of audit events")
        }
    }
}
