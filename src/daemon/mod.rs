//! The daemon owns every task and the channels between the stages; no stage writes another's state.
//!
//! ```text
//!  reload (SIGHUP, POST /-/reload) ──► setup ──► targets: watch<Targets> ──────► supervisor
//!                                          │                                        │ one loop per replica
//!                                          │                                        │ and per Prometheus source
//!                                          │          replica and Prometheus loops ──► mpsc<Update>
//!                                          │                                        ▼
//!                                          ├──► watch<Analysis> ──────────────► analysis
//!                                          │                                        │ watch<Arc<StatusReport>>
//!                                          │                        ┌───────────────┴──────────────┐
//!                                          └──► mpsc<Command> ──► alerting ──► receivers      export (HTTP)
//!                                                                   │ watch<Arc<AlertView>>        ▲
//!                                                                   └──────────────────────────────┘
//! ```
//! Export's silences API and reload endpoint send requests ([`crate::export::SilenceRequest`],
//! [`crate::export::ReloadRequest`]) to the stage that owns what they change. Audit events (the followed files of
//! `audit.files`, on a blocking thread, and export's `POST /api/v1/audit`) go to the analysis as
//! `mpsc<`[`crate::audit::AuditBatch`]`>`, which counts them in its window.
//!
//! The stop ([`Daemon::stop`]): scraping ends; the alerting stage sends what every group owes, delivers what is
//! queued (retries included) until `shutdown_timeout`, and saves its state; the Lease is released; the HTTP server
//! finishes its requests.
mod alerting;
mod analysis;
mod leader;
mod memory;
mod objects;
mod prediction;
mod prometheus;
mod reload;
mod replica;
mod runtime;
pub use runtime::runtime;
mod setup;
mod supervisor;
mod targets;

pub use alerting::{AlertStage, Command};
pub use analysis::{AnalysisStage, Update};
pub use leader::{Election, LeaderState, Leadership};
pub use reload::ReloadMetrics;
pub use setup::{
    analysis_of, build_replicas, build_rules, build_targets, enabled_endpoints, AlertSetup,
    DiscoverySetup, LoopSettings, Origin, PrometheusSetup, ReceiverSetup, Replica, ReplicaSpec,
    Setup, SetupError, TargetSource, Targets, DEFAULT_RECEIVER, NO_RECEIVER_HINT,
};
pub use targets::DiscoveryMetrics;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::alert::{AlertView, TokioClock};
use crate::analyze::predict::Predictions;
use crate::analyze::StatusReport;
use crate::config::Config;
use crate::export::{self, DerivedMetrics, ReloadRequest, Surfaces};
use crate::notify::NotifyMetrics;
use crate::scrape::ScrapeMetrics;

/// Reads the config (the file, with the command line's overrides): at start and at each reload.
pub type Loader = Arc<dyn Fn() -> anyhow::Result<Config> + Send + Sync>;

/// A running daemon: its tasks, and the handles that stop or reload it.
pub struct Daemon {
    tasks: JoinSet<()>,
    reloader: AbortHandle,
    surfaces: Surfaces,
    scraping: CancellationToken,
    http: CancellationToken,
    alerting: mpsc::Sender<Command>,
    leadership: Leadership,
    shutdown_timeout: watch::Receiver<Duration>,
    local_addr: SocketAddr,
}

/// Runs the daemon on `setup` (built by the caller from what `loader` gives) until `shutdown` resolves, reloading
/// the config at each message of `reloads` (SIGHUP); then stops it as [`Daemon::stop`] says.
pub async fn run(
    setup: Setup,
    loader: Loader,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
    mut reloads: mpsc::Receiver<()>,
) -> anyhow::Result<()> {
    let daemon = Daemon::start_setup(setup, loader, listener, None).await?;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(()) = reloads.recv() => {
                // The outcome is logged by the reload itself.
                let _ = daemon.reload().await;
            }
        }
    }
    daemon.stop().await
}

impl Daemon {
    /// Builds the config's setup, starts every stage and serves HTTP on `listener`. Leader election follows
    /// `alerting.leader_election`.
    pub async fn start(
        loader: Loader,
        listener: tokio::net::TcpListener,
    ) -> anyhow::Result<Daemon> {
        Self::start_with(loader, listener, None).await
    }

    /// [`Daemon::start`] with the leadership given rather than elected (tests, a caller that elects itself).
    pub async fn start_with(
        loader: Loader,
        listener: tokio::net::TcpListener,
        leadership: Option<Leadership>,
    ) -> anyhow::Result<Daemon> {
        let setup = Setup::build(loader()?).await?;
        Self::start_setup(setup, loader, listener, leadership).await
    }

    /// Starts on a setup already built from what `loader` gives (the loader is for reloads).
    pub async fn start_setup(
        setup: Setup,
        loader: Loader,
        listener: tokio::net::TcpListener,
        leadership: Option<Leadership>,
    ) -> anyhow::Result<Daemon> {
        setup.prepare()?;
        let leadership = match leadership {
            Some(l) => l,
            None => {
                Leadership::start(
                    &setup.config.alerting.leader_election,
                    &setup.config.targets.kubernetes,
                )
                .await?
            }
        };
        let local_addr = listener
            .local_addr()
            .context("the listening socket has no address")?;
        let mut tasks = JoinSet::new();

        // Self-metrics, one registry; each stage keeps its own families.
        let scrape_metrics = ScrapeMetrics::default();
        let discovery_metrics = DiscoveryMetrics::default();
        let notify_metrics = NotifyMetrics::default();
        let reload_metrics = ReloadMetrics::default();
        reload_metrics.succeeded();
        let audit_metrics = crate::audit::AuditMetrics::default();

        // Channels between the stages.
        let (sources_tx, sources_rx) = watch::channel(setup.targets.clone());
        let (targets_tx, targets_rx) = watch::channel(Arc::new(Targets::default()));
        let (analysis_tx, analysis_rx) = watch::channel(setup.analysis.clone());
        let (updates_tx, updates_rx) = mpsc::channel(64);
        let (audit_tx, audit_rx) = mpsc::channel(256);
        let (report_tx, report_rx) = watch::channel(Arc::new(StatusReport::default()));
        let (ready_tx, ready_rx) = watch::channel(false);
        let (view_tx, view_rx) = watch::channel(Arc::new(AlertView::default()));
        let (predictions_tx, predictions_rx) = watch::channel(Arc::new(Predictions::default()));
        let (commands_tx, commands_rx) = mpsc::channel(8);
        let (silences_tx, silences_rx) = mpsc::channel(16);
        let (reload_tx, reload_rx) = mpsc::channel(4);
        let (timeout_tx, timeout_rx) = watch::channel(setup.config.shutdown_timeout.0);

        let mut registry = Registry::default();
        scrape_metrics.register(&mut registry);
        discovery_metrics.register(&mut registry);
        notify_metrics.register(&mut registry);
        reload_metrics.register(&mut registry);
        audit_metrics.register(&mut registry);
        registry.register_collector(Box::new(DerivedMetrics::new(
            report_rx.clone(),
            view_rx.clone(),
        )));

        let scraping = CancellationToken::new();
        tasks.spawn(targets::run(
            sources_rx,
            targets_tx,
            discovery_metrics,
            scraping.clone(),
        ));
        tasks.spawn(supervisor::run(
            targets_rx,
            updates_tx,
            scrape_metrics,
            scraping.clone(),
        ));
        tasks.spawn(
            AnalysisStage::new(analysis_rx.clone(), report_tx, ready_tx)
                .with_audit_max_users(setup.config.audit.max_users)
                .run(updates_rx, audit_rx),
        );
        if !setup.config.audit.files.is_empty() {
            let (config, tx, metrics, cancel) = (
                setup.config.audit.clone(),
                audit_tx.clone(),
                audit_metrics.clone(),
                scraping.clone(),
            );
            tasks.spawn_blocking(move || crate::audit::follow::run(config, tx, metrics, cancel));
        }
        let stage = AlertStage::new(
            setup.alerting.clone(),
            leadership.clone(),
            notify_metrics,
            TokioClock::new(),
            view_tx,
        );
        tasks.spawn(prediction::run(
            report_rx.clone(),
            analysis_rx,
            predictions_tx,
        ));
        tasks.spawn(stage.run(report_rx.clone(), predictions_rx, commands_rx, silences_rx));
        let reloader = tasks.spawn(
            reload::Reloader {
                loader,
                running: setup.config.clone(),
                targets: sources_tx,
                analysis: analysis_tx,
                alerting: commands_tx.clone(),
                shutdown_timeout: timeout_tx,
                metrics: reload_metrics,
            }
            .run(reload_rx),
        );

        let surfaces = Surfaces {
            report: report_rx,
            ready: ready_rx,
            alerts: view_rx,
            registry: Arc::new(registry),
            reload: reload_tx,
            silences: silences_tx,
            audit: setup
                .config
                .audit
                .webhook
                .then(|| crate::audit::AuditIntake {
                    tx: audit_tx,
                    metrics: audit_metrics,
                }),
            metrics_bytes: Arc::default(),
        };
        let guard = export::Guard::build(
            &setup.config.web.auth,
            &setup.config.targets.kubernetes,
            local_addr,
        )
        .await
        .context("the HTTP API's guard (web.auth)")?;
        tracing::info!(listen = %local_addr, "HTTP API: {}", guard.describe());
        let tls = match &setup.config.web.tls {
            Some(files) => Some(export::tls_acceptor(files)?),
            None => None,
        };
        let http = CancellationToken::new();
        let app = export::router(surfaces.clone(), Arc::new(guard));
        tasks.spawn(export::serve(listener, tls, app, http.clone()));
        tracing::info!(
            listen = %local_addr,
            targets = %setup.targets.describe(),
            receivers = %setup.alerting.describe_receivers(),
            "apf-monitor serving"
        );
        if setup.alerting.console_by_default {
            tracing::warn!("{NO_RECEIVER_HINT}");
        }
        Ok(Daemon {
            tasks,
            reloader,
            surfaces,
            scraping,
            http,
            alerting: commands_tx,
            leadership,
            shutdown_timeout: timeout_rx,
            local_addr,
        })
    }

    /// Where the HTTP endpoints listen.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What `/api/v1/status` serves now.
    pub fn status(&self) -> StatusReport {
        self.surfaces.status()
    }

    /// Re-reads the config, as SIGHUP does; the error is the reason it was refused (the running config goes on).
    pub async fn reload(&self) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        self.surfaces
            .reload
            .send(ReloadRequest { reply: Some(reply) })
            .await
            .map_err(|_| "the daemon is stopping".to_string())?;
        answer
            .await
            .unwrap_or_else(|_| Err("the daemon is stopping".into()))
    }

    /// Stops scraping, delivers what is queued until `shutdown_timeout`, saves the alert state, releases the Lease
    /// and shuts the HTTP server down gracefully.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let timeout = *self.shutdown_timeout.borrow();
        let deadline = Instant::now() + timeout;
        tracing::info!(
            "stopping: queued notifications are delivered for up to {}",
            humantime::format_duration(timeout)
        );
        self.reloader.abort();
        self.scraping.cancel();
        let (done, finished) = oneshot::channel();
        if self
            .alerting
            .send(Command::Stop { deadline, done })
            .await
            .is_ok()
        {
            let _ = tokio::time::timeout_at(deadline + Duration::from_secs(2), finished).await;
        }
        self.leadership.release(Duration::from_secs(3)).await;
        self.http.cancel();
        let rest = async {
            while let Some(joined) = self.tasks.join_next().await {
                if let Err(e) = joined {
                    if e.is_panic() {
                        tracing::error!(error = %e, "a task of the daemon panicked");
                    }
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), rest)
            .await
            .is_err()
        {
            tracing::warn!("tasks still running 5 s after the stop; ending them");
            self.tasks.shutdown().await;
        }
        tracing::info!("stopped");
        Ok(())
    }
}
