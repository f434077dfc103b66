//! Alerts before 429s: the built-in rules evaluated on every report, their life cycle (pending, firing, resolved),
//! grouping, inhibition, silences, and the state that survives a restart.
//!
//! The types here ([`Alert`], [`Notification`]) are the contract between the alerting stage and the receivers
//! (`notify/`), which import them; nothing here imports `notify/`.
pub mod engine;
pub mod notification_log;
pub mod remediation;
pub mod replay;
pub mod route;
pub mod rules;
mod settings;
pub mod silence;
pub mod stage;
pub mod state;

pub use engine::Engine;
pub use notification_log::NotificationLog;
pub use remediation::Remediation;
pub use route::Router;
pub use rules::{
    default_busy_utilizations, what_cleared, Candidate, Fires, RuleError, RuleSpec, Rules,
};
pub use settings::{
    AlertingConfig, LeaderElectionConfig, RouteConfig, RuleConfig, RuleName, Severity,
};
pub use silence::{Matcher, Silence, SilenceError, SilenceInput, SilenceView, Silences};
pub use stage::{AlertView, Alerting, TokioClock};
pub use state::{AlertState, StateError};

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Labels identify an alert: same labels, same alert.
pub type LabelSet = BTreeMap<String, String>;

/// One alert instance as receivers see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub labels: LabelSet,
    /// `summary`, `description`, `top_flows`, `remediation`, `remediation_manifest`, `runbook_url`.
    pub annotations: BTreeMap<String, String>,
    /// When it started firing.
    #[serde(with = "humantime_serde_compat")]
    pub starts_at: SystemTime,
    /// When it resolved; `None` while firing.
    #[serde(with = "humantime_serde_compat::option")]
    pub ends_at: Option<SystemTime>,
    /// A link back to apf-monitor's status page.
    pub generator_url: String,
}

impl Alert {
    pub fn alertname(&self) -> &str {
        self.labels
            .get("alertname")
            .map(String::as_str)
            .unwrap_or("")
    }

    pub fn is_resolved(&self) -> bool {
        self.ends_at.is_some()
    }

    /// Alertmanager's fingerprint of the label set (FNV-1a 64 over sorted name, value pairs), so the same alert has
    /// the same identity here and in Alertmanager.
    pub fn fingerprint(&self) -> u64 {
        fingerprint(&self.labels)
    }
}

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

/// FNV-1a 64 over `name 0xff value 0xff` for the labels in name order (Prometheus `model.LabelsToSignature`).
pub fn fingerprint(labels: &LabelSet) -> u64 {
    const OFFSET: u64 = 0xcbf29ce484222325;
    const PRIME: u64 = 0x100000001b3;
    let mut hash = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    for (name, value) in labels {
        eat(name.as_bytes());
        eat(&[0xff]);
        eat(value.as_bytes());
        eat(&[0xff]);
    }
    hash
}

/// RFC 3339 times in serialized state and payloads.
pub mod humantime_serde_compat {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(&text).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use std::time::SystemTime;

        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<SystemTime>, D::Error> {
            let text = Option::<String>::deserialize(d)?;
            text.map(|t| humantime::parse_rfc3339_weak(&t).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_matches_prometheus() {
        // Prometheus: model.LabelSet{"alertname": "Watchdog"}.Fingerprint() == 0x8c2aeefc14e7ac5f... computed here
        // from the definition; an empty set hashes to the FNV offset basis.
        assert_eq!(fingerprint(&LabelSet::new()), 0xcbf29ce484222325);
        let a: LabelSet = [
            ("alertname".to_string(), "A".to_string()),
            ("x".to_string(), "1".to_string()),
        ]
        .into();
        let b: LabelSet = [
            ("x".to_string(), "1".to_string()),
            ("alertname".to_string(), "A".to_string()),
        ]
        .into();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let c: LabelSet = [
            ("alertname".to_string(), "A".to_string()),
            ("x".to_string(), "2".to_string()),
        ]
        .into();
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }
}
