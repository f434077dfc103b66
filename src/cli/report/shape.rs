//! What `report` answers, as JSON shows it (`{"incidents": [...], "from", "to", "step", "sources"}`) and the table,
//! Markdown and page render it.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{alerts_of, rfc3339};
use crate::alert::replay::Episode;
use crate::analyze::incidents::Incident;

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub incidents: Vec<IncidentReport>,
    pub from: String,
    pub to: String,
    /// The time between two points read, e.g. `30s`.
    pub step: String,
    pub sources: Vec<String>,
    /// Replicas with APF series in the window.
    pub replicas: usize,
}

/// One stretch of rejections (or, with --include-pressure, of no headroom) on one level of one replica.
#[derive(Debug, Clone, Serialize)]
pub struct IncidentReport {
    pub cluster: Option<String>,
    pub apiserver: String,
    pub priority_level: String,
    /// The first point of the stretch.
    pub started_at: String,
    /// The first point whose counters show a 429: the first came after the point before it.
    pub first_rejection: Option<String>,
    pub last_rejection: Option<String>,
    pub peak_rejected_per_second: f64,
    pub rejected_total: f64,
    /// Worst first.
    pub flow_schemas: Vec<SchemaReport>,
    /// When APFHeadroomLow's condition began to hold before the first 429 (its threshold from the config).
    pub headroom_low_since: Option<String>,
    pub max_waiting_requests: Option<f64>,
    /// queues x queueLengthLimit, where the level's configuration was known.
    pub queue_capacity_requests: Option<f64>,
    pub longest_wait_p99_seconds: Option<f64>,
    pub min_headroom_seats: Option<f64>,
    /// The first point after the last 429 with none and no request waiting.
    pub recovered_at: Option<String>,
    /// apf-monitor's rules replayed on the history: when each went pending and fired.
    pub alerts: Vec<AlertReplay>,
    /// What the alert that fired nearest before the first 429 (else the first to fire) proposed, on the seats seen
    /// then.
    pub remediation: Option<String>,
    /// `first_rejection` in unix seconds, for the page's time axis.
    #[serde(skip)]
    pub(super) first: Option<f64>,
    #[serde(skip)]
    pub(super) points: std::ops::Range<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SchemaReport {
    pub flow_schema: String,
    pub rejected: f64,
    /// By reason (`queue-full`, `time-out`, `concurrency-limit`, `cancelled`).
    pub reasons: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AlertReplay {
    pub alertname: String,
    pub severity: Option<String>,
    /// The rejection reason, for APFRequestsRejected (one alert per reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub pending_at: String,
    /// `None`: its condition ended before its `for` passed.
    pub fired_at: Option<String>,
    pub resolved_at: Option<String>,
    /// Seconds from its firing to the first 429 (to the incident's start without 429s); negative when it fired
    /// after.
    pub lead_seconds: Option<f64>,
    #[serde(skip)]
    pub(super) pending: f64,
    #[serde(skip)]
    pub(super) fired: Option<f64>,
    #[serde(skip)]
    pub(super) ended: Option<f64>,
}

/// The incident as reported, with the alerts on its level and replica from `lookback` seconds before it to its
/// recovery.
pub(super) fn incident(i: &Incident, episodes: &[Episode], lookback: f64) -> IncidentReport {
    let reference = i.first_rejection.unwrap_or(i.started_at);
    let ended = i.recovered_at.or(i.last_rejection).unwrap_or(i.started_at);
    let on: Vec<&Episode> = alerts_of(
        episodes,
        &i.replica,
        &i.priority_level,
        i.started_at - lookback,
        ended,
    )
    .collect();
    let alerts: Vec<AlertReplay> = on
        .iter()
        .map(|e| AlertReplay {
            alertname: e.alertname().to_string(),
            severity: e.labels.get("severity").cloned(),
            reason: e.labels.get("reason").cloned(),
            pending_at: rfc3339(e.pending_at),
            fired_at: e.fired_at.map(rfc3339),
            resolved_at: e.fired_at.and(e.ended_at).map(rfc3339),
            lead_seconds: e.fired_at.map(|f| reference - f),
            pending: e.pending_at,
            fired: e.fired_at,
            ended: e.ended_at,
        })
        .collect();
    let headroom_low_since = on
        .iter()
        .filter(|e| e.alertname() == "APFHeadroomLow" && e.pending_at <= reference)
        .map(|e| e.pending_at)
        .reduce(f64::min)
        .map(rfc3339);
    // The alert that fired nearest before the first 429: its remediation is priced on the pressure that gave the
    // 429s, where the earliest warning, minutes before, often saw a level only a few seats short. Without one, the
    // first alert that fired.
    let fired: Vec<(f64, &Episode)> = on.iter().filter_map(|e| Some((e.fired_at?, *e))).collect();
    let remediation = fired
        .iter()
        .filter(|(at, _)| *at <= reference)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .or_else(|| fired.iter().min_by(|a, b| a.0.total_cmp(&b.0)))
        .and_then(|(_, e)| e.annotations.get("remediation").cloned());
    IncidentReport {
        cluster: i.replica.cluster.clone(),
        apiserver: i.replica.apiserver.clone(),
        priority_level: i.priority_level.clone(),
        started_at: rfc3339(i.started_at),
        first_rejection: i.first_rejection.map(rfc3339),
        last_rejection: i.last_rejection.map(rfc3339),
        peak_rejected_per_second: i.peak_rejected_per_second,
        rejected_total: i.rejected_total,
        flow_schemas: i
            .flow_schemas
            .iter()
            .map(|s| SchemaReport {
                flow_schema: s.flow_schema.clone(),
                rejected: s.rejected,
                reasons: s.reasons.clone(),
            })
            .collect(),
        headroom_low_since,
        max_waiting_requests: i.max_waiting_requests,
        queue_capacity_requests: i.queue_capacity_requests,
        longest_wait_p99_seconds: i.longest_wait_p99_seconds,
        min_headroom_seats: i.min_headroom_seats,
        recovered_at: i.recovered_at.map(rfc3339),
        alerts,
        remediation,
        first: i.first_rejection,
        points: i.points.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(name: &str, fired_at: Option<f64>, remediation: &str) -> Episode {
        Episode {
            labels: [
                ("alertname".to_string(), name.to_string()),
                ("priority_level".to_string(), "workload-low".to_string()),
            ]
            .into(),
            replica: Default::default(),
            pending_at: fired_at.unwrap_or(50.0) - 10.0,
            fired_at,
            ended_at: None,
            annotations: [("remediation".to_string(), remediation.to_string())].into(),
        }
    }

    fn rejecting_from(first: f64) -> Incident {
        Incident {
            replica: Default::default(),
            priority_level: "workload-low".into(),
            started_at: first,
            first_rejection: Some(first),
            last_rejection: Some(first + 60.0),
            peak_rejected_per_second: 10.0,
            rejected_total: 100.0,
            flow_schemas: Vec::new(),
            max_waiting_requests: None,
            queue_capacity_requests: None,
            longest_wait_p99_seconds: None,
            min_headroom_seats: None,
            recovered_at: None,
            points: 0..0,
        }
    }

    #[test]
    fn the_remediation_is_the_one_priced_nearest_before_the_first_429() {
        let episodes = [
            episode(
                "APFExhaustionPredicted",
                Some(100.0),
                "early: a few seats short",
            ),
            episode("APFHeadroomExhausted", Some(170.0), "at the pressure"),
            episode("APFRequestsRejected", Some(205.0), "after the first 429"),
            episode("APFHeadroomLow", None, "never fired"),
        ];
        let r = incident(&rejecting_from(200.0), &episodes, 600.0);
        assert_eq!(r.remediation.as_deref(), Some("at the pressure"));
        // Nothing fired before it: the first that fired.
        let r = incident(&rejecting_from(50.0), &episodes, 600.0);
        assert_eq!(r.remediation.as_deref(), Some("early: a few seats short"));
    }
}
