//! Reload: SIGHUP and `POST /-/reload` re-read the config. A config that builds replaces the running one stage by
//! stage (targets, analysis settings, rules, route, receivers), with the alert state kept; one that does not is
//! refused with the error `serve` would print, and the running config goes on.
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};

use super::alerting::Command;
use super::setup::{Setup, TargetSource, NO_RECEIVER_HINT};
use super::Loader;
use crate::analyze::Analysis;
use crate::config::Config;
use crate::export::ReloadRequest;

/// `apf_monitor_config_last_reload_successful` and `..._success_timestamp_seconds`, as Prometheus has them.
#[derive(Debug, Clone, Default)]
pub struct ReloadMetrics {
    successful: Gauge,
    success_timestamp_seconds: Gauge<f64, AtomicU64>,
}

impl ReloadMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apf_monitor_config_last_reload_successful",
            "Whether the last configuration reload attempt was successful",
            self.successful.clone(),
        );
        registry.register(
            "apf_monitor_config_last_reload_success_timestamp_seconds",
            "Timestamp of the last successful configuration reload",
            self.success_timestamp_seconds.clone(),
        );
    }

    /// The config in use was loaded now (start-up counts as a successful load, as in Prometheus).
    pub fn succeeded(&self) {
        self.successful.set(1);
        let unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.success_timestamp_seconds.set(unix);
    }

    pub fn failed(&self) {
        self.successful.set(0);
    }
}

/// Where a new setup goes: one channel per stage.
pub struct Reloader {
    pub loader: Loader,
    pub running: Config,
    pub targets: watch::Sender<TargetSource>,
    pub analysis: watch::Sender<Analysis>,
    pub alerting: mpsc::Sender<Command>,
    pub shutdown_timeout: watch::Sender<Duration>,
    pub metrics: ReloadMetrics,
}

impl Reloader {
    pub async fn run(mut self, mut requests: mpsc::Receiver<ReloadRequest>) {
        while let Some(request) = requests.recv().await {
            let result = self.reload().await;
            match &result {
                Ok(()) => tracing::info!("config reloaded"),
                Err(e) => tracing::error!("config not reloaded, the running config goes on: {e}"),
            }
            if let Some(reply) = request.reply {
                let _ = reply.send(result);
            }
        }
    }

    async fn reload(&mut self) -> Result<(), String> {
        let setup = match (self.loader)() {
            Ok(config) => Setup::build(config)
                .await
                .map_err(|e| e.to_string())
                .and_then(|s| s.prepare().map(|()| s).map_err(|e| e.to_string())),
            Err(e) => Err(crate::errors::chain(&e)),
        };
        let setup = match setup {
            Ok(setup) => setup,
            Err(e) => {
                self.metrics.failed();
                return Err(e);
            }
        };
        let new = &setup.config;
        // What a running process cannot change: said once, applied at the next restart.
        for (changed, key) in [
            (new.listen != self.running.listen, "listen"),
            (new.web != self.running.web, "web"),
            (new.audit != self.running.audit, "audit"),
            (new.log != self.running.log, "log"),
            (
                new.alerting.leader_election != self.running.alerting.leader_election,
                "alerting.leader_election",
            ),
        ] {
            if changed {
                tracing::warn!(
                    key,
                    "changed in the config: takes effect at the next restart"
                );
            }
        }
        self.analysis.send_replace(setup.analysis.clone());
        self.targets.send_replace(setup.targets.clone());
        self.shutdown_timeout.send_replace(new.shutdown_timeout.0);
        if self
            .alerting
            .send(Command::Reconfigure(Box::new(setup.alerting.clone())))
            .await
            .is_err()
        {
            self.metrics.failed();
            return Err("the alerting stage is stopping".into());
        }
        if setup.alerting.console_by_default {
            tracing::warn!("{NO_RECEIVER_HINT}");
        }
        self.running = setup.config;
        self.metrics.succeeded();
        Ok(())
    }
}
