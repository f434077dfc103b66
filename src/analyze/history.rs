//! One replica's scrapes inside the sliding window (plus one before it, the baseline of rates), each kept as what
//! the derivations read of it, the latest also whole; and the flows of its dumps summed over the window.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use apf::model::{FlowSchemaTotals, Histogram, LevelSnapshot, ReplicaSnapshot};

use super::flows::{self, FlowWindow};
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
/// and a window of 250 ms scrapes holds 240 of them.
#[derive(Debug, Clone)]
pub struct WindowPoint {
    /// Seconds on the history's clock.
    pub at: f64,
    /// By priority level, in name order.
    levels: Box<[(Arc<str>, LevelSample)]>,
    /// Cumulative rejections by (priority level, flow schema, reason), in key order.
    flow_schema_rejected_total: Box<[(RejectionKey, f64)]>,
    /// Dispatches and what requests cost by (priority level, flow schema), in key order.
    flow_schemas: Box<[(SchemaKey, FlowSchemaTotals)]>,
}

/// (priority level, flow schema)
type SchemaKey = (Arc<str>, Arc<str>);

/// (priority level, flow schema, reason)
type RejectionKey = (Arc<str>, Arc<str>, Arc<str>);

/// One priority level in a [`WindowPoint`]: the fields of [`LevelSnapshot`] read over the window.
#[derive(Debug, Clone, Default)]
pub struct LevelSample {
    pub limit_seats: Option<f64>,
    pub executing_seats: Option<f64>,
    pub demand_seats_high_watermark: Option<f64>,
    pub no_accommodation_total: Option<f64>,
    /// Flows with requests in `dump_requests`, when it was read.
    pub active_flows: Option<u32>,
    /// Cumulative rejections by reason, in reason order.
    rejected_total: Box<[(Arc<str>, f64)]>,
    wait_seconds: Option<Counts>,
    seat_utilization: Option<Counts>,
}

/// A cumulative histogram's counts; its bucket bounds, the same from one scrape to the next, are held once.
#[derive(Debug, Clone)]
struct Counts {
    bounds: Arc<[f64]>,
    counts: Box<[f64]>,
    count: f64,
}

impl Counts {
    fn new(h: &Histogram, before: Option<&Counts>) -> Self {
        let bounds = match before {
            Some(b) if b.bounds.iter().eq(h.buckets.iter().map(|(le, _)| le)) => b.bounds.clone(),
            _ => h.buckets.iter().map(|(le, _)| *le).collect(),
        };
        Counts {
            bounds,
            counts: h.buckets.iter().map(|(_, c)| *c).collect(),
            count: h.count,
        }
    }

    fn histogram(&self) -> Histogram {
        Histogram {
            buckets: self
                .bounds
                .iter()
                .copied()
                .zip(self.counts.iter().copied())
                .collect(),
            count: self.count,
            // Not read over the window.
            sum: 0.0,
        }
    }
}

/// `name` as an earlier point holds it, else a new one.
fn shared(name: &str, earlier: Option<&Arc<str>>) -> Arc<str> {
    match earlier {
        Some(held) if **held == *name => held.clone(),
        _ => name.into(),
    }
}

impl LevelSample {
    fn new(level: &LevelSnapshot, before: Option<&LevelSample>) -> Self {
        let reason_before = |reason: &str| {
            before.and_then(|b| {
                b.rejected_total
                    .iter()
                    .find(|(r, _)| **r == *reason)
                    .map(|(r, _)| r)
            })
        };
        LevelSample {
            limit_seats: level.limit_seats,
            executing_seats: level.executing_seats,
            demand_seats_high_watermark: level.demand_seats_high_watermark,
            no_accommodation_total: level.no_accommodation_total,
            active_flows: level.active_flows,
            rejected_total: level
                .rejected_total
                .iter()
                .map(|(reason, v)| (shared(reason, reason_before(reason)), *v))
                .collect(),
            wait_seconds: level
                .wait_seconds
                .as_ref()
                .map(|h| Counts::new(h, before.and_then(|b| b.wait_seconds.as_ref()))),
            seat_utilization: level
                .seat_utilization
                .as_ref()
                .map(|h| Counts::new(h, before.and_then(|b| b.seat_utilization.as_ref()))),
        }
    }

    /// Limit minus seats in use, as [`LevelSnapshot::headroom_seats`].
    pub fn headroom_seats(&self) -> Option<f64> {
        Some(self.limit_seats? - self.executing_seats?)
    }

    /// Cumulative rejections by reason.
    pub fn rejected_total(&self) -> impl Iterator<Item = (&str, f64)> {
        self.rejected_total.iter().map(|(r, v)| (&**r, *v))
    }

    pub fn rejected(&self, reason: &str) -> Option<f64> {
        self.rejected_total
            .iter()
            .find(|(r, _)| **r == *reason)
            .map(|(_, v)| *v)
    }

    pub fn wait_seconds(&self) -> Option<Histogram> {
        self.wait_seconds.as_ref().map(Counts::histogram)
    }

    pub fn seat_utilization(&self) -> Option<Histogram> {
        self.seat_utilization.as_ref().map(Counts::histogram)
    }
}

impl WindowPoint {
    /// What the window keeps of `snapshot`, sharing names and bucket bounds with the point `before` it.
    fn new(at: f64, snapshot: &ReplicaSnapshot, before: Option<&WindowPoint>) -> Self {
        let levels = snapshot
            .levels
            .iter()
            .map(|(name, level)| {
                let earlier = before.and_then(|b| b.levels.get(b.level_index(name).ok()?));
                (
                    shared(name, earlier.map(|(n, _)| n)),
                    LevelSample::new(level, earlier.map(|(_, l)| l)),
                )
            })
            .collect();
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
            levels,
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

    fn level_index(&self, name: &str) -> Result<usize, usize> {
        self.levels.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    pub fn level(&self, name: &str) -> Option<&LevelSample> {
        self.level_index(name).ok().map(|i| &self.levels[i].1)
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
    /// The latest scrape, whole: everything a report says of now.
    latest: Option<Point>,
    /// Every scrape of the window (the latest too), as the derivations read it.
    points: VecDeque<WindowPoint>,
    /// The dumps' flows, summed over the window apart from the points: only their means are read.
    flows: FlowWindow,
    /// A tenth of the window last pruned to: the flows' slices.
    slice_seconds: f64,
}

impl Default for ReplicaHistory {
    fn default() -> Self {
        Self {
            latest: None,
            points: VecDeque::new(),
            flows: FlowWindow::default(),
            // A tenth of the default window until the first prune says which.
            slice_seconds: 60.0 / flows::SLICES,
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
        if let Some(flows) = flows {
            self.flows.add(point.at, self.slice_seconds, &flows);
        }
        let compact = WindowPoint::new(point.at, &point.snapshot, self.points.back());
        self.points.push_back(compact);
        self.latest = Some(point);
    }

    /// Drops points no longer needed for a window of `window` seconds ending at `now`, keeping one baseline point
    /// before the window.
    pub fn prune(&mut self, now: f64, window: f64) {
        while self.points.len() >= 2 && self.points[1].at <= now - window {
            self.points.pop_front();
        }
        self.flows.prune(now, window);
        self.slice_seconds = window / flows::SLICES;
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

    /// The latest scrape, whole.
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
        assert_eq!(kept.demand_seats_high_watermark, Some(12.0));
        assert_eq!(kept.no_accommodation_total, Some(3.0));
        assert_eq!(kept.rejected("queue-full"), Some(7.0));
        assert_eq!(kept.rejected("timeout"), None);
        let histogram = |h: Option<Histogram>| h.map(|h| (h.buckets, h.count));
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
    fn points_share_names_and_bounds_and_only_the_latest_is_whole() {
        let mut h = ReplicaHistory::default();
        h.push(point(0.0, snapshot(1.0, 10.0)));
        h.push(point(5.0, snapshot(2.0, 30.0)));
        let (a, b) = (&h.points[0], &h.points[1]);
        assert!(Arc::ptr_eq(&a.levels[0].0, &b.levels[0].0));
        assert!(Arc::ptr_eq(
            &a.flow_schema_rejected_total[0].0 .1,
            &b.flow_schema_rejected_total[0].0 .1
        ));
        let bounds = |p: &WindowPoint| {
            p.levels[0]
                .1
                .wait_seconds
                .as_ref()
                .map(|c| c.bounds.clone())
        };
        match (bounds(a), bounds(b)) {
            (Some(x), Some(y)) => assert!(Arc::ptr_eq(&x, &y)),
            other => panic!("{other:?}"),
        }
        // Each point keeps its own counts.
        assert_eq!(
            a.level("workload-low").map(|l| l.rejected("queue-full")),
            Some(Some(1.0))
        );
        assert_eq!(
            b.level("workload-low").map(|l| l.rejected("queue-full")),
            Some(Some(2.0))
        );
        assert_eq!(h.latest().map(|p| p.at), Some(5.0));
        assert_eq!(
            h.latest().map(|p| p.snapshot.resource_objects.len()),
            Some(1)
        );
        assert_eq!(h.window(5.0, 60.0).len(), 2);
        assert_eq!(h.window(4.0, 60.0).len(), 1);
    }
}
