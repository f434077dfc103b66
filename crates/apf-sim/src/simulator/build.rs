//! A simulator built from a Kubernetes version and a scenario: the version's default priority levels with the
//! seats their shares give, and the scenario's flows, each matched to its flow schema and dealt its queues by
//! shuffle sharding.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use apf::defaults::{default_flow_schemas, default_priority_levels};
use apf::limits::{max_seats, seat_limits};
use apf::Distinguisher;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::state::{Flow, Histogram, Level, Queue, State, SEAT_UTILIZATION_BUCKETS, TICK_NS};
use super::{SimOptions, Simulator};
use crate::scenario::SimError;

impl Simulator {
    pub(super) fn build(opts: SimOptions, strict: bool) -> Result<Self, SimError> {
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
