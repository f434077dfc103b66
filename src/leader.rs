//! Which replica of apf-monitor sends the direct notifications (Slack, email, webhook): the one holding a
//! Kubernetes Lease. Alertmanager receivers are sent from every replica; Alertmanager de-duplicates.
use anyhow::{Context, Result};
use tokio::sync::watch;

use crate::config::LeaderElectionConfig;

const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Tells whether this replica sends direct notifications now.
#[derive(Clone)]
pub struct Leadership {
    state: watch::Receiver<bool>,
}

impl Leadership {
    /// A single replica, or election turned off: always the notifier.
    pub fn always() -> Self {
        let (_tx, rx) = watch::channel(true);
        Self { state: rx }
    }

    /// For tests and callers that drive leadership themselves.
    pub fn from_channel(state: watch::Receiver<bool>) -> Self {
        Self { state }
    }

    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// `enabled` unset: elect when running in a cluster (a service-account token is mounted), else always lead.
    pub async fn start(cfg: &LeaderElectionConfig) -> Result<Self> {
        let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            && std::path::Path::new(SERVICE_ACCOUNT_DIR)
                .join("token")
                .exists();
        let enabled = cfg.enabled.unwrap_or(in_cluster);
        if !enabled {
            return Ok(Self::always());
        }
        let client = kube::Client::try_default()
            .await
            .context("leader election needs apiserver access (in-cluster config or a kubeconfig); set alerting.leader_election.enabled: false to run without it")?;
        let namespace = match &cfg.namespace {
            Some(ns) => ns.clone(),
            None => std::fs::read_to_string(format!("{SERVICE_ACCOUNT_DIR}/namespace"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| client.default_namespace().to_string()),
        };
        // The pod name says who leads in `kubectl get lease`; the suffix keeps two processes on one host apart.
        let identity = format!(
            "{}-{:08x}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "apf-monitor".into()),
            rand::random::<u32>()
        );
        let duration = cfg.lease_duration.0.as_secs().max(2);
        let manager = kube_lease_manager::LeaseManagerBuilder::new(client, &cfg.lease_name)
            .with_namespace(&namespace)
            .with_identity(&identity)
            .with_duration(duration)
            .with_grace((duration / 3).max(1))
            .build()
            .await
            .with_context(|| {
                format!(
                    "cannot use Lease {namespace}/{}: the service account needs get/create/patch on \
                     leases in its namespace",
                    cfg.lease_name
                )
            })?;
        let (mut lease_state, lease_task) = manager.watch().await;
        let (tx, rx) = watch::channel(false);
        let lease_name = cfg.lease_name.clone();
        tokio::spawn(async move {
            loop {
                let leading = *lease_state.borrow_and_update();
                if tx.send(leading).is_err() {
                    break;
                }
                tracing::info!(lease = %lease_name, %identity, leading, "leader election: this replica {} direct notifications", if leading { "now sends" } else { "no longer sends" });
                if lease_state.changed().await.is_err() {
                    // The lease task ended (its errors are logged by it): stop notifying rather than risk doubles.
                    let _ = tx.send(false);
                    tracing::warn!(lease = %lease_name, "leader election stopped; direct notifications are off");
                    break;
                }
            }
            drop(lease_task);
            // Keep the sender alive so readers see the last value.
            std::future::pending::<()>().await;
        });
        Ok(Self { state: rx })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn off_means_always_the_notifier() {
        let cfg = LeaderElectionConfig {
            enabled: Some(false),
            ..Default::default()
        };
        assert!(Leadership::start(&cfg).await.unwrap().is_leader());
    }

    #[tokio::test]
    async fn forced_on_without_apiserver_access_is_a_clear_error() {
        // No cluster and no kubeconfig here: the error says how to run without election.
        let cfg = LeaderElectionConfig {
            enabled: Some(true),
            ..Default::default()
        };
        std::env::set_var("KUBECONFIG", "/nonexistent/kubeconfig");
        let err = Leadership::start(&cfg)
            .await
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("leader_election.enabled: false"), "{err}");
    }
}
