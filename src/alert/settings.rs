//! The alert sections of the config file: `rules:` (each built-in rule's tuning), `route:` (who gets which alerts,
//! grouped how, how often) and `alerting:` (state, silences, links, and which replica of apf-monitor notifies).
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::values::{DurationValue, Interval};

/// The built-in alerts (docs/reference/alerts.md); a key of `rules:` must be one of them.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
pub enum RuleName {
    APFHeadroomLow,
    APFHeadroomExhausted,
    APFQueueNearFull,
    APFExhaustionPredicted,
    APFSaturationRecurring,
    APFRequestsRejected,
    APFScrapeFailing,
}

impl RuleName {
    pub const ALL: [RuleName; 7] = [
        RuleName::APFHeadroomLow,
        RuleName::APFHeadroomExhausted,
        RuleName::APFQueueNearFull,
        RuleName::APFExhaustionPredicted,
        RuleName::APFSaturationRecurring,
        RuleName::APFRequestsRejected,
        RuleName::APFScrapeFailing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RuleName::APFHeadroomLow => "APFHeadroomLow",
            RuleName::APFHeadroomExhausted => "APFHeadroomExhausted",
            RuleName::APFQueueNearFull => "APFQueueNearFull",
            RuleName::APFExhaustionPredicted => "APFExhaustionPredicted",
            RuleName::APFSaturationRecurring => "APFSaturationRecurring",
            RuleName::APFRequestsRejected => "APFRequestsRejected",
            RuleName::APFScrapeFailing => "APFScrapeFailing",
        }
    }
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// Tuning of one built-in rule; every field is optional and defaults to the rule's own (`alert::RuleSpec`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Turn the rule off.
    #[serde(default)]
    pub disabled: bool,
    /// The fire threshold, in the rule's unit (`alert::RuleSpec` says which side fires): a headroom ratio
    /// (HeadroomLow), requests waiting (HeadroomExhausted), a share of queueLengthLimit (QueueNearFull), seconds
    /// (ExhaustionPredicted), the share of `analysis.lookback` the level was full (SaturationRecurring),
    /// rejections/s (RequestsRejected); APFScrapeFailing has none.
    pub threshold: Option<f64>,
    /// The condition ends only past this value (hysteresis): a value hovering at the threshold does not flap.
    pub clear_threshold: Option<f64>,
    /// APFHeadroomLow and APFExhaustionPredicted: the share of the analysis window a level must spend past the
    /// threshold, by the apiserver's seat-utilization histogram (1.25+), to fire between scrapes (default 0.1): a
    /// sub-second saturation is a blip, not pressure.
    pub window_share: Option<f64>,
    /// How long the condition must hold before the alert fires.
    #[serde(rename = "for")]
    pub for_: Option<DurationValue>,
    /// How long the alert keeps firing after the condition clears.
    pub keep_firing_for: Option<DurationValue>,
    /// Overrides the rule's severity (`warning` or `critical`; the status page and `check` follow it).
    pub severity: Option<Severity>,
    /// Extra labels added to the alert (e.g. `team: platform`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Overrides the runbook link of the annotations.
    pub runbook_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    /// Receivers (by name) that get the notifications; default: every receiver configured.
    pub receivers: Vec<String>,
    pub group_by: Vec<String>,
    pub group_wait: DurationValue,
    pub group_interval: Interval,
    pub repeat_interval: Interval,
    pub send_resolved: bool,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            receivers: Vec::new(),
            // `cluster` is absent unless a Prometheus source labels one: then each cluster is notified apart.
            group_by: vec![
                "alertname".into(),
                "cluster".into(),
                "priority_level".into(),
            ],
            group_wait: DurationValue(Duration::from_secs(30)),
            group_interval: Interval(Duration::from_secs(300)),
            repeat_interval: Interval(Duration::from_secs(4 * 3600)),
            send_resolved: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AlertingConfig {
    /// Where alert state and silences are kept across restarts (written atomically). Unset: in memory only.
    pub state_file: Option<PathBuf>,
    /// The link in notifications (`externalURL`, `generatorURL`): how people reach this apf-monitor.
    pub external_url: Option<String>,
    /// Where your team reads `docs/runbooks.md` (this repository's runbooks); `runbook_url` annotations link to its
    /// sections (`...#apfheadroomlow`). Empty: no `runbook_url` annotation.
    pub runbook_base_url: String,
    pub leader_election: LeaderElectionConfig,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        Self {
            state_file: None,
            external_url: None,
            runbook_base_url:
                "https://github.com/apf-monitor/apf-monitor/blob/main/docs/runbooks.md".into(),
            leader_election: LeaderElectionConfig::default(),
        }
    }
}

/// With two replicas of apf-monitor, one (holding a Kubernetes Lease) sends Slack, email and webhook
/// notifications, and keeps what they confirmed in the Lease for the next holder; Alertmanager receivers are sent
/// from every replica.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderElectionConfig {
    /// Unset: on when running in a cluster (a service-account token is mounted); `true`/`false` force it (outside a
    /// pod, `true` needs a kubeconfig: `targets.kubernetes`).
    pub enabled: Option<bool>,
    /// The Lease the replicas elect through; its annotation holds the notification log.
    pub lease_name: String,
    /// The Lease's namespace. Default: the pod's namespace; outside a pod, the kubeconfig context's namespace, else
    /// `default`.
    pub namespace: Option<String>,
    /// After the holder dies, the next takes over within this; a holder that stops releases the Lease at once.
    pub lease_duration: Interval,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: None,
            lease_name: "apf-monitor-notifier".into(),
            namespace: None,
            lease_duration: Interval(Duration::from_secs(15)),
        }
    }
}

impl RouteConfig {
    /// Every receiver the route names must exist; `at` says on which line of the file a key is.
    pub fn validate(
        &self,
        receivers: &BTreeSet<&str>,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(), String> {
        for name in &self.receivers {
            if !receivers.contains(name.as_str()) {
                return Err(format!(
                    "route.receivers: no receiver is named {name:?}{}",
                    at("route.receivers")
                ));
            }
        }
        Ok(())
    }
}
