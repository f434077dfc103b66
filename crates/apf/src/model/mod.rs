//! The version-independent snapshot of one kube-apiserver replica.
//!
//! This is the only module that knows the names of kube-apiserver's metrics and how they changed from one Kubernetes
//! version to the next (k8s.io/apiserver `pkg/util/flowcontrol/metrics/metrics.go`, release by release): everything downstream sees one shape per replica and
//! priority level, whichever metric generation the replica serves.
mod dumps;
mod families;
mod metrics;
mod objects;
mod prometheus;

pub use crate::{PriorityLevelConfig, EXEMPT};
pub use dumps::{
    apply_flows, apply_priority_levels_dump, apply_queues_dump, apply_requests_dump, FlowUser,
    FlowsBuilder, USERS_PER_FLOW,
};
pub use families::{
    is_object_count, is_wanted_sample, limit_families, wanted_families, wanted_series, Family,
};
pub use metrics::SnapshotBuilder;
pub use objects::{
    parse_flow_schema, parse_flow_schemas, parse_flowcontrol_documents,
    parse_priority_level_configuration, parse_priority_level_configurations,
    parse_priority_level_documents, resource_version, DocumentError, FlowcontrolObjects,
};
pub use prometheus::{FleetBuilder, ReplicaKey};

use std::collections::BTreeMap;

/// Which generation of metric names the replica serves; tells a reader of `check` why a number is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricGeneration {
    /// No APF metric at all (APF disabled, or not a kube-apiserver).
    None,
    /// 1.18-1.19: camelCase label names, `request_concurrency_limit`, executing counted in requests.
    CamelCase,
    /// 1.20-1.21: `request_concurrency_limit`, executing counted in requests.
    ConcurrencyLimit,
    /// 1.22-1.25: `request_concurrency_limit` and `request_concurrency_in_use` (seats).
    ConcurrencyInUse,
    /// 1.26+: borrowing: `current_limit_seats` is the enforced limit.
    Borrowing,
}

/// A cumulative histogram: upper bounds with cumulative counts, as exposed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// (le, cumulative count), sorted by le; `+Inf` last.
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
    pub sum: f64,
}

impl Histogram {
    pub(crate) fn add_bucket(&mut self, le: f64, count: f64) {
        // In bound order as they come (a store sorts `le` as text: `+Inf` and `10` before `2.5`), with room for
        // kube-apiserver's bucket lists at once (its APF histograms have 14 buckets in 1.28+).
        match self.buckets.binary_search_by(|(b, _)| b.total_cmp(&le)) {
            Ok(i) => self.buckets[i].1 += count,
            Err(i) => {
                if self.buckets.capacity() == 0 {
                    self.buckets.reserve_exact(16);
                }
                self.buckets.insert(i, (le, count));
            }
        }
    }
}

/// Queue state of one priority level, from `dump_queues`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSummary {
    pub queues: u32,
    /// Queues holding at least one waiting request.
    pub active_queues: u32,
    pub waiting_requests: u64,
    /// The most requests waiting in any one queue: a queue at queueLengthLimit rejects with `queue-full`.
    pub fullest_queue_requests: u64,
}

/// One flow (flow schema + distinguisher) seen in `dump_requests` at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowSample {
    pub priority_level: String,
    pub flow_schema: String,
    /// The APF flow distinguisher (user or namespace); empty when the level has at most one queue.
    pub flow: String,
    pub waiting_requests: u64,
    /// Seats held by executing requests (listed from 1.28 only).
    pub executing_seats: u64,
    /// Requests of this flow the dump lists (waiting, and executing from 1.28), and the seats they hold or will hold
    /// (`max(InitialSeats, FinalSeats)`, 1 each before 1.23): what one request of the flow costs.
    pub listed_requests: u64,
    pub listed_seats: u64,
    /// Users seen in this flow (with request details), a few at most.
    pub users: Vec<String>,
    /// Verb and resource of the first request seen, e.g. `list pods` (with request details).
    pub example_request: Option<String>,
}

/// The pressure a flow puts on its priority level: the requests it has waiting plus the seats its executing requests
/// hold. Flows are ranked by it (the round's cut, the window's top flows), and a flow with more than half of its
/// level's is the one to isolate.
pub fn flow_pressure(waiting_requests: f64, executing_seats: f64) -> f64 {
    waiting_requests + executing_seats
}

/// Everything known of one priority level on one replica at one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelSnapshot {
    /// The enforced limit: `current_limit_seats` (1.26+), else `request_concurrency_limit`.
    pub limit_seats: Option<f64>,
    pub nominal_limit_seats: Option<f64>,
    pub lower_limit_seats: Option<f64>,
    pub upper_limit_seats: Option<f64>,
    /// Seats in use, summed over flow schemas.
    pub executing_seats: Option<f64>,
    pub executing_requests: Option<f64>,
    /// Requests waiting in queues, summed over flow schemas.
    pub inqueue_requests: Option<f64>,
    pub inqueue_seats: Option<f64>,
    /// Cumulative rejections by reason, summed over flow schemas.
    pub rejected_total: BTreeMap<String, f64>,
    pub dispatched_total: Option<f64>,
    /// Queue wait of every request (both `execute` values), summed over flow schemas.
    pub wait_seconds: Option<Histogram>,
    /// Seats in use / enforced limit, integrated over time by the apiserver (a timing-ratio histogram: counts are
    /// nanoseconds spent in each bucket), 1.25+.
    pub seat_utilization: Option<Histogram>,
    /// The most seats demanded (executing + waiting) over the last 10 s adjustment period, 1.26+.
    pub demand_seats_high_watermark: Option<f64>,
    pub demand_seats_average: Option<f64>,
    /// The smoothed seat demand borrowing allocates by (1.26+): it remembers about five minutes of demand (it decays
    /// by 0.977 every 10 s adjustment).
    pub demand_seats_smoothed: Option<f64>,
    /// Dispatch attempts that found no free seat, summed over flow schemas (1.24+).
    pub no_accommodation_total: Option<f64>,
    /// From `dump_queues`.
    pub queues: Option<QueueSummary>,
    /// From the PriorityLevelConfiguration object: queues, queueLengthLimit.
    pub config: Option<PriorityLevelConfig>,
    /// Flows with a request waiting or executing in `dump_requests` (executing listed from 1.28): the flows fair
    /// queuing shares the level's seats among. `None` when the dump was not read.
    pub active_flows: Option<u32>,
}

/// What the requests of one flow schema on one priority level cost and how many started, cumulative since the
/// replica started; summed over the series' other labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowSchemaTotals {
    /// `dispatched_requests_total`.
    pub dispatched_total: Option<f64>,
    /// `request_execution_seconds` of requests other than WATCHes (`type="regular"` from 1.24; a WATCH's
    /// execution is its initialization only): (sum, count).
    pub execution_seconds: Option<(f64, f64)>,
    /// `work_estimated_seats` (1.24+): the seats each request was estimated to need, (sum, count).
    pub estimated_seats: Option<(f64, f64)>,
}

impl LevelSnapshot {
    /// Limit minus seats in use; unknown when either is (a paste of the limit alone says nothing of headroom).
    pub fn headroom_seats(&self) -> Option<f64> {
        Some(self.limit_seats? - self.executing_seats?)
    }
}

/// Everything known of one replica at one scrape: the input of the analysis.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaSnapshot {
    pub generation: Option<MetricGeneration>,
    /// `gitVersion` from `kubernetes_build_info` (e.g. `v1.33.4`).
    pub kubernetes_version: Option<String>,
    pub levels: BTreeMap<String, LevelSnapshot>,
    /// Cumulative rejections by (priority level, flow schema, reason).
    pub flow_schema_rejected_total: BTreeMap<(String, String, String), f64>,
    /// Dispatches and what requests cost, by (priority level, flow schema).
    pub flow_schemas: BTreeMap<(String, String), FlowSchemaTotals>,
    /// Flows from `dump_requests`, when that dump was read this scrape.
    pub flows: Option<Vec<FlowSample>>,
    /// Series of `/metrics` that appeared more than once; each counted once, with its last value.
    pub duplicate_series: u64,
    /// Objects stored per resource (`apiserver_resource_objects`, else `apiserver_storage_objects`), keyed by the
    /// bare resource name the dumps use (`pods`): what a LIST of it reads.
    /// Shared, not copied, by the reports made from the snapshot.
    pub resource_objects: std::sync::Arc<BTreeMap<String, f64>>,
    /// Their estimated size in bytes (`apiserver_resource_size_estimate_bytes`), what a LIST costs from 1.34.
    pub resource_size_bytes: std::sync::Arc<BTreeMap<String, f64>>,
}

impl ReplicaSnapshot {
    /// True when the replica served at least one APF metric.
    pub fn has_apf(&self) -> bool {
        !matches!(self.generation, None | Some(MetricGeneration::None))
    }

    /// The minor version of the replica's gitVersion (provider suffixes allowed).
    pub fn minor(&self) -> Option<u32> {
        self.kubernetes_version
            .as_deref()
            .and_then(crate::KubeVersion::minor_of)
    }

    /// The nominal limit each level reports: what the replica's server concurrency is inferred from.
    pub fn nominal_limits(&self) -> BTreeMap<String, f64> {
        self.levels
            .iter()
            .filter_map(|(name, l)| Some((name.clone(), l.nominal_limit_seats?)))
            .collect()
    }

    /// (flow schema, priority level, user) of every user seen in this scrape's `dump_requests`.
    pub fn flow_users(&self) -> impl Iterator<Item = (String, String, String)> + '_ {
        self.flows.iter().flatten().flat_map(|f| {
            f.users
                .iter()
                .map(|u| (f.flow_schema.clone(), f.priority_level.clone(), u.clone()))
        })
    }

    /// Gives each level its PriorityLevelConfiguration (queues, queueLengthLimit), matched by name; levels without
    /// one keep none.
    pub fn attach_configs<'a>(
        &mut self,
        configs: impl IntoIterator<Item = &'a PriorityLevelConfig>,
    ) {
        for plc in configs {
            if let Some(level) = self.levels.get_mut(&plc.name) {
                level.config = Some(plc.clone());
            }
        }
    }

    pub(crate) fn level_mut(&mut self, name: &str) -> &mut LevelSnapshot {
        // Look up before inserting: most calls find the level, and need not allocate its name.
        if !self.levels.contains_key(name) {
            self.levels
                .insert(name.to_string(), LevelSnapshot::default());
        }
        match self.levels.get_mut(name) {
            Some(level) => level,
            None => unreachable!("inserted above"),
        }
    }
}
