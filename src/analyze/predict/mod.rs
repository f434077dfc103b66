//! What a change of the APF configuration will do under the load a replica carried: the window's load
//! ([`workload`]) replayed in the simulator's queueset (kube-apiserver's), in virtual time, through the objects in
//! force and through the changed ones, over several seeds; per level and per flow, before and after
//! ([`outcome`]). Pure: no I/O, no clock; CPU-bound (about a second), so callers run it off the async workers.
mod audited;
mod outcome;
mod workload;

pub use outcome::{Expectation, FlowExpectation, FlowPrediction, LevelPrediction, Spread};
pub use workload::{observed_load, Load, LoadFlow};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::{ApiserverReport, AuditReport, StatusReport};
use apf::model::{FlowcontrolObjects, ReplicaKey};
use apf::plan::{Change, PlanError, DEFAULT_SERVER_CONCURRENCY};

/// Why no prediction could be made, in words that say what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unpredictable {
    #[error(
        "the window holds no rates yet (a prediction replays what each flow schema sent per second): watch a \
         window of two scrapes at least"
    )]
    NoRates,
    #[error("nothing was sent to the replica's priority levels in the window: there is no load to replay")]
    NoLoad,
    #[error(
        "the replica's FlowSchemas and PriorityLevelConfigurations were not read (read through a Prometheus, or \
         the apiserver refused them): give them as files (`--objects`)"
    )]
    NoObjects,
    #[error("the replica's Kubernetes version is not known (kubernetes_build_info is absent from its /metrics)")]
    NoVersion,
    #[error("the simulator refused the replay: {0}")]
    Replay(String),
}

/// `before` with `applied` put in force (an object of the same kind and name replaced, as `kubectl apply` does) and
/// `set` applied (checked as the API server would); and the levels the change touches.
pub fn changed(
    before: &FlowcontrolObjects,
    applied: &FlowcontrolObjects,
    set: &[Change],
) -> Result<(FlowcontrolObjects, BTreeSet<String>), PlanError> {
    let mut after = before.clone();
    for fs in &applied.flow_schemas {
        after.flow_schemas.retain(|s| s.name != fs.name);
        after.flow_schemas.push(fs.clone());
    }
    for pl in &applied.priority_levels {
        after.priority_levels.retain(|l| l.name != pl.name);
        after.priority_levels.push(pl.clone());
    }
    after.priority_levels = apf::plan::apply(&after.priority_levels, set)?;
    let touched = set
        .iter()
        .map(|c| c.level.clone())
        .chain(applied.priority_levels.iter().map(|l| l.name.clone()))
        .chain(
            applied
                .flow_schemas
                .iter()
                .map(|s| s.priority_level.clone()),
        )
        .collect();
    Ok((after, touched))
}

/// The replica's seats: what the nominal limits it serves imply with its objects' shares, else kube-apiserver's
/// default.
pub fn server_concurrency(report: &ApiserverReport) -> u32 {
    let served: BTreeMap<String, f64> = report
        .levels
        .iter()
        .filter_map(|l| Some((l.priority_level.clone(), l.nominal_limit_seats?)))
        .collect();
    report
        .objects
        .as_deref()
        .and_then(|o| apf::plan::infer_server_concurrency(&o.priority_levels, &served))
        .unwrap_or(DEFAULT_SERVER_CONCURRENCY)
}

/// What a level's remediation is predicted to do: the change it was made for, and the sentence, or why there is
/// none.
#[derive(Debug, Clone, PartialEq)]
pub struct RemedyPrediction {
    /// [`crate::alert::remediation::Remediation::change_key`] of the change predicted.
    pub change_key: String,
    pub outcome: Result<String, String>,
}

impl RemedyPrediction {
    /// What a remediation ends with.
    pub fn words(&self) -> String {
        match &self.outcome {
            Ok(summary) => summary.clone(),
            Err(why) => format!("No prediction of this change: {why}."),
        }
    }
}

/// The recent predictions of each level's remediations, by replica and level, newest first: one per change (a
/// remediation whose numbers move with the load proposes a few changes in turn, each said with its own prediction).
pub type Predictions = BTreeMap<(ReplicaKey, String), Vec<Arc<RemedyPrediction>>>;

/// The report with each replica's predictions attached (only the replicas that have one are copied).
pub fn attach(report: &Arc<StatusReport>, predictions: &Predictions) -> Arc<StatusReport> {
    if predictions.is_empty() {
        return Arc::clone(report);
    }
    let mut out = (**report).clone();
    for a in out.apiservers.iter_mut() {
        let key = a.key();
        let mine: BTreeMap<String, Vec<Arc<RemedyPrediction>>> = predictions
            .range((key.clone(), String::new())..)
            .take_while(|((k, _), _)| *k == key)
            .map(|((_, level), p)| (level.clone(), p.clone()))
            .collect();
        if !mine.is_empty() || !a.predictions.is_empty() {
            Arc::make_mut(a).predictions = mine;
        }
    }
    Arc::new(out)
}

/// A configuration as the replay takes it.
fn objects(o: &FlowcontrolObjects) -> apf_sim::Objects<'_> {
    (&o.flow_schemas, &o.priority_levels)
}

/// How a prediction is replayed.
#[derive(Debug, Clone)]
pub struct ReplaySettings {
    pub seeds: Vec<u64>,
    pub lead_in: std::time::Duration,
    pub warm_up: std::time::Duration,
    pub measured: std::time::Duration,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        let d = apf_sim::Replay::new(apf::KubeVersion::new(33, 0), 600, Vec::new());
        ReplaySettings {
            seeds: d.seeds,
            lead_in: d.lead_in,
            warm_up: d.warm_up,
            measured: d.measured,
        }
    }
}

/// One replica's prediction: each level and each flow before and after the change.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub apiserver: String,
    pub kubernetes_version: String,
    pub server_concurrency: u32,
    pub seeds: Vec<u64>,
    pub lead_in_seconds: f64,
    pub warm_up_seconds: f64,
    pub measured_seconds: f64,
    /// Levels with load or a limit that moves, the changed ones first.
    pub levels: Vec<LevelPrediction>,
    pub flows: Vec<FlowPrediction>,
    /// What the prediction assumed and inferred, in words.
    pub assumptions: Vec<String>,
    /// The flow schemas whose arrivals came in bursts, replayed as they came scrape by scrape; the others steady.
    pub bursty_flow_schemas: Vec<String>,
}

/// Replays the replica's load through its objects (`report.objects`) and through `after`; `changed` names the
/// levels the change touches (listed first). `server_concurrency`: the replica's seats (inferred by the caller from
/// the nominal limits it serves). `audit`: the audit events of the replica's cluster over the window, where given.
pub fn predict(
    report: &ApiserverReport,
    audit: Option<&AuditReport>,
    after: &FlowcontrolObjects,
    changed: &BTreeSet<String>,
    server_concurrency: u32,
    settings: &ReplaySettings,
) -> Result<Prediction, Unpredictable> {
    let before = report.objects.as_deref().ok_or(Unpredictable::NoObjects)?;
    let version: apf::KubeVersion = report
        .kubernetes_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .ok_or(Unpredictable::NoVersion)?;
    let load = observed_load(report, before, audit)?;
    let replay = apf_sim::Replay {
        seeds: settings.seeds.clone(),
        lead_in: settings.lead_in,
        warm_up: settings.warm_up,
        measured: settings.measured,
        smoothed_demand: report
            .levels
            .iter()
            .filter_map(|l| Some((l.priority_level.clone(), l.demand_seats_smoothed?)))
            .collect(),
        ..apf_sim::Replay::new(
            version,
            server_concurrency,
            load.flows.iter().map(|f| f.flow.clone()).collect(),
        )
    };
    let run = |after: &FlowcontrolObjects| {
        apf_sim::replay_change(&replay, objects(before), objects(after))
            .map_err(|e| Unpredictable::Replay(e.to_string()))
    };
    let (runs_before, runs_after) = (run(before)?, run(after)?);
    let bursty: Vec<String> = load
        .flows
        .iter()
        .filter(|f| !f.flow.profile.is_empty())
        .map(|f| f.flow.flow_schema.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut assumptions = vec![
        format!(
            "Each flow sends as it did in the window, at a steady rate with Poisson arrivals{} (open loop: a client \
             rejected does not slow down or retry), every request holding its seats for an execution time drawn \
             within ±{:.0} % of its flow's mean; no work estimator (a LIST costs what it cost in the window).",
            if bursty.is_empty() {
                String::new()
            } else {
                format!(
                    ", but for the flows of {} whose arrivals came in bursts (scrape by scrape, far beyond a Poisson \
                     process's chance): they send as their flow schema did scrape by scrape, the window replayed in a \
                     loop, Poisson within each scrape's interval (bursts shorter than a scrape interval are seen as \
                     its mean)",
                    bursty.join(", ")
                )
            },
            replay.execution_spread * 100.0
        ),
        format!(
            "{server_concurrency} seats on the replica; its levels' limits recomputed from the shares as \
             kube-apiserver does{}.",
            if version.at_least(26) {
                ", borrowing included, from the smoothed seat demand each level had (borrowing remembers about five \
                 minutes of demand: a level relieved of its load keeps claiming seats for a while)"
            } else {
                ""
            }
        ),
        format!(
            "The load replayed {:.0} s through the objects in force (the queues fill as they were), then the change \
             made; its first {:.0} s not counted (what waited before is served or times out, borrowing adjusts), \
             the next {:.0} s counted.",
            replay.lead_in.as_secs_f64(),
            replay.warm_up.as_secs_f64(),
            replay.measured.as_secs_f64()
        ),
    ];
    assumptions.extend(load.notes.iter().cloned());
    let (mut levels, flows) = outcome::compare(&load, &runs_before, &runs_after, changed);
    let missed = window_check(report, &mut levels);
    if !missed.is_empty() {
        assumptions.push(format!(
            "The replay through the objects in force does not give what the replica counted over the window \
             ({}): the load was not told well enough (see how each flow was told; audit events or the dumps tell \
             flows the counters cannot). Read the change's figures as a direction, not a measure.",
            missed.join("; ")
        ));
    }
    Ok(Prediction {
        apiserver: report.apiserver.clone(),
        kubernetes_version: version.to_string(),
        server_concurrency,
        seeds: replay.seeds.clone(),
        lead_in_seconds: replay.lead_in.as_secs_f64(),
        warm_up_seconds: replay.warm_up.as_secs_f64(),
        measured_seconds: replay.measured.as_secs_f64(),
        levels,
        flows,
        assumptions,
        bursty_flow_schemas: bursty,
    })
}

/// Sets each level's 429s counted over the window beside its replay through the objects in force; the levels
/// whose replay misses them (by more than half, and 1/s), in words.
fn window_check(report: &ApiserverReport, levels: &mut [LevelPrediction]) -> Vec<String> {
    let mut missed = Vec::new();
    for l in levels.iter_mut() {
        let counted = report
            .levels
            .iter()
            .find(|r| r.priority_level == l.priority_level)
            .and_then(|r| r.rejected_per_second.as_ref())
            .map(|by_reason| by_reason.values().sum::<f64>());
        l.window_rejected_per_second = counted.map(|c| super::round::round(c, 3));
        if let Some(c) = counted {
            if !replays(l.before.rejected_per_second, c) {
                missed.push(format!(
                    "{}'s 429s: {}/s replayed, {}/s counted",
                    l.priority_level,
                    super::round::shown(l.before.rejected_per_second),
                    super::round::shown(c)
                ));
            }
        }
    }
    // A level that rejected, where the replay put no load at all: not listed, and missed all the same.
    for r in &report.levels {
        let counted: f64 = r.rejected_per_second.iter().flat_map(|m| m.values()).sum();
        if !replays(0.0, counted) && !levels.iter().any(|l| l.priority_level == r.priority_level) {
            missed.push(format!(
                "{}'s 429s: 0/s replayed, {}/s counted",
                r.priority_level,
                super::round::shown(counted)
            ));
        }
    }
    missed
}

/// A replay of the window is near enough what was counted: within half of it, or 1/s.
fn replays(replayed: f64, counted: f64) -> bool {
    (replayed - counted).abs() <= (0.5 * counted).max(1.0)
}

/// `4.4/s`, `0`.
fn per_second(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else {
        format!("{}/s", super::round::shown(v))
    }
}

/// `1.2 s`, `50 ms`, `0`.
fn wait_words(s: f64) -> String {
    if s == 0.0 {
        "0".into()
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.1} s")
    }
}

/// `a` or `a → b`.
fn moved(before: String, after: String) -> String {
    if before == after {
        before
    } else {
        format!("{before} → {after}")
    }
}

impl Prediction {
    /// What the change does to `level` (the alert's), to the levels it makes, and to the level that gives up the
    /// most seats, in one sentence: what a remediation ends with.
    pub fn summary(&self, level: &str, window_end: std::time::SystemTime) -> String {
        let mut parts = Vec::new();
        let missed = self
            .levels
            .iter()
            .find(|l| l.priority_level == level)
            .and_then(|l| {
                let counted = l.window_rejected_per_second?;
                (!replays(l.before.rejected_per_second, counted)).then(|| {
                    format!(
                        " Replayed through the objects in force, the window gives {level} {}/s of 429s where the \
                         replica counted {}/s: the load was not told well enough, read these figures as a direction.",
                        super::round::shown(l.before.rejected_per_second),
                        super::round::shown(counted)
                    )
                })
            })
            .unwrap_or_default();
        if let Some(l) = self.levels.iter().find(|l| l.priority_level == level) {
            // What a share move gives, borrowing included: the remediation counts shares, this the seats.
            let limit = if (l.after.limit_seats - l.before.limit_seats).abs() >= 0.5 {
                format!(
                    ", its limit {:.0} → {:.0} seats",
                    l.before.limit_seats, l.after.limit_seats
                )
            } else {
                String::new()
            };
            parts.push(format!(
                "{level}'s 429s {}, its mean wait {}, p99 {}{limit}",
                moved(
                    per_second(l.before.rejected_per_second),
                    per_second(l.after.rejected_per_second)
                ),
                moved(
                    wait_words(l.before.mean_wait_seconds),
                    wait_words(l.after.mean_wait_seconds)
                ),
                moved(
                    wait_words(l.before.p99_wait_seconds),
                    wait_words(l.after.p99_wait_seconds)
                ),
            ));
        }
        // Levels the change makes: no limit before.
        for l in self
            .levels
            .iter()
            .filter(|l| l.before.limit_seats == 0.0 && l.after.dispatched_per_second > 0.0)
        {
            parts.push(format!(
                "the new {} gets {:.0} seats, its 429s {} and mean wait {}",
                l.priority_level,
                l.after.limit_seats,
                per_second(l.after.rejected_per_second),
                wait_words(l.after.mean_wait_seconds)
            ));
        }
        let donor = self
            .levels
            .iter()
            .filter(|l| l.priority_level != level && l.before.limit_seats > 0.0)
            .map(|l| (l, l.before.limit_seats - l.after.limit_seats))
            .filter(|(_, gave)| *gave >= 0.5)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((d, gave)) = donor {
            let mut words = format!(
                "{} gives up {gave:.0} seats, its headroom {} seats",
                d.priority_level,
                moved(
                    format!("{:.0}", d.before.headroom_seats),
                    format!("{:.0}", d.after.headroom_seats)
                )
            );
            if d.before.rejected_per_second > 0.0 || d.after.rejected_per_second > 0.0 {
                words.push_str(&format!(
                    ", its 429s {}",
                    moved(
                        per_second(d.before.rejected_per_second),
                        per_second(d.after.rejected_per_second)
                    )
                ));
            }
            let (before, after) = (
                wait_words(d.before.mean_wait_seconds),
                wait_words(d.after.mean_wait_seconds),
            );
            if before != "0" || after != "0" {
                words.push_str(&format!(", its mean wait {}", moved(before, after)));
            }
            parts.push(words);
        }
        format!(
            "Predicted under this replica's load of the window to {} (replayed {:.0} s, {} seeds; {}, as `plan \
             --load` says): {}.{missed}",
            humantime::format_rfc3339_seconds(window_end),
            self.measured_seconds,
            self.seeds.len(),
            if self.bursty_flow_schemas.is_empty() {
                "steady rates".to_string()
            } else {
                format!(
                    "{}'s bursts as they came scrape by scrape, other rates steady",
                    self.bursty_flow_schemas.join(", ")
                )
            },
            parts.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expectation(
        rejected: f64,
        mean_wait: f64,
        p99: f64,
        limit: f64,
        headroom: f64,
    ) -> Expectation {
        Expectation {
            rejected_per_second: rejected,
            dispatched_per_second: 1.0,
            mean_wait_seconds: mean_wait,
            p99_wait_seconds: p99,
            limit_seats: limit,
            headroom_seats: headroom,
            ..Default::default()
        }
    }

    fn level(name: &str, before: Expectation, after: Expectation) -> LevelPrediction {
        LevelPrediction {
            priority_level: name.into(),
            window_rejected_per_second: None,
            changed: false,
            before,
            after,
        }
    }

    /// The alert's level, the level the change makes, and the level that gives up the most seats, each with what
    /// moves.
    #[test]
    fn a_summary_says_the_level_the_new_level_and_the_largest_donor() {
        let p = Prediction {
            apiserver: "a".into(),
            kubernetes_version: "1.34.0".into(),
            server_concurrency: 600,
            seeds: vec![1, 2, 3],
            lead_in_seconds: 30.0,
            warm_up_seconds: 20.0,
            measured_seconds: 60.0,
            levels: vec![
                level(
                    "workload-low",
                    expectation(12.8, 5.2, 15.0, 360.0, 0.0),
                    expectation(0.0, 0.0, 0.0, 300.0, 299.0),
                ),
                level(
                    "isolate-agent",
                    expectation(0.0, 0.0, 0.0, 0.0, 0.0),
                    expectation(17.7, 11.2, 15.0, 57.0, 0.0),
                ),
                level(
                    "system",
                    expectation(0.0, 0.0, 0.0, 50.0, 50.0),
                    expectation(0.0, 0.0, 0.0, 48.0, 48.0),
                ),
                level(
                    "global-default",
                    expectation(0.0, 0.0, 0.0, 24.0, 20.0),
                    expectation(0.0, 0.0, 0.0, 24.0, 20.0),
                ),
            ],
            flows: Vec::new(),
            assumptions: Vec::new(),
            bursty_flow_schemas: Vec::new(),
        };
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_000_000);
        assert_eq!(
            p.summary("workload-low", at),
            "Predicted under this replica's load of the window to 2026-11-30T00:53:20Z (replayed 60 s, 3 seeds; \
             steady rates, as `plan --load` says): workload-low's 429s 12.8/s → 0, its mean wait 5.2 s → 0, p99 15.0 s → 0, its limit \
             360 → 300 seats; the new isolate-agent gets 57 seats, its 429s 17.7/s and mean wait 11.2 s; system \
             gives up 2 seats, its headroom 50 → 48 seats."
        );
        // A donor that waits says what the change costs it in waiting.
        let mut p = p;
        p.levels[2].after.mean_wait_seconds = 0.04;
        assert!(p.summary("workload-low", at).ends_with(
            "system gives up 2 seats, its headroom 50 → 48 seats, its mean wait 0 → 40 ms."
        ));
        // A replay that gives what the window counted says nothing more; one that misses it says so.
        p.levels[0].window_rejected_per_second = Some(13.5);
        assert!(p.summary("workload-low", at).ends_with("40 ms."));
        p.levels[0].window_rejected_per_second = Some(30.0);
        assert!(p.summary("workload-low", at).ends_with(
            "40 ms. Replayed through the objects in force, the window gives workload-low 12.8/s of 429s where the \
             replica counted 30/s: the load was not told well enough, read these figures as a direction."
        ));
    }

    /// Each level's count of the window is set beside its replay; the replays that miss it by more than half (and
    /// 1/s) are named.
    #[test]
    fn the_replay_of_the_window_is_checked_against_what_was_counted() {
        let report = ApiserverReport {
            levels: [
                ("workload-low", 11.9),
                ("global-default", 0.4),
                ("system", 0.0),
            ]
            .into_iter()
            .map(|(name, rejected)| crate::analyze::LevelReport {
                priority_level: name.into(),
                rejected_per_second: Some(BTreeMap::from([("time-out".to_string(), rejected)])),
                ..Default::default()
            })
            .collect(),
            ..Default::default()
        };
        let mut levels = vec![
            level(
                "workload-low",
                expectation(0.0, 0.0, 0.0, 360.0, 74.0),
                expectation(0.0, 0.0, 0.0, 350.0, 64.0),
            ),
            level(
                "global-default",
                expectation(1.2, 0.0, 0.0, 24.0, 0.0),
                expectation(1.2, 0.0, 0.0, 24.0, 0.0),
            ),
            level(
                "system",
                expectation(0.0, 0.0, 0.0, 50.0, 50.0),
                expectation(0.0, 0.0, 0.0, 48.0, 48.0),
            ),
            level(
                "isolate-agent",
                expectation(0.0, 0.0, 0.0, 0.0, 0.0),
                expectation(3.0, 1.0, 2.0, 60.0, 0.0),
            ),
        ];
        let missed = window_check(&report, &mut levels);
        assert_eq!(
            missed,
            ["workload-low's 429s: 0/s replayed, 11.9/s counted"]
        );
        let counted: Vec<Option<f64>> = levels
            .iter()
            .map(|l| l.window_rejected_per_second)
            .collect();
        assert_eq!(counted, [Some(11.9), Some(0.4), Some(0.0), None]);
        // A level that rejected and is not replayed at all is missed too.
        levels.remove(0);
        assert_eq!(
            window_check(&report, &mut levels),
            ["workload-low's 429s: 0/s replayed, 11.9/s counted"]
        );
    }

    /// `--apply`'s objects replace those of the same name, `--set` applies on top, and the levels touched are named.
    #[test]
    fn a_change_applies_objects_then_fields() {
        let v = apf::KubeVersion::new(34, 0);
        let (flow_schemas, priority_levels) = apf_sim::default_configuration(v);
        let before = FlowcontrolObjects {
            flow_schemas,
            priority_levels,
        };
        let mut applied = FlowcontrolObjects::default();
        let mut own = before.priority_levels[0].clone();
        own.name = "own".into();
        applied.priority_levels.push(own);
        let set: Vec<Change> = vec!["workload-low.shares=150".parse().unwrap()];
        let (after, touched) = changed(&before, &applied, &set).unwrap();
        assert_eq!(
            after.priority_levels.len(),
            before.priority_levels.len() + 1
        );
        let low = after
            .priority_levels
            .iter()
            .find(|l| l.name == "workload-low")
            .unwrap();
        assert_eq!(low.shares, Some(150));
        assert_eq!(
            touched.into_iter().collect::<Vec<_>>(),
            ["own", "workload-low"]
        );
        assert!(changed(&before, &applied, &["nope.shares=1".parse().unwrap()]).is_err());
    }
}
