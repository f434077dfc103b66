//! The replica's APF configuration: what kube-apiserver's APF controller does when FlowSchemas or
//! PriorityLevelConfigurations change (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller.go`,
//! `digestConfigObjects`): seats divided again by the shares of the levels that exist now, each flow matched again
//! against the FlowSchemas in force, a level whose object is gone kept until the requests it holds are done
//! (quiescing), and queues added at once but removed only as they empty (`queueset.go`, `setConfiguration`).
use apf::limits::{max_seats, seat_limits, SeatLimits};
use apf::matching::match_request;
use apf::{FlowSchema, PriorityLevelConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::state::{Histogram, Level, Queue, State, SEAT_UTILIZATION_BUCKETS};

impl Level {
    fn new(def: PriorityLevelConfig, limits: SeatLimits, max_seats: u32) -> Level {
        let mut level = Level {
            queues: Vec::new(),
            nominal: limits.nominal,
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
            rejected_by_reason: Default::default(),
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
            retired: false,
        };
        level.grow_queues();
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

    fn grow_queues(&mut self) {
        let desired = self.desired_queues();
        if self.queues.len() < desired {
            self.queues.resize(desired, Queue::default());
        }
    }

    /// Drops trailing queues beyond the configured number once they hold nothing (executing requests name their
    /// queue by index, so only the last ones can go).
    pub(super) fn shed_surplus_queues(&mut self) {
        while self.queues.len() > self.desired_queues()
            && self
                .queues
                .last()
                .is_some_and(|q| q.waiting.is_empty() && q.executing_requests == 0)
        {
            self.queues.pop();
        }
    }
}

impl State {
    /// Puts `schemas` and `configs` in force, as the replica's APF controller does on a change of the objects.
    pub(super) fn configure(
        &mut self,
        schemas: Vec<FlowSchema>,
        configs: Vec<PriorityLevelConfig>,
    ) {
        let limits = seat_limits(&configs, self.server_concurrency);
        let mut old = std::mem::take(&mut self.levels);
        let mut levels = Vec::with_capacity(configs.len() + old.len());
        for (def, limits) in configs.into_iter().zip(limits) {
            let cap = max_seats(self.version, &def, limits.nominal);
            match old.iter().position(|l| l.def.name == def.name) {
                Some(i) => {
                    let mut level = old.remove(i);
                    level.reconfigure(def, limits, cap, self.version.at_least(26));
                    levels.push(level);
                }
                None => levels.push(Level::new(def, limits, cap)),
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
            .position(|l| !l.retired && l.def.name == name)
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
            let level = &self.levels[li];
            let hand = deal_hand(
                hash_str(
                    self.seed,
                    &format!("{}/{}", m.flow_schema, m.flow_distinguisher),
                ),
                level.desired_queues(),
                level.def.hand_size.unwrap_or(0) as usize,
            );
            let seats = self.flows[fi].rate.seats.clamp(1, level.max_seats.max(1));
            let flow = &mut self.flows[fi];
            flow.fs = fs;
            flow.level = Some(li);
            flow.distinguisher = m.flow_distinguisher;
            flow.hand = hand;
            flow.seats = seats;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::super::tests::sim;
    use super::*;
    use crate::scenario::{Scenario, ScenarioSource};
    use crate::simulator::{LevelTruth, SimOptions, Simulator};
    use apf::KubeVersion;
    use std::time::Duration;

    const AGENT: &str = "system:serviceaccount:monitoring:agent";

    /// The manifests apf-monitor proposes for a dominant flow: a small level and a schema ahead of
    /// service-accounts, parsed as the simulator reads the stored objects.
    fn isolation(v: KubeVersion) -> (Vec<FlowSchema>, Vec<PriorityLevelConfig>) {
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
        assert_eq!(
            level(&s.truth(), "workload-low").queues,
            128,
            "kept while they hold requests"
        );
        for _ in 0..300 {
            s.step(Duration::from_millis(100));
            let st = s.lock();
            let wl = st
                .levels
                .iter()
                .find(|l| l.def.name == "workload-low")
                .unwrap();
            let waiting: usize = wl.queues.iter().map(|q| q.waiting.len()).sum();
            assert_eq!(waiting as u32, wl.waiting);
            let seats: u32 = wl.executing.iter().map(|r| r.seats).sum();
            assert_eq!(seats, wl.seats_in_use);
        }
        assert_eq!(level(&s.truth(), "workload-low").queues, 8);
        // Back to the defaults: the queues are added at once.
        let (_, defaults) = crate::objects::default_configuration(v);
        s.configure(schemas, defaults);
        assert_eq!(level(&s.truth(), "workload-low").queues, 128);
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
