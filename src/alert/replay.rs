//! The rules replayed over the past (`apf-monitor report`): the same rules, thresholds and life cycle (`for`,
//! `keep_firing_for`, hysteresis) as the alerting stage, evaluated on the report of each step of a Prometheus's
//! history instead of each round. What comes out is each alert's episodes: when it went pending, fired and ended.
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::engine::Phase;
use super::{fingerprint, Engine, LabelSet, Rules};
use crate::analyze::StatusReport;
use crate::values::unix_seconds;
use apf::model::ReplicaKey;

/// One alert from its condition's start to its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub labels: LabelSet,
    pub replica: ReplicaKey,
    /// When its condition began to hold (unix seconds): pending, or firing at once for a rule without `for`.
    pub pending_at: f64,
    /// When it fired; `None` when its condition ended before `for` passed.
    pub fired_at: Option<f64>,
    /// When it resolved (or, never fired, its condition ended); `None` when still on at the end of the history.
    pub ended_at: Option<f64>,
    /// What it said when it fired (`summary`, `remediation`, ...): what its notification would have carried.
    pub annotations: BTreeMap<String, String>,
}

impl Episode {
    pub fn alertname(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }

    /// Whether it was pending or firing at any time in `[from, to]`.
    pub fn overlaps(&self, from: f64, to: f64) -> bool {
        self.pending_at <= to && self.ended_at.is_none_or(|e| e >= from)
    }
}

/// The rules and their life cycle, stepped through time.
pub struct Replay {
    rules: Rules,
    engine: Engine,
    open: BTreeMap<u64, Episode>,
    done: Vec<Episode>,
}

fn at(seconds: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(seconds.max(0.0))
}

impl Replay {
    pub fn new(rules: Rules) -> Self {
        Replay {
            rules,
            engine: Engine::new(""),
            open: BTreeMap::new(),
            done: Vec::new(),
        }
    }

    /// The rules on the report of the moment `time` (unix seconds), as the alerting stage evaluates a round.
    pub fn step(&mut self, time: f64, report: &StatusReport) {
        let candidates = self
            .rules
            .evaluate(report, |labels| self.engine.is_active(labels));
        let replicas: BTreeMap<u64, ReplicaKey> = candidates
            .iter()
            .map(|c| (fingerprint(&c.labels), c.replica.clone()))
            .collect();
        self.engine.update(at(time), candidates);
        let mut live = BTreeSet::new();
        for tracked in self.engine.tracked() {
            let fp = fingerprint(&tracked.labels);
            live.insert(fp);
            let start = |since: SystemTime| Episode {
                replica: replicas.get(&fp).cloned().unwrap_or_default(),
                labels: tracked.labels.clone(),
                pending_at: unix_seconds(since),
                fired_at: None,
                ended_at: None,
                annotations: BTreeMap::new(),
            };
            match tracked.phase {
                Phase::Pending { since } => {
                    self.open.entry(fp).or_insert_with(|| start(since));
                }
                Phase::Firing { since, .. } => {
                    let episode = self.open.entry(fp).or_insert_with(|| start(since));
                    if episode.fired_at.is_none() {
                        episode.fired_at = Some(unix_seconds(since));
                        episode.annotations = tracked.annotations.clone();
                    }
                }
                // Kept by the engine for a while after it ended: closed once.
                Phase::Resolved { since, ends_at } => {
                    if let Some(mut episode) = self.open.remove(&fp) {
                        episode.fired_at.get_or_insert(unix_seconds(since));
                        episode.ended_at = Some(unix_seconds(ends_at));
                        self.done.push(episode);
                    }
                }
            }
        }
        // A pending alert whose condition ended before `for` passed leaves the engine: its episode ends now.
        let ended: Vec<u64> = self
            .open
            .keys()
            .filter(|fp| !live.contains(fp))
            .copied()
            .collect();
        for fp in ended {
            if let Some(mut episode) = self.open.remove(&fp) {
                episode.ended_at = Some(time);
                self.done.push(episode);
            }
        }
    }

    /// Every episode, in the order they began; those still on at the end have no `ended_at`.
    pub fn finish(mut self) -> Vec<Episode> {
        self.done.extend(self.open.into_values());
        self.done
            .sort_by(|a, b| a.pending_at.total_cmp(&b.pending_at));
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::{RuleConfig, RuleName};
    use crate::analyze::{ApiserverReport, LevelReport};
    use crate::values::DurationValue;

    fn report(headroom_ratio: f64) -> StatusReport {
        let level = LevelReport {
            priority_level: "workload-low".into(),
            limit_seats: Some(100.0),
            executing_seats: Some(100.0 * (1.0 - headroom_ratio)),
            headroom_seats: Some(100.0 * headroom_ratio),
            headroom_ratio: Some(headroom_ratio),
            ..Default::default()
        };
        StatusReport {
            apiservers: vec![ApiserverReport {
                apiserver: "10.0.0.5:6443".into(),
                cluster: Some("prod".into()),
                levels: vec![level],
                ..Default::default()
            }]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            ..Default::default()
        }
    }

    fn headroom_low_only(for_seconds: u64) -> Rules {
        let mut cfg = BTreeMap::new();
        for name in RuleName::ALL {
            cfg.insert(
                name,
                RuleConfig {
                    disabled: name != RuleName::APFHeadroomLow,
                    for_: Some(DurationValue(Duration::from_secs(for_seconds))),
                    ..Default::default()
                },
            );
        }
        Rules::new(&cfg, "").unwrap()
    }

    #[test]
    fn an_alert_goes_pending_fires_after_for_and_resolves() {
        let mut replay = Replay::new(headroom_low_only(60));
        let ratios = [0.5, 0.05, 0.05, 0.05, 0.05, 0.5, 0.5];
        for (i, r) in ratios.iter().enumerate() {
            replay.step(1_800_000_000.0 + 30.0 * i as f64, &report(*r));
        }
        let episodes = replay.finish();
        assert_eq!(episodes.len(), 1, "{episodes:?}");
        let e = &episodes[0];
        assert_eq!(e.alertname(), "APFHeadroomLow");
        assert_eq!(e.replica.cluster.as_deref(), Some("prod"));
        assert_eq!(e.pending_at, 1_800_000_030.0);
        // Pending at 30, 60 s later at 90: fired.
        assert_eq!(e.fired_at, Some(1_800_000_090.0));
        assert_eq!(e.ended_at, Some(1_800_000_150.0));
        assert!(e.overlaps(1_800_000_100.0, 1_800_000_200.0));
        assert!(!e.overlaps(1_800_000_160.0, 1_800_000_200.0));
    }

    #[test]
    fn a_condition_shorter_than_for_never_fires() {
        let mut replay = Replay::new(headroom_low_only(120));
        for (i, r) in [0.5, 0.05, 0.05, 0.5, 0.05].iter().enumerate() {
            replay.step(1_800_000_000.0 + 30.0 * i as f64, &report(*r));
        }
        let episodes = replay.finish();
        assert_eq!(episodes.len(), 2, "{episodes:?}");
        assert_eq!(episodes[0].fired_at, None);
        assert_eq!(episodes[0].ended_at, Some(1_800_000_090.0));
        // Still pending when the history ends.
        assert_eq!(episodes[1].pending_at, 1_800_000_120.0);
        assert_eq!(episodes[1].ended_at, None);
    }
}
