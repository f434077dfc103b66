//! The snapshots of one replica inside the sliding window (plus one before it, the baseline of rates), and the
//! flows of its dumps summed over the window.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use apf::model::ReplicaSnapshot;

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

#[derive(Debug, Clone)]
pub struct ReplicaHistory {
    points: VecDeque<Point>,
    /// The dumps' flows, summed over the window apart from the points: only their means are read.
    flows: FlowWindow,
    /// A tenth of the window last pruned to: the flows' slices.
    slice_seconds: f64,
}

impl Default for ReplicaHistory {
    fn default() -> Self {
        Self {
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
        // Objects per resource speak for the latest scrape only (the LIST estimate): the points before it do without
        // them, which in a large fleet was most of what the window held. A point still shared (never, between
        // rounds) keeps them.
        if let Some(previous) = self
            .points
            .back_mut()
            .and_then(|p| Arc::get_mut(&mut p.snapshot))
        {
            previous.resource_objects = Default::default();
            previous.resource_size_bytes = Default::default();
        }
        self.points.push_back(point);
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
    pub fn window(&self, now: f64, window: f64) -> Vec<Point> {
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
            .cloned()
            .collect()
    }

    /// Every point kept, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Point> {
        self.points.iter()
    }

    pub fn latest(&self) -> Option<&Point> {
        self.points.back()
    }

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

    fn point(at: f64, pods: f64) -> Point {
        let snapshot = ReplicaSnapshot {
            resource_objects: Arc::new([("pods".to_string(), pods)].into()),
            resource_size_bytes: Arc::new([("pods".to_string(), pods * 1000.0)].into()),
            ..Default::default()
        };
        Point {
            at,
            wall_time: String::new(),
            snapshot: Arc::new(snapshot),
        }
    }

    #[test]
    fn only_the_latest_point_keeps_objects_per_resource() {
        let mut h = ReplicaHistory::default();
        h.push(point(0.0, 1.0));
        h.push(point(5.0, 2.0));
        h.push(point(10.0, 3.0));
        let kept: Vec<usize> = h
            .iter()
            .map(|p| p.snapshot.resource_objects.len())
            .collect();
        assert_eq!(kept, [0, 0, 1]);
        let latest = h.latest().map(|p| p.snapshot.clone()).unwrap_or_default();
        assert_eq!(latest.resource_objects.get("pods"), Some(&3.0));
        assert_eq!(latest.resource_size_bytes.get("pods"), Some(&3000.0));
        // A point someone still holds is left whole.
        let held = h.latest().map(|p| p.snapshot.clone());
        h.push(point(15.0, 4.0));
        assert_eq!(held.map(|s| s.resource_objects.len()), Some(1));
        let kept: Vec<usize> = h
            .iter()
            .map(|p| p.snapshot.resource_objects.len())
            .collect();
        assert_eq!(kept, [0, 0, 1, 1]);
    }
}
