//! Which replica of apf-monitor sends the direct notifications (Slack, email, webhook): the one holding a
//! Kubernetes Lease. Alertmanager receivers are sent from every replica; Alertmanager de-duplicates.
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::alert::LeaderElectionConfig;
use crate::targets::KubernetesConfig;

const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Tells whether this replica sends direct notifications now.
#[derive(Clone)]
pub struct Leadership {
    state: watch::Receiver<bool>,
    lease: Option<Arc<tokio::sync::Mutex<Option<LeaseTask>>>>,
}

/// The task that keeps the Lease: told to stop, it gives the Lease up.
struct LeaseTask {
    release: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Leadership {
    /// A single replica, or election turned off: always the notifier.
    pub fn always() -> Self {
        let (_tx, rx) = watch::channel(true);
        Self {
            state: rx,
            lease: None,
        }
    }

    /// For tests and callers that drive leadership themselves.
    pub fn from_channel(state: watch::Receiver<bool>) -> Self {
        Self { state, lease: None }
    }

    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Gives the Lease up, so that another replica of apf-monitor takes over at once instead of waiting for the
    /// Lease to expire; waits at most `timeout`. Direct notifications stop here.
    pub async fn release(&self, timeout: Duration) {
        let Some(lease) = &self.lease else {
            return;
        };
        let Some(LeaseTask { release, task }) = lease.lock().await.take() else {
            return;
        };
        let _ = release.send(());
        if tokio::time::timeout(timeout, task).await.is_err() {
            tracing::warn!("the Lease was not released within {timeout:?}: another replica takes over when it expires");
        }
    }

    /// `enabled` unset: elect when running in a cluster (a service-account token is mounted), else always lead. The
    /// Lease is reached with the same apiserver access as discovery (`targets.kubernetes`).
    pub async fn start(cfg: &LeaderElectionConfig, access: &KubernetesConfig) -> Result<Self> {
        let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            && std::path::Path::new(SERVICE_ACCOUNT_DIR)
                .join("token")
                .exists();
        let enabled = cfg.enabled.unwrap_or(in_cluster);
        if !enabled {
            return Ok(Self::always());
        }
        let hint =
            "leader election needs apiserver access (in-cluster config or a kubeconfig); set \
                    alerting.leader_election.enabled: false to run without it";
        let config = crate::targets::access::access(access).await.context(hint)?;
        let client = crate::targets::access::client(&config).context(hint)?;
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
        let (release, mut released) = oneshot::channel::<()>();
        let lease_name = cfg.lease_name.clone();
        let task = tokio::spawn(async move {
            loop {
                let leading = *lease_state.borrow_and_update();
                let _ = tx.send(leading);
                tracing::info!(lease = %lease_name, %identity, leading, "leader election: this replica {} direct notifications", if leading { "now sends" } else { "no longer sends" });
                tokio::select! {
                    _ = &mut released => break,
                    changed = lease_state.changed() => if changed.is_err() {
                        // The lease task ended (its errors are logged by it): stop notifying rather than risk doubles.
                        tracing::warn!(lease = %lease_name, "leader election stopped; direct notifications are off");
                        break;
                    },
                }
            }
            let _ = tx.send(false);
            // Closing the state channel makes the manager's task release the Lease and end (kube-lease-manager).
            drop(lease_state);
            match lease_task.await {
                Ok(Ok(_)) => tracing::info!(lease = %lease_name, "Lease released"),
                Ok(Err(e)) => {
                    tracing::warn!(lease = %lease_name, error = %e, "the Lease could not be released; it expires on its own")
                }
                Err(_) => {}
            }
        });
        Ok(Self {
            state: rx,
            lease: Some(Arc::new(tokio::sync::Mutex::new(Some(LeaseTask {
                release,
                task,
            })))),
        })
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
        assert!(Leadership::start(&cfg, &KubernetesConfig::default())
            .await
            .unwrap()
            .is_leader());
    }

    #[tokio::test]
    async fn forced_on_without_apiserver_access_is_a_clear_error() {
        // No cluster and no kubeconfig here: the error says how to run without election.
        let cfg = LeaderElectionConfig {
            enabled: Some(true),
            ..Default::default()
        };
        std::env::set_var("KUBECONFIG", "/nonexistent/kubeconfig");
        let err = Leadership::start(&cfg, &KubernetesConfig::default())
            .await
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("leader_election.enabled: false"), "{err}");
    }
}
