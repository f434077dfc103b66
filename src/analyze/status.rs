//! ok / warning / critical per level, with the default thresholds of the built-in alerts (product.md).
use serde::Serialize;

use super::LevelReport;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LevelStatus {
    #[default]
    Ok,
    Warning,
    Critical,
}

#[derive(Debug, Clone)]
pub struct Thresholds {
    /// APFHeadroomLow: headroom ratio below this.
    pub headroom_ratio_warning: f64,
    /// APFQueueNearFull: the fullest queue at this share of queueLengthLimit.
    pub queue_full_ratio: f64,
    /// APFExhaustionPredicted: seconds to exhaustion below this.
    pub exhaustion_seconds_warning: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            headroom_ratio_warning: 0.2,
            queue_full_ratio: 0.8,
            exhaustion_seconds_warning: 300.0,
        }
    }
}

impl Thresholds {
    /// The worst status any built-in rule gives this level now (without `for`: one evaluation).
    pub fn classify(&self, l: &LevelReport) -> LevelStatus {
        let exhausted = l.headroom_seats.is_some_and(|h| h <= 0.0)
            && l.inqueue_requests.is_some_and(|q| q > 0.0);
        let queue_near_full = match (l.fullest_queue_requests, l.queue_length_limit) {
            (Some(f), Some(limit)) if limit > 0.0 => f >= self.queue_full_ratio * limit,
            _ => false,
        };
        let rejecting = l
            .rejected_per_second
            .as_ref()
            .is_some_and(|r| r.values().any(|v| *v > 0.0));
        if exhausted || queue_near_full || rejecting {
            return LevelStatus::Critical;
        }
        let low = l
            .headroom_ratio
            .is_some_and(|r| r < self.headroom_ratio_warning);
        let predicted = l
            .seconds_to_exhaustion
            .is_some_and(|s| s < self.exhaustion_seconds_warning);
        if low || predicted {
            return LevelStatus::Warning;
        }
        LevelStatus::Ok
    }
}
