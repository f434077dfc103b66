//! Receivers: one file per kind behind one trait, each fed through its own bounded queue with retries, so a dead
//! receiver never stalls scraping or the other receivers.
//!
//! How the daemon uses it, per configured receiver:
//! ```ignore
//! let metrics = NotifyMetrics::default();
//! let receiver = notify::build(&receiver_config)?;            // Arc<dyn Receiver>, clear config errors
//! let delivery = Delivery::spawn(receiver, &receiver_config.delivery, metrics.clone());
//! delivery.enqueue(notification);                              // never blocks; a full queue counts `dropped`
//! delivery.shutdown(Duration::from_secs(5)).await;             // at exit: drain for a while, then stop
//! ```
//! Slack, email and webhook receivers get the router's grouped notifications; an Alertmanager receiver gets every
//! current alert (firing and recently resolved) every `resend_interval` and on each change.
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::alert::{Alert, LabelSet};
use crate::config::ReceiverConfig;

pub mod alertmanager;
pub mod console;
pub mod delivery;
pub mod email;
pub mod format;
mod http;
pub mod slack;
pub mod webhook;

pub use delivery::Delivery;

/// One message to one receiver: a group of alerts (Alertmanager's notification model).
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub receiver: String,
    /// Identifies the group across notifications (`{}:{alertname="APFHeadroomLow", priority_level="workload-low"}`).
    pub group_key: String,
    /// The values of the `group_by` labels.
    pub group_labels: LabelSet,
    /// Labels every alert of the group shares.
    pub common_labels: LabelSet,
    pub common_annotations: BTreeMap<String, String>,
    /// Firing alerts first, then resolved ones (with `ends_at`).
    pub alerts: Vec<Alert>,
    /// apf-monitor's own URL, for links back.
    pub external_url: String,
}

impl Notification {
    /// `firing` while any alert of the group fires, else `resolved`.
    pub fn status(&self) -> &'static str {
        if self.alerts.iter().any(|a| !a.is_resolved()) {
            "firing"
        } else {
            "resolved"
        }
    }

    pub fn firing(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.iter().filter(|a| !a.is_resolved())
    }

    pub fn resolved(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.iter().filter(|a| a.is_resolved())
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum NotifyError {
    /// 429, 5xx, a connection error, a timeout: try again (after `retry_after` when the receiver said so).
    #[error("{message}")]
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Any other 4xx, a bad address, a refused plaintext connection: trying again will not help.
    #[error("{0}")]
    Permanent(String),
}

pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), NotifyError>> + Send + 'a>>;

/// What every receiver kind implements.
pub trait Receiver: Send + Sync {
    /// The configured name (`receiver` label).
    fn name(&self) -> &str;
    /// One attempt; retries and queueing are the delivery's business.
    fn send<'a>(&'a self, notification: &'a Notification) -> SendFuture<'a>;
}

/// `apf_monitor_notifications_total{receiver, outcome}`: `sent`, `retried`, `failed`, `dropped`.
#[derive(Debug, Clone, Default)]
pub struct NotifyMetrics {
    counts: Arc<Mutex<BTreeMap<(String, &'static str), u64>>>,
}

impl NotifyMetrics {
    pub const OUTCOMES: [&'static str; 4] = ["sent", "retried", "failed", "dropped"];

    /// Every outcome exists at 0 from start-up.
    pub fn register(&self, receiver: &str) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for o in Self::OUTCOMES {
            c.entry((receiver.to_string(), o)).or_insert(0);
        }
    }

    pub fn inc(&self, receiver: &str, outcome: &'static str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((receiver.to_string(), outcome))
            .or_insert(0) += 1;
    }

    pub fn snapshot(&self) -> BTreeMap<(String, &'static str), u64> {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Builds the receiver a config entry describes. Errors name the receiver and the key, never a secret's value.
pub fn build(cfg: &ReceiverConfig) -> Result<Arc<dyn Receiver>, String> {
    let name = cfg.name.as_str();
    let kinds = [
        cfg.slack.is_some(),
        cfg.email.is_some(),
        cfg.webhook.is_some(),
        cfg.alertmanager.is_some(),
        cfg.console.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(format!(
            "receiver {name:?}: give exactly one of slack, email, webhook, alertmanager, console"
        ));
    }
    let timeout = cfg.delivery.timeout.0;
    let built: Arc<dyn Receiver> = if let Some(c) = &cfg.slack {
        Arc::new(
            slack::Slack::new(name, c, timeout)
                .map_err(|e| format!("receiver {name:?}: slack: {e}"))?,
        )
    } else if let Some(c) = &cfg.email {
        Arc::new(
            email::Email::new(name, c, timeout)
                .map_err(|e| format!("receiver {name:?}: email: {e}"))?,
        )
    } else if let Some(c) = &cfg.webhook {
        Arc::new(
            webhook::Webhook::new(name, c, timeout)
                .map_err(|e| format!("receiver {name:?}: webhook: {e}"))?,
        )
    } else if let Some(c) = &cfg.alertmanager {
        Arc::new(
            alertmanager::Alertmanager::new(name, c, timeout)
                .map_err(|e| format!("receiver {name:?}: alertmanager: {e}"))?,
        )
    } else {
        Arc::new(console::Console::new(name))
    };
    Ok(built)
}
