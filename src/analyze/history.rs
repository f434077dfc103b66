//! The snapshots of one replica inside the sliding window (plus one before it, the baseline of rates).
use std::collections::VecDeque;
use std::sync::Arc;

use apf::model::ReplicaSnapshot;

#[derive(Debug, Clone)]
pub struct Point {
    /// Seconds on a monotonic clock chosen by the caller.
    pub at: f64,
    /// RFC 3339 wall time of the scrape, for reports.
    pub wall_time: String,
    pub snapshot: Arc<ReplicaSnapshot>,
}

#[derive(Debug, Clone, Default)]
pub struct ReplicaHistory {
    points: VecDeque<Point>,
}

impl ReplicaHistory {
    pub fn push(&mut self, point: Point) {
        self.points.push_back(point);
    }

    /// Drops points no longer needed for a window of `window` seconds ending at `now`, keeping one baseline point
    /// before the window.
    pub fn prune(&mut self, now: f64, window: f64) {
        while self.points.len() >= 2 && self.points[1].at <= now - window {
            self.points.pop_front();
        }
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
