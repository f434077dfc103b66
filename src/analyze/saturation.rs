//! Recurring saturation: the episodes in which a priority level had no free seat, over a lookback of minutes (longer
//! than the window). A level full for 15 s of every minute is one burst away from 429s, yet a minute's window, read
//! at any moment, holds one episode at most: a pattern is seen only over several.
//!
//! Each interval between two scrapes is classed by how long the level was full in it: by the apiserver's
//! seat-utilization histogram (1.25+), which integrates every nanosecond; before it, by the scrape that ends it (no
//! free seat then: the whole interval counts). Full intervals in a row are one episode.
use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;

use apf::model::{flow_pressure, FlowSample};

use super::math::{share_above_between, Buckets};

/// Seats in use above this share of the limit: the level is full. Not 1: a wide request (a LIST takes up to 10 seats)
/// does not fit the last few seats, so a level saturated by them stays a little under its limit (240 of 245); 0.95 is
/// a bound of kube-apiserver's histogram, so no interpolation is read.
pub const FULL: f64 = 0.95;

/// A level must have been full this many times in the lookback for its saturation to recur: once is a plateau or a
/// burst, which the window's rules judge.
pub const MIN_EPISODES: usize = 2;

/// An episode is a second full or more; shorter ones are blips (a burst's drain, a level flickering at its limit
/// as it fills): their time counts in the share of the lookback, not as episodes.
pub const MIN_EPISODE_SECONDS: f64 = 1.0;

/// Saturation recurs while the time since the last episode ended is at most this many times the longest quiet
/// between two of them: the next is not overdue (the half is room for the scrape that sees it start).
pub const OVERDUE_AFTER: f64 = 1.5;

/// Episodes kept per level, at most: a level flickering at every scrape of a long lookback keeps its latest ones.
const MAX_EPISODES: usize = 512;

/// Flows named per episode, at most.
const FLOWS_PER_EPISODE: usize = 5;

/// One stretch of full intervals.
#[derive(Debug, Clone, PartialEq)]
struct Episode {
    /// The start of its first interval and the end of its last.
    start: f64,
    end: f64,
    /// How long the level was full in it.
    full_seconds: f64,
    /// The flows the scrapes inside it saw holding seats or waiting, heaviest first.
    flows: Vec<Weighed>,
}

/// A flow (flow schema, flow) and its pressure (seats held and requests waiting, at a scrape) times the full seconds
/// of the interval that scrape ended, summed.
#[derive(Debug, Clone, PartialEq)]
struct Weighed {
    flow: (Arc<str>, Arc<str>),
    weight: f64,
}

/// Adds `weight` to `flow` in `list`.
fn weigh(list: &mut Vec<Weighed>, flow: (&str, &str), weight: f64) {
    match list
        .iter_mut()
        .find(|w| *w.flow.0 == *flow.0 && *w.flow.1 == *flow.1)
    {
        Some(w) => w.weight += weight,
        None => list.push(Weighed {
            flow: (flow.0.into(), flow.1.into()),
            weight,
        }),
    }
}

/// One level's episodes over the lookback.
#[derive(Debug, Clone, Default)]
struct LevelEpisodes {
    name: Arc<str>,
    episodes: VecDeque<Episode>,
    /// The last interval was full: the next full one extends the latest episode.
    open: bool,
    /// The histogram measured the intervals (else the scrapes did).
    by_histogram: bool,
}

/// A replica's episodes, per level, and the time they were watched over.
#[derive(Debug, Clone, Default)]
pub struct SaturationLedger {
    /// By level name, in name order.
    levels: Vec<LevelEpisodes>,
    /// The first scrape of the lookback (the replica's first, until it is longer ago than the lookback).
    watched_since: Option<f64>,
    /// The latest scrape.
    latest: f64,
}

/// How one interval of a level went: full for how long, and by what measure.
pub struct Interval {
    pub full_seconds: f64,
    pub by_histogram: bool,
}

impl Interval {
    /// By the seat-utilization histograms of the scrapes at its two ends, `seconds` apart.
    pub fn by_histogram(first: Option<Buckets<'_>>, last: Buckets<'_>, seconds: f64) -> Self {
        // No time integrated between the two (the same gather twice): not full in it.
        let share = share_above_between(FULL, first, last).unwrap_or(0.0);
        Interval {
            full_seconds: share * seconds,
            by_histogram: true,
        }
    }

    /// By the scrape that ends it (before the histogram, 1.25): full all along if it found the level full.
    pub fn by_scrape(executing: Option<f64>, limit: Option<f64>, seconds: f64) -> Self {
        let full = matches!((executing, limit), (Some(e), Some(l)) if l > 0.0 && e >= FULL * l);
        Interval {
            full_seconds: if full { seconds } else { 0.0 },
            by_histogram: false,
        }
    }
}

impl SaturationLedger {
    /// Notes the interval of `level` ending at `at` (`seconds` long), with the flows of the scrape that ends it.
    pub fn note(
        &mut self,
        level: &Arc<str>,
        at: f64,
        seconds: f64,
        interval: Interval,
        flows: &[FlowSample],
    ) {
        let i = match self.levels.binary_search_by(|l| l.name.cmp(level)) {
            Ok(i) => i,
            Err(i) => {
                // The name the window's points hold, shared.
                self.levels.insert(
                    i,
                    LevelEpisodes {
                        name: level.clone(),
                        ..Default::default()
                    },
                );
                i
            }
        };
        let l = &mut self.levels[i];
        l.by_histogram = interval.by_histogram;
        if interval.full_seconds <= 0.0 {
            l.open = false;
            return;
        }
        if !l.open || l.episodes.is_empty() {
            if l.episodes.len() >= MAX_EPISODES {
                l.episodes.pop_front();
            }
            l.episodes.push_back(Episode {
                start: at - seconds,
                end: at,
                full_seconds: 0.0,
                flows: Vec::new(),
            });
        }
        l.open = true;
        let Some(e) = l.episodes.back_mut() else {
            return;
        };
        e.end = at;
        e.full_seconds += interval.full_seconds;
        for f in flows.iter().filter(|f| *f.priority_level == **level) {
            let pressure = flow_pressure(f.waiting_requests as f64, f.executing_seats as f64);
            if pressure > 0.0 {
                let flow = (f.flow_schema.as_str(), f.flow.as_str());
                weigh(&mut e.flows, flow, pressure * interval.full_seconds);
            }
        }
        e.flows.sort_by(|a, b| b.weight.total_cmp(&a.weight));
        e.flows.truncate(FLOWS_PER_EPISODE);
    }

    /// A scrape at `at` was read: the ledger has watched the replica until then.
    pub fn watched(&mut self, at: f64) {
        self.watched_since.get_or_insert(at);
        self.latest = at;
    }

    /// Drops the episodes that ended before the lookback of `lookback` seconds ending at `now`, and the levels left
    /// with none that are not in the latest scrape (`present`).
    pub fn prune(&mut self, now: f64, lookback: f64, present: impl Fn(&str) -> bool) {
        let from = now - lookback;
        if let Some(since) = &mut self.watched_since {
            *since = since.max(from);
        }
        for l in &mut self.levels {
            while l.episodes.front().is_some_and(|e| e.end <= from) {
                l.episodes.pop_front();
            }
        }
        self.levels
            .retain(|l| !l.episodes.is_empty() || present(&l.name));
    }

    /// The pattern of `level` over the lookback ending at the latest scrape; `None` when it was never full in it.
    pub fn report(&self, level: &str) -> Option<Saturation> {
        let since = self.watched_since?;
        let l = self
            .levels
            .binary_search_by(|l| (*l.name).cmp(level))
            .ok()
            .map(|i| &self.levels[i])?;
        if l.episodes.is_empty() {
            return None;
        }
        let watched = (self.latest - since).max(0.0);
        // Only what falls inside the lookback: an episode it began in counts from where it starts.
        let inside = |e: &Episode| {
            if e.start >= since || e.end <= e.start {
                e.full_seconds
            } else {
                e.full_seconds * ((e.end - since) / (e.end - e.start)).clamp(0.0, 1.0)
            }
        };
        let full_seconds: f64 = l.episodes.iter().map(inside).sum();
        let counted: Vec<(&Episode, f64)> = l
            .episodes
            .iter()
            .map(|e| (e, inside(e)))
            .filter(|(_, full)| *full >= MIN_EPISODE_SECONDS)
            .collect();
        let lengths = || counted.iter().map(|(_, full)| *full);
        let longest_gap = counted
            .iter()
            .zip(counted.iter().skip(1))
            .map(|((a, _), (b, _))| b.start - a.end)
            .reduce(f64::max);
        let mut flows: Vec<Weighed> = Vec::new();
        for w in l.episodes.iter().flat_map(|e| &e.flows) {
            weigh(&mut flows, (&w.flow.0, &w.flow.1), w.weight);
        }
        flows.sort_by(|a, b| b.weight.total_cmp(&a.weight));
        let total: f64 = flows.iter().map(|w| w.weight).sum();
        Some(Saturation {
            lookback_seconds: watched,
            full_seconds,
            full_ratio: if watched > 0.0 {
                (full_seconds / watched).min(1.0)
            } else {
                0.0
            },
            episodes: counted.len(),
            shortest_seconds: lengths().reduce(f64::min).unwrap_or(0.0),
            longest_seconds: lengths().reduce(f64::max).unwrap_or(0.0),
            seconds_since: counted.last().map(|(e, _)| (self.latest - e.end).max(0.0)),
            longest_gap_seconds: longest_gap,
            by_histogram: l.by_histogram,
            flows: flows
                .iter()
                .map(|w| HeldBy {
                    flow_schema: w.flow.0.to_string(),
                    flow: w.flow.1.to_string(),
                    share: if total > 0.0 { w.weight / total } else { 0.0 },
                })
                .filter(|f| f.share >= MIN_FLOW_SHARE)
                .take(3)
                .collect(),
        })
    }
}

/// A flow named as holding a level's seats holds this share of them in its episodes at least.
const MIN_FLOW_SHARE: f64 = 0.05;

/// A level's saturation over the lookback: how often, how long and how much of the time it was full, and who held
/// its seats then.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Saturation {
    /// The lookback watched so far: `analysis.lookback`, or less since the replica was first read.
    #[serde(serialize_with = "super::round::seconds")]
    pub lookback_seconds: f64,
    /// How long the level was full (95 % of its limit in use or more) in it, and the share of it.
    #[serde(serialize_with = "super::round::seconds")]
    pub full_seconds: f64,
    #[serde(serialize_with = "super::round::share")]
    pub full_ratio: f64,
    /// Episodes: full intervals in a row, a second full or more ([`MIN_EPISODE_SECONDS`]); their shortest and
    /// longest (0 without one).
    pub episodes: usize,
    #[serde(serialize_with = "super::round::seconds")]
    pub shortest_seconds: f64,
    #[serde(serialize_with = "super::round::seconds")]
    pub longest_seconds: f64,
    /// Since the last episode ended; absent without one.
    #[serde(serialize_with = "super::round::seconds_opt")]
    pub seconds_since: Option<f64>,
    /// The longest quiet between two episodes; absent with one.
    #[serde(serialize_with = "super::round::seconds_opt")]
    pub longest_gap_seconds: Option<f64>,
    /// Measured by the apiserver's seat-utilization histogram (1.25+), else by the scrapes.
    pub by_histogram: bool,
    /// The flows the dumps inside the episodes saw holding seats or waiting, the heaviest first, with their share.
    pub flows: Vec<HeldBy>,
}

/// A flow that held a level's seats in its episodes.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct HeldBy {
    pub flow_schema: String,
    pub flow: String,
    #[serde(serialize_with = "super::round::share")]
    pub share: f64,
}

impl Saturation {
    /// The saturation recurs: [`MIN_EPISODES`] or more in the lookback, and the next one is not overdue. A level
    /// that recovered (a fix applied, or by itself) stops recurring once its usual quiet has passed half again.
    pub fn recurs(&self) -> bool {
        match (self.seconds_since, self.longest_gap_seconds) {
            (Some(since), Some(gap)) => {
                self.episodes >= MIN_EPISODES && since <= OVERDUE_AFTER * gap
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use apf::model::{Histogram, LevelSnapshot, ReplicaSnapshot};

    use crate::analyze::{Point, ReplicaHistory};

    /// The utilization histogram's bounds (kube-apiserver's).
    const BOUNDS: [f64; 14] = [
        0.0,
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        0.95,
        0.99,
        1.0,
        f64::INFINITY,
    ];

    /// A level of 100 seats with `executing` in use, and its utilization histogram after `idle` seconds at 10 % and
    /// `full` seconds at 100 % (absent when `histogram` is false: before 1.25).
    fn level(executing: f64, idle: f64, full: f64, histogram: bool) -> LevelSnapshot {
        LevelSnapshot {
            limit_seats: Some(100.0),
            executing_seats: Some(executing),
            seat_utilization: histogram.then(|| Histogram {
                buckets: BOUNDS
                    .iter()
                    .map(|&le| {
                        let below = if le >= 0.1 { idle } else { 0.0 };
                        (le, below + if le >= 1.0 { full } else { 0.0 })
                    })
                    .collect(),
                count: idle + full,
                sum: 0.1 * idle + full,
            }),
            ..Default::default()
        }
    }

    fn flow(name: &str, seats: u64) -> apf::model::FlowSample {
        apf::model::FlowSample {
            priority_level: "workload-low".into(),
            flow_schema: "service-accounts".into(),
            flow: name.into(),
            executing_seats: seats,
            ..Default::default()
        }
    }

    /// Five-second scrapes of workload-low from 0 to `until`, full for the seconds `full(t)` says of each second;
    /// with a dump at each scrape naming `burst` as the holder while it is full, `steady` otherwise. Returns the
    /// history (pruned to a minute's window and a five-minute lookback) at each scrape.
    fn watch(
        until: u32,
        full: impl Fn(u32) -> bool,
        histogram: bool,
        mut each: impl FnMut(u32, &ReplicaHistory),
    ) {
        let mut h = ReplicaHistory::default();
        let (mut idle_s, mut full_s) = (0.0, 0.0);
        for t in 0..=until {
            if t > 0 {
                if full(t) {
                    full_s += 1.0;
                } else {
                    idle_s += 1.0;
                }
            }
            if t % 5 != 0 {
                continue;
            }
            let now_full = full(t);
            let mut snapshot = ReplicaSnapshot {
                levels: [(
                    "workload-low".to_string(),
                    level(
                        if now_full { 100.0 } else { 10.0 },
                        idle_s,
                        full_s,
                        histogram,
                    ),
                )]
                .into_iter()
                .collect(),
                ..Default::default()
            };
            snapshot.flows = Some(vec![if now_full {
                flow("system:serviceaccount:batch:burst", 90)
            } else {
                flow("system:serviceaccount:ci:steady", 5)
            }]);
            h.push(Point {
                at: f64::from(t),
                wall_time: String::new(),
                snapshot: Arc::new(snapshot),
            });
            h.prune(f64::from(t), 60.0, 300.0);
            each(t, &h);
        }
    }

    #[test]
    fn fifteen_seconds_of_every_minute_recur_and_stop_recurring_once_fixed() {
        // Full from 30 s to 45 s of each minute, for four minutes; then the fix: never again.
        let full = |t: u32| t < 240 && (31..=45).contains(&(t % 60));
        let mut seen = Vec::new();
        watch(525, full, true, |t, h| {
            seen.push((t, h.saturation("workload-low")));
        });
        let at = |t: u32| seen.iter().find(|(s, _)| *s == t).unwrap().1.clone();
        // The first episode alone: known, not recurring.
        let first = at(60).unwrap();
        assert_eq!(first.episodes, 1);
        assert!(!first.recurs());
        // The second one: 15 s each, about 45 s apart, a quarter of the time watched.
        let s = at(110).unwrap();
        assert_eq!(s.episodes, 2);
        assert!(s.recurs(), "{s:?}");
        assert!((s.shortest_seconds - 15.0).abs() < 1e-9, "{s:?}");
        assert!((s.longest_seconds - 15.0).abs() < 1e-9, "{s:?}");
        assert!((s.full_seconds - 30.0).abs() < 1e-9, "{s:?}");
        assert!((s.full_ratio - 30.0 / 110.0).abs() < 1e-9, "{s:?}");
        assert!(s.by_histogram);
        assert_eq!(s.flows.len(), 1, "{s:?}");
        assert_eq!(s.flows[0].flow, "system:serviceaccount:batch:burst");
        // Episodes span whole intervals (30..45 s): the quiet between two is the rest of the minute.
        assert_eq!(s.longest_gap_seconds, Some(45.0));
        // Every scrape from then until the fix: still recurring, in the quiet between two episodes too.
        for (t, s) in seen.iter().filter(|(t, _)| (110..=240).contains(t)) {
            assert!(s.as_ref().is_some_and(|s| s.recurs()), "{t}: {s:?}");
        }
        // The lookback holds five minutes at most: four episodes, a quarter of it.
        let s = at(290).unwrap();
        assert_eq!(s.episodes, 4);
        assert!((s.full_ratio - 60.0 / 290.0).abs() < 1e-9, "{s:?}");
        // The last episode ended at 225 s: overdue past 1.5 times the 45 s quiet, at 292.5 s.
        assert!(at(290).unwrap().recurs());
        assert!(!at(295).unwrap().recurs(), "{:?}", at(295));
        // Five minutes after the last one, nothing is left of it.
        assert_eq!(at(525), None);
    }

    #[test]
    fn a_sub_second_blip_each_minute_is_no_episode_and_a_sliver_of_the_time() {
        // 0.7 s full in each minute's interval from 30 to 35 s: the histogram says so, no scrape sees it.
        let mut h = ReplicaHistory::default();
        for k in 0..=60u32 {
            let t = f64::from(k) * 5.0;
            let blips = f64::from(k / 12) * 0.7;
            let snapshot = ReplicaSnapshot {
                levels: [(
                    "workload-low".to_string(),
                    level(10.0, t - blips, blips, true),
                )]
                .into_iter()
                .collect(),
                ..Default::default()
            };
            h.push(Point {
                at: t,
                wall_time: String::new(),
                snapshot: Arc::new(snapshot),
            });
            h.prune(t, 60.0, 300.0);
        }
        // Its time is in the share (0.7 s a minute, 1.2 %); none is an episode, so nothing recurs.
        let s = h.saturation("workload-low").unwrap();
        assert!((s.full_ratio - 0.7 / 60.0).abs() < 1e-9, "{s:?}");
        assert_eq!(
            (s.episodes, s.seconds_since, s.longest_gap_seconds),
            (0, None, None),
            "{s:?}"
        );
        assert!(!s.recurs());
    }

    #[test]
    fn before_the_histogram_the_scrapes_that_find_the_level_full_count() {
        let full = |t: u32| (31..=45).contains(&(t % 60));
        let mut last = None;
        watch(180, full, false, |_, h| last = h.saturation("workload-low"));
        let s = last.unwrap();
        // Scrapes at 35, 40 and 45 s of each minute saw it full: three intervals of 5 s.
        assert_eq!(s.episodes, 3);
        assert!(!s.by_histogram);
        assert!((s.longest_seconds - 15.0).abs() < 1e-9, "{s:?}");
        assert!(s.recurs());
    }
}
