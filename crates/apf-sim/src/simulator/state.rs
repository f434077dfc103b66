//! The simulated replica's APF state: its priority levels with their seats and queues, the flows of the scenario,
//! and the counters and histograms `/metrics` and the dumps are rendered from.
use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

use apf::{FlowSchema, KubeVersion, PriorityLevelConfig};
use rand::rngs::StdRng;

use crate::scenario::FlowSpec;

/// borrowingAdjustmentPeriod: CurrentCL is recomputed this often (1.26+).
pub(crate) const ADJUST_NS: u64 = 10_000_000_000;
/// requestWaitLimit = --request-timeout/4 with the default 60 s ([`apf::limits::QUEUE_WAIT_LIMIT`]).
pub(super) const QUEUE_WAIT_LIMIT_NS: u64 = apf::limits::QUEUE_WAIT_LIMIT.as_nanos() as u64;
/// Buckets of request_queue_length_after_enqueue.
pub(crate) const QUEUE_LENGTH_BUCKETS: [f64; 8] =
    [0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];

/// Buckets of priority_level_seat_utilization (seats in use / CurrentCL), as kube-apiserver serves them.
pub(crate) const SEAT_UTILIZATION_BUCKETS: [f64; 13] = [
    0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0,
];

/// One request, from its arrival to the end of its additional latency.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    /// Unique in the replica, in arrival order.
    pub id: u64,
    pub flow: usize,
    /// The flow schema it matched when it arrived ([`State::fs_names`]): a change of the FlowSchemas re-matches
    /// the flow, not the requests already admitted.
    pub fs: usize,
    /// Its initial seats: held while it executes.
    pub seats: u32,
    /// Seats held after the execution, for `additional_latency_ns` (0 without).
    pub final_seats: u32,
    pub additional_latency_ns: u64,
    pub dur_ns: u64,
    pub arrive_ns: u64,
    pub start_ns: u64,
    /// The queue the flow was shuffle-sharded to; None on levels without queues.
    pub queue: Option<usize>,
    /// The level's virtual time at its arrival (1e-8 seat-seconds).
    pub arrival_r: i128,
    /// Its work as fair queuing counts it: initial seats x 3 ms + final seats x additional latency (1e-8 seat-seconds).
    pub work: i128,
    /// The closed-loop thread that sent it.
    pub thread: Option<u32>,
}

impl Req {
    /// The seats it holds from dispatch to the end of its additional latency.
    pub fn max_seats(&self) -> u32 {
        self.seats.max(self.final_seats)
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Queue {
    pub waiting: VecDeque<Req>,
    /// Requests of this queue executing (not those in their additional latency).
    pub executing_requests: u32,
    /// Seats held by its requests, additional latency included.
    pub seats_in_use: u32,
    /// Virtual time at which its head may start (1e-8 seat-seconds).
    pub next_dispatch_r: i128,
    /// Sums over its waiting requests: their work, and their widest seats.
    pub waiting_work: i128,
    pub waiting_max_seats: u32,
}

impl Queue {
    /// The virtual start of its head, in seat-seconds (as the dumps and metrics show it).
    pub fn next_dispatch_seat_seconds(&self) -> f64 {
        self.next_dispatch_r as f64 / super::queueset::SEAT_SECONDS as f64
    }
    /// The work of its waiting requests, in seat-seconds (kube-apiserver's TotalWorkSum).
    pub fn waiting_work_seat_seconds(&self) -> f64 {
        self.waiting_work as f64 / super::queueset::SEAT_SECONDS as f64
    }
    pub(super) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.executing_requests == 0
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    /// Per bucket (not cumulative), plus +Inf at the end.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub(super) fn new(buckets: usize) -> Self {
        Histogram {
            counts: vec![0; buckets + 1],
            sum: 0.0,
            count: 0,
        }
    }
    /// A timing histogram's observation (component-base `timing_histogram.go`): `v` held for `ns` nanoseconds adds
    /// `ns` to its bucket and to the count, `v × ns` to the sum.
    pub(super) fn hold(&mut self, bounds: &[f64], v: f64, ns: u64) {
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.counts[i] += ns;
        self.sum += v * ns as f64;
        self.count += ns;
    }
    pub(super) fn observe(&mut self, bounds: &[f64], v: f64) {
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// Counters and gauges of one (priority level, flow schema) pair.
#[derive(Debug, Clone)]
pub(crate) struct FsStats {
    pub dispatched: u64,
    pub rejected: BTreeMap<&'static str, u64>,
    pub executing_requests: u32,
    pub executing_seats: u32,
    pub inqueue_requests: u32,
    pub inqueue_seats: u32,
    pub wait_executed: Histogram,
    pub wait_rejected: Histogram,
    pub execution: Histogram,
    pub queue_length: Histogram,
    pub work_seats: Histogram,
    /// Dispatch attempts that found no seat for the head of the queue next in turn.
    pub no_accommodation: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Level {
    /// Stable across configurations (levels move in the list when the objects change); events name levels by it.
    pub uid: u64,
    pub def: PriorityLevelConfig,
    pub nominal: u32,
    pub lower: u32,
    pub upper: u32,
    pub current_cl: u32,
    pub max_seats: u32,
    /// A level the scenario defines directly: fixed limit, outside the share division and borrowing.
    pub fixed: bool,
    pub wait_limit_ns: u64,
    pub queues: Vec<Queue>,
    /// Executing requests by id, and those past their execution holding final seats (additional latency).
    pub executing: BTreeMap<u64, Req>,
    pub finishing: BTreeMap<u64, Req>,
    pub seats_in_use: u32,
    pub waiting: u32,
    pub waiting_seats: u32,
    pub dispatched: u64,
    pub rejected: u64,
    pub timed_out: u64,
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Admissions that left more seats in use than the limit (must stay 0; tests check it). Seats in use can still
    /// exceed a limit that was lowered afterwards: APF never preempts.
    pub admitted_over_limit: u64,
    // Fair queuing (kube-apiserver's queueset): the virtual clock in 1e-8 seat-seconds and when it was last
    // advanced, the round-robin index, the count of enqueues (where a hand is first visited).
    pub current_r: i128,
    pub(super) r_synced_ns: u64,
    pub(super) robin_index: isize,
    pub(super) enqueues: u64,
    pub(super) dealer: Option<apf::shuffle::Dealer>,
    /// When the time integrals below were last brought up to date.
    pub(super) integrated_ns: u64,
    // Seat demand (seats in use + waiting) of the current adjustment period, integrated over time, and the last
    // period's results.
    pub(super) period_ns: u64,
    pub(super) period_sum: f64,
    pub(super) period_sum_sq: f64,
    pub(super) period_hwm: u32,
    pub demand_hwm: f64,
    pub demand_avg: f64,
    pub demand_stdev: f64,
    pub demand_smoothed: f64,
    pub target: f64,
    /// Seats in use / CurrentCL over time.
    pub seat_utilization: Histogram,
    /// Over the whole run: seats in use and requests waiting, integrated over time (seat-ns, request-ns).
    pub(super) run_seats_ns: f64,
    pub(super) run_waiting_ns: f64,
    /// The enforced limit, integrated the same way (seat-ns): a replay's mean limit, borrowing included.
    pub(super) run_limit_ns: f64,
    /// Its PriorityLevelConfiguration is gone: it takes no new requests, and goes once those it holds are done
    /// (kube-apiserver's quiescing level).
    pub retired: bool,
}

impl Level {
    pub fn enforced_limit(&self) -> u32 {
        self.current_cl
    }
    /// The virtual clock in seat-seconds.
    pub fn current_r_seat_seconds(&self) -> f64 {
        self.current_r as f64 / super::queueset::SEAT_SECONDS as f64
    }
    /// The queues its configuration asks for: 0 for exempt and Reject levels. A level that had more keeps the
    /// surplus until they are empty, as kube-apiserver's queueset does.
    pub(super) fn desired_queues(&self) -> usize {
        if self.def.queuing && !self.def.exempt {
            self.def.queues.unwrap_or(0) as usize
        } else {
            0
        }
    }
    /// Nothing executes, nothing holds final seats, nothing waits.
    pub(super) fn is_idle(&self) -> bool {
        self.executing.is_empty() && self.finishing.is_empty() && self.waiting == 0
    }
    /// queueLengthLimit; 0 on levels without queues.
    pub fn queue_length_limit(&self) -> u32 {
        self.def.queue_length_limit.unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Flow {
    /// The scenario's name for the flow (tests look flows up by it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub name: String,
    /// The flow schema its requests match now ([`State::fs_names`]) and the priority level that gives them.
    pub fs: usize,
    /// `None` while no priority level takes its requests (no catch-all to fall back to): it sends none.
    pub level: Option<usize>,
    pub seats: u32,
    pub dur_ns: u64,
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub namespace: String,
    pub distinguisher: String,
    /// Its hash for shuffle sharding: the scenario's `hash`, else kube-apiserver's from flow schema and
    /// distinguisher.
    pub hash: u64,
    /// The queues this flow is dealt by shuffle sharding (handSize of them).
    pub hand: Vec<usize>,
    pub final_seats: u32,
    pub additional_latency_ns: u64,
    pub(super) rate: FlowSpec,
    /// Before 1.23 every request takes one seat; a flow of width N is then sent N times as often so that a
    /// scenario keeps the same seat demand (and pressure) on every version.
    pub(super) rate_scale: f64,
    /// How its requests come: at a rate (open loop) or from threads that wait for their answers (closed loop).
    pub(super) source: super::clients::Source,
    /// What it got over the run (for `simulate --run`).
    pub(super) run: FlowRunStats,
}

/// The 99th percentile of waits (ns) by nearest rank: the smallest at or above 99 % of them; in seconds, 0 for none.
pub(crate) fn p99_seconds(waits: &mut [u64]) -> f64 {
    waits.sort_unstable();
    match waits.len() {
        0 => 0.0,
        n => waits[((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1] as f64 / 1e9,
    }
}

/// A flow's tallies over a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct FlowRunStats {
    pub dispatched: u64,
    pub rejected: BTreeMap<&'static str, u64>,
    /// Initial seats x execution time of its requests that finished (seat-ns).
    pub executed_seat_ns: f64,
    /// The waits of its dispatched requests (ns), kept only in a virtual-time run.
    pub waits: Vec<u64>,
    pub wait_sum_ns: f64,
    /// The same of its requests that timed out in their queue (kube-apiserver's wait metric observes them with
    /// `execute="true"`, beside the dispatched ones).
    pub timed_out_waits: Vec<u64>,
    pub timed_out_wait_sum_ns: f64,
}

impl FlowRunStats {
    /// Its rejections by reason, as the reports name them.
    pub fn rejected_by_reason(&self) -> BTreeMap<String, u64> {
        self.rejected
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    }
}

pub(crate) struct State {
    pub version: KubeVersion,
    /// The configured levels in their objects' order, then the retired ones still draining.
    pub levels: Vec<Level>,
    /// The FlowSchemas in force.
    pub flow_schemas: Vec<FlowSchema>,
    /// Every flow schema name requests were matched to, in first-seen order; only grows, so an index stays valid.
    pub fs_names: Vec<String>,
    pub flows: Vec<Flow>,
    pub(super) seed: u64,
    pub(super) server_concurrency: u32,
    pub fs_stats: BTreeMap<(String, String), FsStats>,
    /// Buckets of request_wait_duration_seconds and request_execution_seconds.
    pub wait_buckets: Vec<f64>,
    pub work_buckets: Vec<f64>,
    pub seat_fair_frac: f64,
    /// apiserver_request_total by (verb, resource, code).
    pub request_total: BTreeMap<(String, String, String), u64>,
    /// apiserver_request_terminations_total by (verb, resource, code): every APF 429.
    pub terminations_total: BTreeMap<(String, String, String), u64>,
    pub now_ns: u64,
    pub(super) target_ns: u64,
    pub(super) scenario_ns: u64,
    pub(super) rng: StdRng,
    pub wall_start: SystemTime,
    /// The part of the scenario's rates this replica receives (a cluster splits its load between replicas).
    pub(super) load_share: f64,
    /// The requests that ended since the audit sink last drained them; `None` while no sink is attached.
    pub(crate) audit: Option<crate::audit::Outbox>,
    /// What happens next, in time order.
    pub(super) events: super::events::Events,
    pub(super) next_req_id: u64,
    pub(super) next_level_uid: u64,
    pub(super) dispatch: crate::scenario::Dispatch,
    /// The levels the scenario defines directly.
    pub(super) scenario_levels: Vec<crate::scenario::LevelSpec>,
    /// A virtual-time run keeps every wait for its percentiles; a served replica does not.
    pub(super) keep_waits: bool,
}
