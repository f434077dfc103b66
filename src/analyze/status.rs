//! The worst state of a level, as the alert rules judge it (`alert/rules.rs` decides; the report only carries it).
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

/// The width of a waiting request: the mean seats of the waiting requests (1.28+), else 1.
pub fn waiting_width(l: &LevelReport) -> f64 {
    match (l.inqueue_seats, l.inqueue_requests) {
        (Some(seats), Some(q)) if q > 0.0 => (seats / q).max(1.0),
        _ => 1.0,
    }
}
