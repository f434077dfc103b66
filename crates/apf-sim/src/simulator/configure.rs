//! The replica's APF configuration: what kube-apiserver's APF controller does when FlowSchemas or
//! PriorityLevelConfigurations change (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller.go`,
//! `digestConfigObjects`): seats divided again by the shares of the levels that exist now, each flow matched again
//! against the FlowSchemas in force, a level whose object is gone kept until the requests it holds are done
//! (quiescing), and queues added at once but removed only as they empty (`queueset.go`, `setConfiguration`).
use apf::limits::{max_seats, seat_limits, SeatLimits};
use apf::matching::match_request;
use apf::{FlowSchema, PriorityLevelConfig};

use super::state::{Histogram, Level, Queue, State, QUEUE_WAIT_LIMIT_NS, SEAT_UTILIZATION_BUCKETS};
use crate::scenario::LevelSpec;

impl Level {
    fn new(uid: u64, def: PriorityLevelConfig, limits: SeatLimits, max_seats: u32) -> Level {
        let mut level = Level {
            uid,
            queues: Vec::new(),
            nominal: limits.nominal,
            lower: limits.lower,
            upper: limits.upper,
            // Before 1.26 there is no lendablePercent: the limit stays at NominalCL.
            current_cl: limits.initial_current(),
            max_seats,
            fixed: false,
            wait_limit_ns: QUEUE_WAIT_LIMIT_NS,
            def,
            executing: Default::default(),
            finishing: Default::default(),
            seats_in_use: 0,
            waiting: 0,
            waiting_seats: 0,
            dispatched: 0,
            rejected: 0,
            timed_out: 0,
            rejected_by_reason: Default::default(),
            admitted_over_limit: 0,
            current_r: 0,
            r_synced_ns: 0,
            // As kube-apiserver's queueSet starts it (Go's zero value): the first scan starts at queue 1.
            robin_index: 0,
            enqueues: 0,
            dealer: None,
            integrated_ns: 0,
            period_ns: 0,
            period_sum: 0.0,
            period_sum_sq: 0.0,
            period_hwm: 0,
            demand_hwm: 0.0,
            demand_avg: 0.0,
            demand_stdev: 0.0,
            demand_smoothed: 0.0,
            target: 0.0,
            seat_utilization: Histogram::new(SEAT_UTILIZATION_BUCKETS.len()),
            run_seats_ns: 0.0,
            run_waiting_ns: 0.0,
            run_limit_ns: 0.0,
            retired: false,
        };
        level.grow_queues();
        level
    }

    /// A level that comes into being at `now`: its clocks and time integrals start there.
    fn born(mut self, now: u64) -> Level {
        self.r_synced_ns = now;
        self.integrated_ns = now;
        self
    }

    /// A level the scenario defines directly: its fixed limit, queues and wait limit.
    pub(super) fn from_spec(uid: u64, spec: &LevelSpec) -> Level {
        let def = PriorityLevelConfig {
            name: spec.name.clone(),
            queuing: !spec.exempt && spec.queues > 0,
            exempt: spec.exempt,
            queues: (spec.queues > 0).then_some(spec.queues),
            hand_size: (spec.queues > 0).then_some(spec.hand_size),
            queue_length_limit: (spec.queues > 0).then_some(spec.queue_length_limit),
            shares: None,
            lendable_percent: None,
            borrowing_limit_percent: None,
        };
        let limit = spec.concurrency_limit;
        let limits = SeatLimits {
            nominal: limit,
            lower: limit,
            upper: limit,
            lendable: 0,
            borrowing: 0,
        };
        // No work estimator stands before it: a request's seats are the scenario's, however wide.
        let mut level = Level::new(uid, def, limits, u32::MAX);
        level.current_cl = limit;
        level.fixed = true;
        level.wait_limit_ns = spec
            .request_wait_limit
            .as_nanos()
            .min(u128::from(u64::MAX / 4)) as u64;
        level
    }

    /// A changed object: new limits (CurrentCL kept within them until the next borrowing adjustment), and more
    /// queues at once if it asks for more.
    fn reconfigure(
        &mut self,
        def: PriorityLevelConfig,
        limits: SeatLimits,
        max_seats: u32,
        borrowing: bool,
    ) {
        self.def = def;
        self.nominal = limits.nominal;
        self.lower = limits.lower;
        self.upper = limits.upper;
        self.max_seats = max_seats;
        self.current_cl = if borrowing {
            self.current_cl.clamp(limits.lower, limits.upper)
        } else {
            limits.initial_current()
        };
        self.retired = false;
        self.grow_queues();
    }

    /// More queues at once when the configuration asks for more (`setConfiguration`); fewer go one by one as they
    /// empty ([`Level::remove_queue_if_surplus`]). The dealer deals hands of the configured queues.
    fn grow_queues(&mut self) {
        let desired = self.desired_queues();
        if self.queues.len() < desired {
            let r = self.current_r;
            self.queues.resize(
                desired,
                Queue {
                    next_dispatch_r: r,
                    ..Queue::default()
                },
            );
        }
        self.dealer = match (desired, self.def.hand_size) {
            (0, _) | (_, None) => None,
            (deck, Some(hand)) => apf::shuffle::Dealer::new(deck as i64, i64::from(hand)).ok(),
        };
    }
}

impl State {
    /// Puts `schemas` and `configs` in force, as the replica's APF controller does on a change of the objects.
    pub(super) fn configure(
        &mut self,
        schemas: Vec<FlowSchema>,
        configs: Vec<PriorityLevelConfig>,
    ) {
        let now = self.now_ns;
        for l in &mut self.levels {
            l.catch_up(now);
        }
        let limits = seat_limits(&configs, self.server_concurrency);
        let mut old = std::mem::take(&mut self.levels);
        let mut levels = Vec::with_capacity(configs.len() + old.len());
        for (def, limits) in configs.into_iter().zip(limits) {
            let cap = max_seats(self.version, &def, limits.nominal);
            match old.iter().position(|l| !l.fixed && l.def.name == def.name) {
                Some(i) => {
                    let mut level = old.remove(i);
                    level.reconfigure(def, limits, cap, self.version.at_least(26));
                    levels.push(level);
                }
                None => {
                    self.next_level_uid += 1;
                    levels.push(Level::new(self.next_level_uid, def, limits, cap).born(now));
                }
            }
        }
        // The scenario's own levels stand beside the objects' and outside their share of the seats.
        for spec in &self.scenario_levels {
            match old.iter().position(|l| l.fixed && l.def.name == spec.name) {
                Some(i) => levels.push(old.remove(i)),
                None => {
                    self.next_level_uid += 1;
                    levels.push(Level::from_spec(self.next_level_uid, spec).born(now));
                }
            }
        }
        // Levels whose object is gone come last, so that dropping them once idle moves no other level's index.
        for mut level in old {
            level.retired = true;
            levels.push(level);
        }
        self.levels = levels;
        self.flow_schemas = schemas;
        self.rematch_flows();
        // New limits may admit what waits (`setConfiguration` dispatches as much as it can).
        for li in 0..self.levels.len() {
            self.dispatch(li);
        }
        // A retired level already idle goes at once.
        self.levels.retain(|l| !(l.retired && l.is_idle()));
        // The gauges of every flow schema exist from its creation, as in the captures; counters appear on first use.
        for i in 0..self.flow_schemas.len() {
            let name = self.flow_schemas[i].name.clone();
            let level = self.flow_schemas[i].priority_level.clone();
            if let Some(li) = self.active_level(&level) {
                let fs = self.intern_flow_schema(&name);
                self.stats(li, fs);
            }
        }
    }

    fn active_level(&self, name: &str) -> Option<usize> {
        self.levels
            .iter()
            .position(|l| !l.retired && !l.fixed && l.def.name == name)
    }

    pub(super) fn intern_flow_schema(&mut self, name: &str) -> usize {
        match self.fs_names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.fs_names.push(name.to_string());
                self.fs_names.len() - 1
            }
        }
    }

    /// Each flow to the FlowSchema and priority level its requests match now, with its distinguisher and hand.
    fn rematch_flows(&mut self) {
        let configs: Vec<PriorityLevelConfig> = self
            .levels
            .iter()
            .filter(|l| !l.retired)
            .map(|l| l.def.clone())
            .collect();
        for fi in 0..self.flows.len() {
            if let Some(level) = self.flows[fi].rate.priority_level.clone() {
                self.send_directly(fi, &level);
                continue;
            }
            if let Some((schema, distinguisher)) = self.flows[fi].rate.pinned.clone() {
                self.send_pinned(fi, &schema, distinguisher, &configs);
                continue;
            }
            let request = self.flows[fi].rate.request();
            let found = match_request(&self.flow_schemas, &configs, &request)
                .ok()
                .and_then(|m| Some((self.active_level(&m.priority_level)?, m)));
            let Some((li, m)) = found else {
                // Only a cluster without catch-all gets here; kube-apiserver re-creates it at once.
                tracing::warn!(
                    flow = %self.flows[fi].name,
                    "no FlowSchema takes the flow's requests and there is no catch-all: it sends none"
                );
                self.flows[fi].level = None;
                continue;
            };
            let fs = self.intern_flow_schema(&m.flow_schema);
            let hash = self.flows[fi]
                .rate
                .hash
                .unwrap_or_else(|| apf::shuffle::flow_hash(&m.flow_schema, &m.flow_distinguisher));
            self.flows[fi].distinguisher = m.flow_distinguisher;
            self.place(fi, li, fs, hash);
        }
    }

    /// A replayed flow whose requests are not known well enough to be matched: to the flow schema it was seen in,
    /// by name, with the distinguisher it was seen with; to the catch-all when that flow schema is gone (what a
    /// request no other schema takes gets).
    fn send_pinned(
        &mut self,
        fi: usize,
        schema: &str,
        distinguisher: String,
        configs: &[PriorityLevelConfig],
    ) {
        let found = [schema, apf::CATCH_ALL].into_iter().find_map(|name| {
            let fs = self.flow_schemas.iter().find(|s| s.name == name)?;
            configs.iter().find(|c| c.name == fs.priority_level)?;
            let li = self.active_level(&fs.priority_level)?;
            Some((fs.name.clone(), li))
        });
        let Some((name, li)) = found else {
            self.flows[fi].level = None;
            return;
        };
        let fs = self.intern_flow_schema(&name);
        let hash = apf::shuffle::flow_hash(&name, &distinguisher);
        self.flows[fi].distinguisher = distinguisher;
        self.place(fi, li, fs, hash);
    }

    /// A flow sent to one of the scenario's levels: its own flow schema, by its name.
    fn send_directly(&mut self, fi: usize, level: &str) {
        let Some(li) = self
            .levels
            .iter()
            .position(|l| l.fixed && !l.retired && l.def.name == level)
        else {
            self.flows[fi].level = None;
            return;
        };
        let name = self.flows[fi].name.clone();
        let fs = self.intern_flow_schema(&name);
        let hash = self.flows[fi]
            .rate
            .hash
            .unwrap_or_else(|| apf::shuffle::flow_hash(&name, ""));
        self.place(fi, li, fs, hash);
    }

    /// The flow's requests go to level `li` through flow schema `fs`, dealt the hand of queues `hash` gives.
    fn place(&mut self, fi: usize, li: usize, fs: usize, hash: u64) {
        let level = &self.levels[li];
        let hand = level
            .dealer
            .map(|d| d.deal(hash).into_iter().map(|q| q as usize).collect())
            .unwrap_or_default();
        let cap = level.max_seats.max(1);
        let spec = &self.flows[fi].rate;
        let seats = spec.seats.clamp(1, cap);
        let final_seats = spec.final_seats.unwrap_or(0);
        let flow = &mut self.flows[fi];
        flow.fs = fs;
        flow.level = Some(li);
        flow.hash = hash;
        flow.hand = hand;
        flow.seats = seats;
        flow.final_seats = final_seats;
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{isolation, sim};
    use crate::scenario::{Scenario, ScenarioSource};
    use crate::simulator::{LevelTruth, SimOptions, Simulator};
    use apf::KubeVersion;
    use std::time::Duration;

    const AGENT: &str = "system:serviceaccount:monitoring:agent";

    fn level<'a>(t: &'a [LevelTruth], name: &str) -> &'a LevelTruth {
        t.iter().find(|l| l.priority_level == name).unwrap()
    }

    fn rejected(l: &LevelTruth) -> u64 {
        l.rejected_total.values().sum()
    }

    #[test]
    fn isolating_the_dominant_flow_stops_the_rejections_of_its_level() {
        // The agent floods workload-low; a second service account there suffers with it.
        let sc = Scenario::from_yaml(&format!(
            "duration: 600s\nflows:\n\
             - {{name: agents, flow_schema: service-accounts, user: \"{AGENT}\", verb: list, resource: pods, seats: 10, duration: 2s, rate: [{{at: 0s, rps: 40}}]}}\n\
             - {{name: operator, flow_schema: service-accounts, user: \"system:serviceaccount:cert-manager:cert-manager\", verb: get, resource: secrets, namespace: cert-manager, duration: 50ms, rate: [{{at: 0s, rps: 20}}]}}\n"
        ))
        .unwrap();
        let v = KubeVersion::new(34, 0);
        let s = Simulator::try_new(SimOptions::new(v, sc)).unwrap();
        s.step(Duration::from_secs(60));
        let before = s.truth();
        assert!(rejected(level(&before, "workload-low")) > 100, "{before:?}");
        let nominal_before: u32 = before.iter().map(|l| l.nominal_limit_seats).sum();

        let (schemas, levels) = isolation(v);
        s.configure(schemas, levels);
        let t = s.truth();
        // 5 more shares: every level's NominalCL = ceil(600 × shares / Σ shares) again, the new one included.
        let sum_shares: u64 = crate::objects::default_configuration(v)
            .1
            .iter()
            .map(|l| u64::from(l.shares_or_default()))
            .sum::<u64>()
            + 5;
        let new = level(&t, "isolate-agent");
        assert_eq!(
            u64::from(new.nominal_limit_seats),
            (600 * 5u64).div_ceil(sum_shares)
        );
        assert_eq!(new.queues, 16);
        assert!(
            level(&t, "workload-low").nominal_limit_seats
                < level(&before, "workload-low").nominal_limit_seats
        );
        let nominal_after: u32 = t.iter().map(|l| l.nominal_limit_seats).sum();
        assert!(
            nominal_after.abs_diff(nominal_before) <= 12,
            "{nominal_before} -> {nominal_after}"
        );

        // What waited in workload-low is served or times out within the 15 s wait limit; then nothing is rejected
        // there any more, while the agent's own level turns its excess away.
        s.step(Duration::from_secs(20));
        let settled = rejected(level(&s.truth(), "workload-low"));
        s.step(Duration::from_secs(60));
        let t = s.truth();
        assert_eq!(rejected(level(&t, "workload-low")), settled);
        assert!(
            level(&t, "workload-low").dispatched_total
                > level(&before, "workload-low").dispatched_total
        );
        assert!(rejected(level(&t, "isolate-agent")) > 100);
        let dump = s.render_dump_requests(true);
        assert!(
            dump.lines()
                .any(|l| l.starts_with("isolate-agent") && l.contains(AGENT)),
            "{dump}"
        );
    }

    #[test]
    fn a_deleted_level_drains_then_goes_and_its_flows_fall_through() {
        let s = sim(34, ScenarioSource::Storm, 3);
        let v = KubeVersion::new(34, 0);
        s.step(Duration::from_secs(20));
        assert!(level(&s.truth(), "workload-low").inqueue_requests > 0);
        // Without workload-low, service-accounts dangles: its flows go to catch-all's schema... which sits
        // behind global-default, which matches every user.
        let (schemas, mut levels) = crate::objects::default_configuration(v);
        levels.retain(|l| l.name != "workload-low");
        s.configure(schemas, levels);
        let st = s.lock();
        let wl = st
            .levels
            .iter()
            .find(|l| l.def.name == "workload-low")
            .unwrap();
        assert!(wl.retired);
        let agents = st.flows.iter().find(|f| f.name == "agents").unwrap();
        assert_eq!(st.levels[agents.level.unwrap()].def.name, "global-default");
        drop(st);
        let dump = s.render_dump_priority_levels();
        assert!(
            dump.lines()
                .any(|l| l.starts_with("workload-low") && l.contains("true")),
            "{dump}"
        );
        // Requests wait 15 s at most and run 3 s: after 20 s the level is gone.
        s.step(Duration::from_secs(20));
        assert!(s.truth().iter().all(|l| l.priority_level != "workload-low"));
        assert!(level(&s.truth(), "global-default").dispatched_total > 0);
    }

    #[test]
    fn fewer_queues_go_as_they_empty_and_the_books_balance() {
        let s = sim(29, ScenarioSource::Storm, 5);
        let v = KubeVersion::new(29, 0);
        s.step(Duration::from_secs(20));
        let (schemas, mut levels) = crate::objects::default_configuration(v);
        for l in levels.iter_mut().filter(|l| l.name == "workload-low") {
            l.queues = Some(8);
            l.hand_size = Some(2);
        }
        s.configure(schemas.clone(), levels);
        // As kube-apiserver's queueset: a surplus queue goes when a request of its own ends and leaves it empty,
        // and the queues behind it move down (into the hands dealt from the first 8).
        assert_eq!(level(&s.truth(), "workload-low").queues, 128);
        let mut queues = 128;
        for _ in 0..300 {
            s.step(Duration::from_millis(100));
            let st = s.lock();
            let wl = st
                .levels
                .iter()
                .find(|l| l.def.name == "workload-low")
                .unwrap();
            assert!(wl.queues.len() <= queues && wl.queues.len() >= 8);
            queues = wl.queues.len();
            let waiting: usize = wl.queues.iter().map(|q| q.waiting.len()).sum();
            assert_eq!(waiting as u32, wl.waiting);
            let waiting_seats: u32 = wl.queues.iter().map(|q| q.waiting_max_seats).sum();
            assert_eq!(waiting_seats, wl.waiting_seats);
            let held = wl.executing.values().chain(wl.finishing.values());
            let seats: u32 = held.clone().map(|r| r.max_seats()).sum();
            assert_eq!(seats, wl.seats_in_use);
            for (qi, q) in wl.queues.iter().enumerate() {
                let of_queue = held.clone().filter(|r| r.queue == Some(qi));
                assert_eq!(of_queue.map(|r| r.max_seats()).sum::<u32>(), q.seats_in_use);
                assert!(q.waiting.iter().all(|r| r.queue == Some(qi)));
            }
        }
        assert!(queues < 128, "no queue went");
        // Back to the defaults: the queues are added at once.
        let (_, defaults) = crate::objects::default_configuration(v);
        s.configure(schemas, defaults);
        assert_eq!(level(&s.truth(), "workload-low").queues, 128);
    }

    #[test]
    fn a_level_made_later_holds_its_time_from_then() {
        let s = sim(34, ScenarioSource::Idle, 2);
        s.step(Duration::from_secs(60));
        let (schemas, levels) = isolation(KubeVersion::new(34, 0));
        s.configure(schemas, levels);
        s.step(Duration::from_secs(10));
        let st = s.lock();
        let new = st
            .levels
            .iter()
            .find(|l| l.def.name == "isolate-agent")
            .unwrap();
        // Its seat utilization covers the 10 s it has existed, not the minute before.
        assert_eq!(new.seat_utilization.count, 10_000_000_000);
        let old = st
            .levels
            .iter()
            .find(|l| l.def.name == "workload-low")
            .unwrap();
        assert_eq!(old.seat_utilization.count, 70_000_000_000);
    }

    #[test]
    fn the_same_changes_at_the_same_time_give_the_same_run() {
        let run = || {
            let s = sim(34, ScenarioSource::Ramp, 9);
            s.step(Duration::from_secs(120));
            let (schemas, levels) = isolation(KubeVersion::new(34, 0));
            s.configure(schemas, levels);
            s.step(Duration::from_secs(60));
            s.render_metrics()
        };
        assert_eq!(run(), run());
    }
}
