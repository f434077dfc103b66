//! The APF model: priority levels with seats, shuffle-sharded queues, rejections and (1.26+) borrowing.
//!
//! Time advances in fixed 10 ms ticks so a seed always gives the same run. Within a tick, executions that ended
//! free their seats first, then queued requests past the 15 s wait limit are rejected with `time-out`, then the
//! tick's arrivals are admitted in arrival order, then queued requests are dispatched while seats are free.

use super::{KubeVersion, Scenario, SimError};
use apf::defaults::{default_flow_schemas, default_priority_levels};
use apf::limits::{max_seats, seat_limits};
use apf::reason::{CONCURRENCY_LIMIT, QUEUE_FULL, TIME_OUT};
use apf::{Distinguisher, FlowSchemaDef, PriorityLevelConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

pub(super) const TICK_NS: u64 = 10_000_000;
/// borrowingAdjustmentPeriod: CurrentCL is recomputed this often (1.26+).
const ADJUST_NS: u64 = 10_000_000_000;
/// requestWaitLimit = --request-timeout/4 with the default 60 s.
const QUEUE_WAIT_LIMIT_NS: u64 = 15_000_000_000;
/// Buckets of request_queue_length_after_enqueue.
pub(super) const QUEUE_LENGTH_BUCKETS: [f64; 8] =
    [0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];

/// Buckets of priority_level_seat_utilization (seats in use / CurrentCL), as kube-apiserver serves them.
pub(super) const SEAT_UTILIZATION_BUCKETS: [f64; 13] = [
    0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0,
];

/// How to run a simulation.
#[derive(Debug, Clone)]
pub struct SimOptions {
    pub version: KubeVersion,
    pub scenario: Scenario,
    pub seed: u64,
    /// ServerCL = --max-requests-inflight + --max-mutating-requests-inflight (default 400 + 200).
    pub server_concurrency: u32,
}

impl SimOptions {
    /// Seed 1 and ServerCL 600.
    pub fn new(version: KubeVersion, scenario: Scenario) -> Self {
        SimOptions {
            version,
            scenario,
            seed: 1,
            server_concurrency: 600,
        }
    }
}

/// What the served numbers of one priority level are right now.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelTruth {
    pub priority_level: String,
    pub exempt: bool,
    pub nominal_limit_seats: u32,
    /// The enforced limit: CurrentCL on 1.26+, NominalCL before.
    pub current_limit_seats: u32,
    pub executing_seats: u32,
    pub executing_requests: u32,
    pub inqueue_requests: u32,
    pub queues: u32,
    pub queue_length_limit: u32,
    pub fullest_queue_requests: u32,
    pub rejected_total: BTreeMap<String, u64>,
    pub dispatched_total: u64,
}

#[derive(Debug, Clone)]
pub(super) struct Req {
    pub flow: usize,
    pub seats: u32,
    pub dur_ns: u64,
    pub arrive_ns: u64,
    pub start_ns: u64,
    /// The queue the flow was shuffle-sharded to; None on levels without queues.
    pub queue: Option<usize>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Queue {
    pub waiting: VecDeque<Req>,
    pub executing_requests: u32,
    pub seats_in_use: u32,
    /// Virtual time (seat-seconds) of the level when this queue last dispatched.
    pub next_dispatch_r: f64,
}

#[derive(Debug, Clone)]
pub(super) struct Histogram {
    /// Per bucket (not cumulative), plus +Inf at the end.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    fn new(buckets: usize) -> Self {
        Histogram {
            counts: vec![0; buckets + 1],
            sum: 0.0,
            count: 0,
        }
    }
    /// A timing histogram's observation (component-base `timing_histogram.go`): `v` held for `ns` nanoseconds adds
    /// `ns` to its bucket and to the count, `v × ns` to the sum.
    fn hold(&mut self, bounds: &[f64], v: f64, ns: u64) {
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.counts[i] += ns;
        self.sum += v * ns as f64;
        self.count += ns;
    }
    fn observe(&mut self, bounds: &[f64], v: f64) {
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// Counters and gauges of one (priority level, flow schema) pair.
#[derive(Debug, Clone)]
pub(super) struct FsStats {
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
pub(super) struct Level {
    pub def: PriorityLevelConfig,
    pub nominal: u32,
    pub lower: u32,
    pub upper: u32,
    pub current_cl: u32,
    pub max_seats: u32,
    pub queues: Vec<Queue>,
    pub executing: Vec<Req>,
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
    rr: usize,
    pub virtual_r: f64,
    // Demand statistics of the current adjustment period and the last one's results.
    period_sum: f64,
    period_sum_sq: f64,
    period_n: u64,
    period_hwm: u32,
    pub demand_hwm: f64,
    pub demand_avg: f64,
    pub demand_stdev: f64,
    pub demand_smoothed: f64,
    pub target: f64,
    /// Seats in use / CurrentCL over time, integrated every tick.
    pub seat_utilization: Histogram,
}

impl Level {
    pub fn enforced_limit(&self) -> u32 {
        self.current_cl
    }
    fn fits(&self, seats: u32) -> bool {
        // A request wider than the whole limit is still admitted when nothing executes (Q).
        self.seats_in_use == 0 || self.seats_in_use + seats <= self.current_cl
    }
    fn has_queues(&self) -> bool {
        !self.queues.is_empty()
    }
    /// queueLengthLimit; 0 on levels without queues.
    pub fn queue_length_limit(&self) -> u32 {
        self.def.queue_length_limit.unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
pub(super) struct Flow {
    /// The scenario's name for the flow (tests look flows up by it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub name: String,
    pub fs: usize,
    pub level: usize,
    pub seats: u32,
    pub dur_ns: u64,
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub namespace: String,
    pub distinguisher: String,
    /// The queues this flow is dealt by shuffle sharding (handSize of them).
    pub hand: Vec<usize>,
    rate: super::FlowSpec,
    /// Before 1.23 every request takes one seat; a flow of width N is then sent N times as often so that a
    /// scenario keeps the same seat demand (and pressure) on every version.
    rate_scale: f64,
}

pub(super) struct State {
    pub version: KubeVersion,
    pub levels: Vec<Level>,
    pub flow_schemas: Vec<FlowSchemaDef>,
    pub flows: Vec<Flow>,
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
    target_ns: u64,
    scenario_ns: u64,
    rng: StdRng,
    pub wall_start: SystemTime,
    /// The part of the scenario's rates this replica receives (a cluster splits its load between replicas).
    load_share: f64,
}

/// The simulated apiserver's APF state, shared between the clock, the HTTP handlers and tests.
#[derive(Clone)]
pub struct Simulator {
    pub(super) state: Arc<Mutex<State>>,
}

fn hash_str(seed: u64, s: &str) -> u64 {
    // FNV-1a: stable across runs and Rust versions, unlike DefaultHasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Simulator {
    /// Builds a simulator; flows whose flow schema the version lacks are skipped with a warning.
    pub fn new(opts: SimOptions) -> Self {
        Self::build(opts, false).unwrap_or_else(|_| unreachable!("lenient build never fails"))
    }

    /// Like [`Simulator::new`], but a flow whose flow schema the version lacks is an error.
    pub fn try_new(opts: SimOptions) -> Result<Self, SimError> {
        Self::build(opts, true)
    }

    fn build(opts: SimOptions, strict: bool) -> Result<Self, SimError> {
        let v = opts.version;
        if strict {
            opts.scenario.validate_for(v)?;
        }
        let server_cl = opts.server_concurrency;
        let defs = default_priority_levels(v);
        let limits = seat_limits(&defs, server_cl);
        let levels: Vec<Level> = defs
            .into_iter()
            .zip(limits)
            .map(|(def, limits)| {
                let nominal = limits.nominal;
                let max_seats = max_seats(v, &def, nominal);
                Level {
                    queues: vec![Queue::default(); def.queues.unwrap_or(0) as usize],
                    nominal,
                    lower: limits.lower,
                    upper: limits.upper,
                    // Before 1.26 there is no lendablePercent: the limit stays at NominalCL.
                    current_cl: limits.initial_current(),
                    max_seats,
                    def,
                    executing: Vec::new(),
                    seats_in_use: 0,
                    waiting: 0,
                    waiting_seats: 0,
                    dispatched: 0,
                    rejected: 0,
                    timed_out: 0,
                    rejected_by_reason: BTreeMap::new(),
                    admitted_over_limit: 0,
                    rr: 0,
                    virtual_r: 0.0,
                    period_sum: 0.0,
                    period_sum_sq: 0.0,
                    period_n: 0,
                    period_hwm: 0,
                    demand_hwm: 0.0,
                    demand_avg: 0.0,
                    demand_stdev: 0.0,
                    demand_smoothed: 0.0,
                    target: 0.0,
                    seat_utilization: Histogram::new(SEAT_UTILIZATION_BUCKETS.len()),
                }
            })
            .collect();
        let flow_schemas = default_flow_schemas(v);
        let mut flows = Vec::new();
        for spec in &opts.scenario.flows {
            let Some(fs) = flow_schemas.iter().position(|f| f.name == spec.flow_schema) else {
                let msg = format!(
                    "flow {:?}: flow schema {:?} does not exist in Kubernetes {}",
                    spec.name, spec.flow_schema, v
                );
                if strict {
                    return Err(SimError::Scenario(msg));
                }
                tracing::warn!("{msg}; skipping the flow");
                continue;
            };
            let Some(level) = levels
                .iter()
                .position(|l| l.def.name == flow_schemas[fs].priority_level)
            else {
                continue;
            };
            let distinguisher = match flow_schemas[fs].distinguisher {
                Distinguisher::None => String::new(),
                Distinguisher::ByUser => spec.user.clone(),
                Distinguisher::ByNamespace => spec.namespace.clone(),
            };
            let l = &levels[level];
            let hand = deal_hand(
                hash_str(
                    opts.seed,
                    &format!("{}/{}", flow_schemas[fs].name, distinguisher),
                ),
                l.queues.len(),
                l.def.hand_size.unwrap_or(0) as usize,
            );
            flows.push(Flow {
                name: spec.name.clone(),
                fs,
                level,
                seats: spec.seats.clamp(1, l.max_seats.max(1)),
                dur_ns: (spec.duration.as_nanos() as u64).max(1),
                user: spec.user.clone(),
                verb: spec.verb.clone(),
                resource: spec.resource.clone(),
                namespace: spec.namespace.clone(),
                distinguisher,
                hand,
                rate: spec.clone(),
                rate_scale: if v.at_least(23) {
                    1.0
                } else {
                    spec.seats.max(1) as f64
                },
            });
        }
        let mut wait_buckets = vec![0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];
        if v.at_least(28) {
            wait_buckets.push(15.0);
        }
        wait_buckets.push(30.0);
        let work_buckets = if v.at_least(34) {
            vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0]
        } else {
            vec![1.0, 2.0, 4.0, 10.0]
        };
        let state = State {
            version: v,
            levels,
            flow_schemas,
            flows,
            fs_stats: BTreeMap::new(),
            wait_buckets,
            work_buckets,
            seat_fair_frac: 0.0,
            request_total: BTreeMap::new(),
            terminations_total: BTreeMap::new(),
            now_ns: 0,
            target_ns: 0,
            scenario_ns: (opts.scenario.duration.as_nanos() as u64).max(TICK_NS),
            rng: StdRng::seed_from_u64(opts.seed),
            wall_start: SystemTime::now(),
            load_share: 1.0,
        };
        let mut state = state;
        // The gauges of every flow schema exist from start-up, as in the captures; counters appear on first use.
        for fs in 0..state.flow_schemas.len() {
            if let Some(li) = state
                .levels
                .iter()
                .position(|l| l.def.name == state.flow_schemas[fs].priority_level)
            {
                state.stats(li, fs);
            }
        }
        Ok(Simulator {
            state: Arc::new(Mutex::new(state)),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough numbers; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the simulated wall clock at time 0 (times in `dump_requests`); defaults to the creation time.
    pub fn set_wall_start(&self, t: SystemTime) {
        self.lock().wall_start = t;
    }

    /// Scales every flow's rate by `share` from now on (1.0, the default, is the scenario as written): a replica
    /// of a cluster receives only its part of the cluster's load. Negative, infinite or NaN shares count as 0.
    pub fn set_load_share(&self, share: f64) {
        self.lock().load_share = if share.is_finite() {
            share.max(0.0)
        } else {
            0.0
        };
    }

    /// The part of the scenario's rates this simulator receives (see [`Simulator::set_load_share`]).
    pub fn load_share(&self) -> f64 {
        self.lock().load_share
    }

    /// Advances simulated time by `dt`, deterministically for a seed.
    pub fn step(&self, dt: Duration) {
        let mut st = self.lock();
        st.target_ns += dt.as_nanos() as u64;
        while st.now_ns + TICK_NS <= st.target_ns {
            st.tick();
        }
    }

    /// Simulated time since start.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.lock().target_ns)
    }

    /// Steps the simulation by wall time, every `tick`, until the task is aborted.
    pub fn spawn_clock(&self, tick: Duration) -> tokio::task::JoinHandle<()> {
        let sim = self.clone();
        let tick = tick.max(Duration::from_millis(1));
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = tokio::time::Instant::now();
            loop {
                interval.tick().await;
                let now = tokio::time::Instant::now();
                sim.step(now - last);
                last = now;
            }
        })
    }

    /// What the served numbers are right now.
    pub fn truth(&self) -> Vec<LevelTruth> {
        let st = self.lock();
        st.levels
            .iter()
            .map(|l| LevelTruth {
                priority_level: l.def.name.to_string(),
                exempt: l.def.exempt,
                nominal_limit_seats: l.nominal,
                current_limit_seats: l.current_cl,
                executing_seats: l.seats_in_use,
                executing_requests: l.executing.len() as u32,
                inqueue_requests: l.waiting,
                queues: l.queues.len() as u32,
                queue_length_limit: l.queue_length_limit(),
                fullest_queue_requests: l
                    .queues
                    .iter()
                    .map(|q| q.waiting.len() as u32)
                    .max()
                    .unwrap_or(0),
                rejected_total: l.rejected_by_reason.clone(),
                dispatched_total: l.dispatched,
            })
            .collect()
    }
}

/// Shuffle sharding: deal `hand_size` distinct queues of `queues`, from the flow's hash.
fn deal_hand(hash: u64, queues: usize, hand_size: usize) -> Vec<usize> {
    if queues == 0 {
        return Vec::new();
    }
    let mut rng = StdRng::seed_from_u64(hash);
    let mut all: Vec<usize> = (0..queues).collect();
    let n = hand_size.clamp(1, queues);
    for i in 0..n {
        let j = rng.gen_range(i..queues);
        all.swap(i, j);
    }
    all.truncate(n);
    all
}

fn poisson(rng: &mut StdRng, lambda: f64) -> u32 {
    // Also catches NaN from a hand-built scenario; the cap bounds the work of one tick.
    if lambda.is_nan() || lambda <= 0.0 {
        return 0;
    }
    let lambda = lambda.min(500.0);
    // Knuth; lambda per 10 ms tick stays small.
    let l = (-lambda).exp();
    let mut k = 0;
    let mut p = 1.0;
    loop {
        p *= rng.gen::<f64>();
        if p <= l || k > 10_000 {
            return k;
        }
        k += 1;
    }
}

impl State {
    fn stats(&mut self, level: usize, fs: usize) -> &mut FsStats {
        let key = (
            self.levels[level].def.name.to_string(),
            self.flow_schemas[fs].name.to_string(),
        );
        let n = self.wait_buckets.len();
        let w = self.work_buckets.len();
        self.fs_stats.entry(key).or_insert_with(|| FsStats {
            dispatched: 0,
            rejected: BTreeMap::new(),
            executing_requests: 0,
            executing_seats: 0,
            inqueue_requests: 0,
            inqueue_seats: 0,
            wait_executed: Histogram::new(n),
            wait_rejected: Histogram::new(n),
            execution: Histogram::new(n),
            queue_length: Histogram::new(QUEUE_LENGTH_BUCKETS.len()),
            work_seats: Histogram::new(w),
            no_accommodation: 0,
        })
    }

    fn tick(&mut self) {
        let t0 = self.now_ns;
        let t1 = t0 + TICK_NS;
        self.now_ns = t1;
        self.complete(t1);
        self.time_out(t1);
        let mut arrivals = Vec::new();
        let in_scenario = Duration::from_nanos(t0 % self.scenario_ns);
        for fi in 0..self.flows.len() {
            let f = &self.flows[fi];
            let lambda =
                f.rate.rps_at(in_scenario) * f.rate_scale * self.load_share * TICK_NS as f64 / 1e9;
            for _ in 0..poisson(&mut self.rng, lambda) {
                arrivals.push((t0 + self.rng.gen_range(1..=TICK_NS), fi));
            }
        }
        arrivals.sort();
        for (at, fi) in arrivals {
            self.arrive(fi, at);
        }
        for li in 0..self.levels.len() {
            self.dispatch(li, t1);
            let l = &mut self.levels[li];
            // The fair-queuing virtual clock advances by the seats each active queue gets.
            let active = l
                .queues
                .iter()
                .filter(|q| !q.waiting.is_empty() || q.executing_requests > 0)
                .count();
            if active > 0 {
                l.virtual_r += TICK_NS as f64 / 1e9 * l.seats_in_use as f64 / active as f64;
            }
            let utilization = f64::from(l.seats_in_use) / f64::from(l.current_cl.max(1));
            l.seat_utilization
                .hold(&SEAT_UTILIZATION_BUCKETS, utilization, TICK_NS);
            let demand = l.seats_in_use + l.waiting_seats;
            l.period_sum += demand as f64;
            l.period_sum_sq += (demand as f64) * (demand as f64);
            l.period_n += 1;
            l.period_hwm = l.period_hwm.max(demand);
        }
        if t1 % ADJUST_NS == 0 && self.version.at_least(26) {
            self.adjust_limits();
            // A raised limit admits queued requests at once.
            for li in 0..self.levels.len() {
                self.dispatch(li, t1);
            }
        }
    }

    fn complete(&mut self, now: u64) {
        for li in 0..self.levels.len() {
            let done: Vec<Req> = {
                let l = &mut self.levels[li];
                let (done, keep): (Vec<Req>, Vec<Req>) = l
                    .executing
                    .drain(..)
                    .partition(|r| r.start_ns + r.dur_ns <= now);
                l.executing = keep;
                done
            };
            for r in done {
                let l = &mut self.levels[li];
                l.seats_in_use -= r.seats;
                if let Some(q) = r.queue {
                    l.queues[q].executing_requests -= 1;
                    l.queues[q].seats_in_use -= r.seats;
                }
                let fs = self.flows[r.flow].fs;
                let bounds = self.wait_buckets.clone();
                let st = self.stats(li, fs);
                st.executing_requests -= 1;
                st.executing_seats -= r.seats;
                st.execution.observe(&bounds, r.dur_ns as f64 / 1e9);
                self.count_request(r.flow, "200");
            }
        }
    }

    fn count_request(&mut self, flow: usize, code: &str) {
        let f = &self.flows[flow];
        let key = (f.verb.to_uppercase(), f.resource.clone(), code.to_string());
        if code == "429" {
            *self.terminations_total.entry(key.clone()).or_insert(0) += 1;
            // RecordDroppedRequest counts APF rejections in apiserver_request_total only from 1.24.
            if !self.version.at_least(24) {
                return;
            }
        }
        *self.request_total.entry(key).or_insert(0) += 1;
    }

    fn reject(&mut self, li: usize, flow: usize, reason: &'static str, waited_ns: u64) {
        let fs = self.flows[flow].fs;
        let l = &mut self.levels[li];
        *l.rejected_by_reason.entry(reason.to_string()).or_insert(0) += 1;
        if reason == TIME_OUT {
            l.timed_out += 1;
        } else {
            l.rejected += 1;
        }
        let bounds = self.wait_buckets.clone();
        let st = self.stats(li, fs);
        *st.rejected.entry(reason).or_insert(0) += 1;
        // A request that timed out in its queue is still observed with execute="true" (k8s.io/apiserver `pkg/server/filters/priority-and-fairness.go`).
        let h = if reason == TIME_OUT {
            &mut st.wait_executed
        } else {
            &mut st.wait_rejected
        };
        h.observe(&bounds, waited_ns as f64 / 1e9);
        self.count_request(flow, "429");
    }

    fn time_out(&mut self, now: u64) {
        for li in 0..self.levels.len() {
            let mut expired = Vec::new();
            {
                let l = &mut self.levels[li];
                for q in l.queues.iter_mut() {
                    while q
                        .waiting
                        .front()
                        .is_some_and(|r| r.arrive_ns + QUEUE_WAIT_LIMIT_NS <= now)
                    {
                        if let Some(r) = q.waiting.pop_front() {
                            expired.push(r);
                        }
                    }
                }
                for r in &expired {
                    l.waiting -= 1;
                    l.waiting_seats -= r.seats;
                }
            }
            for r in expired {
                let fs = self.flows[r.flow].fs;
                let st = self.stats(li, fs);
                st.inqueue_requests -= 1;
                st.inqueue_seats -= r.seats;
                self.reject(li, r.flow, TIME_OUT, now - r.arrive_ns);
            }
        }
    }

    fn execute(&mut self, li: usize, mut r: Req, start: u64) {
        r.start_ns = start;
        let fs = self.flows[r.flow].fs;
        let waited = (start - r.arrive_ns) as f64 / 1e9;
        let bounds = self.wait_buckets.clone();
        let exempt = self.levels[li].def.exempt;
        let st = self.stats(li, fs);
        st.dispatched += 1;
        st.executing_requests += 1;
        st.executing_seats += r.seats;
        if !exempt {
            st.wait_executed.observe(&bounds, waited);
        }
        let l = &mut self.levels[li];
        l.dispatched += 1;
        l.seats_in_use += r.seats;
        if !l.def.exempt && l.seats_in_use > l.current_cl && !l.executing.is_empty() {
            l.admitted_over_limit += 1;
        }
        if let Some(q) = r.queue {
            l.queues[q].executing_requests += 1;
            l.queues[q].seats_in_use += r.seats;
            l.queues[q].next_dispatch_r = l.virtual_r;
        }
        l.executing.push(r);
    }

    fn arrive(&mut self, fi: usize, at: u64) {
        let f = &self.flows[fi];
        let li = f.level;
        let req = Req {
            flow: fi,
            seats: f.seats,
            dur_ns: f.dur_ns,
            arrive_ns: at,
            start_ns: 0,
            queue: None,
        };
        let hand = f.hand.clone();
        let fs = f.fs;
        let seats = f.seats as f64;
        let work_bounds = self.work_buckets.clone();
        self.stats(li, fs).work_seats.observe(&work_bounds, seats);
        let l = &self.levels[li];
        if l.def.exempt {
            return self.execute(li, req, at);
        }
        if !l.has_queues() {
            // Reject-type level (catch-all).
            if l.fits(req.seats) {
                return self.execute(li, req, at);
            }
            return self.reject(li, fi, CONCURRENCY_LIMIT, 0);
        }
        // Shuffle sharding: the queue of the hand with the least waiting work (seats), then fewest in use.
        let q = hand
            .iter()
            .copied()
            .min_by_key(|&q| {
                let queue = &l.queues[q];
                let waiting: u32 = queue.waiting.iter().map(|r| r.seats).sum();
                (waiting, queue.seats_in_use)
            })
            .unwrap_or(0);
        let req = Req {
            queue: Some(q),
            ..req
        };
        // Q enqueues every admitted request, then dispatches as much as possible.
        if l.waiting == 0 && l.fits(req.seats) {
            self.stats(li, fs)
                .queue_length
                .observe(&QUEUE_LENGTH_BUCKETS, 1.0);
            return self.execute(li, req, at);
        }
        if l.queues[q].waiting.len() as u32 >= l.queue_length_limit() {
            return self.reject(li, fi, QUEUE_FULL, 0);
        }
        let len = (l.queues[q].waiting.len() + 1) as f64;
        self.stats(li, fs)
            .queue_length
            .observe(&QUEUE_LENGTH_BUCKETS, len);
        let seats = req.seats;
        let l = &mut self.levels[li];
        l.queues[q].waiting.push_back(req);
        l.waiting += 1;
        l.waiting_seats += seats;
        let st = self.stats(li, fs);
        st.inqueue_requests += 1;
        st.inqueue_seats += seats;
    }

    /// Fair round-robin over the queues: dispatch any head that fits, until none does.
    fn dispatch(&mut self, li: usize, now: u64) {
        loop {
            let l = &mut self.levels[li];
            if l.waiting == 0 {
                return;
            }
            let n = l.queues.len();
            let found = (0..n).map(|k| (l.rr + k) % n).find(|&qi| {
                l.queues[qi]
                    .waiting
                    .front()
                    .is_some_and(|r| l.fits(r.seats))
            });
            let Some(qi) = found else {
                // Q counts the attempt that found no seat for the head of the queue next in turn.
                let head = (0..n)
                    .map(|k| (l.rr + k) % n)
                    .find_map(|qi| l.queues[qi].waiting.front().map(|r| r.flow));
                if let Some(flow) = head {
                    let fs = self.flows[flow].fs;
                    self.stats(li, fs).no_accommodation += 1;
                }
                return;
            };
            let Some(r) = l.queues[qi].waiting.pop_front() else {
                return;
            };
            l.rr = (qi + 1) % n;
            l.waiting -= 1;
            l.waiting_seats -= r.seats;
            let fs = self.flows[r.flow].fs;
            let st = self.stats(li, fs);
            st.inqueue_requests -= 1;
            st.inqueue_seats -= r.seats;
            self.execute(li, r, now);
        }
    }

    /// C's borrowing adjustment (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller.go`): per level, demand statistics of the period, smoothed demand, target;
    /// then a fair fraction so the limits of the non-exempt levels add up to their Σ NominalCL.
    fn adjust_limits(&mut self) {
        for l in self.levels.iter_mut() {
            let n = l.period_n.max(1) as f64;
            let avg = l.period_sum / n;
            let var = (l.period_sum_sq / n - avg * avg).max(0.0);
            let stdev = var.sqrt();
            let envelope = avg + stdev;
            l.demand_avg = avg;
            l.demand_stdev = stdev;
            l.demand_hwm = l.period_hwm as f64;
            l.demand_smoothed = envelope.max(0.977 * l.demand_smoothed + 0.023 * envelope);
            l.period_sum = 0.0;
            l.period_sum_sq = 0.0;
            l.period_n = 0;
            l.period_hwm = l.seats_in_use + l.waiting_seats;
        }
        let items: Vec<(usize, f64, f64, f64)> = self
            .levels
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.def.exempt)
            .map(|(i, l)| {
                let lb = (l.lower as f64).max((l.nominal as f64).min(l.demand_hwm));
                let target = lb.max(l.demand_smoothed);
                (i, lb, target, l.upper as f64)
            })
            .collect();
        let total: f64 = self
            .levels
            .iter()
            .filter(|l| !l.def.exempt)
            .map(|l| l.nominal as f64)
            .sum();
        let alloc = |ff: f64| -> f64 {
            items
                .iter()
                .map(|&(_, lb, t, ub)| (ff * t).clamp(lb, ub))
                .sum()
        };
        let sum_lb: f64 = items.iter().map(|x| x.1).sum();
        let ff = if sum_lb >= total {
            0.0 // oversubscribed: everyone falls back to the lower bound
        } else {
            let mut hi = 1.0;
            while alloc(hi) < total && hi < 1e9 {
                hi *= 2.0;
            }
            let mut lo = 0.0;
            for _ in 0..80 {
                let mid = (lo + hi) / 2.0;
                if alloc(mid) < total {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            hi
        };
        self.seat_fair_frac = ff;
        for &(i, lb, t, ub) in &items {
            let l = &mut self.levels[i];
            l.target = t;
            l.current_cl = (ff * t).clamp(lb, ub).round() as u32;
        }
        for l in self.levels.iter_mut().filter(|l| l.def.exempt) {
            l.target = l.demand_hwm;
            l.current_cl = (l.lower as f64).max(l.demand_hwm).round() as u32;
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ScenarioSource;

    pub fn sim(minor: u32, src: ScenarioSource, seed: u64) -> Simulator {
        let scenario = Scenario::load(&src).unwrap();
        let mut opts = SimOptions::new(KubeVersion::new(minor, 0), scenario);
        opts.seed = seed;
        let s = Simulator::try_new(opts).unwrap();
        s.set_wall_start(SystemTime::UNIX_EPOCH + Duration::from_secs(1_772_446_504));
        s
    }

    fn level<'a>(t: &'a [LevelTruth], name: &str) -> &'a LevelTruth {
        t.iter().find(|l| l.priority_level == name).unwrap()
    }

    /// Checks the invariants after every step; returns the time of the first queue-full rejection.
    fn run_checking(s: &Simulator, secs: u64) -> Option<u64> {
        let mut prev = s.truth();
        let mut first_reject = None;
        for i in 0..secs * 10 {
            s.step(Duration::from_millis(100));
            let st = s.lock();
            for l in st.levels.iter().filter(|l| !l.def.exempt) {
                // Admission never takes seats beyond the enforced limit (a request wider than it may run alone).
                assert_eq!(
                    l.admitted_over_limit, 0,
                    "{} admitted over its limit",
                    l.def.name
                );
                if !st.version.at_least(26) {
                    // Without borrowing the limit never drops, so usage stays within it at all times.
                    assert!(l.seats_in_use <= l.enforced_limit() || l.executing.len() == 1);
                }
                // Nothing queues while seats are free for it.
                for q in &l.queues {
                    if let Some(h) = q.waiting.front() {
                        assert!(!l.fits(h.seats), "{} queues with free seats", l.def.name);
                    }
                    assert!(q.waiting.len() as u32 <= l.queue_length_limit());
                }
            }
            drop(st);
            let now = s.truth();
            for (a, b) in prev.iter().zip(&now) {
                assert!(b.dispatched_total >= a.dispatched_total);
                for (reason, n) in &a.rejected_total {
                    assert!(b.rejected_total.get(reason).copied().unwrap_or(0) >= *n);
                }
            }
            if first_reject.is_none()
                && level(&now, "workload-low")
                    .rejected_total
                    .contains_key("queue-full")
            {
                first_reject = Some((i + 1) / 10);
            }
            prev = now;
        }
        first_reject
    }

    #[test]
    fn storm_invariants_and_rejections() {
        let s = sim(29, ScenarioSource::Storm, 7);
        let first = run_checking(&s, 120);
        assert!(
            first.is_some_and(|t| t <= 20),
            "first queue-full at {first:?}"
        );
        let t = s.truth();
        let wl = level(&t, "workload-low");
        assert!(wl.inqueue_requests > 0);
        assert!(
            wl.rejected_total.contains_key("time-out")
                || wl.rejected_total.contains_key("queue-full")
        );
        let ex = level(&t, "exempt");
        assert!(ex.rejected_total.is_empty() && ex.inqueue_requests == 0);
    }

    #[test]
    fn storm_invariants_old_version() {
        let s = sim(21, ScenarioSource::Storm, 3);
        let first = run_checking(&s, 60);
        assert!(first.is_some());
        let t = s.truth();
        assert_eq!(level(&t, "workload-low").current_limit_seats, 293);
    }

    #[test]
    fn queue_full_only_at_queue_length_limit() {
        // A single flow can hold at most handSize × queueLengthLimit waiting requests before queue-full.
        let s = sim(29, ScenarioSource::Storm, 11);
        s.step(Duration::from_secs(30));
        let st = s.lock();
        let l = st
            .levels
            .iter()
            .find(|l| l.def.name == "workload-low")
            .unwrap();
        let f = st.flows.iter().find(|f| f.name == "agents").unwrap();
        for &q in &f.hand {
            assert!(l.queues[q].waiting.len() as u32 <= l.queue_length_limit());
        }
        assert!(f.hand.iter().any(|&q| l.queues[q].waiting.len() >= 45));
    }

    #[test]
    fn same_seed_same_output() {
        let a = sim(30, ScenarioSource::Ramp, 42);
        let b = sim(30, ScenarioSource::Ramp, 42);
        a.step(Duration::from_secs(150));
        b.step(Duration::from_secs(150));
        assert_eq!(a.truth(), b.truth());
        assert_eq!(a.render_metrics(), b.render_metrics());
        assert_eq!(a.render_dump_requests(true), b.render_dump_requests(true));
        let c = sim(30, ScenarioSource::Ramp, 43);
        c.step(Duration::from_secs(150));
        assert_ne!(a.render_metrics(), c.render_metrics());
    }

    #[test]
    fn ramp_timing() {
        for minor in [20, 24, 29, 35] {
            let s = sim(minor, ScenarioSource::Ramp, 1);
            s.step(Duration::from_secs(5));
            let headroom = |s: &Simulator| {
                let t = s.truth();
                let wl = level(&t, "workload-low");
                (wl.current_limit_seats as f64 - wl.executing_seats as f64)
                    / wl.current_limit_seats as f64
            };
            let early = headroom(&s);
            s.step(Duration::from_secs(55));
            let at60 = headroom(&s);
            assert!(
                at60 < early - 0.2,
                "1.{minor}: headroom ratio {early} -> {at60}"
            );
            assert!(level(&s.truth(), "workload-low").rejected_total.is_empty());
            let s = sim(minor, ScenarioSource::Ramp, 1);
            let first = run_checking(&s, 240);
            // Before 1.23 the same seat demand comes as 10× the requests, so queues fill faster.
            let window = if minor < 23 { 60..=180 } else { 90..=180 };
            assert!(
                first.is_some_and(|t| window.contains(&t)),
                "1.{minor}: first queue-full at {first:?}"
            );
            // The load drops back after 210 s: the queues drain.
            s.step(Duration::from_secs(50));
            let t = s.truth();
            assert_eq!(level(&t, "workload-low").inqueue_requests, 0, "1.{minor}");
        }
    }

    #[test]
    fn borrowing_moves_limits() {
        let s = sim(29, ScenarioSource::Idle, 5);
        s.step(Duration::from_secs(60));
        let t = s.truth();
        let sum_nominal: u32 = t
            .iter()
            .filter(|l| !l.exempt)
            .map(|l| l.nominal_limit_seats)
            .sum();
        let sum_current: u32 = t
            .iter()
            .filter(|l| !l.exempt)
            .map(|l| l.current_limit_seats)
            .sum();
        assert!(
            sum_current.abs_diff(sum_nominal) <= 4,
            "{sum_current} vs {sum_nominal}"
        );
        // Idle levels lend: workload-low sits far below its nominal 245, at least its lower bound 24.
        let wl = level(&t, "workload-low");
        assert!(wl.current_limit_seats < 245 && wl.current_limit_seats >= 24);
        let s = sim(29, ScenarioSource::Storm, 5);
        s.step(Duration::from_secs(60));
        let t = s.truth();
        let wl = level(&t, "workload-low");
        assert!(
            wl.current_limit_seats > 245,
            "pressured level borrows: {}",
            wl.current_limit_seats
        );
        let sum_current: u32 = t
            .iter()
            .filter(|l| !l.exempt)
            .map(|l| l.current_limit_seats)
            .sum();
        assert!(
            sum_current.abs_diff(sum_nominal) <= 4,
            "{sum_current} vs {sum_nominal}"
        );
        // Before 1.26 there is no borrowing.
        let s = sim(25, ScenarioSource::Storm, 5);
        s.step(Duration::from_secs(30));
        assert_eq!(level(&s.truth(), "workload-low").current_limit_seats, 245);
    }

    #[test]
    fn reject_level_answers_concurrency_limit() {
        let sc = Scenario::from_yaml(
            "duration: 60s\nflows:\n- {name: anon, flow_schema: catch-all, user: \"system:anonymous\", duration: 2s, rate: [{at: 0s, rps: 50}]}\n",
        )
        .unwrap();
        let s = Simulator::try_new(SimOptions::new(KubeVersion::new(25, 0), sc)).unwrap();
        for _ in 0..100 {
            s.step(Duration::from_millis(100));
            let t = s.truth();
            let ca = level(&t, "catch-all");
            assert!(ca.executing_seats <= 15 && ca.inqueue_requests == 0);
        }
        let t = s.truth();
        let ca = level(&t, "catch-all");
        assert_eq!(ca.current_limit_seats, 13);
        assert!(ca
            .rejected_total
            .get("concurrency-limit")
            .is_some_and(|n| *n > 100));
        assert_eq!(ca.rejected_total.len(), 1);
        let d = s.render_dump_priority_levels();
        assert!(d
            .lines()
            .any(|l| l.starts_with("catch-all,") && l.contains(" 13")));
    }

    #[test]
    fn strict_build_rejects_missing_flow_schema() {
        let sc = Scenario::from_yaml(
            "duration: 60s\nflows:\n- {name: a, flow_schema: system-node-high, user: u, duration: 1s, rate: [{at: 0s, rps: 1}]}\n",
        )
        .unwrap();
        let e = Simulator::try_new(SimOptions::new(KubeVersion::new(21, 0), sc.clone()))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("does not exist in Kubernetes 1.21"), "{e}");
        assert!(Simulator::try_new(SimOptions::new(KubeVersion::new(22, 0), sc)).is_ok());
    }

    #[test]
    fn a_load_share_scales_the_arrivals() {
        let dispatched = |share: f64| {
            let s = sim(34, ScenarioSource::Idle, 3);
            s.set_load_share(share);
            s.step(Duration::from_secs(120));
            s.truth().iter().map(|l| l.dispatched_total).sum::<u64>() as f64
        };
        let (full, third, none) = (dispatched(1.0), dispatched(1.0 / 3.0), dispatched(0.0));
        assert!(full > 1000.0, "{full}");
        assert!((third / full - 1.0 / 3.0).abs() < 0.05, "{third} of {full}");
        assert_eq!(none, 0.0);
        let s = sim(34, ScenarioSource::Idle, 3);
        s.set_load_share(f64::NAN);
        assert_eq!(s.load_share(), 0.0);
    }
}

#[cfg(test)]
mod debug_timeline {
    use super::tests::sim;
    use crate::ScenarioSource;
    use std::time::Duration;

    /// For tuning the built-in scenarios: `cargo test print_ramp -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_ramp() {
        for minor in [20, 24, 29] {
            let s = sim(minor, ScenarioSource::Ramp, 1);
            for t in 0..30 {
                s.step(Duration::from_secs(10));
                let tr = s.truth();
                let wl = tr
                    .iter()
                    .find(|l| l.priority_level == "workload-low")
                    .unwrap();
                println!(
                    "1.{minor} t={} limit={} exec={} wait={} fullest={} rej={:?}",
                    (t + 1) * 10,
                    wl.current_limit_seats,
                    wl.executing_seats,
                    wl.inqueue_requests,
                    wl.fullest_queue_requests,
                    wl.rejected_total
                );
            }
        }
    }
}

#[cfg(test)]
mod capture_compare {
    use super::tests::sim;
    use crate::ScenarioSource;
    use std::time::Duration;

    /// Lists APF families the capture has and the simulator lacks (and the reverse): `--ignored --nocapture`.
    #[test]
    #[ignore]
    fn compare_families() {
        for minor in [20, 21, 23, 24, 25, 26, 28, 29, 30, 31, 32, 34, 35] {
            // The project's own copies of the real captures (tests/fixtures, gzipped).
            let path = format!(
                "{}/../../tests/fixtures/metrics-v1.{minor}.txt.gz",
                env!("CARGO_MANIFEST_DIR")
            );
            let Ok(file) = std::fs::File::open(path) else {
                continue;
            };
            let mut cap = String::new();
            if std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(file), &mut cap)
                .is_err()
            {
                continue;
            }
            let s = sim(minor, ScenarioSource::Storm, 1);
            s.step(Duration::from_secs(20));
            let ours = s.render_metrics();
            let helps = |t: &str| -> std::collections::BTreeMap<String, String> {
                t.lines()
                    .filter_map(|l| l.strip_prefix("# HELP apiserver_flowcontrol_"))
                    .filter_map(|l| l.split_once(' '))
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect()
            };
            let (c, o) = (helps(&cap), helps(&ours));
            for (k, v) in &c {
                match o.get(k) {
                    None => println!("1.{minor} missing {k}"),
                    Some(ov) if ov != v => {
                        println!("1.{minor} HELP differs {k}:\n  cap {v}\n  sim {ov}")
                    }
                    _ => {}
                }
            }
            for k in o.keys().filter(|k| !c.contains_key(*k)) {
                println!("1.{minor} extra {k}");
            }
        }
    }
}

#[cfg(test)]
mod idle_check {
    use super::tests::sim;
    use crate::ScenarioSource;
    use std::time::Duration;

    /// `idle` must never look like pressure: no queueing, no rejections, headroom ratio above 0.2 (the warning).
    #[test]
    fn idle_has_no_pressure() {
        for minor in [20, 29] {
            let s = sim(minor, ScenarioSource::Idle, 1);
            for _ in 0..300 {
                s.step(Duration::from_secs(1));
                for l in s.truth().iter().filter(|l| !l.exempt) {
                    let ratio = (l.current_limit_seats as f64 - l.executing_seats as f64)
                        / l.current_limit_seats as f64;
                    assert!(
                        ratio >= 0.2,
                        "1.{minor} {} headroom ratio {ratio}",
                        l.priority_level
                    );
                    assert_eq!(l.inqueue_requests, 0);
                    assert!(l.rejected_total.is_empty());
                }
            }
        }
    }
}
