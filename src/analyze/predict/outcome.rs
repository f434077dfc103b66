//! The replays of both configurations side by side: per level and per flow, the mean over the seeds and their
//! range, rounded as the status JSON rounds.
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::workload::Load;
use crate::analyze::round::round;
use apf_sim::{FlowOutcome, LevelOutcome, ReplayRun};

/// The lowest and highest of a figure over the seeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    pub rejected_per_second: [f64; 2],
    pub mean_wait_seconds: [f64; 2],
    pub p99_wait_seconds: [f64; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headroom_seats: Option<[f64; 2]>,
}

/// What a level is expected to do under one configuration: means over the seeds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Expectation {
    pub rejected_per_second: f64,
    pub rejected_per_second_by_reason: BTreeMap<String, f64>,
    pub dispatched_per_second: f64,
    /// Of the requests dispatched and of those that timed out in their queue (as kube-apiserver's
    /// request_wait_duration_seconds with execute="true" observes them).
    pub mean_wait_seconds: f64,
    pub p99_wait_seconds: f64,
    /// The enforced limit less the seats in use, time averages.
    pub headroom_seats: f64,
    pub limit_seats: f64,
    pub nominal_limit_seats: u32,
    /// The limit over the nominal one: seats borrowed (negative: lent to other levels).
    pub seats_borrowed: f64,
    pub range: Spread,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelPrediction {
    pub priority_level: String,
    /// The change touches this level's own object.
    pub changed: bool,
    /// What the replica counted over the window, 429s per second: `before` replays it, and is to be read beside it.
    pub window_rejected_per_second: Option<f64>,
    pub before: Expectation,
    pub after: Expectation,
}

/// What a flow is expected to get under one configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlowExpectation {
    pub priority_level: String,
    pub flow_schema: String,
    pub rejected_per_second: f64,
    pub mean_wait_seconds: f64,
    pub p99_wait_seconds: f64,
    pub range: Spread,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowPrediction {
    pub name: String,
    /// Where the window saw it.
    pub flow_schema: String,
    pub flow: String,
    pub priority_level: String,
    pub users: Vec<String>,
    /// What it sends, as replayed.
    pub requests_per_second: f64,
    pub seats: u32,
    pub seconds_per_request: f64,
    /// How its rate, seats and execution time were told.
    pub told_from: String,
    /// Where it came in bursts: its rate scrape by scrape as (seconds, multiple of `requests_per_second`), replayed
    /// in a loop.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<(f64, f64)>,
    pub before: FlowExpectation,
    pub after: FlowExpectation,
}

/// Mean and (min, max) of `f` over the runs.
fn over<T>(items: &[&T], f: impl Fn(&T) -> f64) -> (f64, [f64; 2]) {
    if items.is_empty() {
        return (0.0, [0.0, 0.0]);
    }
    let values: Vec<f64> = items.iter().map(|i| f(i)).collect();
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, [lo, hi])
}

fn rounded(v: (f64, [f64; 2]), decimals: i32) -> (f64, [f64; 2]) {
    (
        round(v.0, decimals),
        [round(v.1[0], decimals), round(v.1[1], decimals)],
    )
}

fn total(m: &BTreeMap<String, f64>) -> f64 {
    m.values().sum()
}

fn level_expectation(outcomes: &[&LevelOutcome]) -> Expectation {
    let rejected = rounded(over(outcomes, |o| total(&o.rejected_per_second)), 3);
    let mean_wait = rounded(over(outcomes, |o| o.mean_wait_seconds), 3);
    let p99_wait = rounded(over(outcomes, |o| o.p99_wait_seconds), 3);
    let headroom = rounded(
        over(outcomes, |o| o.mean_limit_seats - o.mean_seats_in_use),
        2,
    );
    let limit = over(outcomes, |o| o.mean_limit_seats).0;
    let nominal = outcomes.first().map_or(0, |o| o.nominal_limit_seats);
    let reasons: BTreeSet<&String> = outcomes
        .iter()
        .flat_map(|o| o.rejected_per_second.keys())
        .collect();
    Expectation {
        rejected_per_second: rejected.0,
        rejected_per_second_by_reason: reasons
            .into_iter()
            .map(|r| {
                let v = over(outcomes, |o| {
                    o.rejected_per_second.get(r).copied().unwrap_or(0.0)
                });
                (r.clone(), round(v.0, 3))
            })
            .collect(),
        dispatched_per_second: round(over(outcomes, |o| o.dispatched_per_second).0, 3),
        mean_wait_seconds: mean_wait.0,
        p99_wait_seconds: p99_wait.0,
        headroom_seats: headroom.0,
        limit_seats: round(limit, 2),
        nominal_limit_seats: nominal,
        seats_borrowed: round(limit - f64::from(nominal), 2),
        range: Spread {
            rejected_per_second: rejected.1,
            mean_wait_seconds: mean_wait.1,
            p99_wait_seconds: p99_wait.1,
            headroom_seats: Some(headroom.1),
        },
    }
}

fn flow_expectation(outcomes: &[&FlowOutcome]) -> FlowExpectation {
    let rejected = rounded(over(outcomes, |o| total(&o.rejected_per_second)), 3);
    let mean_wait = rounded(over(outcomes, |o| o.mean_wait_seconds), 3);
    let p99_wait = rounded(over(outcomes, |o| o.p99_wait_seconds), 3);
    let first = outcomes.first();
    FlowExpectation {
        priority_level: first.map(|o| o.priority_level.clone()).unwrap_or_default(),
        flow_schema: first.map(|o| o.flow_schema.clone()).unwrap_or_default(),
        rejected_per_second: rejected.0,
        mean_wait_seconds: mean_wait.0,
        p99_wait_seconds: p99_wait.0,
        range: Spread {
            rejected_per_second: rejected.1,
            mean_wait_seconds: mean_wait.1,
            p99_wait_seconds: p99_wait.1,
            headroom_seats: None,
        },
    }
}

fn level_outcomes<'a>(runs: &'a [ReplayRun], name: &str) -> Vec<&'a LevelOutcome> {
    runs.iter()
        .filter_map(|r| r.levels.iter().find(|l| l.priority_level == name))
        .collect()
}

fn flow_outcomes<'a>(runs: &'a [ReplayRun], name: &str) -> Vec<&'a FlowOutcome> {
    runs.iter()
        .filter_map(|r| r.flows.iter().find(|f| f.name == name))
        .collect()
}

/// Both replays side by side. A level appears when it had load or 429s in either, or its limit moves; the levels
/// `changed` first, then the most 429s, then the largest move of the limit.
pub(super) fn compare(
    load: &Load,
    before: &[ReplayRun],
    after: &[ReplayRun],
    changed: &BTreeSet<String>,
) -> (Vec<LevelPrediction>, Vec<FlowPrediction>) {
    let names: BTreeSet<&str> = before
        .iter()
        .chain(after)
        .flat_map(|r| r.levels.iter().map(|l| l.priority_level.as_str()))
        .collect();
    let mut levels: Vec<LevelPrediction> = names
        .into_iter()
        .map(|name| LevelPrediction {
            priority_level: name.to_string(),
            changed: changed.contains(name),
            window_rejected_per_second: None,
            before: level_expectation(&level_outcomes(before, name)),
            after: level_expectation(&level_outcomes(after, name)),
        })
        .filter(|l| {
            let busy =
                |e: &Expectation| e.dispatched_per_second > 0.0 || e.rejected_per_second > 0.0;
            l.changed
                || busy(&l.before)
                || busy(&l.after)
                || (l.before.limit_seats - l.after.limit_seats).abs() >= 0.5
        })
        .collect();
    let key = |l: &LevelPrediction| {
        (
            !l.changed,
            -(l.before
                .rejected_per_second
                .max(l.after.rejected_per_second)),
            -(l.before.limit_seats - l.after.limit_seats).abs(),
        )
    };
    levels.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0)
            .then(ka.1.total_cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then_with(|| a.priority_level.cmp(&b.priority_level))
    });
    let mut flows: Vec<FlowPrediction> = load
        .flows
        .iter()
        .map(|f| FlowPrediction {
            name: f.flow.name.clone(),
            flow_schema: f.flow.flow_schema.clone(),
            flow: f.flow.flow.clone(),
            priority_level: f.priority_level.clone(),
            users: f.users.clone(),
            requests_per_second: round(f.flow.requests_per_second, 3),
            seats: f.flow.seats,
            seconds_per_request: round(f.flow.execution.as_secs_f64(), 3),
            told_from: f.told_from.clone(),
            profile: f
                .flow
                .profile
                .iter()
                .map(|(s, m)| (round(*s, 3), round(*m, 3)))
                .collect(),
            before: flow_expectation(&flow_outcomes(before, &f.flow.name)),
            after: flow_expectation(&flow_outcomes(after, &f.flow.name)),
        })
        .collect();
    flows.sort_by(|a, b| {
        b.before
            .rejected_per_second
            .total_cmp(&a.before.rejected_per_second)
            .then(b.requests_per_second.total_cmp(&a.requests_per_second))
            .then_with(|| a.name.cmp(&b.name))
    });
    (levels, flows)
}
