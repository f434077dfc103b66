//! Receivers: one file per kind behind one trait, each fed through its own bounded queue with retries, so a dead
//! receiver never stalls scraping or the other receivers.
//!
//! How the daemon uses it, per configured receiver:
//! ```ignore
//! let metrics = NotifyMetrics::default();
//! let receiver = notify::build(&receiver_config)?;            // Arc<dyn Receiver>, clear config errors
//! let delivery = Delivery::spawn(receiver, &receiver_config.delivery, metrics.clone());
//! delivery.enqueue(notification);                              // never blocks; a full queue counts `dropped`
//! let undelivered = delivery.drain(deadline).await;            // at exit: deliver what is queued until the deadline
//! ```
//! The notification type is the alerting stage's (`alert::Notification`): notify imports alert, never the reverse.
//! Slack, email and webhook receivers get the router's grouped notifications; an Alertmanager receiver gets every
//! current alert (firing and recently resolved) every `resend_interval` and on each change.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::alert::Notification;

pub mod alertmanager;
pub mod console;
pub mod delivery;
pub mod email;
pub mod format;
mod http;
mod settings;
pub mod slack;
pub mod webhook;

pub use delivery::Delivery;
pub use settings::{
    validate_receivers, AlertmanagerConfig, ConsoleConfig, DeliveryConfig, EmailConfig, EmailTls,
    ReceiverConfig, SlackConfig, WebhookConfig,
};

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

/// What became of a notification: the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Sent,
    /// One retry (a notification may count several).
    Retried,
    /// Gave up: a permanent error, or retries ran out.
    Failed,
    /// Never attempted to the end: a full queue, or still queued at the shutdown deadline.
    Dropped,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Sent,
        Outcome::Retried,
        Outcome::Failed,
        Outcome::Dropped,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Retried => "retried",
            Outcome::Failed => "failed",
            Outcome::Dropped => "dropped",
        }
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.label(), encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NotifyLabels {
    receiver: String,
    outcome: Outcome,
}

/// `apf_monitor_notifications_total{receiver, outcome}`; cloning shares the family.
#[derive(Debug, Clone, Default)]
pub struct NotifyMetrics {
    notifications: Family<NotifyLabels, Counter>,
}

impl NotifyMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apf_monitor_notifications",
            "Notifications by receiver and outcome (sent, retried, failed, dropped)",
            self.notifications.clone(),
        );
    }

    /// Every outcome of a receiver exists at 0 from start-up.
    pub fn register_receiver(&self, receiver: &str) {
        for outcome in Outcome::ALL {
            self.counter(receiver, outcome);
        }
    }

    pub fn inc(&self, receiver: &str, outcome: Outcome) {
        self.counter(receiver, outcome).inc();
    }

    pub fn inc_by(&self, receiver: &str, outcome: Outcome, n: u64) {
        self.counter(receiver, outcome).inc_by(n);
    }

    /// The count so far (tests and logs).
    pub fn count(&self, receiver: &str, outcome: Outcome) -> u64 {
        self.counter(receiver, outcome).get()
    }

    fn counter(&self, receiver: &str, outcome: Outcome) -> Counter {
        self.notifications
            .get_or_create(&NotifyLabels {
                receiver: receiver.to_string(),
                outcome,
            })
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
