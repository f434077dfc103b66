//! The life cycle of each alert (Prometheus rule semantics): pending while the condition holds for less than `for`,
//! firing after, kept firing `keep_firing_for` past the condition, then resolved and remembered for 15 minutes so
//! the resolution reaches the receivers.
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::humantime_serde_compat as rfc3339;
use super::notification_log::LoggedAlert;
use super::rules::Candidate;
use super::{fingerprint, Alert, LabelSet};

/// How long a resolved alert is still returned (and notified) before it is forgotten.
pub const RESOLVED_RETENTION: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Phase {
    /// The condition holds since `since`, not yet for `for`.
    Pending {
        #[serde(with = "rfc3339")]
        since: SystemTime,
    },
    /// Firing since `since` (the alert's `starts_at`); the condition last held at `last_true`.
    Firing {
        #[serde(with = "rfc3339")]
        since: SystemTime,
        #[serde(with = "rfc3339")]
        last_true: SystemTime,
    },
    Resolved {
        #[serde(with = "rfc3339")]
        since: SystemTime,
        #[serde(with = "rfc3339")]
        ends_at: SystemTime,
    },
}

/// One alert the engine tracks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tracked {
    pub labels: LabelSet,
    pub annotations: BTreeMap<String, String>,
    #[serde(with = "secs")]
    pub for_: Duration,
    #[serde(with = "secs")]
    pub keep_firing_for: Duration,
    pub phase: Phase,
}

/// Durations as fractional seconds in the state file.
mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Engine {
    alerts: BTreeMap<u64, Tracked>,
    generator_url: String,
}

fn elapsed(now: SystemTime, since: SystemTime) -> Duration {
    // A clock that stepped back counts as no time passed.
    now.duration_since(since).unwrap_or(Duration::ZERO)
}

impl Engine {
    /// `generator_url`: the link back to apf-monitor's status page put in every alert.
    pub fn new(generator_url: impl Into<String>) -> Self {
        Self {
            alerts: BTreeMap::new(),
            generator_url: generator_url.into(),
        }
    }

    /// Restores the states saved by `tracked()` (a restart).
    pub fn with_tracked(mut self, tracked: Vec<Tracked>) -> Self {
        self.alerts = tracked
            .into_iter()
            .map(|t| (fingerprint(&t.labels), t))
            .collect();
        self
    }

    /// Every state, for the state file.
    pub fn tracked(&self) -> Vec<Tracked> {
        self.alerts.values().cloned().collect()
    }

    /// One evaluation: `candidates` are the conditions that hold now; any other alert's condition is gone.
    /// Returns the current alerts: firing ones, then resolved ones not yet forgotten.
    pub fn update(&mut self, now: SystemTime, candidates: Vec<Candidate>) -> Vec<Alert> {
        self.evaluate(now, candidates, |_| false)
    }

    /// [`Engine::update`], where an alert without a candidate whose labels `hold` is kept as it is: a condition
    /// that cannot be evaluated yet (its replica not read yet since a start) is not a condition gone.
    pub fn evaluate(
        &mut self,
        now: SystemTime,
        candidates: Vec<Candidate>,
        hold: impl Fn(&LabelSet) -> bool,
    ) -> Vec<Alert> {
        let mut seen = std::collections::BTreeSet::new();
        for c in candidates {
            let fp = fingerprint(&c.labels);
            seen.insert(fp);
            let start = |for_: Duration| {
                if for_.is_zero() {
                    Phase::Firing {
                        since: now,
                        last_true: now,
                    }
                } else {
                    Phase::Pending { since: now }
                }
            };
            let phase = match self.alerts.get(&fp).map(|t| &t.phase) {
                // A resolved alert that comes back is a new alert with a new `starts_at`.
                None | Some(Phase::Resolved { .. }) => start(c.for_),
                Some(Phase::Pending { since }) if elapsed(now, *since) >= c.for_ => Phase::Firing {
                    since: now,
                    last_true: now,
                },
                Some(Phase::Pending { since }) => Phase::Pending { since: *since },
                Some(Phase::Firing { since, .. }) => Phase::Firing {
                    since: *since,
                    last_true: now,
                },
            };
            // Labels are the identity; annotations carry this evaluation's numbers.
            self.alerts.insert(
                fp,
                Tracked {
                    labels: c.labels,
                    annotations: c.annotations,
                    for_: c.for_,
                    keep_firing_for: c.keep_firing_for,
                    phase,
                },
            );
        }
        self.alerts.retain(|fp, t| {
            if seen.contains(fp) {
                return true;
            }
            if !matches!(t.phase, Phase::Resolved { .. }) && hold(&t.labels) {
                return true;
            }
            match t.phase {
                Phase::Pending { .. } => false,
                Phase::Firing { since, last_true } => {
                    if elapsed(now, last_true) >= t.keep_firing_for {
                        t.phase = Phase::Resolved {
                            since,
                            ends_at: now,
                        };
                    }
                    true
                }
                Phase::Resolved { ends_at, .. } => elapsed(now, ends_at) < RESOLVED_RETENTION,
            }
        });
        self.alerts()
    }

    /// Firing alerts, then resolved ones.
    pub fn alerts(&self) -> Vec<Alert> {
        let mut firing = Vec::new();
        let mut resolved = Vec::new();
        for t in self.alerts.values() {
            let alert = |starts_at, ends_at| Alert {
                labels: t.labels.clone(),
                annotations: t.annotations.clone(),
                starts_at,
                ends_at,
                generator_url: self.generator_url.clone(),
            };
            match t.phase {
                Phase::Pending { .. } => {}
                Phase::Firing { since, .. } => firing.push(alert(since, None)),
                Phase::Resolved { since, ends_at } => resolved.push(alert(since, Some(ends_at))),
            }
        }
        firing.extend(resolved);
        firing
    }

    /// Alerts whose condition holds but not yet for `for` (with what they would say), and when it started holding.
    pub fn pending(&self) -> Vec<(&Tracked, SystemTime)> {
        self.alerts
            .values()
            .filter_map(|t| match t.phase {
                Phase::Pending { since } => Some((t, since)),
                _ => None,
            })
            .collect()
    }

    /// Ends the alerts whose labels match at once: firing ones resolve now (whatever `keep_firing_for` says),
    /// pending ones are dropped. For a replica that is no longer watched.
    pub fn resolve_where(&mut self, now: SystemTime, matches: impl Fn(&LabelSet) -> bool) {
        self.alerts.retain(|_, t| {
            if !matches(&t.labels) {
                return true;
            }
            match t.phase {
                Phase::Pending { .. } => false,
                Phase::Firing { since, .. } => {
                    t.phase = Phase::Resolved {
                        since,
                        ends_at: now,
                    };
                    true
                }
                Phase::Resolved { .. } => true,
            }
        });
    }

    /// Alerts the previous Lease holder notified as firing: firing here too from now on (since when the holder
    /// said), so this replica neither announces them again nor drops them while its own `for` runs. One this
    /// replica saw resolve keeps its resolution (owed to the receivers); the next evaluation resolves one whose
    /// condition does not hold here.
    pub fn adopt<'a>(
        &mut self,
        alerts: impl IntoIterator<Item = &'a LoggedAlert>,
        now: SystemTime,
    ) {
        for a in alerts {
            let fp = a.fingerprint();
            let firing = Phase::Firing {
                since: a.starts_at,
                last_true: now,
            };
            match self.alerts.get_mut(&fp) {
                Some(t) => match t.phase {
                    Phase::Pending { .. } => t.phase = firing,
                    // Resolved here before the holder saw it fire again: that later episode is the one owed.
                    Phase::Resolved { ends_at, .. } if ends_at < a.starts_at => t.phase = firing,
                    _ => {}
                },
                None => {
                    let logged = a.alert(&self.generator_url);
                    self.alerts.insert(
                        fp,
                        Tracked {
                            labels: logged.labels,
                            annotations: logged.annotations,
                            for_: Duration::ZERO,
                            keep_firing_for: Duration::ZERO,
                            phase: firing,
                        },
                    );
                }
            }
        }
    }

    /// Pending or firing: the rules then apply the clear threshold (hysteresis).
    /// The `apiserver` label of every pending or firing alert.
    pub fn active_apiservers(&self) -> BTreeSet<&str> {
        self.alerts
            .values()
            .filter(|t| !matches!(t.phase, Phase::Resolved { .. }))
            .filter_map(|t| t.labels.get("apiserver").map(String::as_str))
            .collect()
    }

    pub fn is_active(&self, labels: &LabelSet) -> bool {
        self.active_since(labels).is_some()
    }

    /// Since when the alert is pending (condition start) or firing (`starts_at`).
    pub fn active_since(&self, labels: &LabelSet) -> Option<SystemTime> {
        match self.alerts.get(&fingerprint(labels))?.phase {
            Phase::Pending { since } | Phase::Firing { since, .. } => Some(since),
            Phase::Resolved { .. } => None,
        }
    }

    pub fn phase(&self, labels: &LabelSet) -> Option<&Phase> {
        self.alerts.get(&fingerprint(labels)).map(|t| &t.phase)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn cand(name: &str, for_secs: u64, keep_secs: u64, summary: &str) -> Candidate {
        Candidate {
            replica: Default::default(),
            labels: [("alertname".to_string(), name.to_string())].into(),
            annotations: [("summary".to_string(), summary.to_string())].into(),
            for_: Duration::from_secs(for_secs),
            keep_firing_for: Duration::from_secs(keep_secs),
        }
    }

    #[test]
    fn pending_firing_resolved_forgotten() {
        let mut e = Engine::new("http://mon/");
        let c = || cand("APFHeadroomLow", 60, 0, "8 free");
        assert!(
            e.update(t(0), vec![c()]).is_empty(),
            "pending is not an alert yet"
        );
        assert_eq!(e.pending().len(), 1);
        assert!(e.is_active(&c().labels));
        assert_eq!(e.active_since(&c().labels), Some(t(0)));
        assert!(e.update(t(59), vec![c()]).is_empty());
        let a = e.update(t(60), vec![c()]);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].starts_at, t(60));
        assert_eq!(a[0].ends_at, None);
        assert_eq!(a[0].generator_url, "http://mon/");
        assert!(e.pending().is_empty());
        // Annotations follow the numbers.
        let a = e.update(t(70), vec![cand("APFHeadroomLow", 60, 0, "2 free")]);
        assert_eq!(a[0].annotations["summary"], "2 free");
        assert_eq!(a[0].starts_at, t(60));
        // Condition gone: resolved at once (no keep_firing_for).
        let a = e.update(t(80), vec![]);
        assert_eq!(a[0].ends_at, Some(t(80)));
        assert!(!e.is_active(&c().labels));
        assert_eq!(e.update(t(80 + 899), vec![]).len(), 1, "kept 15 minutes");
        assert!(e.update(t(80 + 900), vec![]).is_empty(), "then forgotten");
    }

    #[test]
    fn resolve_where_ends_firing_now_and_drops_pending() {
        let mut e = Engine::new("");
        let mut other = cand("APFHeadroomLow", 0, 600, "");
        other.labels.insert("apiserver".into(), "b".into());
        let mut gone = cand("APFHeadroomLow", 0, 600, "");
        gone.labels.insert("apiserver".into(), "a".into());
        let mut pending = cand("APFQueueNearFull", 60, 0, "");
        pending.labels.insert("apiserver".into(), "a".into());
        e.update(t(0), vec![other.clone(), gone.clone(), pending]);
        e.resolve_where(t(10), |l| l.get("apiserver").is_some_and(|a| a == "a"));
        assert!(e.pending().is_empty());
        let a = e.alerts();
        let ended: Vec<_> = a
            .iter()
            .map(|a| (a.labels["apiserver"].as_str(), a.ends_at))
            .collect();
        assert_eq!(
            ended,
            [("b", None), ("a", Some(t(10)))],
            "keep_firing_for does not hold a gone replica"
        );
    }

    #[test]
    fn pending_that_clears_never_fires_and_restarts_its_for() {
        let mut e = Engine::new("");
        let c = || cand("APFQueueNearFull", 15, 0, "");
        e.update(t(0), vec![c()]);
        assert!(e.update(t(10), vec![]).is_empty());
        assert!(e.pending().is_empty());
        e.update(t(20), vec![c()]);
        assert!(
            e.update(t(34), vec![c()]).is_empty(),
            "for counts from 20 again"
        );
        assert_eq!(e.update(t(35), vec![c()]).len(), 1);
    }

    #[test]
    fn keep_firing_for_and_refire() {
        let mut e = Engine::new("");
        let c = || cand("APFRequestsRejected", 0, 120, "");
        assert_eq!(
            e.update(t(0), vec![c()])[0].starts_at,
            t(0),
            "for 0s fires at once"
        );
        assert!(e.update(t(119), vec![])[0].ends_at.is_none(), "kept firing");
        // Back within keep_firing_for: same alert, same starts_at.
        assert_eq!(e.update(t(130), vec![c()])[0].starts_at, t(0));
        assert!(e.update(t(249), vec![])[0].ends_at.is_none());
        let a = e.update(t(250), vec![]);
        assert_eq!(a[0].ends_at, Some(t(250)));
        // After resolving, it comes back as a new alert.
        let a = e.update(t(300), vec![c()]);
        assert_eq!((a[0].starts_at, a[0].ends_at), (t(300), None));
    }

    #[test]
    fn restored_states_resolve_when_the_condition_is_gone() {
        let mut e = Engine::new("");
        let c = || cand("APFHeadroomExhausted", 30, 60, "");
        e.update(t(0), vec![c()]);
        e.update(t(30), vec![c()]);
        let saved = serde_json::to_string(&e.tracked()).unwrap();
        let back: Vec<Tracked> = serde_json::from_str(&saved).unwrap();
        let mut e2 = Engine::new("").with_tracked(back);
        assert_eq!(e2, e);
        // Down for 10 minutes; the condition is gone: resolved on the first evaluation.
        let a = e2.update(t(630), vec![]);
        assert_eq!((a[0].starts_at, a[0].ends_at), (t(30), Some(t(630))));
    }

    /// What the previous Lease holder announced is firing here from the take-over: a pending alert with the holder's
    /// start, an unknown one until the next evaluation says its condition is gone.
    #[test]
    fn adopted_alerts_fire_from_the_holders_start() {
        let mut e = Engine::new("http://mon/");
        assert!(
            e.update(t(0), vec![cand("A", 60, 0, "a")]).is_empty(),
            "pending"
        );
        let logged = |name: &str| LoggedAlert {
            labels: [("alertname".to_string(), name.to_string())].into(),
            starts_at: t(5),
            summary: Some(format!("{name} as announced")),
        };
        e.adopt(&[logged("A"), logged("B")], t(10));
        let alerts = e.alerts();
        assert_eq!(alerts.len(), 2);
        assert!(alerts
            .iter()
            .all(|a| a.starts_at == t(5) && !a.is_resolved()));
        // B's condition does not hold here: resolved at the next evaluation, its resolution owed.
        let alerts = e.update(t(11), vec![cand("A", 60, 0, "a")]);
        let b = alerts.iter().find(|a| a.alertname() == "B").unwrap();
        assert_eq!(b.ends_at, Some(t(11)));
        assert_eq!(b.annotations["summary"], "B as announced");
    }

    /// An alert whose condition cannot be evaluated yet is held as it is, firing or pending.
    #[test]
    fn holding_resolves_nothing_for_want_of_a_candidate() {
        let mut e = Engine::new("http://mon/");
        e.update(t(0), vec![cand("A", 0, 0, "a"), cand("P", 60, 0, "p")]);
        let alerts = e.evaluate(t(30), Vec::new(), |_| true);
        assert_eq!(alerts.len(), 1);
        assert!(!alerts[0].is_resolved());
        assert!(e.is_active(&[("alertname".to_string(), "P".to_string())].into()));
        let alerts = e.evaluate(t(31), Vec::new(), |_| false);
        assert_eq!(alerts[0].ends_at, Some(t(31)));
    }
}
