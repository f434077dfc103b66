//! The built-in rules (docs/reference/alerts.md): which conditions hold on a report now. `for`, `keep_firing_for` and the life
//! cycle are the engine's business; hysteresis is decided here, because only the rule knows its clear threshold.
//!
//! These files are the one owner of alert logic. Here: which way each rule fires, its defaults, how its settings are
//! validated (the config is checked by building [`Rules`]), and the status a level gets from the rules that hold;
//! `conditions.rs`: when each rule holds on a report and what its alert says; `describe.rs`: the level's numbers
//! and flows in the annotations; `audit.rs`: who was answered 429 on the level (audit events).
use std::collections::BTreeMap;
use std::time::Duration;

use crate::alert::{RuleConfig, RuleName, Severity};
use crate::analyze::{ApiserverReport, LevelStatus, StatusReport};
use apf::model::ReplicaKey;

use super::LabelSet;

mod audit;
mod conditions;
mod describe;

pub use describe::what_cleared;

/// A condition that holds now, with what the alert would say.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The replica the condition holds on (its cluster, when it has one).
    pub replica: ReplicaKey,
    pub labels: LabelSet,
    pub annotations: BTreeMap<String, String>,
    pub for_: Duration,
    pub keep_firing_for: Duration,
}

/// A rule setting that cannot work; `key` is its path in the config file (`rules.APFHeadroomLow.threshold`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct RuleError {
    pub key: String,
    pub message: String,
}

/// Labels the rules set themselves; extra labels from the config may not replace them.
const OWN_LABELS: [&str; 5] = [
    "alertname",
    "severity",
    "apiserver",
    "priority_level",
    "reason",
];

/// Which side of its threshold a rule's value fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fires {
    /// Headroom ratio, seconds to exhaustion: low is bad; the alert clears at or above the clear threshold.
    Below,
    /// Requests waiting, queue fill, rejections: high is bad; the alert clears at or below the clear threshold.
    Above,
}

/// What a rule watches and its defaults (docs/reference/alerts.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleSpec {
    pub fires: Fires,
    /// What the threshold measures, as the config's comments and errors say it.
    pub unit: &'static str,
    /// `None` for a rule without a threshold (APFScrapeFailing).
    pub threshold: Option<f64>,
    pub clear_threshold: Option<f64>,
    pub for_: Duration,
    pub severity: Severity,
    /// A ratio: the threshold must be above 0 and at most 1 (above 1 it would fire on every level all the time).
    pub ratio: bool,
    /// For a rule that also reads the apiserver's seat-utilization histogram: the share of the window a level must
    /// spend past the threshold to fire on it (`window_share`).
    pub window_share: Option<f64>,
}

/// The default `window_share`: six seconds of a minute's window. One sub-second saturation is about 1 %.
pub const DEFAULT_WINDOW_SHARE: f64 = 0.1;

/// Seats in use above this share of the limit: the level is full (the analysis counts its episodes by it too).
pub use crate::analyze::FULL;

/// The utilizations the built-in rules read the window's histogram at, by default: past APFHeadroomLow's fire and
/// clear thresholds, and full (APFExhaustionPredicted). `/metrics` exports the share of the window above each, so
/// dashboards and the PrometheusRule read what the rules read.
pub fn default_busy_utilizations() -> [f64; 3] {
    let low = RuleSpec::of(RuleName::APFHeadroomLow);
    let (fire, clear) = (
        low.threshold.unwrap_or(0.2),
        low.clear_threshold.unwrap_or(0.25),
    );
    [1.0 - clear, 1.0 - fire, FULL]
}

impl RuleSpec {
    pub fn of(name: RuleName) -> RuleSpec {
        let s = Duration::from_secs;
        let spec = |fires, unit, threshold, clear, for_, severity, ratio| RuleSpec {
            fires,
            unit,
            threshold,
            clear_threshold: clear,
            for_,
            severity,
            ratio,
            window_share: None,
        };
        use Fires::{Above, Below};
        let spec = match name {
            RuleName::APFHeadroomLow => spec(
                Below,
                "headroom ratio",
                Some(0.2),
                Some(0.25),
                s(60),
                Severity::Warning,
                true,
            ),
            RuleName::APFHeadroomExhausted => spec(
                Above,
                "requests waiting",
                Some(0.0),
                Some(0.0),
                s(30),
                Severity::Critical,
                false,
            ),
            RuleName::APFQueueNearFull => spec(
                Above,
                "share of queueLengthLimit",
                Some(0.8),
                Some(0.7),
                s(15),
                Severity::Critical,
                true,
            ),
            RuleName::APFExhaustionPredicted => spec(
                Below,
                "seconds to exhaustion",
                Some(300.0),
                Some(360.0),
                s(60),
                Severity::Warning,
                false,
            ),
            RuleName::APFSaturationRecurring => spec(
                Above,
                "share of the lookback the level was full",
                Some(0.1),
                Some(0.05),
                s(0),
                Severity::Warning,
                true,
            ),
            RuleName::APFRequestsRejected => spec(
                Above,
                "rejections per second",
                Some(0.0),
                Some(0.0),
                s(0),
                Severity::Critical,
                false,
            ),
            RuleName::APFScrapeFailing => {
                spec(Above, "", None, None, s(120), Severity::Warning, false)
            }
        };
        // The rules that see, in the apiserver's own histogram, what happens between scrapes.
        let window_share = matches!(
            name,
            RuleName::APFHeadroomLow | RuleName::APFExhaustionPredicted
        )
        .then_some(DEFAULT_WINDOW_SHARE);
        RuleSpec {
            window_share,
            ..spec
        }
    }

    /// The `window_share` `c` gives, checked; 0 for a rule that reads no histogram.
    fn window_share(&self, c: &RuleConfig) -> Result<f64, String> {
        match (self.window_share, c.window_share) {
            (None, None) => Ok(0.0),
            (None, Some(_)) => Err(
                "this rule reads no histogram: only APFHeadroomLow and APFExhaustionPredicted take a window_share"
                    .into(),
            ),
            (Some(default), given) => {
                let share = given.unwrap_or(default);
                if share.is_finite() && share > 0.0 && share <= 1.0 {
                    Ok(share)
                } else {
                    Err(format!(
                        "{share} is a share of the window: above 0 and at most 1 (0.1: six seconds of a minute)"
                    ))
                }
            }
        }
    }

    /// The fire and clear thresholds `c` gives, checked; (0, 0) for a rule without a threshold. The error is the
    /// key under the rule and what is wrong with it.
    fn thresholds(&self, c: &RuleConfig) -> Result<(f64, f64), (&'static str, String)> {
        let (Some(default), Some(default_clear)) = (self.threshold, self.clear_threshold) else {
            if c.threshold.is_some() || c.clear_threshold.is_some() {
                return Err((
                    "threshold",
                    "this rule has no threshold (it fires while the replica cannot be read)".into(),
                ));
            }
            return Ok((0.0, 0.0));
        };
        let t = c.threshold.unwrap_or(default);
        if !t.is_finite() {
            return Err(("threshold", "must be a number".into()));
        }
        if t < 0.0 {
            return Err(("threshold", format!("{t} must be >= 0 ({})", self.unit)));
        }
        if self.ratio && (t == 0.0 || t > 1.0) {
            return Err((
                "threshold",
                format!(
                    "{t} is a ratio ({}): it must be above 0 and at most 1",
                    self.unit
                ),
            ));
        }
        // A threshold moved without a clear threshold keeps the default distance between the two.
        let clear = c
            .clear_threshold
            .unwrap_or(t + (default_clear - default) * scale(t, default));
        if !clear.is_finite() {
            return Err(("clear_threshold", "must be a number".into()));
        }
        match self.fires {
            Fires::Below if clear < t => Err((
                "clear_threshold",
                format!(
                    "{clear} must be >= threshold {t} (the rule fires below its threshold, so it clears above it)"
                ),
            )),
            Fires::Above if clear > t => Err((
                "clear_threshold",
                format!(
                    "{clear} must be <= threshold {t} (the rule fires above its threshold, so it clears below it)"
                ),
            )),
            _ => Ok((t, clear)),
        }
    }

    /// The value fires the rule: past the fire threshold, or, once active, not yet back past the clear one.
    fn holds(&self, value: f64, threshold: f64) -> bool {
        match self.fires {
            Fires::Below => value < threshold,
            Fires::Above => value > threshold,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    name: RuleName,
    spec: RuleSpec,
    threshold: f64,
    clear_threshold: f64,
    for_: Duration,
    keep_firing_for: Duration,
    severity: Severity,
    labels: BTreeMap<String, String>,
    runbook_url: String,
    /// The share of the window past the threshold that fires the rule between scrapes; 0 for a rule that reads no
    /// histogram.
    window_share: f64,
}

/// The enabled rules with their settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    rules: Vec<Rule>,
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Rules {
    /// Validates the settings and builds the enabled rules; an error names the key.
    pub fn new(
        cfg: &BTreeMap<RuleName, RuleConfig>,
        runbook_base_url: &str,
    ) -> Result<Rules, RuleError> {
        let empty = RuleConfig::default();
        let mut rules = Vec::new();
        for name in RuleName::ALL {
            let c = cfg.get(&name).unwrap_or(&empty);
            let err = |key: &str, message: String| RuleError {
                key: format!("rules.{}.{key}", name.as_str()),
                message,
            };
            let spec = RuleSpec::of(name);
            // Checked even when the rule is disabled: enabling it later must not reveal a bad setting.
            let (threshold, clear) = spec
                .thresholds(c)
                .map_err(|(key, message)| err(key, message))?;
            let window_share = spec
                .window_share(c)
                .map_err(|message| err("window_share", message))?;
            if c.disabled {
                continue;
            }
            let mut rule = Rule::build(name, spec, threshold, clear, c, runbook_base_url, &err)?;
            rule.window_share = window_share;
            rules.push(rule);
        }
        Ok(Rules { rules })
    }

    /// Every condition that holds on the report now. `is_active` says whether an alert is pending or firing: then
    /// it ends only past the clear threshold.
    pub fn evaluate(
        &self,
        report: &StatusReport,
        is_active: impl Fn(&LabelSet) -> bool,
    ) -> Vec<Candidate> {
        self.evaluate_with(report, is_active, |_| true)
    }

    /// [`Self::evaluate`], told on which replicas (by `apiserver` label) some alert may be pending or firing: on
    /// the others, none is asked about.
    pub fn evaluate_with(
        &self,
        report: &StatusReport,
        is_active: impl Fn(&LabelSet) -> bool,
        maybe_active_on: impl Fn(&str) -> bool,
    ) -> Vec<Candidate> {
        let mut out = Vec::new();
        for server in &report.apiservers {
            let maybe_active = maybe_active_on(&server.apiserver);
            for rule in &self.rules {
                rule.evaluate(server, &is_active, maybe_active, &mut out);
            }
        }
        audit::name_who_suffers(&mut out, report);
        out
    }
}

/// The status of each level (by replica and `priority_level`): the worst severity among the conditions that hold
/// on it. A disabled rule holds nowhere, so it colours nothing.
pub fn level_statuses(candidates: &[Candidate]) -> BTreeMap<(ReplicaKey, String), LevelStatus> {
    let mut out: BTreeMap<(ReplicaKey, String), LevelStatus> = BTreeMap::new();
    for c in candidates {
        let Some(level) = c.labels.get("priority_level") else {
            continue;
        };
        let status = severity_status(c.labels.get("severity").map(String::as_str));
        let e = out.entry((c.replica.clone(), level.clone())).or_default();
        *e = (*e).max(status);
    }
    out
}

/// The status a `severity` label means.
pub fn severity_status(severity: Option<&str>) -> LevelStatus {
    match severity {
        Some("critical") => LevelStatus::Critical,
        Some("warning") => LevelStatus::Warning,
        _ => LevelStatus::Ok,
    }
}

/// Moving a threshold scales the default hysteresis gap with it (0.2/0.25 → 0.4/0.5), except from a zero default.
fn scale(t: f64, default: f64) -> f64 {
    if default == 0.0 || t == 0.0 {
        1.0
    } else {
        (t / default).abs()
    }
}

impl Rule {
    fn build(
        name: RuleName,
        spec: RuleSpec,
        threshold: f64,
        clear_threshold: f64,
        c: &RuleConfig,
        runbook_base_url: &str,
        err: &impl Fn(&str, String) -> RuleError,
    ) -> Result<Rule, RuleError> {
        for (k, v) in &c.labels {
            if !valid_label_name(k) {
                return Err(err("labels", format!("{k:?} is not a valid label name")));
            }
            if OWN_LABELS.contains(&k.as_str()) {
                return Err(err("labels", format!("{k} is set by the rule itself")));
            }
            if v.is_empty() {
                return Err(err(
                    "labels",
                    format!("{k} is empty (an empty label is no label)"),
                ));
            }
        }
        // No base and no per-rule link: no `runbook_url` at all rather than a link that leads nowhere.
        let runbook_url = c.runbook_url.clone().unwrap_or_else(|| {
            if runbook_base_url.is_empty() {
                String::new()
            } else {
                format!(
                    "{}#{}",
                    runbook_base_url.trim_end_matches('#'),
                    name.as_str().to_ascii_lowercase()
                )
            }
        });
        Ok(Rule {
            name,
            spec,
            threshold,
            clear_threshold,
            for_: c.for_.map_or(spec.for_, |d| d.0),
            keep_firing_for: c.keep_firing_for.map_or(Duration::ZERO, |d| d.0),
            severity: c.severity.unwrap_or(spec.severity),
            labels: c.labels.clone(),
            runbook_url,
            window_share: 0.0,
        })
    }

    /// The rule's labels on a replica: its cluster (when it has one, over a `cluster` set in the rule's config)
    /// and apiserver, and the level.
    fn labels(&self, server: &ApiserverReport, level: Option<&str>) -> LabelSet {
        let mut labels: LabelSet = self.labels.clone();
        labels.insert("alertname".into(), self.name.as_str().into());
        labels.insert("severity".into(), self.severity.as_str().into());
        if let Some(cluster) = &server.cluster {
            labels.insert("cluster".into(), cluster.clone());
        }
        labels.insert("apiserver".into(), server.apiserver.clone());
        if let Some(level) = level {
            labels.insert("priority_level".into(), level.into());
        }
        labels
    }

    fn candidate(
        &self,
        server: &ApiserverReport,
        labels: LabelSet,
        mut annotations: BTreeMap<String, String>,
    ) -> Candidate {
        if !self.runbook_url.is_empty() {
            annotations.insert("runbook_url".into(), self.runbook_url.clone());
        }
        Candidate {
            replica: server.key(),
            labels,
            annotations,
            for_: self.for_,
            keep_firing_for: self.keep_firing_for,
        }
    }

    /// Fire threshold, or the clear threshold when the alert is already pending or firing.
    fn threshold(&self, active: bool) -> f64 {
        if active {
            self.clear_threshold
        } else {
            self.threshold
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::FlowReport;
    use crate::analyze::{LevelReport, Problem};
    use crate::scrape::{Endpoint, ScrapeError};
    use crate::values::DurationValue;

    fn rules() -> Rules {
        Rules::new(&BTreeMap::new(), "https://example.com/runbooks.md").unwrap()
    }

    fn level(name: &str, limit: f64, executing: f64, queued: f64) -> LevelReport {
        LevelReport {
            priority_level: name.into(),
            limit_seats: Some(limit),
            nominal_limit_seats: Some(limit),
            executing_seats: Some(executing),
            headroom_seats: Some(limit - executing),
            headroom_ratio: Some((limit - executing) / limit),
            inqueue_requests: Some(queued),
            queue_length_limit: Some(50.0),
            fullest_queue_requests: Some(0.0),
            rejected_per_second: Some(BTreeMap::new()),
            ..Default::default()
        }
    }

    fn report(levels: Vec<LevelReport>) -> StatusReport {
        StatusReport {
            apiservers: vec![ApiserverReport {
                apiserver: "10.0.0.5:6443".into(),
                levels,
                ..Default::default()
            }]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            alerts: vec![],
            config_findings: None,
            audit: Vec::new(),
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: None,
        }
    }

    #[test]
    fn a_replica_in_a_cluster_carries_it_and_statuses_tell_the_clusters_apart() {
        let r = rules();
        // The same address in two clusters: one loaded, one idle.
        let mut rep = report(vec![level("workload-low", 100.0, 100.0, 5.0)]);
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).cluster = Some("prod-eu".into());
        let mut idle = ApiserverReport::clone(&rep.apiservers[0]);
        idle.cluster = Some("prod-us".into());
        idle.levels = vec![level("workload-low", 100.0, 10.0, 0.0)];
        rep.apiservers.push(idle.into());
        let c = r.evaluate(&rep, |_| false);
        assert!(!c.is_empty());
        assert!(c.iter().all(|c| c.labels["cluster"] == "prod-eu"), "{c:?}");
        assert!(
            c[0].annotations["summary"].contains("10.0.0.5:6443 in cluster prod-eu"),
            "{c:?}"
        );
        let statuses = level_statuses(&c);
        let key = |cluster: &str| {
            (
                ReplicaKey {
                    cluster: Some(cluster.into()),
                    apiserver: "10.0.0.5:6443".into(),
                },
                "workload-low".to_string(),
            )
        };
        assert_eq!(statuses.get(&key("prod-eu")), Some(&LevelStatus::Critical));
        assert_eq!(statuses.get(&key("prod-us")), None);
    }

    fn names(c: &[Candidate]) -> Vec<String> {
        c.iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c.labels["alertname"],
                    c.labels.get("priority_level").map_or("-", |s| s)
                )
            })
            .collect()
    }

    /// A minute's window of seat utilization as the apiserver integrates it: `busy` seconds full, the rest at 10 %.
    fn window_with(busy_seconds: f64) -> Vec<(f64, f64)> {
        let calm = 60.0 - busy_seconds;
        [0.0, 0.1, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0, f64::INFINITY]
            .into_iter()
            .map(|le| {
                (
                    le,
                    if le < 0.1 {
                        0.0
                    } else if le < 1.0 {
                        calm
                    } else {
                        60.0
                    },
                )
            })
            .collect()
    }

    #[test]
    fn sustained_saturation_between_scrapes_warns_and_a_blip_does_not() {
        let r = rules();
        // Scrapes saw 10 of 100 seats in use. One 0.7 s saturation in the minute: the 99th percentile of the
        // window is the full level, but that is a blip: nothing.
        let mut l = level("workload-low", 100.0, 10.0, 0.0);
        l.seat_utilization_window = window_with(0.7);
        l.seat_utilization_recent = window_with(0.7);
        l.seat_utilization_p99 = Some(1.0);
        l.demand_seats_max = Some(140.0);
        l.no_accommodation_per_second = Some(0.5);
        assert!(r.evaluate(&report(vec![l.clone()]), |_| false).is_empty());
        // 15 s of the minute full: sustained pressure, both rules say so and which measure they read.
        l.seat_utilization_window = window_with(15.0);
        l.seat_utilization_recent = window_with(15.0);
        let c = r.evaluate(&report(vec![l.clone()]), |_| false);
        assert_eq!(
            names(&c),
            [
                "APFHeadroomLow/workload-low",
                "APFExhaustionPredicted/workload-low"
            ]
        );
        let summary = &c[0].annotations["summary"];
        assert!(
            summary.contains("more than 80% of the limit was in use for 25% of the last window")
                && summary.contains("seat-utilization histogram")
                && summary.contains("though the last scrape saw 90 of 100 seats free"),
            "{summary}"
        );
        let summary = &c[1].annotations["summary"];
        assert!(
            summary.contains(
                "it was full (95% of its limit in use or more) for 25% of the last window"
            ) && summary.contains("demand peaked at 140 seats of a 100-seat limit")
                && summary.contains("0.50 dispatches/s found no free seat"),
            "{summary}"
        );
        // window_share moves the line: 30 % of the window is needed, 25 % is not enough.
        let mut cfg = BTreeMap::new();
        for name in [RuleName::APFHeadroomLow, RuleName::APFExhaustionPredicted] {
            cfg.insert(
                name,
                RuleConfig {
                    window_share: Some(0.3),
                    ..Default::default()
                },
            );
        }
        let strict = Rules::new(&cfg, "").unwrap();
        assert!(strict.evaluate(&report(vec![l]), |_| false).is_empty());
    }

    #[test]
    fn a_level_that_recovered_warns_of_nothing_new_though_its_window_holds_the_pressure() {
        let r = rules();
        // 50 s of the last minute full, then the fix: all 285 seats free at the last scrape and nothing in use in
        // the last quarter of the window.
        let mut l = level("workload-low", 285.0, 0.0, 0.0);
        l.seat_utilization_window = window_with(50.0);
        l.seat_utilization_recent = window_with(0.0);
        for active in [false, true] {
            let c = r.evaluate(&report(vec![l.clone()]), |_| active);
            assert!(c.is_empty(), "active {active}: {:?}", names(&c));
        }
        // Still bursting in the last quarter: the window's pressure is still there.
        l.seat_utilization_recent = window_with(15.0);
        assert_eq!(
            names(&r.evaluate(&report(vec![l.clone()]), |_| false)),
            [
                "APFHeadroomLow/workload-low",
                "APFExhaustionPredicted/workload-low"
            ]
        );
        // No recent part to read: nothing says the pressure is still there (the PrometheusRule reads it so too).
        l.seat_utilization_recent = Vec::new();
        assert!(r.evaluate(&report(vec![l]), |_| false).is_empty());
    }

    #[test]
    fn recurring_saturation_warns_names_its_pattern_and_ends_when_overdue() {
        use crate::analyze::{HeldBy, Saturation};
        let r = rules();
        // Full for 15 s of every minute, three times in the last five minutes; calm at the last scrape.
        let mut l = level("workload-low", 285.0, 40.0, 0.0);
        let pattern = Saturation {
            lookback_seconds: 300.0,
            full_seconds: 45.0,
            full_ratio: 0.15,
            episodes: 3,
            shortest_seconds: 14.2,
            longest_seconds: 15.5,
            seconds_since: Some(20.0),
            longest_gap_seconds: Some(45.0),
            by_histogram: true,
            flows: vec![HeldBy {
                flow_schema: "service-accounts".into(),
                flow: "system:serviceaccount:batch:burst".into(),
                share: 0.8,
            }],
        };
        l.saturation = Some(Box::new(pattern.clone()));
        let c = r.evaluate(&report(vec![l.clone()]), |_| false);
        assert_eq!(names(&c), ["APFSaturationRecurring/workload-low"]);
        assert_eq!(c[0].labels["severity"], "warning");
        assert_eq!(c[0].for_, Duration::ZERO);
        assert_eq!(
            c[0].annotations["summary"],
            "workload-low on 10.0.0.5:6443: full (95% of its limit in use or more) 3 times in the last 5m \
             (14-16s each), 15% of the time, by the apiserver's seat-utilization histogram; the last ended 20s \
             ago, the longest quiet between two 45s; its seats held by service-accounts / \
             system:serviceaccount:batch:burst (80%)"
        );
        // Hysteresis: 8 % of the lookback starts nothing, keeps an active alert; 5 % ends it.
        l.saturation = Some(Box::new(Saturation {
            full_ratio: 0.08,
            ..pattern.clone()
        }));
        assert!(r.evaluate(&report(vec![l.clone()]), |_| false).is_empty());
        assert_eq!(r.evaluate(&report(vec![l.clone()]), |_| true).len(), 1);
        l.saturation = Some(Box::new(Saturation {
            full_ratio: 0.05,
            ..pattern.clone()
        }));
        assert!(r.evaluate(&report(vec![l.clone()]), |_| true).is_empty());
        // One episode is a burst, not a pattern; an overdue one (fixed, or over by itself) neither starts nor keeps
        // an alert.
        for s in [
            Saturation {
                episodes: 1,
                longest_gap_seconds: None,
                ..pattern.clone()
            },
            Saturation {
                seconds_since: Some(70.0),
                ..pattern.clone()
            },
        ] {
            l.saturation = Some(Box::new(s));
            for active in [false, true] {
                assert!(r.evaluate(&report(vec![l.clone()]), |_| active).is_empty());
            }
        }
        // Measured by scrapes (before 1.25), and with no dump inside an episode: said so.
        l.saturation = Some(Box::new(Saturation {
            by_histogram: false,
            flows: Vec::new(),
            longest_seconds: 15.0,
            shortest_seconds: 15.0,
            ..pattern
        }));
        let summary = &r.evaluate(&report(vec![l]), |_| false)[0].annotations["summary"];
        assert!(
            summary.contains("(15s each)")
                && summary.contains("by scrapes that found it full")
                && summary
                    .ends_with("no dump was read inside an episode to say who held its seats"),
            "{summary}"
        );
    }

    #[test]
    fn window_share_is_a_share_and_only_for_the_histogram_rules() {
        let with = |name, share| {
            let cfg = BTreeMap::from([(
                name,
                RuleConfig {
                    window_share: Some(share),
                    ..Default::default()
                },
            )]);
            Rules::new(&cfg, "").map(|_| ()).map_err(|e| e.to_string())
        };
        assert!(with(RuleName::APFHeadroomLow, 1.0).is_ok());
        let err = with(RuleName::APFHeadroomLow, 0.0).unwrap_err();
        assert!(
            err.starts_with("rules.APFHeadroomLow.window_share: "),
            "{err}"
        );
        assert!(with(RuleName::APFExhaustionPredicted, 1.5).is_err());
        let err = with(RuleName::APFQueueNearFull, 0.1).unwrap_err();
        assert!(err.contains("reads no histogram"), "{err}");
    }

    #[test]
    fn no_runbook_base_means_no_runbook_link() {
        let r = Rules::new(&BTreeMap::new(), "").unwrap();
        let rep = report(vec![level("workload-low", 368.0, 360.0, 0.0)]);
        let c = r.evaluate(&rep, |_| false);
        assert_eq!(names(&c), ["APFHeadroomLow/workload-low"]);
        assert!(
            !c[0].annotations.contains_key("runbook_url"),
            "{:?}",
            c[0].annotations
        );
    }

    #[test]
    fn headroom_low_with_hysteresis_and_annotations() {
        let r = rules();
        let mut l = level("workload-low", 368.0, 360.0, 0.0);
        l.top_flows = vec![FlowReport {
            flow_schema: "service-accounts".into(),
            flow: "system:serviceaccount:ci:runner".into(),
            waiting_requests: 0.0,
            executing_seats: 300.0,
            users: vec!["system:serviceaccount:ci:runner".into()],
            example_request: Some("list pods".into()),
            ..Default::default()
        }];
        let rep = report(vec![l, level("exempt", 600.0, 600.0, 0.0)]);
        let c = r.evaluate(&rep, |_| false);
        assert_eq!(
            names(&c),
            ["APFHeadroomLow/workload-low"],
            "never on exempt"
        );
        let c = &c[0];
        assert_eq!(c.for_, Duration::from_secs(60));
        assert_eq!(c.labels["severity"], "warning");
        assert_eq!(c.labels["apiserver"], "10.0.0.5:6443");
        assert_eq!(
            c.annotations["summary"],
            "workload-low on 10.0.0.5:6443: 8 of 368 seats free (2%) at the last scrape"
        );
        assert_eq!(
            c.annotations["runbook_url"],
            "https://example.com/runbooks.md#apfheadroomlow"
        );
        assert!(c.annotations["description"].contains("limit: 368 seats (nominal 368)"));
        assert!(c.annotations["description"].contains("headroom: 8 seats (2%)"));
        assert!(c.annotations["top_flows"]
            .contains("service-accounts / system:serviceaccount:ci:runner: 300.0 seats executing"));
        assert!(c.annotations["top_flows"].contains("e.g. `list pods`"));
        assert!(c.annotations["remediation"]
            .starts_with("Isolate flow system:serviceaccount:ci:runner"));
        assert!(c.annotations["remediation_manifest"].contains("kind: FlowSchema"));

        // 22% free: above the fire threshold 0.2, below the clear threshold 0.25.
        let rep = report(vec![level("workload-low", 100.0, 78.0, 0.0)]);
        assert!(
            r.evaluate(&rep, |_| false).is_empty(),
            "not active: 0.22 >= 0.2 does not fire"
        );
        assert_eq!(
            r.evaluate(&rep, |_| true).len(),
            1,
            "active: holds until 0.25"
        );
        let rep = report(vec![level("workload-low", 100.0, 75.0, 0.0)]);
        assert!(r.evaluate(&rep, |_| true).is_empty(), "0.25 clears");
        // Told where alerts may be active: the same, without asking about the other replicas.
        let rep = report(vec![level("workload-low", 100.0, 78.0, 0.0)]);
        let asked = std::cell::Cell::new(0);
        let is_active = |_: &LabelSet| {
            asked.set(asked.get() + 1);
            true
        };
        assert_eq!(
            r.evaluate_with(&rep, is_active, |a| a == "10.0.0.5:6443")
                .len(),
            1
        );
        assert!(asked.get() > 0);
        asked.set(0);
        assert!(r.evaluate_with(&rep, is_active, |_| false).is_empty());
        assert_eq!(asked.get(), 0, "no alert's labels made on a quiet replica");
    }

    #[test]
    fn exhausted_queue_near_full_predicted() {
        let r = rules();
        // 8 free seats, 30 LISTs 10 seats wide wait: exhausted (and low headroom).
        let mut l = level("workload-low", 100.0, 92.0, 30.0);
        l.inqueue_seats = Some(300.0);
        l.fullest_queue_requests = Some(40.0);
        l.seconds_to_exhaustion = Some(0.0);
        let c = r.evaluate(&report(vec![l.clone()]), |_| false);
        assert_eq!(
            names(&c),
            [
                "APFHeadroomLow/workload-low",
                "APFHeadroomExhausted/workload-low",
                "APFQueueNearFull/workload-low",
                "APFExhaustionPredicted/workload-low"
            ]
        );
        assert_eq!(c[1].labels["severity"], "critical");
        assert_eq!(c[1].for_, Duration::from_secs(30));
        assert_eq!(c[2].for_, Duration::from_secs(15));
        assert!(c[2].annotations["summary"]
            .contains("the fullest queue holds 40 of queueLengthLimit 50 (80%)"));
        // With 8 seats free a full queue is not refused: its 10-seat LISTs wait out their limit.
        assert!(
            c[2].annotations["summary"].contains(
                "8 seats are free but too few for the requests that wait, so the queue takes more and they wait \
                 out their limit (time-out 429s)"
            ),
            "{}",
            c[2].annotations["summary"]
        );
        // With none free, the next are refused.
        let mut full = l.clone();
        full.executing_seats = Some(100.0);
        full.headroom_seats = Some(0.0);
        let refused = r.evaluate(&report(vec![full]), |_| false);
        let near_full = refused
            .iter()
            .find(|c| c.labels["alertname"] == "APFQueueNearFull")
            .unwrap();
        assert!(near_full.annotations["summary"].ends_with("the next requests get queue-full 429s"));
        assert!(
            c[1].annotations["summary"]
                .contains("30 requests wait for 300 seats (10 seats each); 8 of 100 seats free"),
            "{}",
            c[1].annotations["summary"]
        );
        // Requests wait only when no seat fits them: 1-seat requests waiting with 8 seats free by the gauge are
        // still out of seats (the gauges are sampled apart).
        l.inqueue_seats = Some(30.0);
        let c = r.evaluate(&report(vec![l.clone()]), |_| false);
        assert!(names(&c).contains(&"APFHeadroomExhausted/workload-low".to_string()));
        // Nothing waiting: not exhausted, however little is free.
        l.inqueue_requests = Some(0.0);
        l.inqueue_seats = Some(0.0);
        // 37 of 50 = 74%: below 80% to fire, above 70% to clear.
        l.fullest_queue_requests = Some(37.0);
        l.seconds_to_exhaustion = Some(330.0);
        let c = r.evaluate(&report(vec![l.clone()]), |_| false);
        assert_eq!(names(&c), ["APFHeadroomLow/workload-low"]);
        let c = r.evaluate(&report(vec![l]), |_| true);
        assert_eq!(
            names(&c),
            [
                "APFHeadroomLow/workload-low",
                "APFQueueNearFull/workload-low",
                "APFExhaustionPredicted/workload-low"
            ]
        );
    }

    #[test]
    fn rejections_one_alert_per_reason_with_flow_schemas() {
        let r = rules();
        let mut l = level("catch-all", 13.0, 2.0, 0.0);
        l.rejected_per_second = Some(
            [
                ("concurrency-limit".to_string(), 0.5),
                ("time-out".to_string(), 0.0),
            ]
            .into(),
        );
        let mut rep = report(vec![l]);
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).flow_schema_rejected_per_second = vec![
            (
                "catch-all".into(),
                "catch-all".into(),
                "concurrency-limit".into(),
                0.5,
            ),
            (
                "workload-low".into(),
                "service-accounts".into(),
                "queue-full".into(),
                1.0,
            ),
        ];
        let c = r.evaluate(&rep, |_| false);
        assert_eq!(names(&c), ["APFRequestsRejected/catch-all"]);
        assert_eq!(c[0].labels["reason"], "concurrency-limit");
        assert_eq!(c[0].for_, Duration::ZERO);
        assert_eq!(c[0].annotations["flow_schema"], "catch-all 0.50/s");
        assert_eq!(
            c[0].annotations["summary"],
            "catch-all on 10.0.0.5:6443: 0.50 requests/s rejected with 429 (concurrency-limit)"
        );
        // After a restart the rate is unknown for a scrape: a firing alert holds, nothing new fires.
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).levels[0].rejected_per_second = None;
        assert!(r.evaluate(&rep, |_| false).is_empty());
        let c = r.evaluate(&rep, |l| {
            l.get("reason").is_some_and(|r| r == "concurrency-limit")
        });
        assert_eq!(names(&c), ["APFRequestsRejected/catch-all"]);
        assert!(c[0].annotations["summary"].contains("the rate is not known yet"));
    }

    fn scrape(endpoint: Endpoint, error: ScrapeError) -> Problem {
        Problem::Scrape { endpoint, error }
    }

    fn http(status: u16, detail: &str) -> ScrapeError {
        ScrapeError::Http {
            status,
            detail: detail.into(),
        }
    }

    #[test]
    fn scrape_failing_metrics_and_403() {
        let r = rules();
        let mut rep = report(vec![]);
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).errors = vec![scrape(
            Endpoint::Metrics,
            ScrapeError::Connect("connection refused".into()),
        )];
        let c = r.evaluate(&rep, |_| false);
        assert_eq!(names(&c), ["APFScrapeFailing/-"]);
        assert_eq!(c[0].for_, Duration::from_secs(120));
        assert_eq!(
            c[0].annotations["summary"],
            "10.0.0.5:6443: /metrics cannot be scraped (cannot connect: connection refused)"
        );
        let mut rep = report(vec![level("workload-low", 100.0, 10.0, 0.0)]);
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).errors =
            vec![scrape(Endpoint::DumpQueues, http(403, "forbidden"))];
        let c = r.evaluate(&rep, |_| false);
        assert_eq!(names(&c), ["APFScrapeFailing/-"]);
        assert!(c[0].annotations["remediation"].contains("/debug/api_priority_and_fairness/*"));
        assert!(c[0].annotations["summary"].contains("HTTP 403 on dump_queues"));
        // /metrics itself forbidden: the rule for /metrics is the one missing.
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).errors =
            vec![scrape(Endpoint::Metrics, http(403, "forbidden"))];
        let c = r.evaluate(&rep, |_| false);
        assert!(c[0].annotations["summary"]
            .contains("/metrics cannot be scraped (HTTP 403: forbidden: RBAC does not allow it"));
        assert!(c[0].annotations["remediation"].contains("nonResourceURLs: [\"/metrics\"]"));
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).errors =
            vec![scrape(Endpoint::DumpRequests, http(500, "oops"))];
        assert!(
            r.evaluate(&rep, |_| false).is_empty(),
            "other dump errors are not alerts"
        );
        // A Prometheus source that fails: said as such, with what to check there.
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).errors = vec![scrape(
            Endpoint::Prometheus,
            ScrapeError::Query("partial answer, not used: store down".into()),
        )];
        std::sync::Arc::make_mut(&mut rep.apiservers[0])
            .levels
            .clear();
        let c = r.evaluate(&rep, |_| false);
        assert!(
            c[0].annotations["summary"]
                .contains("the Prometheus source cannot be read (the query failed: partial"),
            "{:?}",
            c[0].annotations
        );
        assert!(c[0].annotations["remediation"].contains("apiserver_label"));
        std::sync::Arc::make_mut(&mut rep.apiservers[0]).errors =
            vec![scrape(Endpoint::Prometheus, http(403, "no"))];
        let c = r.evaluate(&rep, |_| false);
        assert!(
            !c[0].annotations["summary"].contains("RBAC")
                && c[0].annotations["summary"].contains("credentials"),
            "{:?}",
            c[0].annotations
        );
    }

    #[test]
    fn config_tunes_and_validates() {
        let mut cfg = BTreeMap::new();
        cfg.insert(
            RuleName::APFHeadroomLow,
            RuleConfig {
                threshold: Some(0.4),
                for_: Some(DurationValue(Duration::from_secs(5))),
                keep_firing_for: Some(DurationValue(Duration::from_secs(90))),
                severity: Some(Severity::Critical),
                labels: [("team".to_string(), "platform".to_string())].into(),
                runbook_url: Some("https://wiki/apf".into()),
                ..Default::default()
            },
        );
        cfg.insert(
            RuleName::APFQueueNearFull,
            RuleConfig {
                disabled: true,
                ..Default::default()
            },
        );
        let r = Rules::new(&cfg, "x").unwrap();
        let mut l = level("global-default", 100.0, 62.0, 0.0);
        l.fullest_queue_requests = Some(50.0);
        let c = r.evaluate(&report(vec![l.clone()]), |_| false);
        assert_eq!(
            names(&c),
            ["APFHeadroomLow/global-default"],
            "38% free < 40%; QueueNearFull is off"
        );
        assert_eq!(c[0].labels["team"], "platform");
        assert_eq!(c[0].labels["severity"], "critical");
        assert_eq!(c[0].for_, Duration::from_secs(5));
        assert_eq!(c[0].keep_firing_for, Duration::from_secs(90));
        assert_eq!(c[0].annotations["runbook_url"], "https://wiki/apf");
        // The default gap scales: 0.4 fires, 0.5 clears.
        l.executing_seats = Some(55.0);
        l.headroom_seats = Some(45.0);
        l.headroom_ratio = Some(0.45);
        assert!(r.evaluate(&report(vec![l.clone()]), |_| false).is_empty());
        assert_eq!(r.evaluate(&report(vec![l]), |_| true).len(), 1);

        let bad = |name, c: RuleConfig| {
            Rules::new(&[(name, c)].into(), "x")
                .unwrap_err()
                .to_string()
        };
        let e = bad(
            RuleName::APFHeadroomLow,
            RuleConfig {
                clear_threshold: Some(0.1),
                ..Default::default()
            },
        );
        assert!(e.contains("must be >= threshold"), "{e}");
        let e = bad(
            RuleName::APFQueueNearFull,
            RuleConfig {
                clear_threshold: Some(0.9),
                ..Default::default()
            },
        );
        assert!(e.contains("must be <= threshold"), "{e}");
        let e = bad(
            RuleName::APFHeadroomLow,
            RuleConfig {
                labels: [("severity".to_string(), "x".to_string())].into(),
                ..Default::default()
            },
        );
        assert!(e.contains("set by the rule itself"), "{e}");
        let e = bad(
            RuleName::APFHeadroomLow,
            RuleConfig {
                labels: [("a-b".to_string(), "x".to_string())].into(),
                ..Default::default()
            },
        );
        assert!(e.contains("not a valid label name"), "{e}");
        let e = bad(
            RuleName::APFHeadroomLow,
            RuleConfig {
                threshold: Some(f64::NAN),
                ..Default::default()
            },
        );
        assert!(e.contains("must be a number"), "{e}");
        let e = bad(
            RuleName::APFQueueNearFull,
            RuleConfig {
                threshold: Some(80.0),
                ..Default::default()
            },
        );
        assert!(e.contains("is a ratio"), "{e}");
        let e = bad(
            RuleName::APFExhaustionPredicted,
            RuleConfig {
                threshold: Some(-1.0),
                ..Default::default()
            },
        );
        assert!(e.contains("must be >= 0"), "{e}");
        // APFHeadroomExhausted fires above its threshold (requests waiting), so it clears at or below it.
        let ok = RuleConfig {
            threshold: Some(5.0),
            clear_threshold: Some(2.0),
            ..Default::default()
        };
        let r = Rules::new(&[(RuleName::APFHeadroomExhausted, ok)].into(), "x").unwrap();
        let waiting = |n: f64| report(vec![level("workload-low", 100.0, 0.0, n)]);
        assert!(
            r.evaluate(&waiting(5.0), |_| false).is_empty(),
            "5 is not above 5"
        );
        assert_eq!(r.evaluate(&waiting(6.0), |_| false).len(), 1);
        assert_eq!(
            r.evaluate(&waiting(3.0), |_| true).len(),
            1,
            "active: holds above 2"
        );
        assert!(
            r.evaluate(&waiting(2.0), |_| true).is_empty(),
            "clears at 2"
        );
        let e = bad(
            RuleName::APFHeadroomExhausted,
            RuleConfig {
                clear_threshold: Some(3.0),
                ..Default::default()
            },
        );
        assert!(
            e.starts_with("rules.APFHeadroomExhausted.clear_threshold: 3 must be <= threshold 0"),
            "{e}"
        );
        let e = bad(
            RuleName::APFScrapeFailing,
            RuleConfig {
                threshold: Some(1.0),
                ..Default::default()
            },
        );
        assert!(e.contains("has no threshold"), "{e}");
    }
}
