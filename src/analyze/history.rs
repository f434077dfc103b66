//! One replica's scrapes inside the sliding window (plus one before it, the baseline of rates), each kept as what
//! the derivations read of it, the latest also whole but for its histograms (its window point holds them); and the
//! flows of its dumps summed over the window.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use apf::model::{FlowSchemaTotals, Histogram, LevelSnapshot, ReplicaSnapshot};

pub use super::math::Buckets;

use super::flows::{self, FlowWindow};
use super::saturation::{Interval, Saturation, SaturationLedger};
use super::FlowReport;

#[derive(Debug, Clone)]
pub struct Point {
    /// Seconds on a monotonic clock chosen by the caller.
    pub at: f64,
    /// RFC 3339 wall time of the scrape, for reports.
    pub wall_time: String,
    pub snapshot: Arc<ReplicaSnapshot>,
}

/// What the derivations over the window read of one scrape: the counters of rates, the gauges of trends, the
/// histograms of percentiles. Only the latest scrape is kept whole; a whole snapshot of the 1.34 levels is about 8 KB,
/// and a window of 250 ms scrapes holds 240 of them. A fleet's window holds thousands of replicas' points, so each
/// point's numbers are one allocation, and the names and bucket bounds they go with are held once for the points of
/// a replica that keep them (every scrape, but a restart or an upgrade).
#[derive(Debug, Clone)]
pub struct WindowPoint {
    /// Seconds on the history's clock.
    pub at: f64,
    /// Where each level's numbers are in `values`: shared with the point before when the levels, their rejection
    /// reasons and their buckets are the same.
    layout: Arc<[LevelPlace]>,
    /// Every level's numbers, one level after the other, as `layout` places them.
    values: Box<[f64]>,
    /// Cumulative rejections by (priority level, flow schema, reason), in key order.
    flow_schema_rejected_total: Box<[(RejectionKey, f64)]>,
    /// Dispatches and what requests cost by (priority level, flow schema), in key order.
    flow_schemas: Box<[(SchemaKey, FlowSchemaTotals)]>,
}

/// (priority level, flow schema)
type SchemaKey = (Arc<str>, Arc<str>);

/// (priority level, flow schema, reason)
type RejectionKey = (Arc<str>, Arc<str>, Arc<str>);

/// A level's gauges and counters at the head of its numbers, in this order ([`LevelSample`] reads them); NaN where
/// the scrape had none (a snapshot's sums are finite: a NaN it held would mean unknown too).
const SCALARS: usize = 5;
const LIMIT: usize = 0;
const EXECUTING: usize = 1;
const DEMAND_HIGH_WATERMARK: usize = 2;
const NO_ACCOMMODATION: usize = 3;
const ACTIVE_FLOWS: usize = 4;

/// One priority level's place in a point's numbers: [`SCALARS`] numbers, the cumulative rejections by reason, then
/// each histogram held, its buckets' cumulative counts and its count.
#[derive(Debug)]
struct LevelPlace {
    name: Arc<str>,
    start: usize,
    /// In reason order.
    reasons: Box<[Arc<str>]>,
    /// Bucket bounds of the queue wait and seat utilization histograms, when the scrape had them.
    wait_bounds: Option<Arc<[f64]>>,
    seat_bounds: Option<Arc<[f64]>>,
}

impl LevelPlace {
    /// How many numbers the level takes.
    fn len(&self) -> usize {
        let histogram = |b: &Option<Arc<[f64]>>| b.as_ref().map_or(0, |b| b.len() + 1);
        SCALARS + self.reasons.len() + histogram(&self.wait_bounds) + histogram(&self.seat_bounds)
    }

    /// Whether `level` (named `name`) would take this place: the same name, reasons and bucket bounds.
    fn fits(&self, name: &str, level: &LevelSnapshot) -> bool {
        let bounds_fit = |held: &Option<Arc<[f64]>>, h: &Option<Histogram>| match (held, h) {
            (Some(b), Some(h)) => b.iter().eq(h.buckets.iter().map(|(le, _)| le)),
            (None, None) => true,
            _ => false,
        };
        *self.name == *name
            && self
                .reasons
                .iter()
                .map(|r| &**r)
                .eq(level.rejected_total.keys().map(String::as_str))
            && bounds_fit(&self.wait_bounds, &level.wait_seconds)
            && bounds_fit(&self.seat_bounds, &level.seat_utilization)
    }
}

/// The places of `levels`, one after the other, with the names, reasons and bounds the point `before` holds where
/// they are the same.
fn layout_of(
    levels: &BTreeMap<String, LevelSnapshot>,
    before: Option<&WindowPoint>,
) -> Arc<[LevelPlace]> {
    let mut start = 0;
    levels
        .iter()
        .map(|(name, level)| {
            let earlier = before.and_then(|b| b.place(name));
            let bounds = |h: &Option<Histogram>, held: Option<&Arc<[f64]>>| {
                let h = h.as_ref()?;
                Some(match held {
                    Some(b) if b.iter().eq(h.buckets.iter().map(|(le, _)| le)) => b.clone(),
                    _ => h.buckets.iter().map(|(le, _)| *le).collect(),
                })
            };
            let place = LevelPlace {
                name: shared(name, earlier.map(|p| &p.name)),
                start,
                reasons: level
                    .rejected_total
                    .keys()
                    .map(|reason| {
                        let held =
                            earlier.and_then(|p| p.reasons.iter().find(|r| ***r == **reason));
                        shared(reason, held)
                    })
                    .collect(),
                wait_bounds: bounds(
                    &level.wait_seconds,
                    earlier.and_then(|p| p.wait_bounds.as_ref()),
                ),
                seat_bounds: bounds(
                    &level.seat_utilization,
                    earlier.and_then(|p| p.seat_bounds.as_ref()),
                ),
            };
            start += place.len();
            place
        })
        .collect()
}

/// `name` as an earlier point holds it, else a new one.
fn shared(name: &str, earlier: Option<&Arc<str>>) -> Arc<str> {
    match earlier {
        Some(held) if **held == *name => held.clone(),
        _ => name.into(),
    }
}

/// One priority level in a [`WindowPoint`]: the fields of [`LevelSnapshot`] read over the window.
#[derive(Debug, Clone, Copy)]
pub struct LevelSample<'a> {
    place: &'a LevelPlace,
    /// The level's numbers alone.
    values: &'a [f64],
}

impl<'a> LevelSample<'a> {
    fn scalar(&self, i: usize) -> Option<f64> {
        self.values.get(i).copied().filter(|v| !v.is_nan())
    }

    /// The enforced limit, as [`LevelSnapshot::limit_seats`].
    pub fn limit_seats(&self) -> Option<f64> {
        self.scalar(LIMIT)
    }

    pub fn executing_seats(&self) -> Option<f64> {
        self.scalar(EXECUTING)
    }

    pub fn demand_seats_high_watermark(&self) -> Option<f64> {
        self.scalar(DEMAND_HIGH_WATERMARK)
    }

    pub fn no_accommodation_total(&self) -> Option<f64> {
        self.scalar(NO_ACCOMMODATION)
    }

    /// Flows with requests in `dump_requests`, when it was read.
    pub fn active_flows(&self) -> Option<u32> {
        // Held as a number like the others: a u32 is exact in an f64.
        self.scalar(ACTIVE_FLOWS).map(|v| v as u32)
    }

    /// Limit minus seats in use, as [`LevelSnapshot::headroom_seats`].
    pub fn headroom_seats(&self) -> Option<f64> {
        Some(self.limit_seats()? - self.executing_seats()?)
    }

    /// Cumulative rejections by reason.
    pub fn rejected_total(&self) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        let values = self.values.get(SCALARS..).unwrap_or_default();
        self.place
            .reasons
            .iter()
            .map(|r| &**r)
            .zip(values.iter().copied())
    }

    pub fn rejected(&self, reason: &str) -> Option<f64> {
        let i = self.place.reasons.iter().position(|r| **r == *reason)?;
        self.values.get(SCALARS + i).copied()
    }

    /// The queue wait's histogram.
    pub fn wait_seconds(&self) -> Option<Buckets<'a>> {
        let at = SCALARS + self.place.reasons.len();
        self.histogram(self.place.wait_bounds.as_deref(), at)
    }

    /// The seat utilization's histogram.
    pub fn seat_utilization(&self) -> Option<Buckets<'a>> {
        let wait = self.place.wait_bounds.as_ref().map_or(0, |b| b.len() + 1);
        let at = SCALARS + self.place.reasons.len() + wait;
        self.histogram(self.place.seat_bounds.as_deref(), at)
    }

    fn histogram(&self, bounds: Option<&'a [f64]>, at: usize) -> Option<Buckets<'a>> {
        let bounds = bounds?;
        let counts = self.values.get(at..at + bounds.len())?;
        let count = *self.values.get(at + bounds.len())?;
        Some(Buckets {
            bounds,
            counts,
            count,
        })
    }
}

impl WindowPoint {
    /// What the window keeps of `snapshot`, sharing names and bucket bounds with the point `before` it.
    fn new(at: f64, snapshot: &ReplicaSnapshot, before: Option<&WindowPoint>) -> Self {
        let same_layout = before.filter(|b| {
            b.layout.len() == snapshot.levels.len()
                && b.layout
                    .iter()
                    .zip(&snapshot.levels)
                    .all(|(place, (name, level))| place.fits(name, level))
        });
        let layout = match same_layout {
            Some(b) => b.layout.clone(),
            None => layout_of(&snapshot.levels, before),
        };
        let len = layout.last().map_or(0, |p| p.start + p.len());
        let mut values = Vec::with_capacity(len);
        for level in snapshot.levels.values() {
            let or_nan = |v: Option<f64>| v.unwrap_or(f64::NAN);
            values.extend([
                or_nan(level.limit_seats),
                or_nan(level.executing_seats),
                or_nan(level.demand_seats_high_watermark),
                or_nan(level.no_accommodation_total),
                or_nan(level.active_flows.map(f64::from)),
            ]);
            values.extend(level.rejected_total.values());
            for h in [&level.wait_seconds, &level.seat_utilization]
                .into_iter()
                .flatten()
            {
                values.extend(h.buckets.iter().map(|(_, c)| *c));
                values.push(h.count);
            }
        }
        debug_assert_eq!(values.len(), len);
        let flow_schema_rejected_total = snapshot
            .flow_schema_rejected_total
            .iter()
            .map(|((level, schema, reason), v)| {
                let earlier = before.and_then(|b| {
                    let i = b
                        .flow_schema_rejected_total
                        .binary_search_by(|((l, s, r), _)| {
                            (&**l, &**s, &**r).cmp(&(
                                level.as_str(),
                                schema.as_str(),
                                reason.as_str(),
                            ))
                        })
                        .ok()?;
                    Some(&b.flow_schema_rejected_total[i].0)
                });
                let key = match earlier {
                    Some(key) => key.clone(),
                    None => (
                        level.as_str().into(),
                        schema.as_str().into(),
                        reason.as_str().into(),
                    ),
                };
                (key, *v)
            })
            .collect();
        let flow_schemas = snapshot
            .flow_schemas
            .iter()
            .map(|((level, schema), totals)| {
                let earlier = before.and_then(|b| {
                    let i = b
                        .flow_schemas
                        .binary_search_by(|((l, s), _)| {
                            (&**l, &**s).cmp(&(level.as_str(), schema.as_str()))
                        })
                        .ok()?;
                    Some(&b.flow_schemas[i].0)
                });
                let key = match earlier {
                    Some(key) => key.clone(),
                    None => (level.as_str().into(), schema.as_str().into()),
                };
                (key, totals.clone())
            })
            .collect();
        WindowPoint {
            at,
            layout,
            values: values.into_boxed_slice(),
            flow_schema_rejected_total,
            flow_schemas,
        }
    }

    /// Dispatches and costs of (priority level, flow schema) at this scrape.
    pub fn flow_schema(&self, level: &str, schema: &str) -> Option<&FlowSchemaTotals> {
        self.flow_schemas
            .binary_search_by(|((l, s), _)| (&**l, &**s).cmp(&(level, schema)))
            .ok()
            .map(|i| &self.flow_schemas[i].1)
    }

    /// The flow schemas of `level` at this scrape.
    pub fn flow_schemas_of<'a>(
        &'a self,
        level: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a FlowSchemaTotals)> + 'a {
        self.flow_schemas
            .iter()
            .filter(move |((l, _), _)| **l == *level)
            .map(|((_, s), t)| (&**s, t))
    }

    fn place(&self, name: &str) -> Option<&LevelPlace> {
        let i = self.layout.binary_search_by(|p| (*p.name).cmp(name)).ok()?;
        self.layout.get(i)
    }

    pub fn level(&self, name: &str) -> Option<LevelSample<'_>> {
        let place = self.place(name)?;
        let values = self.values.get(place.start..place.start + place.len())?;
        Some(LevelSample { place, values })
    }

    /// Cumulative rejections by (priority level, flow schema, reason), in key order.
    pub fn flow_schema_rejected_total(&self) -> impl Iterator<Item = ((&str, &str, &str), f64)> {
        self.flow_schema_rejected_total
            .iter()
            .map(|((l, s, r), v)| ((&**l, &**s, &**r), *v))
    }

    pub fn flow_schema_rejected(&self, key: (&str, &str, &str)) -> Option<f64> {
        self.flow_schema_rejected_total
            .binary_search_by(|((l, s, r), _)| (&**l, &**s, &**r).cmp(&key))
            .ok()
            .map(|i| self.flow_schema_rejected_total[i].1)
    }
}

#[derive(Debug, Clone)]
pub struct ReplicaHistory {
    /// The latest scrape, whole but for its histograms: everything a report says of now.
    latest: Option<Point>,
    /// Every scrape of the window (the latest too), as the derivations read it.
    points: VecDeque<WindowPoint>,
    /// The dumps' flows, summed over the window apart from the points: only their means are read.
    flows: FlowWindow,
    /// A tenth of the window last pruned to: the flows' slices.
    slice_seconds: f64,
    /// The episodes in which each level was full, over the lookback (longer than the window).
    saturation: SaturationLedger,
}

impl Default for ReplicaHistory {
    fn default() -> Self {
        Self {
            latest: None,
            points: VecDeque::new(),
            flows: FlowWindow::default(),
            // A tenth of the default window until the first prune says which.
            slice_seconds: 60.0 / flows::SLICES,
            saturation: SaturationLedger::default(),
        }
    }
}

impl ReplicaHistory {
    pub fn push(&mut self, mut point: Point) {
        // The flows go to the window's sums, not into the history's points.
        let flows = match Arc::get_mut(&mut point.snapshot) {
            Some(snapshot) => snapshot.flows.take(),
            None => point.snapshot.flows.clone(),
        };
        let compact = WindowPoint::new(point.at, &point.snapshot, self.points.back());
        // How long each level was full since the scrape before, and who held its seats at this one.
        if let Some(before) = self.points.back().filter(|b| compact.at > b.at) {
            let seconds = compact.at - before.at;
            let dumped = flows.as_deref().unwrap_or_default();
            for place in compact.layout.iter() {
                let Some(after) = compact.level(&place.name) else {
                    continue;
                };
                let interval = match after.seat_utilization() {
                    Some(last) => {
                        let first = before.level(&place.name).and_then(|b| b.seat_utilization());
                        Interval::by_histogram(first, last, seconds)
                    }
                    None => {
                        Interval::by_scrape(after.executing_seats(), after.limit_seats(), seconds)
                    }
                };
                self.saturation
                    .note(&place.name, compact.at, seconds, interval, dumped);
            }
        }
        self.saturation.watched(compact.at);
        if let Some(flows) = flows {
            self.flows.add(point.at, self.slice_seconds, &flows);
        }
        self.points.push_back(compact);
        // The histograms are read from the window's points alone: not held twice (two per level of every replica).
        if let Some(snapshot) = Arc::get_mut(&mut point.snapshot) {
            for level in snapshot.levels.values_mut() {
                level.wait_seconds = None;
                level.seat_utilization = None;
            }
        }
        self.latest = Some(point);
    }

    /// Drops points no longer needed for a window of `window` seconds ending at `now`, keeping one baseline point
    /// before the window, and the episodes of saturation that ended before the `lookback`.
    pub fn prune(&mut self, now: f64, window: f64, lookback: f64) {
        while self.points.len() >= 2 && self.points[1].at <= now - window {
            self.points.pop_front();
        }
        self.flows.prune(now, window);
        self.slice_seconds = window / flows::SLICES;
        let latest = self.points.back().map(|p| &p.layout);
        self.saturation.prune(now, lookback.max(window), |level| {
            latest.is_some_and(|l| l.iter().any(|p| *p.name == *level))
        });
    }

    /// How often, how long and how much of the lookback `level` was full, when it was.
    pub fn saturation(&self, level: &str) -> Option<Saturation> {
        self.saturation.report(level)
    }

    /// Each flow's mean waiting requests and seats over the window's dumps, the `n` with the most pressure per level.
    pub fn top_flows(&self, now: f64, window: f64, n: usize) -> BTreeMap<String, Vec<FlowReport>> {
        self.flows.top_by_level(now, window, n)
    }

    /// (flow schema, priority level, user) of every user seen in the window's dumps (the flows kept of them).
    pub fn flow_users(&self) -> impl Iterator<Item = (String, String, String)> + '_ {
        self.flows.users()
    }

    /// The points of the window ending at `now`, with the baseline point before it when there is one.
    pub fn window(&self, now: f64, window: f64) -> Vec<&WindowPoint> {
        let start = self
            .points
            .iter()
            .position(|p| p.at >= now - window)
            .unwrap_or(self.points.len());
        let from = start.saturating_sub(1);
        self.points
            .iter()
            .skip(from)
            .filter(|p| p.at <= now)
            .collect()
    }

    /// The latest scrape, whole but for its histograms.
    pub fn latest(&self) -> Option<&Point> {
        self.latest.as_ref()
    }

    /// Points kept for the window.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// Whether `level` is in each point's scrape.
pub(super) fn level_present(points: &[&WindowPoint], level: &str) -> Vec<bool> {
    points.iter().map(|p| p.level(level).is_some()).collect()
}

/// A counter of a level over the points, as [`super::counter_rate`] reads it. kube-apiserver makes a counter's series at its
/// first event: while the level is there without it, it is 0; before the level was made (a fix's new level), it is
/// not counted, so a new level is rated over its own life.
pub(super) fn level_counter<'p>(
    points: &'p [&WindowPoint],
    present: &'p [bool],
    values: impl Iterator<Item = Option<f64>> + 'p,
) -> impl Iterator<Item = (f64, Option<f64>)> + 'p {
    points
        .iter()
        .zip(present)
        .zip(values)
        .map(|((p, there), v)| (p.at, there.then(|| v.unwrap_or(0.0))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(rejected: f64, waited: f64) -> ReplicaSnapshot {
        let histogram = |count: f64| Histogram {
            buckets: vec![(0.1, count / 2.0), (1.0, count), (f64::INFINITY, count)],
            count,
            sum: count / 4.0,
        };
        let level = LevelSnapshot {
            limit_seats: Some(40.0),
            executing_seats: Some(10.0),
            demand_seats_high_watermark: Some(12.0),
            no_accommodation_total: Some(3.0),
            rejected_total: [("queue-full".to_string(), rejected)].into(),
            wait_seconds: Some(histogram(waited)),
            seat_utilization: Some(histogram(waited * 2.0)),
            inqueue_requests: Some(5.0),
            active_flows: Some(4),
            ..Default::default()
        };
        ReplicaSnapshot {
            levels: [("workload-low".to_string(), level)].into(),
            flow_schema_rejected_total: [(
                (
                    "workload-low".into(),
                    "service-accounts".into(),
                    "queue-full".into(),
                ),
                rejected,
            )]
            .into(),
            resource_objects: Arc::new([("pods".to_string(), 1.0)].into()),
            ..Default::default()
        }
    }

    fn point(at: f64, snapshot: ReplicaSnapshot) -> Point {
        Point {
            at,
            wall_time: String::new(),
            snapshot: Arc::new(snapshot),
        }
    }

    #[test]
    fn a_window_point_keeps_what_the_derivations_read() {
        let whole = snapshot(7.0, 20.0);
        let p = WindowPoint::new(1.0, &whole, None);
        let (level, kept) = (&whole.levels["workload-low"], p.level("workload-low"));
        let Some(kept) = kept else {
            panic!("the level is kept")
        };
        assert_eq!(kept.headroom_seats(), level.headroom_seats());
        assert_eq!(kept.limit_seats(), Some(40.0));
        assert_eq!(kept.executing_seats(), Some(10.0));
        assert_eq!(kept.demand_seats_high_watermark(), Some(12.0));
        assert_eq!(kept.no_accommodation_total(), Some(3.0));
        assert_eq!(kept.active_flows(), Some(4));
        assert_eq!(kept.rejected("queue-full"), Some(7.0));
        assert_eq!(kept.rejected("timeout"), None);
        assert_eq!(
            kept.rejected_total().collect::<Vec<_>>(),
            vec![("queue-full", 7.0)]
        );
        let histogram = |h: Option<Buckets<'_>>| {
            h.map(|h| {
                let buckets: Vec<(f64, f64)> = h
                    .bounds
                    .iter()
                    .copied()
                    .zip(h.counts.iter().copied())
                    .collect();
                (buckets, h.count)
            })
        };
        let whole_histogram = |h: &Option<Histogram>| h.clone().map(|h| (h.buckets, h.count));
        assert_eq!(
            histogram(kept.wait_seconds()),
            whole_histogram(&level.wait_seconds)
        );
        assert_eq!(
            histogram(kept.seat_utilization()),
            whole_histogram(&level.seat_utilization)
        );
        assert_eq!(
            p.flow_schema_rejected(("workload-low", "service-accounts", "queue-full")),
            Some(7.0)
        );
        assert!(p.level("catch-all").is_none());
    }

    #[test]
    fn what_a_level_lacks_is_unknown_and_the_levels_keep_their_own_numbers() {
        let mut whole = snapshot(7.0, 20.0);
        // A level of another version's scrape: no histograms, no rejections, no dump.
        whole.levels.insert(
            "catch-all".to_string(),
            LevelSnapshot {
                limit_seats: Some(5.0),
                ..Default::default()
            },
        );
        let p = WindowPoint::new(1.0, &whole, None);
        let Some(bare) = p.level("catch-all") else {
            panic!("the level is kept")
        };
        assert_eq!(bare.limit_seats(), Some(5.0));
        assert_eq!(bare.executing_seats(), None);
        assert_eq!(bare.headroom_seats(), None);
        assert_eq!(bare.active_flows(), None);
        assert_eq!(bare.rejected_total().count(), 0);
        assert!(bare.wait_seconds().is_none() && bare.seat_utilization().is_none());
        // The level after it in name order is read from its own place.
        let low = p.level("workload-low").and_then(|l| l.seat_utilization());
        assert_eq!(low.map(|h| h.count), Some(40.0));
    }

    #[test]
    fn points_share_names_and_bounds_and_only_the_latest_is_whole() {
        let mut h = ReplicaHistory::default();
        h.push(point(0.0, snapshot(1.0, 10.0)));
        h.push(point(5.0, snapshot(2.0, 30.0)));
        let (a, b) = (&h.points[0], &h.points[1]);
        assert!(Arc::ptr_eq(&a.layout, &b.layout));
        assert!(Arc::ptr_eq(
            &a.flow_schema_rejected_total[0].0 .1,
            &b.flow_schema_rejected_total[0].0 .1
        ));
        // Each point keeps its own counts.
        assert_eq!(
            a.level("workload-low").map(|l| l.rejected("queue-full")),
            Some(Some(1.0))
        );
        assert_eq!(
            b.level("workload-low").map(|l| l.rejected("queue-full")),
            Some(Some(2.0))
        );
        assert_eq!(
            b.level("workload-low")
                .and_then(|l| l.wait_seconds())
                .map(|w| w.count),
            Some(30.0)
        );
        assert_eq!(h.latest().map(|p| p.at), Some(5.0));
        assert_eq!(
            h.latest().map(|p| p.snapshot.resource_objects.len()),
            Some(1)
        );
        // Its histograms are the window's alone.
        let latest_level = h.latest().map(|p| &p.snapshot.levels["workload-low"]);
        assert!(
            latest_level.is_some_and(|l| l.wait_seconds.is_none() && l.seat_utilization.is_none())
        );
        assert_eq!(h.window(5.0, 60.0).len(), 2);
        assert_eq!(h.window(4.0, 60.0).len(), 1);
    }

    #[test]
    fn a_point_with_other_reasons_or_buckets_gets_its_own_places_and_shares_what_is_the_same() {
        let mut h = ReplicaHistory::default();
        h.push(point(0.0, snapshot(1.0, 10.0)));
        let mut other = snapshot(2.0, 30.0);
        if let Some(level) = other.levels.get_mut("workload-low") {
            level.rejected_total.insert("time-out".to_string(), 4.0);
            if let Some(w) = &mut level.wait_seconds {
                w.buckets.insert(1, (0.5, 20.0));
            }
        }
        h.push(point(5.0, other));
        let (a, b) = (&h.points[0], &h.points[1]);
        assert!(!Arc::ptr_eq(&a.layout, &b.layout));
        assert!(Arc::ptr_eq(&a.layout[0].name, &b.layout[0].name));
        assert!(Arc::ptr_eq(
            &a.layout[0].reasons[0],
            &b.layout[0].reasons[0]
        ));
        match (&a.layout[0].seat_bounds, &b.layout[0].seat_bounds) {
            (Some(x), Some(y)) => assert!(Arc::ptr_eq(x, y)),
            other => panic!("{other:?}"),
        }
        let Some(level) = b.level("workload-low") else {
            panic!("the level is kept")
        };
        assert_eq!(level.rejected("time-out"), Some(4.0));
        assert_eq!(level.rejected("queue-full"), Some(2.0));
        assert_eq!(level.wait_seconds().map(|w| w.bounds.len()), Some(4));
        assert_eq!(level.seat_utilization().map(|s| s.count), Some(60.0));
        // The first point reads as it was.
        assert_eq!(
            a.level("workload-low")
                .and_then(|l| l.wait_seconds())
                .map(|w| w.bounds.len()),
            Some(3)
        );
    }
}
