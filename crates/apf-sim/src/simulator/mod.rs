//! The APF model: priority levels with seats, kube-apiserver's fair-queuing queues, rejections and (1.26+)
//! borrowing, driven by open-loop flows and closed-loop client threads.
//!
//! Time moves from event to event in exact nanoseconds (`events.rs`), so a seed always gives the same run and a
//! quiet level costs nothing.
//!
//! Here: the options, the public handle ([`Simulator`]) and what it tells of each level; `state.rs` the state,
//! `build.rs` how it is built from a version and a scenario, `configure.rs` how it follows the FlowSchemas and
//! PriorityLevelConfigurations in force, `queueset.rs` one level's queues as kube-apiserver's queueset serves them,
//! `requests.rs` a request's life and its counters, `clients.rs` where requests come from, `borrowing.rs` the
//! borrowing adjustment.
mod borrowing;
mod build;
mod clients;
mod configure;
mod events;
mod queueset;
mod requests;
mod state;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::scenario::{Scenario, SimError};
use apf::KubeVersion;

pub(crate) use state::{
    p99_seconds, FsStats, Histogram, Level, Req, State, ADJUST_NS, QUEUE_LENGTH_BUCKETS,
    SEAT_UTILIZATION_BUCKETS,
};

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
    /// The scenario's seed (else 1) and ServerCL 600.
    pub fn new(version: KubeVersion, scenario: Scenario) -> Self {
        SimOptions {
            version,
            seed: scenario.seed.unwrap_or(1),
            scenario,
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

/// A flow's tallies since the run began ([`Simulator::tallies`]).
#[derive(Debug, Clone)]
pub(crate) struct FlowTally {
    pub name: String,
    pub flow_schema: String,
    pub priority_level: String,
    pub dispatched: u64,
    pub rejected: BTreeMap<String, u64>,
    pub wait_sum_ns: f64,
    /// Every dispatched request's wait, in order, since waits are kept.
    pub waits: Vec<u64>,
    /// The same of the requests that timed out in their queue.
    pub timed_out_wait_sum_ns: f64,
    pub timed_out_waits: Vec<u64>,
}

/// A level's tallies since the run began: counts, and seats in use, requests waiting and the enforced limit
/// integrated over time (seat-ns, request-ns).
#[derive(Debug, Clone)]
pub(crate) struct LevelTally {
    pub name: String,
    pub exempt: bool,
    pub nominal: u32,
    pub dispatched: u64,
    pub rejected: BTreeMap<String, u64>,
    pub seats_ns: f64,
    pub waiting_ns: f64,
    pub limit_ns: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct Tallies {
    pub now_ns: u64,
    pub flows: Vec<FlowTally>,
    pub levels: Vec<LevelTally>,
}

/// The simulated apiserver's APF state, shared between the clock, the HTTP handlers and tests.
#[derive(Clone)]
pub struct Simulator {
    pub(super) state: Arc<Mutex<State>>,
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
        let mut st = self.lock();
        st.load_share = if share.is_finite() {
            share.max(0.0)
        } else {
            0.0
        };
        // What each flow sends from now on: the pending arrivals at the new rate, the threads of the new share.
        let now = st.now_ns;
        for fi in 0..st.flows.len() {
            st.start_flow(fi, now);
        }
    }

    /// The part of the scenario's rates this simulator receives (see [`Simulator::set_load_share`]).
    pub fn load_share(&self) -> f64 {
        self.lock().load_share
    }

    /// From now on, every request that ends is noted for the audit sink ([`Simulator::drain_audit`]); a
    /// [`crate::Cluster`] with `audit` does it for each replica.
    pub fn enable_audit(&self) {
        let mut st = self.lock();
        if st.audit.is_none() {
            st.audit = Some(crate::audit::Outbox::default());
        }
    }

    /// The requests that ended since the last call, with what their events name; `None` without audit.
    pub(crate) fn drain_audit(&self) -> Option<crate::audit::AuditDrain> {
        let mut st = self.lock();
        let minor = st.version.minor;
        let wall_start = st.wall_start;
        let flows = st
            .flows
            .iter()
            .map(|f| {
                let mut groups = f.rate.groups.clone();
                for g in apf::matching::implied_groups(&f.user) {
                    if !groups.contains(&g) {
                        groups.push(g);
                    }
                }
                crate::audit::FlowIdentity {
                    name: f.rate.name.clone(),
                    user: f.user.clone(),
                    groups,
                    verb: f.verb.clone(),
                    resource: f.resource.clone(),
                    namespace: f.namespace.clone(),
                }
            })
            .collect();
        let outbox = st.audit.as_mut()?;
        let records: Vec<_> = outbox.records.drain(..).collect();
        let first_id = outbox.next_id;
        outbox.next_id += records.len() as u64;
        if outbox.dropped > 0 {
            tracing::warn!(
                dropped = outbox.dropped,
                "audit: events were dropped, the sink is behind"
            );
            outbox.dropped = 0;
        }
        Some(crate::audit::AuditDrain {
            records,
            flows,
            wall_start,
            minor,
            first_id,
        })
    }

    /// The audit events (JSON lines) of the requests that ended since the last call: what a cluster's sink writes.
    pub fn drain_audit_events(&self) -> Vec<String> {
        let Some(d) = self.drain_audit() else {
            return Vec::new();
        };
        d.records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let f = d.flows.get(r.flow)?;
                Some(
                    crate::audit::render(r, f, d.wall_start, d.minor, d.first_id + i as u64)
                        .to_string(),
                )
            })
            .collect()
    }

    /// Advances simulated time by `dt`, deterministically for a seed.
    pub fn step(&self, dt: Duration) {
        let mut st = self.lock();
        st.target_ns += dt.as_nanos() as u64;
        let target = st.target_ns;
        st.advance_to(target);
    }

    /// Puts a configuration in force, as kube-apiserver's APF controller does when the flowcontrol objects change:
    /// seats divided again among `levels`, every flow matched again against `schemas`, a level no longer configured
    /// kept until the requests it holds are done.
    pub fn configure(&self, schemas: Vec<apf::FlowSchema>, levels: Vec<apf::PriorityLevelConfig>) {
        self.lock().configure(schemas, levels);
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

    /// Runs the scenario's duration in virtual time and reports what each flow and level got.
    pub(crate) fn run_to_end(&self) -> crate::run::RunReport {
        let duration = {
            let mut st = self.lock();
            st.keep_waits = true;
            st.scenario_ns
        };
        self.step(Duration::from_nanos(duration));
        self.lock().run_report()
    }

    /// Sets the smoothed seat demand of the levels named (a replay starts where the replica was): borrowing's memory.
    pub(crate) fn remember_demand(&self, smoothed: &BTreeMap<String, f64>) {
        let mut st = self.lock();
        for l in st.levels.iter_mut() {
            if let Some(v) = smoothed
                .get(&l.def.name)
                .filter(|v| v.is_finite() && **v >= 0.0)
            {
                l.demand_smoothed = *v;
            }
        }
    }

    /// Every flow's and level's tallies of the run so far, the levels' integrals brought to now: a replay
    /// ([`crate::replay`]) takes them at the end of its warm-up and at its end, and measures the difference. Keeps
    /// every wait from the first call on.
    pub(crate) fn tallies(&self) -> Tallies {
        let mut st = self.lock();
        st.keep_waits = true;
        let now = st.now_ns;
        for l in &mut st.levels {
            l.catch_up(now);
        }

        Tallies {
            now_ns: now,
            flows: st
                .flows
                .iter()
                .map(|f| {
                    let (priority_level, flow_schema) = st.placement(f);
                    FlowTally {
                        name: f.name.clone(),
                        flow_schema,
                        priority_level,
                        dispatched: f.run.dispatched,
                        rejected: f.run.rejected_by_reason(),
                        wait_sum_ns: f.run.wait_sum_ns,
                        waits: f.run.waits.clone(),
                        timed_out_wait_sum_ns: f.run.timed_out_wait_sum_ns,
                        timed_out_waits: f.run.timed_out_waits.clone(),
                    }
                })
                .collect(),
            levels: st
                .levels
                .iter()
                .map(|l| LevelTally {
                    name: l.def.name.clone(),
                    exempt: l.def.exempt,
                    nominal: l.nominal,
                    dispatched: l.dispatched,
                    rejected: l.rejected_by_reason.clone(),
                    seats_ns: l.run_seats_ns,
                    waiting_ns: l.run_waiting_ns,
                    limit_ns: l.run_limit_ns,
                })
                .collect(),
        }
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::scenario::ScenarioSource;

    /// The manifests apf-monitor proposes for a dominant flow: a small level and a schema ahead of
    /// service-accounts, parsed as the simulator reads the stored objects, beside `v`'s defaults.
    pub fn isolation(v: KubeVersion) -> (Vec<apf::FlowSchema>, Vec<apf::PriorityLevelConfig>) {
        let (mut schemas, mut levels) = crate::objects::default_configuration(v);
        let parsed = apf::model::parse_flowcontrol_documents(
            "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: isolate-agent}\n\
             spec: {type: Limited, limited: {nominalConcurrencyShares: 5, lendablePercent: 0, limitResponse: \
             {type: Queue, queuing: {queues: 16, handSize: 4, queueLengthLimit: 50}}}}\n---\n\
             apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: isolate-agent}\n\
             spec: {priorityLevelConfiguration: {name: isolate-agent}, matchingPrecedence: 8999, \
             distinguisherMethod: {type: ByUser}, rules: [{subjects: [{kind: ServiceAccount, serviceAccount: \
             {namespace: monitoring, name: agent}}], resourceRules: [{verbs: [list], apiGroups: [\"\"], \
             resources: [pods], clusterScope: true, namespaces: [\"*\"]}]}]}\n"
        )
        .unwrap();
        levels.extend(parsed.priority_levels);
        schemas.extend(parsed.flow_schemas);
        (schemas, levels)
    }

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

    /// Checks the invariants after every step; returns the time of workload-low's first rejection.
    fn run_checking(s: &Simulator, secs: u64) -> Option<u64> {
        let mut prev = s.truth();
        let mut first_reject = None;
        for i in 0..secs * 10 {
            s.step(Duration::from_millis(100));
            let st = s.lock();
            for l in st.levels.iter().filter(|l| !l.def.exempt && !l.retired) {
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
                // Nothing waits while every head could start: the one fair queuing chooses does not fit.
                if l.waiting > 0 {
                    assert!(
                        l.seats_in_use >= l.current_cl
                            || l.queues.iter().any(|q| q
                                .waiting
                                .front()
                                .is_some_and(|h| !l.can_accommodate(h.max_seats()))),
                        "{} queues with free seats",
                        l.def.name
                    );
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
            if first_reject.is_none() && !level(&now, "workload-low").rejected_total.is_empty() {
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
            // The mean headroom ratio over the next 10 s: one instant is one draw of the arrivals.
            let headroom = |s: &Simulator| {
                let mut sum = 0.0;
                for _ in 0..10 {
                    s.step(Duration::from_secs(1));
                    let t = s.truth();
                    let wl = level(&t, "workload-low");
                    sum += (wl.current_limit_seats as f64 - wl.executing_seats as f64)
                        / wl.current_limit_seats as f64;
                }
                sum / 10.0
            };
            let early = headroom(&s);
            s.step(Duration::from_secs(45));
            let at60 = headroom(&s);
            // From 1.26 the level borrows as its demand grows, so the ratio falls less than the seats in use rise.
            assert!(
                at60 < early - 0.15,
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
    fn even_arrivals_hold_seats_in_use_at_the_rate_times_the_duration() {
        // 50 requests/s of 720 ms each in global-default (49 seats on 1.25): 36 seats in use, a seat either way at
        // most (a request ends and the next begins within a 10 ms tick). Poisson arrivals at the same rate scatter
        // by about the square root of 36.
        let flow = |arrivals: &str| {
            let sc = Scenario::from_yaml(&format!(
                "duration: 60s\nflows:\n- {{name: a, flow_schema: global-default, user: alice, duration: 720ms, \
                 arrivals: {arrivals}, rate: [{{at: 0s, rps: 50}}]}}\n"
            ))
            .unwrap();
            let s = Simulator::try_new(SimOptions::new(KubeVersion::new(25, 0), sc)).unwrap();
            s.step(Duration::from_secs(5));
            (0..200)
                .map(|_| {
                    s.step(Duration::from_millis(130));
                    let t = s.truth();
                    let l = t.iter().find(|l| l.priority_level == "global-default");
                    f64::from(l.map_or(0, |l| l.executing_seats))
                })
                .collect::<Vec<f64>>()
        };
        let even = flow("even");
        assert!(even.iter().all(|s| (35.0..=37.0).contains(s)), "{even:?}");
        let poisson = flow("poisson");
        let spread = poisson.iter().copied().fold(f64::MIN, f64::max)
            - poisson.iter().copied().fold(f64::MAX, f64::min);
        assert!(spread > 10.0, "{poisson:?}");
        // Unknown ways of arriving are refused by name.
        let e = Scenario::from_yaml(
            "duration: 60s\nflows:\n- {name: a, user: alice, duration: 1s, arrivals: bursty, rate: [{at: 0s, rps: 1}]}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bursty") && e.contains("even"), "{e}");
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
        // global-default takes every user; without it, anonymous requests fall through to catch-all (Reject).
        let sc = Scenario::from_yaml(
            "duration: 60s\nflows:\n- {name: anon, user: \"system:anonymous\", duration: 2s, rate: [{at: 0s, rps: 50}]}\n",
        )
        .unwrap();
        let v = KubeVersion::new(25, 0);
        let s = Simulator::try_new(SimOptions::new(v, sc)).unwrap();
        let (mut schemas, levels) = crate::objects::default_configuration(v);
        schemas.retain(|fs| fs.name != "global-default");
        s.configure(schemas, levels);
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
            "duration: 60s\nflows:\n- {name: a, flow_schema: system-node-high, user: \"system:node:n1\", groups: [system:nodes], resource: nodes, duration: 1s, rate: [{at: 0s, rps: 1}]}\n",
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
    use crate::scenario::ScenarioSource;
    use std::time::Duration;

    /// For tuning the built-in scenarios: `cargo test print_ramp -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_ramp() {
        print(ScenarioSource::Ramp, 10, 30);
    }

    /// `cargo test print_storm -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_storm() {
        print(ScenarioSource::Storm, 2, 30);
    }

    fn print(source: ScenarioSource, every: u64, times: u64) {
        for minor in [20, 24, 29] {
            let s = sim(minor, source.clone(), 1);
            for t in 0..times {
                s.step(Duration::from_secs(every));
                let tr = s.truth();
                let wl = tr
                    .iter()
                    .find(|l| l.priority_level == "workload-low")
                    .unwrap();
                println!(
                    "1.{minor} t={} limit={} exec={} wait={} fullest={} rej={:?}",
                    (t + 1) * every,
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
    use crate::scenario::ScenarioSource;
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
    use crate::scenario::ScenarioSource;
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
