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

/// The width of a waiting request: the mean seats of the waiting requests (1.28+), else 1.
pub fn waiting_width(l: &LevelReport) -> f64 {
    match (l.inqueue_seats, l.inqueue_requests) {
        (Some(seats), Some(q)) if q > 0.0 => (seats / q).max(1.0),
        _ => 1.0,
    }
}

/// No seat for the requests that wait: headroom below the width of a waiting request (plus `extra` seats of margin),
/// which then cannot be dispatched either. A LIST 10 seats wide does not fit in 8 free seats.
pub fn is_exhausted(l: &LevelReport, extra: f64) -> bool {
    let (Some(headroom), Some(queued)) = (l.headroom_seats, l.inqueue_requests) else {
        return false;
    };
    queued > 0.0 && headroom < waiting_width(l) + extra
}

impl Thresholds {
    /// The worst status any built-in rule gives this level now (without `for`: one evaluation).
    pub fn classify(&self, l: &LevelReport) -> LevelStatus {
        let exhausted = is_exhausted(l, 0.0);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn level(headroom: f64, queued: f64, queued_seats: Option<f64>) -> LevelReport {
        LevelReport {
            limit_seats: Some(100.0),
            headroom_seats: Some(headroom),
            headroom_ratio: Some(headroom / 100.0),
            inqueue_requests: Some(queued),
            inqueue_seats: queued_seats,
            ..Default::default()
        }
    }

    #[test]
    fn exhausted_means_no_seat_for_the_waiting_requests() {
        assert!(is_exhausted(&level(0.0, 3.0, None), 0.0));
        // 8 free seats, but the waiting LISTs are 10 seats wide: they cannot be dispatched.
        assert!(is_exhausted(&level(8.0, 30.0, Some(300.0)), 0.0));
        assert!(!is_exhausted(&level(8.0, 30.0, Some(30.0)), 0.0));
        assert!(!is_exhausted(&level(0.0, 0.0, None), 0.0));
        let t = Thresholds::default();
        assert_eq!(
            t.classify(&level(8.0, 30.0, Some(300.0))),
            LevelStatus::Critical
        );
        assert_eq!(t.classify(&level(15.0, 0.0, None)), LevelStatus::Warning);
        assert_eq!(t.classify(&level(50.0, 0.0, None)), LevelStatus::Ok);
    }
}
