//! Headroom, rates, trends and the flows behind the pressure: pure functions over a replica's snapshots in the
//! sliding window. Nothing here does I/O or reads a clock: times come in as seconds.
mod advice;
mod audit;
mod flows;
mod history;
pub mod incidents;
mod list_costs;
mod math;
pub mod predict;
mod problem;
pub mod round;
mod saturation;
mod settings;
mod status;

pub use advice::{advise, ClientAdvice, ClientRecommendation, ReplicaRate, SchemaCost};
pub use audit::{AuditLevel, AuditReport, AuditUser, AuditedSchema, ObjectsInForce};
pub use flows::{verb_and_resource, FLOWS_PER_SCHEMA};
use history::{level_counter, level_present};
pub use history::{LevelSample, Point, ReplicaHistory, WindowPoint};
pub use list_costs::ListCosts;
pub use math::{
    counter_increase, counter_rate, histogram_quantile, latest_trend, share_above, Trend,
};
pub use problem::Problem;
pub use saturation::{HeldBy, Saturation, FULL, MIN_EPISODES, OVERDUE_AFTER};
pub use settings::AnalysisConfig;
pub use status::{waiting_width, LevelStatus};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use apf::model::{LevelSnapshot, ReplicaKey, ReplicaSnapshot, EXEMPT};

/// The shape shared by `check --output json` and `/api/v1/status` (docs/guides/check.md, docs/reference/http-api.md), named like the metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatusReport {
    /// Shared with the analysis' own state: a fleet's reports are thousands, published every round.
    pub apiservers: Vec<Arc<ApiserverReport>>,
    /// Pending and firing alerts (and those muted by inhibition or a silence), from the alerting stage.
    pub alerts: Vec<AlertReport>,
    /// The configuration review of the objects the replicas serve (`check --review`); absent until they were
    /// read, and from `check` without `--review`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_findings: Option<Vec<apf::review::Finding>>,
    /// Who got the 429s: per cluster, the audited requests of the window (absent without audit events).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditReport>,
    /// How fast each client may go: per replica, its top flows and the users audit events name, worst first
    /// (observed over sustainable). Filled by [`advise`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<ClientAdvice>,
    /// One recommendation per client over the replicas it was seen on, worst first. Filled by [`advise`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recommendations: Vec<ClientRecommendation>,
    /// Who sends the direct notifications (Slack, email, webhook), from the alerting stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notifier: Option<NotifierReport>,
}

/// Who sends the direct notifications: this replica, or the holder of the Lease (docs/operations/high-availability.md).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NotifierReport {
    /// This replica sends them now.
    pub leading: bool,
    /// `namespace/name` of the Lease the replicas elect through; absent when this replica sends without an election.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// This replica's identity in the election.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The replica holding the Lease, as last read, and since when (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_since: Option<String>,
    /// The notification log in the Lease: entries (one per alert group and receiver) and its size in bytes.
    pub log_entries: usize,
    pub log_bytes: usize,
}

/// One alert as `/api/v1/status` shows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AlertReport {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `pending`, `firing`, `inhibited`, `silenced` or `resolved`.
    pub state: String,
    /// RFC 3339: when the condition began (pending) or the alert fired.
    pub active_since: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ApiserverReport {
    pub apiserver: String,
    /// The replica's cluster, when read from a Prometheus that labels one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The Prometheus source the replica is read through (absent: scraped directly). Such a replica has no debug
    /// dumps and no objects: no flows, no fullest queue, no queue settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_through: Option<String>,
    pub kubernetes_version: Option<String>,
    /// RFC 3339 time of the last successful `/metrics` scrape.
    pub scraped_at: Option<String>,
    /// Problems of the last round, each naming what failed and what to do.
    pub errors: Vec<Problem>,
    pub levels: Vec<LevelReport>,
    /// Rejections per second by (priority level, flow schema, reason) over the window.
    #[serde(skip)]
    pub flow_schema_rejected_per_second: Vec<(String, String, String, f64)>,
    /// What a LIST of each resource reads on this replica: the remediation prices a flow's LISTs with it.
    #[serde(skip)]
    pub list_costs: ListCosts,
    /// The flowcontrol objects the replica serves, when read: the remediation matches a flow against them.
    #[serde(skip)]
    pub objects: Option<Arc<apf::model::FlowcontrolObjects>>,
    /// The recent predictions of each level's remediations (the daemon's prediction task), by level, newest first:
    /// one per change predicted.
    #[serde(skip)]
    pub predictions: BTreeMap<String, Vec<Arc<predict::RemedyPrediction>>>,
}

impl ApiserverReport {
    /// Which replica this is: its cluster and apiserver.
    pub fn key(&self) -> ReplicaKey {
        ReplicaKey {
            cluster: self.cluster.clone(),
            apiserver: self.apiserver.clone(),
        }
    }

    /// Why some numbers are absent on a replica read through a Prometheus: what people ask first.
    pub fn absent_without_dumps(&self) -> Option<String> {
        self.read_through.as_ref().map(|source| {
            format!(
                "read through the Prometheus {source}: without the debug dumps and the PriorityLevelConfigurations \
                 there are no flows, no fullest queue and no queue capacity (absent, not zero); the alerts that \
                 need them do not fire"
            )
        })
    }

    /// The replica as a sentence names it: `10.0.0.5:6443`, or `10.0.0.5:6443 in cluster prod`.
    pub fn display_name(&self) -> String {
        match &self.cluster {
            Some(c) => format!("{} in cluster {c}", self.apiserver),
            None => self.apiserver.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LevelReport {
    pub priority_level: String,
    #[serde(serialize_with = "round::seats")]
    pub limit_seats: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub nominal_limit_seats: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub upper_limit_seats: Option<f64>,
    /// NominalCL minus what the level lends (1.26+): the seats its configuration keeps for its own load, which a
    /// share move proposed to feed another level leaves it. Not in the JSON.
    #[serde(skip)]
    pub lower_limit_seats: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub executing_seats: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub headroom_seats: Option<f64>,
    #[serde(serialize_with = "round::ratio")]
    pub headroom_ratio: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub inqueue_requests: Option<f64>,
    /// Seats the waiting requests will need (1.28+).
    #[serde(serialize_with = "round::seats")]
    pub inqueue_seats: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub queue_capacity_requests: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub queue_length_limit: Option<f64>,
    #[serde(serialize_with = "round::seats")]
    pub fullest_queue_requests: Option<f64>,
    /// By reason; null until two scrapes span a window.
    #[serde(serialize_with = "round::rates")]
    pub rejected_per_second: Option<BTreeMap<String, f64>>,
    /// Rejections on record by reason, counted since the replica started (the counters of the last scrape): what a
    /// single scrape can tell when it has no rate.
    #[serde(serialize_with = "round::counts")]
    pub rejected_total: BTreeMap<String, f64>,
    #[serde(serialize_with = "round::millis")]
    pub wait_p99_seconds: Option<f64>,
    /// Seats in use / enforced limit, 99th percentile of the window's time, from the apiserver's own
    /// time-integrated histogram (1.25+): a saturation between two scrapes shows here and in no gauge.
    #[serde(serialize_with = "round::ratio")]
    pub seat_utilization_p99: Option<f64>,
    /// The window's seat utilization as the apiserver integrated it: cumulative buckets of seats in use / enforced
    /// limit, counting nanoseconds (1.25+; empty before two scrapes). The rules read from it how long the level
    /// spent past a threshold ([`LevelReport::time_above`]). Not in the JSON.
    #[serde(skip)]
    pub seat_utilization_window: Vec<(f64, f64)>,
    /// The same over the recent part of the window ([`RECENT_SHARE`] of it, and two scrapes at least): what tells a
    /// level that recovered from one still under pressure ([`LevelReport::time_above_recently`]). Not in the JSON.
    #[serde(skip)]
    pub seat_utilization_recent: Vec<(f64, f64)>,
    /// The most seats demanded (executing + waiting) in the window, from `demand_seats_high_watermark` (1.26+).
    #[serde(serialize_with = "round::seats")]
    pub demand_seats_max: Option<f64>,
    /// The smoothed seat demand borrowing allocates by, at the last scrape (1.26+): where a prediction's replay
    /// starts the level's memory of demand. Not in the JSON.
    #[serde(skip)]
    pub demand_seats_smoothed: Option<f64>,
    /// Dispatch attempts that found no free seat, per second over the window (1.24+): the earliest sign.
    #[serde(serialize_with = "round::ratio")]
    pub no_accommodation_per_second: Option<f64>,
    #[serde(serialize_with = "round::whole")]
    pub seconds_to_exhaustion: Option<f64>,
    /// The rise of seats in use that `seconds_to_exhaustion` extrapolates (absent when it is 0 or absent): how
    /// fast, and since when. Not in the JSON.
    /// Boxed, as the saturation below: a fleet's reports hold tens of thousands of levels, most without either.
    #[serde(skip)]
    pub seats_rising: Option<Box<Trend>>,
    /// The episodes in which the level was full over the lookback (`analysis.lookback`); absent when it was never
    /// full in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saturation: Option<Box<Saturation>>,
    /// The worst alert rule holding on the level (filled in by the rules; `ok` until then).
    pub status: LevelStatus,
    pub top_flows: Vec<FlowReport>,
    /// What each flow schema's requests cost over the window (rate advice). Not in the JSON.
    #[serde(skip)]
    pub flow_schema_costs: BTreeMap<String, SchemaCost>,
    /// The most flows with requests in any dump of the window: fair queuing's divisor. Not in the JSON.
    #[serde(skip)]
    pub peak_active_flows: Option<u32>,
    /// Headroom in seats at each scrape of the window, as (seconds before the report, seats): the status page's
    /// trend line. Not in the JSON: the metrics' history is Prometheus' job.
    #[serde(skip)]
    pub headroom_trend: Vec<(f64, f64)>,
}

impl LevelReport {
    /// The share of the window's time the level spent with more than `utilization` of its limit in use, by the
    /// apiserver's own integration (1.25+): sustained pressure, where one scrape sees an instant and the 99th
    /// percentile a blip.
    pub fn time_above(&self, utilization: f64) -> Option<f64> {
        share_above(utilization, &self.seat_utilization_window)
    }

    /// [`LevelReport::time_above`] over the recent part of the window alone: 0 once a level has recovered, while
    /// the whole window still holds the pressure from before.
    pub fn time_above_recently(&self, utilization: f64) -> Option<f64> {
        share_above(utilization, &self.seat_utilization_recent)
    }
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct FlowReport {
    pub flow_schema: String,
    pub flow: String,
    /// Mean over the window's dumps.
    #[serde(serialize_with = "round::mean")]
    pub waiting_requests: f64,
    #[serde(serialize_with = "round::mean")]
    pub executing_seats: f64,
    /// Users seen in the flow (with request details): who to talk to.
    pub users: Vec<String>,
    /// e.g. `list pods`.
    pub example_request: Option<String>,
    /// Seats per request of the flow's requests listed in the window's dumps (waiting, and executing from 1.28).
    #[serde(skip)]
    pub seats_per_request: Option<f64>,
    /// The flow's share of its flow schema's pressure over the window: its share of the schema's requests, as far
    /// as the dumps tell.
    #[serde(skip)]
    pub schema_share: Option<f64>,
    /// How fast the client behind the flow may go (rate advice), when what it needs is known.
    #[serde(skip)]
    pub advice: Option<ClientAdvice>,
}

/// The share of the window, at its end, that tells whether pressure the window holds is still there: a quarter (15 s
/// of a minute). A rule reading the window's histogram holds only while this part of it shows the pressure too.
pub const RECENT_SHARE: f64 = 0.25;

/// Settings of the analysis.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// Seconds covered by rates, percentiles, trends and flow means.
    pub window_seconds: f64,
    pub top_flows: usize,
    /// Seconds over which the episodes of saturation are counted (at least the window).
    pub lookback_seconds: f64,
    /// The daemon predicts what each remediation's change does (`analysis.predictions`).
    pub predictions: bool,
}

impl Default for Analysis {
    fn default() -> Self {
        Self {
            window_seconds: 60.0,
            top_flows: 10,
            lookback_seconds: 300.0,
            predictions: true,
        }
    }
}

impl Analysis {
    /// Everything about one replica, from its history; `now` is in the history's seconds.
    pub fn analyze_replica(
        &self,
        apiserver: &str,
        history: &ReplicaHistory,
        now: f64,
    ) -> ApiserverReport {
        let mut report = ApiserverReport {
            apiserver: apiserver.to_string(),
            ..Default::default()
        };
        let points = history.window(now, self.window_seconds);
        // `now` is at or after the latest scrape: the points of the window end with it.
        let (Some(latest), false) = (history.latest(), points.is_empty()) else {
            return report;
        };
        let snap = &latest.snapshot;
        report.kubernetes_version = snap.kubernetes_version.clone();
        report.list_costs = ListCosts {
            minor: snap.minor(),
            objects: snap.resource_objects.clone(),
            bytes: snap.resource_size_bytes.clone(),
        };
        report.scraped_at = Some(latest.wall_time.clone());
        // Only the points inside the window (not the baseline before it) speak for trends and flow means.
        let inside: Vec<&WindowPoint> = points
            .iter()
            .copied()
            .filter(|p| p.at >= now - self.window_seconds)
            .collect();
        let span = points.last().map(|l| l.at).unwrap_or(0.0)
            - points.first().map(|f| f.at).unwrap_or(0.0);
        let flows = history.top_flows(now, self.window_seconds, self.top_flows);
        // Sized once: a fleet's status holds thousands of replicas' levels.
        report.levels.reserve_exact(snap.levels.len());
        for (name, level) in &snap.levels {
            let mut lr = if name == EXEMPT {
                // Never limited, never rejects: its limit is a borrowing artefact, not a capacity (docs/reference/metrics.md).
                LevelReport {
                    priority_level: name.clone(),
                    executing_seats: level.executing_seats,
                    ..Default::default()
                }
            } else {
                self.level_report(name, level, &points, &inside, span)
            };
            if name != EXEMPT {
                lr.top_flows = flows.get(name.as_str()).cloned().unwrap_or_default();
                lr.peak_active_flows = advice::peak_active_flows(&inside, name);
                lr.saturation = history.saturation(name).map(Box::new);
            }
            report.levels.push(lr);
        }
        if points.len() >= 2 && span > 0.0 {
            let keys: BTreeSet<(&str, &str, &str)> = points
                .iter()
                .flat_map(|p| p.flow_schema_rejected_total().map(|(key, _)| key))
                .collect();
            // The keys come level by level: each level's presence is looked up once.
            let mut present: (&str, Vec<bool>) = ("", Vec::new());
            for key in keys {
                if present.0 != key.0 {
                    present = (key.0, level_present(&points, key.0));
                }
                let values = points.iter().map(|p| p.flow_schema_rejected(key));
                let rate = counter_rate(level_counter(&points, &present.1, values));
                report.flow_schema_rejected_per_second.push((
                    key.0.to_string(),
                    key.1.to_string(),
                    key.2.to_string(),
                    rate,
                ));
            }
        }
        for level in &mut report.levels {
            if level.priority_level != EXEMPT {
                level.flow_schema_costs = advice::schema_costs(
                    &points,
                    span,
                    &level.priority_level,
                    &report.flow_schema_rejected_per_second,
                );
            }
        }
        advice::advise_flows(&mut report);
        report
    }

    fn level_report(
        &self,
        name: &str,
        level: &LevelSnapshot,
        points: &[&WindowPoint],
        inside: &[&WindowPoint],
        span: f64,
    ) -> LevelReport {
        let headroom = level.headroom_seats();
        let limit = level.limit_seats;
        let capacity = level
            .config
            .as_ref()
            .and_then(|c| c.queue_capacity())
            .map(|c| c as f64);
        let levels = || points.iter().map(|p| p.level(name));
        let rejected_per_second = (points.len() >= 2 && span > 0.0).then(|| {
            let reasons: BTreeSet<&str> = levels()
                .flatten()
                .flat_map(|l| l.rejected_total().map(|(reason, _)| reason))
                .collect();
            reasons
                .into_iter()
                .map(|reason| {
                    // A level present without the reason's series has rejected nothing yet: 0.
                    let series = points.iter().map(|p| {
                        (
                            p.at,
                            p.level(name).map(|l| l.rejected(reason).unwrap_or(0.0)),
                        )
                    });
                    (reason.to_string(), counter_rate(series))
                })
                .collect()
        });
        let wait_p99_seconds = match (levels().next().flatten(), levels().next_back().flatten()) {
            (Some(first), Some(last)) if points.len() >= 2 => {
                math::histogram_delta_quantile(first.wait_seconds(), last.wait_seconds(), 0.99)
            }
            _ => None,
        };
        let seat_utilization_window =
            match (levels().next().flatten(), levels().next_back().flatten()) {
                (Some(first), Some(last)) if points.len() >= 2 => last
                    .seat_utilization()
                    .map(|l| math::histogram_delta(first.seat_utilization(), l))
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
        // The recent part of the window: its last quarter, and two scrapes at least. A level that recovered shows
        // nothing here while the whole window still holds the pressure from before.
        let recent_from = points.last().map_or(0.0, |p| p.at) - self.window_seconds * RECENT_SHARE;
        let recent_base = points
            .iter()
            .rposition(|p| p.at <= recent_from)
            .unwrap_or(0)
            .min(points.len().saturating_sub(3));
        let seat_utilization_recent = match (
            points.get(recent_base).and_then(|p| p.level(name)),
            levels().next_back().flatten(),
        ) {
            (Some(base), Some(last)) if points.len() >= 2 => last
                .seat_utilization()
                .map(|l| math::histogram_delta(base.seat_utilization(), l))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let seat_utilization_p99 = histogram_quantile(0.99, &seat_utilization_window);
        let demand_seats_max = inside
            .iter()
            .filter_map(|p| p.level(name)?.demand_seats_high_watermark())
            .reduce(f64::max);
        let no_accommodation_per_second = (points.len() >= 2 && span > 0.0)
            .then(|| {
                points
                    .iter()
                    .map(|p| (p.at, p.level(name).and_then(|l| l.no_accommodation_total())))
            })
            .filter(|_| level.no_accommodation_total.is_some())
            .map(counter_rate);
        // The fall of headroom that leads to 429s is demand rising: seats in use. A limit that shrinks because an idle
        // level lends its seats (1.26+ borrowing, every 10 s) is not exhaustion: the limit grows back with demand.
        let trend: Vec<(f64, f64)> = inside
            .iter()
            .filter_map(|p| Some((p.at, p.level(name)?.executing_seats()?)))
            .collect();
        let now = inside.last().map(|p| p.at).unwrap_or(0.0);
        let mut headroom_trend = Vec::with_capacity(inside.len());
        headroom_trend.extend(
            inside
                .iter()
                .filter_map(|p| Some((p.at - now, p.level(name)?.headroom_seats()?))),
        );
        // The fall that matters is the latest one: a level that idled for a minute and then began to fill is fitted
        // on the filling alone, so the estimate follows a new ramp within a few scrapes.
        let rising = latest_trend(&trend);
        // Requests waiting mean no seat fits them (APF queues a request only then): the level is exhausted for
        // them, though a few seats may be free for narrower ones.
        let waiting = level.inqueue_requests.is_some_and(|w| w > 0.0);
        let (seconds_to_exhaustion, seats_rising) = match (headroom, limit, rising) {
            (Some(h), _, _) if h <= 0.0 || waiting => (Some(0.0), None),
            (Some(_), Some(limit), Some(t)) => {
                let seconds = t.seconds_to(limit);
                (seconds, seconds.map(|_| Box::new(t)))
            }
            _ => (None, None),
        };
        LevelReport {
            priority_level: name.to_string(),
            limit_seats: limit,
            nominal_limit_seats: level.nominal_limit_seats,
            upper_limit_seats: level.upper_limit_seats,
            lower_limit_seats: level.lower_limit_seats,
            executing_seats: level.executing_seats,
            headroom_seats: headroom,
            headroom_ratio: match (headroom, limit) {
                (Some(h), Some(l)) if l > 0.0 => Some(h / l),
                _ => None,
            },
            inqueue_requests: level.inqueue_requests,
            inqueue_seats: level.inqueue_seats,
            queue_capacity_requests: capacity,
            queue_length_limit: level
                .config
                .as_ref()
                .and_then(|c| c.queue_length_limit)
                .map(f64::from),
            fullest_queue_requests: level
                .queues
                .as_ref()
                .map(|q| q.fullest_queue_requests as f64),
            rejected_per_second,
            rejected_total: level.rejected_total.clone(),
            wait_p99_seconds,
            seat_utilization_p99,
            seat_utilization_window,
            seat_utilization_recent,
            demand_seats_max,
            demand_seats_smoothed: level.demand_seats_smoothed,
            no_accommodation_per_second,
            seconds_to_exhaustion,
            seats_rising,
            saturation: None,
            status: LevelStatus::Ok,
            top_flows: Vec::new(),
            flow_schema_costs: BTreeMap::new(),
            peak_active_flows: None,
            headroom_trend,
        }
    }
}

/// One snapshot alone (`check --file`): no rates, no trend.
pub fn analyze_single(
    apiserver: &str,
    snapshot: ReplicaSnapshot,
    analysis: &Analysis,
) -> ApiserverReport {
    let mut history = ReplicaHistory::default();
    history.push(Point {
        at: 0.0,
        wall_time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        snapshot: Arc::new(snapshot),
    });
    analysis.analyze_replica(apiserver, &history, 0.0)
}

/// A snapshot and, when there is one, the snapshot `span` seconds before it (`check --prometheus`): rates,
/// percentiles and the trend over that span, by the same derivations as the daemon's history.
pub fn analyze_pair(
    apiserver: &str,
    baseline: Option<ReplicaSnapshot>,
    snapshot: ReplicaSnapshot,
    span: f64,
    analysis: &Analysis,
) -> ApiserverReport {
    let now = std::time::SystemTime::now();
    let mut history = ReplicaHistory::default();
    if let Some(b) = baseline {
        let then = now - std::time::Duration::from_secs_f64(span.max(0.0));
        history.push(Point {
            at: -span,
            wall_time: humantime::format_rfc3339_seconds(then).to_string(),
            snapshot: Arc::new(b),
        });
    }
    history.push(Point {
        at: 0.0,
        wall_time: humantime::format_rfc3339_seconds(now).to_string(),
        snapshot: Arc::new(snapshot),
    });
    analysis.analyze_replica(apiserver, &history, 0.0)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use apf::model::{FlowSample, Histogram, QueueSummary};

    fn level(limit: f64, executing: f64, queued: f64, rejected: &[(&str, f64)]) -> LevelSnapshot {
        LevelSnapshot {
            limit_seats: Some(limit),
            nominal_limit_seats: Some(limit),
            executing_seats: Some(executing),
            inqueue_requests: Some(queued),
            rejected_total: rejected.iter().map(|(r, v)| (r.to_string(), *v)).collect(),
            ..Default::default()
        }
    }

    fn history(points: Vec<(f64, ReplicaSnapshot)>) -> ReplicaHistory {
        let mut h = ReplicaHistory::default();
        for (at, snapshot) in points {
            h.push(Point {
                at,
                wall_time: String::new(),
                snapshot: Arc::new(snapshot),
            });
        }
        h
    }

    fn snap(levels: Vec<(&str, LevelSnapshot)>) -> ReplicaSnapshot {
        ReplicaSnapshot {
            levels: levels
                .into_iter()
                .map(|(n, l)| (n.to_string(), l))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn rejection_rates_over_the_window_survive_a_restart() {
        let h = history(vec![
            (
                0.0,
                snap(vec![("workload-low", level(100.0, 10.0, 0.0, &[]))]),
            ),
            // The series appears with the first rejections: counted from 0.
            (
                10.0,
                snap(vec![(
                    "workload-low",
                    level(100.0, 100.0, 50.0, &[("queue-full", 30.0)]),
                )]),
            ),
            (
                20.0,
                snap(vec![(
                    "workload-low",
                    level(100.0, 100.0, 50.0, &[("queue-full", 60.0)]),
                )]),
            ),
            // The apiserver restarted: 60 -> 12 means 12 new rejections.
            (
                30.0,
                snap(vec![(
                    "workload-low",
                    level(100.0, 100.0, 50.0, &[("queue-full", 12.0)]),
                )]),
            ),
        ]);
        let a = Analysis::default();
        let r = a.analyze_replica("a", &h, 30.0);
        let l = &r.levels[0];
        let rate = l.rejected_per_second.as_ref().unwrap()["queue-full"];
        assert!((rate - (30.0 + 30.0 + 12.0) / 30.0).abs() < 1e-9, "{rate}");
        assert_eq!(l.headroom_seats, Some(0.0));
        assert_eq!(l.seconds_to_exhaustion, Some(0.0));
    }

    #[test]
    fn a_single_scrape_has_no_rates() {
        let r = analyze_single(
            "a",
            snap(vec![(
                "workload-low",
                level(100.0, 10.0, 0.0, &[("queue-full", 9.0)]),
            )]),
            &Analysis::default(),
        );
        assert_eq!(r.levels[0].rejected_per_second, None);
        assert_eq!(r.levels[0].headroom_ratio, Some(0.9));
    }

    #[test]
    fn falling_headroom_predicts_exhaustion() {
        // Headroom falls 1 seat/s: 100, 95, ... 50 at t=50.
        let points = (0..=10)
            .map(|i| {
                (
                    i as f64 * 5.0,
                    snap(vec![(
                        "workload-low",
                        level(200.0, 100.0 + i as f64 * 5.0, 0.0, &[]),
                    )]),
                )
            })
            .collect();
        let r = Analysis::default().analyze_replica("a", &history(points), 50.0);
        let l = &r.levels[0];
        assert_eq!(l.headroom_seats, Some(50.0));
        // The page's trend: every scrape of the window, oldest first, in seconds before the latest.
        assert_eq!(l.headroom_trend.len(), 11);
        assert_eq!(l.headroom_trend[0], (-50.0, 100.0));
        assert_eq!(l.headroom_trend[10], (0.0, 50.0));
        assert!(
            (l.seconds_to_exhaustion.unwrap() - 50.0).abs() < 1e-6,
            "{:?}",
            l.seconds_to_exhaustion
        );
        // A limit lent away while seats in use stay flat predicts nothing (borrowing, not demand).
        let points = (0..=10)
            .map(|i| {
                let lent = level(200.0 - i as f64 * 10.0, 20.0, 0.0, &[]);
                (i as f64 * 5.0, snap(vec![("catch-all", lent)]))
            })
            .collect();
        let r = Analysis::default().analyze_replica("a", &history(points), 50.0);
        assert_eq!(r.levels[0].seconds_to_exhaustion, None);
        // Rising headroom predicts nothing.
        let points = (0..=10)
            .map(|i| {
                (
                    i as f64 * 5.0,
                    snap(vec![(
                        "workload-low",
                        level(200.0, 150.0 - i as f64, 0.0, &[]),
                    )]),
                )
            })
            .collect();
        let r = Analysis::default().analyze_replica("a", &history(points), 50.0);
        assert_eq!(r.levels[0].seconds_to_exhaustion, None);
    }

    /// A deterministic stream of numbers in [-0.5, 0.5): a linear congruential generator, seeded.
    fn uniform(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed;
        move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as f64 / (1u64 << 31) as f64 - 0.5
        }
    }

    /// Scrapes of workload-low every `step` seconds until `until`, seats in use `seats(t)` of `limit` (read as whole
    /// seats), each scrape's recorded time off by up to `jitter` seconds from the instant its gauges were read; every
    /// published time to exhaustion as (the scrape's time, the estimate).
    fn published(
        limit: f64,
        seats: impl Fn(f64) -> f64,
        step: f64,
        until: f64,
        jitter: f64,
        seed: u64,
    ) -> Vec<(f64, f64)> {
        let mut jitter_of = uniform(seed);
        let analysis = Analysis::default();
        let mut h = ReplicaHistory::default();
        let mut out = Vec::new();
        for k in 0..=(until / step) as u32 {
            let read = f64::from(k) * step;
            let at = read + 2.0 * jitter * jitter_of();
            h.push(Point {
                at,
                wall_time: String::new(),
                snapshot: Arc::new(snap(vec![(
                    "workload-low",
                    level(limit, seats(read).round(), 0.0, &[]),
                )])),
            });
            h.prune(at, analysis.window_seconds, analysis.lookback_seconds);
            let l = &analysis.analyze_replica("a", &h, at).levels[0];
            if let Some(s) = l.seconds_to_exhaustion {
                out.push((read, s));
            }
        }
        out
    }

    /// Every estimate within `tolerance` of `truth`, and each one below the one before.
    fn only_falls_near_the_truth(
        published: &[(f64, f64)],
        truth: impl Fn(f64) -> f64,
        tolerance: f64,
    ) {
        for (t, s) in published {
            let truth = truth(*t);
            assert!(
                (s - truth).abs() <= tolerance * truth,
                "at {t} s: {s} for {truth}"
            );
        }
        for pair in published.windows(2) {
            assert!(
                pair[1].1 < pair[0].1,
                "the estimate rose from {:?} to {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn a_new_ramp_is_followed_within_a_few_scrapes() {
        // The shape that starts outages: workload-low steady at 185 of 245 seats for minutes, scraped every second,
        // then 3 more seats a second: no seat free 20 s later. Each scrape's time is off by up to 50 ms (the time
        // apf-monitor stamps is when it asked for /metrics; the apiserver reads its gauges a moment later).
        const RAMP: f64 = 120.0;
        let seats = |t: f64| 185.0 + 3.0 * (t - RAMP).max(0.0);
        for seed in 1..=20 {
            let published = published(245.0, seats, 1.0, RAMP + 19.0, 0.05, seed);
            let first = published.first().copied();
            // Nothing while the level was steady: a window of flat samples predicts no exhaustion.
            let Some((first, _)) = first.filter(|(t, _)| *t >= RAMP) else {
                panic!("seed {seed}: {published:?}");
            };
            assert!(
                first <= RAMP + 5.0,
                "seed {seed}: first published {} s into the ramp",
                first - RAMP
            );
            // From its first publication: within 20 % of the truth, and only falling.
            only_falls_near_the_truth(&published, |t| (245.0 - seats(t)) / 3.0, 0.2);
        }
    }

    #[test]
    fn on_a_steady_ramp_the_time_to_exhaustion_only_falls() {
        // Seats in use rise 2 a second toward a 400-seat limit, scraped every second; each scrape's recorded time is
        // off by up to 0.3 s from the instant its gauges were read (scrapes take time, and not the same each time).
        // An exhaustion minutes away is said once the fit can tell it to within a scrape interval, and from then on
        // the estimate only falls.
        for seed in 1..=10 {
            let published = published(400.0, |t| 2.0 * t, 1.0, 190.0, 0.3, seed);
            let first = published.first().map_or(f64::INFINITY, |p| p.0);
            assert!(first <= 30.0, "seed {seed}: first at {first} s");
            assert!(
                published.len() as f64 >= 190.0 - first,
                "seed {seed}: then at every scrape: {published:?}"
            );
            only_falls_near_the_truth(&published, |t| 200.0 - t, 0.05);
        }
    }

    #[test]
    fn once_told_the_estimate_stays_through_a_seat_of_scatter() {
        // Half a seat more a second, scraped every 5 s, each reading a seat off either way (requests start and end
        // around the instant): once published, the estimate is there at every scrape until the level is full (a
        // gap would restart an alert's `for`), and it stays near the truth.
        for seed in 1..=20 {
            let mut scatter = uniform(seed);
            let noise: Vec<f64> = (0..=60).map(|_| (2.0 * scatter()).round()).collect();
            let seats = |t: f64| 185.0 + 0.5 * t + noise[(t / 5.0) as usize];
            let published = published(245.0, seats, 5.0, 110.0, 0.05, seed);
            // Within a minute of a rise two minutes from the limit (sooner where the scatter is kinder).
            let first = published.first().map_or(f64::INFINITY, |p| p.0);
            assert!(first <= 60.0, "seed {seed}: first at {first} s");
            let told: Vec<f64> = published.iter().map(|p| p.0).collect();
            let every: Vec<f64> = (0..=22)
                .map(|k| f64::from(k) * 5.0)
                .filter(|t| *t >= first)
                .collect();
            assert_eq!(told, every, "seed {seed}: {published:?}");
            for (t, s) in &published {
                let truth = (245.0 - 185.0 - 0.5 * t) / 0.5;
                assert!(
                    (s - truth).abs() <= 0.2 * truth + 5.0,
                    "seed {seed} at {t} s: {s} for {truth}"
                );
            }
        }
    }

    #[test]
    fn jittery_flat_seats_predict_nothing() {
        // Steady load read with noise: seats in use scatter by up to +-n around 185 or 235 of 245, scraped every
        // second for five minutes. No stretch of it is a ramp to fit.
        for (mean, spread) in [(185.0, 2.0), (185.0, 10.0), (185.0, 40.0), (235.0, 8.0)] {
            for seed in 1..=10 {
                let mut noise = uniform(seed);
                let noisy: Vec<f64> = (0..=300).map(|_| mean + spread * noise()).collect();
                let published = published(
                    245.0,
                    |t| noisy[t as usize].min(244.0),
                    1.0,
                    300.0,
                    0.05,
                    seed,
                );
                assert!(
                    published.is_empty(),
                    "{mean} +- {spread}, seed {seed}: {published:?}"
                );
            }
        }
    }

    #[test]
    fn a_paused_ramp_that_rises_again_is_fitted_on_its_last_rise() {
        // 1 seat/s for 20 s, a 15 s pause, then 4 seats/s: the estimate is of the last rise, not of the window's
        // average.
        let seats = |t: f64| {
            if t < 20.0 {
                100.0 + t
            } else if t < 35.0 {
                120.0
            } else {
                120.0 + 4.0 * (t - 35.0)
            }
        };
        let published = published(245.0, seats, 1.0, 60.0, 0.0, 1);
        let (t, s) = *published.last().unwrap();
        assert_eq!(t, 60.0);
        let truth = (245.0 - seats(t)) / 4.0;
        assert!((s - truth).abs() <= 0.05 * truth, "{s} for {truth}");
        // During the pause nothing is predicted.
        assert!(
            !published.iter().any(|(t, _)| (25.0..35.0).contains(t)),
            "{published:?}"
        );
    }

    #[test]
    fn the_recent_part_of_the_window_tells_a_recovered_level() {
        // Scraped every 5 s; full (seat utilization 1.0) until 40 s, idle (0.1) after: the apiserver's histogram
        // counts the seconds spent in each bucket.
        let (mut full, mut idle) = (0.0, 0.0);
        let mut h = ReplicaHistory::default();
        for k in 0..=12 {
            let at = f64::from(k) * 5.0;
            if k > 0 {
                if at <= 40.0 {
                    full += 5.0;
                } else {
                    idle += 5.0;
                }
            }
            let mut l = level(100.0, 10.0, 0.0, &[]);
            l.seat_utilization = Some(Histogram {
                buckets: vec![
                    (0.1, idle),
                    (0.95, idle),
                    (1.0, idle + full),
                    (f64::INFINITY, idle + full),
                ],
                count: idle + full,
                sum: 0.0,
            });
            h.push(Point {
                at,
                wall_time: String::new(),
                snapshot: Arc::new(snap(vec![("workload-low", l)])),
            });
            let l = &Analysis::default().analyze_replica("a", &h, at).levels[0];
            let recently = l.time_above_recently(0.95).unwrap_or(-1.0);
            if at == 50.0 {
                // The last quarter (35..50 s) still holds 5 s of the level full.
                assert!((recently - 5.0 / 15.0).abs() < 1e-9, "{recently}");
            }
            if at == 60.0 {
                // The window (0..60 s) holds 40 s of the level full; its last quarter (45..60 s) none.
                let window = l.time_above(0.95).unwrap();
                assert!((window - 40.0 / 60.0).abs() < 1e-9, "{window}");
                assert_eq!(recently, 0.0);
            }
            if at == 5.0 {
                // Two scrapes: the recent part is all there is.
                assert_eq!(Some(recently), l.time_above(0.95));
            }
        }
    }

    #[test]
    fn exempt_gets_executing_seats_only() {
        let mut exempt = level(600.0, 3.0, 0.0, &[("concurrency-limit", 5.0)]);
        exempt.config = None;
        let r = analyze_single("a", snap(vec![("exempt", exempt)]), &Analysis::default());
        let l = &r.levels[0];
        assert_eq!(l.executing_seats, Some(3.0));
        assert_eq!(
            (l.limit_seats, l.headroom_seats, l.headroom_ratio),
            (None, None, None)
        );
    }

    #[test]
    fn fullest_queue_near_the_limit_is_critical() {
        let mut l = level(100.0, 50.0, 45.0, &[]);
        l.queues = Some(QueueSummary {
            queues: 128,
            active_queues: 1,
            waiting_requests: 45,
            fullest_queue_requests: 45,
        });
        l.config = Some(apf::model::PriorityLevelConfig {
            name: "workload-low".into(),
            queuing: true,
            exempt: false,
            queues: Some(128),
            hand_size: Some(6),
            queue_length_limit: Some(50),
            shares: Some(100),
            lendable_percent: Some(90),
            borrowing_limit_percent: None,
        });
        let r = analyze_single("a", snap(vec![("workload-low", l)]), &Analysis::default());
        let l = &r.levels[0];
        assert_eq!(l.queue_capacity_requests, Some(6400.0));
        assert_eq!(l.fullest_queue_requests, Some(45.0));
    }

    #[test]
    fn top_flows_are_window_means_ranked_by_pressure() {
        let flow = |name: &str, waiting: u64, seats: u64| FlowSample {
            priority_level: "workload-low".into(),
            flow_schema: "service-accounts".into(),
            flow: name.into(),
            waiting_requests: waiting,
            executing_seats: seats,
            users: vec![name.into()],
            example_request: Some("list pods".into()),
            listed_requests: waiting,
            listed_seats: waiting + seats,
        };
        let with = |flows: Vec<FlowSample>| {
            let mut s = snap(vec![("workload-low", level(100.0, 90.0, 10.0, &[]))]);
            s.flows = Some(flows);
            s
        };
        let h = history(vec![
            (0.0, with(vec![flow("agent", 10, 40), flow("ci", 1, 1)])),
            (5.0, with(vec![flow("agent", 20, 60)])),
        ]);
        let a = Analysis {
            top_flows: 1,
            ..Analysis::default()
        };
        let r = a.analyze_replica("a", &h, 5.0);
        let top = &r.levels[0].top_flows;
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].flow, "agent");
        assert_eq!(top[0].waiting_requests, 15.0);
        assert_eq!(top[0].executing_seats, 50.0);
    }
}
