//! Alertmanager API v2: `POST {url}/api/v2/alerts` with every alert of the notification, to every configured URL.
//!
//! Each URL is one replica of an HA Alertmanager: they de-duplicate among themselves, so all get everything, and
//! one being down must not stop the others. An attempt succeeds when at least one replica took the alerts; it fails
//! (Retryable, naming the failed URLs) only when every replica failed, Permanent only if every failure was.
//!
//! The daemon feeds this receiver all current alerts (firing and recently resolved) every `resend_interval` and on
//! every change. Firing alerts are sent WITHOUT `endsAt`: Alertmanager then keeps them for its `resolve_timeout`
//! (5m by default) and our re-sends keep them alive; if apf-monitor dies they resolve by themselves. Resolved alerts
//! carry `endsAt` = the time they resolved, which resolves them at once (Alertmanager's `docs/clients.md`).
use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::join_all;
use reqwest::Url;
use serde::Serialize;

use super::format::rfc3339;
use super::{http, Notification, NotifyError, Receiver, SendFuture};
use crate::alert::Alert;
use crate::notify::AlertmanagerConfig;

pub struct Alertmanager {
    name: String,
    /// `{url}/api/v2/alerts` per replica, and how the URL may be shown (no user info).
    endpoints: Vec<(Url, String)>,
    client: reqwest::Client,
    resend_interval: Duration,
}

/// One element of the `postableAlerts` array.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostableAlert<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub starts_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
    #[serde(rename = "generatorURL")]
    pub generator_url: &'a str,
}

impl<'a> PostableAlert<'a> {
    pub fn new(a: &'a Alert) -> Self {
        Self {
            labels: &a.labels,
            annotations: &a.annotations,
            starts_at: rfc3339(a.starts_at),
            ends_at: a.ends_at.map(rfc3339),
            generator_url: &a.generator_url,
        }
    }
}

pub fn body(n: &Notification) -> Vec<PostableAlert<'_>> {
    n.alerts.iter().map(PostableAlert::new).collect()
}

/// `http://am-0:9093/prefix` -> `http://am-0:9093/prefix/api/v2/alerts`.
pub fn alerts_url(base: &Url) -> Result<Url, String> {
    let joined = format!("{}/api/v2/alerts", base.as_str().trim_end_matches('/'));
    Url::parse(&joined)
        .map_err(|e| format!("cannot build the API URL from {}: {e}", http::redact(base)))
}

impl Alertmanager {
    pub fn new(name: &str, cfg: &AlertmanagerConfig, timeout: Duration) -> Result<Self, String> {
        if cfg.urls.is_empty() {
            return Err("urls: at least one URL".into());
        }
        let endpoints = cfg
            .urls
            .iter()
            .map(|u| {
                let url = alerts_url(&u.0)?;
                let mut shown = url.clone();
                // User info may hold a password; the rest of an Alertmanager URL is not secret.
                let _ = shown.set_username("");
                let _ = shown.set_password(None);
                Ok((url, shown.to_string()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            name: name.to_string(),
            endpoints,
            client: http::client(timeout)?,
            resend_interval: cfg.resend_interval.0,
        })
    }

    /// How often the daemon should re-send the current alerts.
    pub fn resend_interval(&self) -> Duration {
        self.resend_interval
    }

    async fn post(&self, n: &Notification) -> Result<(), NotifyError> {
        if n.alerts.is_empty() {
            return Ok(());
        }
        let body = serde_json::to_vec(&body(n)).map_err(|e| {
            NotifyError::Permanent(format!("cannot encode the Alertmanager alerts: {e}"))
        })?;
        let attempts = self.endpoints.iter().map(|(url, shown)| {
            let body = body.clone();
            async move {
                let reply = http::post_json(&self.client, url.clone(), shown, body, None).await?;
                http::classify(&reply, shown)
            }
        });
        let results = join_all(attempts).await;
        let failures: Vec<NotifyError> = results.into_iter().filter_map(Result::err).collect();
        if failures.len() < self.endpoints.len() {
            for f in &failures {
                tracing::warn!(receiver = %self.name, error = %f, "an Alertmanager replica did not take the alerts; the others did");
            }
            return Ok(());
        }
        let all_permanent = failures
            .iter()
            .all(|f| matches!(f, NotifyError::Permanent(_)));
        let message = format!(
            "every Alertmanager replica failed: {}",
            failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        );
        if all_permanent {
            Err(NotifyError::Permanent(message))
        } else {
            let retry_after = failures
                .iter()
                .filter_map(|f| match f {
                    NotifyError::Retryable { retry_after, .. } => *retry_after,
                    NotifyError::Permanent(_) => None,
                })
                .min();
            Err(NotifyError::Retryable {
                message,
                retry_after,
            })
        }
    }
}

impl Receiver for Alertmanager {
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

    #[test]
    fn firing_alerts_have_no_ends_at() {
        let mut a = Alert {
            labels: [("alertname".to_string(), "A".to_string())].into(),
            annotations: BTreeMap::new(),
            starts_at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            ends_at: None,
            generator_url: "http://m/".into(),
        };
        let v = serde_json::to_value(PostableAlert::new(&a)).unwrap();
        assert!(v.get("endsAt").is_none(), "{v}");
        assert_eq!(v["startsAt"], "2023-11-14T22:13:20Z");
        assert_eq!(v["generatorURL"], "http://m/");
        a.ends_at = Some(UNIX_EPOCH + Duration::from_secs(1_700_000_060));
        let v = serde_json::to_value(PostableAlert::new(&a)).unwrap();
        assert_eq!(v["endsAt"], "2023-11-14T22:14:20Z");
    }

    #[test]
    fn api_url_keeps_a_path_prefix() {
        let u = Url::parse("http://am:9093/").unwrap();
        assert_eq!(
            alerts_url(&u).unwrap().as_str(),
            "http://am:9093/api/v2/alerts"
        );
        let u = Url::parse("http://am:9093/am").unwrap();
        assert_eq!(
            alerts_url(&u).unwrap().as_str(),
            "http://am:9093/am/api/v2/alerts"
        );
    }
}
