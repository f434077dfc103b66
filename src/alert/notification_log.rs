//! What the replica holding the Lease delivered to its direct receivers, per alert group: the firing alerts each
//! receiver was told of (and not yet that they resolved) and when it was last told. Kept in the Lease's annotation,
//! so the next holder reads it before it sends and goes on where the last one stopped: no second FIRING for what
//! was announced, a RESOLVED for what ends (Alertmanager's notification log, shared through the cluster instead of
//! between peers).
//!
//! Built from confirmed deliveries only: what a dead holder had queued but not delivered is missing here, so the
//! next holder sends it (at least once).
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::humantime_serde_compat as rfc3339;
use super::{fingerprint, Alert, LabelSet, Notification};

/// The Lease annotation that holds the log.
pub const ANNOTATION: &str = "apf-monitor.io/notification-log";
/// Bumped when the layout changes incompatibly; a log of another version is read as empty (a duplicate at most).
pub const LOG_VERSION: u32 = 1;
/// Kubernetes refuses an object whose annotations total more than 256 KiB: the log stays well under.
pub const MAX_BYTES: usize = 128 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("the notification log is not valid JSON of version {LOG_VERSION}: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error("the notification log has version {0}; this apf-monitor reads version {LOG_VERSION}")]
    Version(u32),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationLog {
    pub version: u32,
    /// By group key.
    pub groups: BTreeMap<String, LoggedGroup>,
}

impl Default for NotificationLog {
    fn default() -> Self {
        Self {
            version: LOG_VERSION,
            groups: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedGroup {
    /// The values of the `group_by` labels.
    pub labels: LabelSet,
    /// By receiver name.
    pub receivers: BTreeMap<String, Delivered>,
}

/// What one receiver was last delivered about one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivered {
    #[serde(with = "rfc3339")]
    pub last_sent: SystemTime,
    /// Delivered as firing, not yet as resolved.
    pub firing: Vec<LoggedAlert>,
}

/// An alert as the log keeps it: its identity and start, and its summary for a resolution the next holder may have
/// to send without having seen the alert itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedAlert {
    pub labels: LabelSet,
    #[serde(with = "rfc3339")]
    pub starts_at: SystemTime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

impl LoggedAlert {
    fn of(a: &Alert) -> Self {
        Self {
            labels: a.labels.clone(),
            starts_at: a.starts_at,
            summary: a.annotations.get("summary").cloned(),
        }
    }

    /// The alert as the router keeps what it notified firing.
    pub fn alert(&self, generator_url: &str) -> Alert {
        Alert {
            labels: self.labels.clone(),
            annotations: self
                .summary
                .iter()
                .map(|s| ("summary".to_string(), s.clone()))
                .collect(),
            starts_at: self.starts_at,
            ends_at: None,
            generator_url: generator_url.to_string(),
        }
    }

    pub fn fingerprint(&self) -> u64 {
        fingerprint(&self.labels)
    }
}

impl NotificationLog {
    /// A notification its receiver confirmed, at `at`: its firing alerts are now known to the receiver, its
    /// resolved ones are no longer owed a resolution.
    pub fn record(&mut self, n: &Notification, at: SystemTime) {
        let group = self
            .groups
            .entry(n.group_key.clone())
            .or_insert_with(|| LoggedGroup {
                labels: n.group_labels.clone(),
                receivers: BTreeMap::new(),
            });
        let delivered = group
            .receivers
            .entry(n.receiver.clone())
            .or_insert_with(|| Delivered {
                last_sent: at,
                firing: Vec::new(),
            });
        delivered.last_sent = at;
        for a in &n.alerts {
            let fp = a.fingerprint();
            delivered.firing.retain(|l| l.fingerprint() != fp);
            if !a.is_resolved() {
                delivered.firing.push(LoggedAlert::of(a));
            }
        }
        delivered.firing.sort_by(|a, b| a.labels.cmp(&b.labels));
        if delivered.firing.is_empty() {
            group.receivers.remove(&n.receiver);
        }
        if group.receivers.is_empty() {
            self.groups.remove(&n.group_key);
        }
    }

    /// Drops what the next holder no longer needs: an entry last sent more than `keep` ago (the holder re-sends a
    /// firing group every repeat interval, so only an entry nobody kept up ages out).
    pub fn expire(&mut self, now: SystemTime, keep: Duration) {
        for group in self.groups.values_mut() {
            group
                .receivers
                .retain(|_, d| now.duration_since(d.last_sent).unwrap_or_default() <= keep);
        }
        self.groups.retain(|_, g| !g.receivers.is_empty());
    }

    /// Drops the entries last sent longest ago until the log encodes in at most `max_bytes`; how many went. A
    /// dropped entry costs a repeated FIRING after a failover, never a lost notification.
    pub fn bound(&mut self, max_bytes: usize) -> usize {
        let mut dropped = 0;
        while self.encode().len() > max_bytes {
            let oldest = self
                .groups
                .iter()
                .flat_map(|(k, g)| g.receivers.iter().map(move |(r, d)| (d.last_sent, k, r)))
                .min()
                .map(|(_, k, r)| (k.clone(), r.clone()));
            let Some((key, receiver)) = oldest else {
                break;
            };
            if let Some(g) = self.groups.get_mut(&key) {
                g.receivers.remove(&receiver);
                if g.receivers.is_empty() {
                    self.groups.remove(&key);
                }
            }
            dropped += 1;
        }
        dropped
    }

    /// Entries: one per group and receiver.
    pub fn entries(&self) -> usize {
        self.groups.values().map(|g| g.receivers.len()).sum()
    }

    /// The log as the annotation holds it: compact JSON.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn decode(text: &str) -> Result<Self, LogError> {
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let v: Version = serde_json::from_str(text)?;
        if v.version != LOG_VERSION {
            return Err(LogError::Version(v.version));
        }
        Ok(serde_json::from_str(text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn alert(name: &str, ends: Option<u64>) -> Alert {
        Alert {
            labels: [("alertname".to_string(), name.to_string())].into(),
            annotations: [
                ("summary".to_string(), format!("{name} now")),
                ("remediation".to_string(), "a long text".to_string()),
            ]
            .into(),
            starts_at: t(0),
            ends_at: ends.map(t),
            generator_url: "http://mon/".into(),
        }
    }

    fn note(receiver: &str, group: &str, alerts: Vec<Alert>) -> Notification {
        Notification {
            receiver: receiver.into(),
            group_key: group.into(),
            group_labels: [("alertname".to_string(), group.to_string())].into(),
            common_labels: Default::default(),
            common_annotations: Default::default(),
            alerts,
            external_url: String::new(),
        }
    }

    #[test]
    fn firing_is_kept_until_its_resolution_is_delivered() {
        let mut log = NotificationLog::default();
        log.record(
            &note("slack", "g", vec![alert("A", None), alert("B", None)]),
            t(10),
        );
        log.record(&note("hook", "g", vec![alert("A", None)]), t(11));
        assert_eq!(log.entries(), 2);
        let slack = &log.groups["g"].receivers["slack"];
        assert_eq!(slack.last_sent, t(10));
        assert_eq!(slack.firing.len(), 2);
        // Only the summary is kept of the annotations: the log stays small.
        assert_eq!(slack.firing[0].summary.as_deref(), Some("A now"));
        assert_eq!(
            slack.firing[0].alert("u").annotations.len(),
            1,
            "{:?}",
            slack.firing[0]
        );

        log.record(&note("slack", "g", vec![alert("A", Some(20))]), t(20));
        let slack = &log.groups["g"].receivers["slack"];
        assert_eq!(slack.last_sent, t(20));
        let left: Vec<&str> = slack
            .firing
            .iter()
            .map(|a| a.labels["alertname"].as_str())
            .collect();
        assert_eq!(left, ["B"]);

        // Nothing firing left: the entry goes, then the group.
        log.record(&note("slack", "g", vec![alert("B", Some(30))]), t(30));
        log.record(&note("hook", "g", vec![alert("A", Some(30))]), t(30));
        assert_eq!(log, NotificationLog::default());
    }

    #[test]
    fn expiry_and_bound_drop_the_oldest_entries() {
        let mut log = NotificationLog::default();
        for i in 0..50 {
            log.record(
                &note("slack", &format!("g{i:02}"), vec![alert("A", None)]),
                t(i),
            );
        }
        log.expire(t(100), Duration::from_secs(60));
        assert_eq!(log.entries(), 10, "40 of 50 last sent more than 60 s ago");
        assert!(log.groups.contains_key("g49") && !log.groups.contains_key("g39"));

        let size = log.encode().len();
        let dropped = log.bound(size / 2);
        assert!(log.encode().len() <= size / 2);
        assert_eq!(dropped, 10 - log.entries());
        assert!(log.groups.contains_key("g49"), "the newest stay");
        assert_eq!(log.bound(size), 0);
    }

    #[test]
    fn decodes_what_it_encodes_and_refuses_other_versions() {
        let mut log = NotificationLog::default();
        log.record(
            &note("slack", "{}:{alertname=\"A\"}", vec![alert("A", None)]),
            t(5),
        );
        let text = log.encode();
        assert!(!text.contains('\n'), "compact: {text}");
        assert_eq!(NotificationLog::decode(&text).unwrap(), log);
        assert!(matches!(
            NotificationLog::decode(r#"{"version": 9, "groups": {}}"#),
            Err(LogError::Version(9))
        ));
        assert!(matches!(
            NotificationLog::decode("{\"version\": 1, \"groups\": ["),
            Err(LogError::Corrupt(_))
        ));
    }
}
