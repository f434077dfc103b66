//! Alertmanager's webhook payload, version "4", POSTed to a URL: whatever consumes Alertmanager webhooks works
//! unchanged. Field names and formats are Alertmanager's: RFC 3339 times as Go prints them, `endsAt` of a firing
//! alert is Go's zero time `0001-01-01T00:00:00Z`, the fingerprint is 16 hex digits.
//!
//! The URL may carry a secret (a token in the path): errors name only its scheme and host.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::format::{rfc3339, GO_ZERO_TIME};
use super::http::{self, UrlSource};
use super::{Notification, NotifyError, Receiver, SendFuture};
use crate::alert::Alert;
use crate::notify::WebhookConfig;

pub struct Webhook {
    name: String,
    url: UrlSource,
    bearer_token_file: Option<PathBuf>,
    max_alerts: usize,
    client: reqwest::Client,
}

/// The version-4 message.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message<'a> {
    pub version: &'static str,
    pub group_key: &'a str,
    pub truncated_alerts: usize,
    pub status: &'static str,
    pub receiver: &'a str,
    pub group_labels: &'a BTreeMap<String, String>,
    pub common_labels: &'a BTreeMap<String, String>,
    pub common_annotations: &'a BTreeMap<String, String>,
    #[serde(rename = "externalURL")]
    pub external_url: &'a str,
    pub alerts: Vec<WebhookAlert<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAlert<'a> {
    pub status: &'static str,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub starts_at: String,
    pub ends_at: String,
    #[serde(rename = "generatorURL")]
    pub generator_url: &'a str,
    pub fingerprint: String,
}

impl<'a> WebhookAlert<'a> {
    pub fn new(a: &'a Alert) -> Self {
        Self {
            status: if a.is_resolved() {
                "resolved"
            } else {
                "firing"
            },
            labels: &a.labels,
            annotations: &a.annotations,
            starts_at: rfc3339(a.starts_at),
            ends_at: a
                .ends_at
                .map(rfc3339)
                .unwrap_or_else(|| GO_ZERO_TIME.to_string()),
            generator_url: &a.generator_url,
            fingerprint: format!("{:016x}", a.fingerprint()),
        }
    }
}

/// The message for `n`, keeping the first `max_alerts` alerts (0: all), as Alertmanager's `TruncateAlerts` does.
pub fn message(n: &Notification, max_alerts: usize) -> Message<'_> {
    let keep = if max_alerts == 0 {
        n.alerts.len()
    } else {
        max_alerts.min(n.alerts.len())
    };
    Message {
        version: "4",
        group_key: &n.group_key,
        truncated_alerts: n.alerts.len() - keep,
        status: n.status(),
        receiver: &n.receiver,
        group_labels: &n.group_labels,
        common_labels: &n.common_labels,
        common_annotations: &n.common_annotations,
        external_url: &n.external_url,
        alerts: n.alerts[..keep].iter().map(WebhookAlert::new).collect(),
    }
}

impl Webhook {
    pub fn new(name: &str, cfg: &WebhookConfig, timeout: Duration) -> Result<Self, String> {
        let url = UrlSource::new(cfg.url.as_deref(), cfg.url_file.as_ref(), "url")?;
        if let Some(path) = &cfg.bearer_token_file {
            std::fs::metadata(path)
                .map_err(|e| format!("bearer_token_file {}: {e}", path.display()))?;
        }
        Ok(Self {
            name: name.to_string(),
            url,
            bearer_token_file: cfg.bearer_token_file.clone(),
            max_alerts: cfg.max_alerts,
            client: http::client(timeout)?,
        })
    }

    async fn post(&self, n: &Notification) -> Result<(), NotifyError> {
        let url = self.url.resolve().await?;
        let shown = http::redact(&url);
        let token = match &self.bearer_token_file {
            Some(path) => Some(http::read_token(path).await?),
            None => None,
        };
        let body = serde_json::to_vec(&message(n, self.max_alerts)).map_err(|e| {
            NotifyError::Permanent(format!("cannot encode the webhook message: {e}"))
        })?;
        let reply = http::post_json(&self.client, url, &shown, body, token.as_deref()).await?;
        http::classify(&reply, &shown)
    }
}

impl Receiver for Webhook {
    fn name(&self) -> &str {
        &self.name
    }

    fn send<'a>(&'a self, notification: &'a Notification) -> SendFuture<'a> {
        Box::pin(self.post(notification))
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn alert(resolved: bool) -> Alert {
        Alert {
            labels: [("alertname".to_string(), "A".to_string())].into(),
            annotations: BTreeMap::new(),
            starts_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
            ends_at: resolved.then(|| UNIX_EPOCH + Duration::from_secs(1_700_000_100)),
            generator_url: "http://m/".into(),
        }
    }

    #[test]
    fn alert_fields_as_alertmanager() {
        let v = serde_json::to_value(WebhookAlert::new(&alert(false))).unwrap();
        assert_eq!(v["status"], "firing");
        assert_eq!(v["startsAt"], "2023-11-14T22:13:20.25Z");
        assert_eq!(v["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(v["generatorURL"], "http://m/");
        let fp = v["fingerprint"].as_str().unwrap();
        assert_eq!(fp.len(), 16);
        assert!(fp.chars().all(|c| c.is_ascii_hexdigit()));
        let v = serde_json::to_value(WebhookAlert::new(&alert(true))).unwrap();
        assert_eq!(v["status"], "resolved");
        assert_eq!(v["endsAt"], "2023-11-14T22:15:00Z");
    }

    #[test]
    fn truncation() {
        let n = Notification {
            receiver: "hook".into(),
            group_key: "{}:{}".into(),
            group_labels: BTreeMap::new(),
            common_labels: BTreeMap::new(),
            common_annotations: BTreeMap::new(),
            alerts: vec![alert(false), alert(false), alert(true)],
            external_url: String::new(),
        };
        let m = message(&n, 2);
        assert_eq!(m.alerts.len(), 2);
        assert_eq!(m.truncated_alerts, 1);
        let m = message(&n, 0);
        assert_eq!((m.alerts.len(), m.truncated_alerts), (3, 0));
    }
}
