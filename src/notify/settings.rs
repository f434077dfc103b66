//! The `receivers:` section of the config file: where notifications go (Slack, email, webhook, Alertmanager,
//! console) and how each is delivered.
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::values::{DurationValue, Interval, TargetUrl};

/// One receiver: a name and exactly one kind.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiverConfig {
    /// The receiver's name, which `route.receivers` lists; unique.
    pub name: String,
    /// A Slack incoming webhook (one kind per receiver).
    pub slack: Option<SlackConfig>,
    /// Mail over SMTP.
    pub email: Option<EmailConfig>,
    /// Alertmanager's webhook payload, POSTed to a URL of yours.
    pub webhook: Option<WebhookConfig>,
    /// Alertmanager's API v2, sent from every replica of apf-monitor.
    pub alertmanager: Option<AlertmanagerConfig>,
    /// This process' own log.
    pub console: Option<ConsoleConfig>,
    /// Delivery tuning shared by every kind.
    #[serde(default)]
    pub delivery: DeliveryConfig,
}

impl ReceiverConfig {
    /// A console receiver: a log line per notification.
    pub fn console(name: &str) -> Self {
        Self {
            name: name.into(),
            slack: None,
            email: None,
            webhook: None,
            alertmanager: None,
            console: Some(ConsoleConfig {}),
            delivery: DeliveryConfig::default(),
        }
    }

    /// The kind of receiver, as the config names it.
    pub fn kind(&self) -> &'static str {
        if self.slack.is_some() {
            "slack"
        } else if self.email.is_some() {
            "email"
        } else if self.webhook.is_some() {
            "webhook"
        } else if self.alertmanager.is_some() {
            "alertmanager"
        } else {
            "console"
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    /// One attempt's timeout.
    pub timeout: Interval,
    /// Retries (429, 5xx, connection errors) stop after this long; the notification then counts as `failed`.
    pub max_retry_duration: DurationValue,
    /// Notifications waiting for this receiver; when full, new ones are `dropped` (counted), never blocking others.
    pub queue_capacity: usize,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            timeout: Interval(Duration::from_secs(10)),
            max_retry_duration: DurationValue(Duration::from_secs(300)),
            queue_capacity: 100,
        }
    }
}

/// A Slack incoming webhook.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// The webhook URL inline (quick start); prefer `webhook_url_file`.
    pub webhook_url: Option<String>,
    /// A file holding the webhook URL (a mounted Secret); read at each send.
    pub webhook_url_file: Option<PathBuf>,
    /// Overrides the webhook's channel (legacy webhooks only).
    pub channel: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EmailTls {
    /// Port 587: STARTTLS required, plaintext refused.
    Starttls,
    /// Port 465: implicit TLS.
    Tls,
    /// Plain SMTP: a local relay only; must be chosen explicitly.
    None,
}

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    /// `host:port` of the SMTP server.
    pub smarthost: String,
    /// How the connection is secured: `starttls` (port 587), `tls` (implicit, 465) or `none`.
    pub tls: EmailTls,
    /// The sender address.
    pub from: String,
    /// The recipients.
    pub to: Vec<String>,
    /// The SMTP login, when the server asks for one.
    pub username: Option<String>,
    /// Inline password (quick start); prefer `password_file`.
    pub password: Option<String>,
    /// A file holding the SMTP password (a mounted Secret); re-read at each send.
    pub password_file: Option<PathBuf>,
    /// A PEM CA bundle for the SMTP server's certificate (default: the public web roots).
    pub ca_file: Option<PathBuf>,
}

/// Alertmanager's webhook payload (version 4) POSTed to a URL.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Where the payload is POSTed.
    pub url: Option<String>,
    /// A file holding the URL instead (when it carries a secret).
    pub url_file: Option<PathBuf>,
    /// Sent as `Authorization: Bearer ...` when set.
    pub bearer_token_file: Option<PathBuf>,
    /// At most this many alerts per message; the rest are counted in `truncatedAlerts`. 0: no limit.
    #[serde(default)]
    pub max_alerts: usize,
}

/// Alertmanager API v2: every replica listed gets every alert (they de-duplicate among themselves).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// Every Alertmanager of the cluster (`http://alertmanager:9093`).
    pub urls: Vec<TargetUrl>,
    /// Firing alerts are re-sent this often (Alertmanager resolves an alert it has not heard of for resolve_timeout).
    #[serde(default = "default_am_resend")]
    pub resend_interval: Interval,
}

fn default_am_resend() -> Interval {
    Interval(Duration::from_secs(60))
}

/// A log line per notification (standard error, in the configured log format).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {}

/// Checks each receiver (exactly one kind, a unique name, what its kind needs) and returns their names; `at` says on
/// which line of the file a key is.
pub fn validate_receivers<'a>(
    receivers: &'a [ReceiverConfig],
    at: &dyn Fn(&str) -> String,
) -> Result<BTreeSet<&'a str>, String> {
    let mut names = BTreeSet::new();
    for (i, r) in receivers.iter().enumerate() {
        let kinds = [
            r.slack.is_some(),
            r.email.is_some(),
            r.webhook.is_some(),
            r.alertmanager.is_some(),
            r.console.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(format!(
                    "receivers[{i}] ({}): give exactly one of slack, email, webhook, alertmanager, console{}",
                    r.name,
                    at("receivers.name")
                ));
        }
        if r.name.trim().is_empty() || !names.insert(r.name.as_str()) {
            return Err(format!(
                "receivers[{i}].name {:?} is empty or used twice{}",
                r.name,
                at("receivers.name")
            ));
        }
        if let Some(s) = &r.slack {
            if s.webhook_url.is_some() == s.webhook_url_file.is_some() {
                return Err(format!(
                    "receivers[{i}].slack: give webhook_url or webhook_url_file (one){}",
                    at("receivers.slack")
                ));
            }
        }
        if let Some(w) = &r.webhook {
            if w.url.is_some() == w.url_file.is_some() {
                return Err(format!(
                    "receivers[{i}].webhook: give url or url_file (one){}",
                    at("receivers.webhook")
                ));
            }
        }
        if let Some(e) = &r.email {
            if e.to.is_empty() {
                return Err(format!(
                    "receivers[{i}].email.to: at least one address{}",
                    at("receivers.to")
                ));
            }
            if e.password.is_some() && e.password_file.is_some() {
                return Err(format!(
                    "receivers[{i}].email: password or password_file, not both{}",
                    at("receivers.password")
                ));
            }
            if (e.password.is_some() || e.password_file.is_some()) && e.username.is_none() {
                return Err(format!(
                    "receivers[{i}].email: a password needs a username{}",
                    at("receivers.username")
                ));
            }
            if !e.smarthost.contains(':') {
                return Err(format!(
                    "receivers[{i}].email.smarthost {:?}: write it as host:port{}",
                    e.smarthost,
                    at("receivers.smarthost")
                ));
            }
        }
        if let Some(a) = &r.alertmanager {
            if a.urls.is_empty() {
                return Err(format!(
                    "receivers[{i}].alertmanager.urls: at least one URL{}",
                    at("receivers.urls")
                ));
            }
        }
    }
    Ok(names)
}
