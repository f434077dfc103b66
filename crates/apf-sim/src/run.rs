//! A virtual-time run (`apf-monitor simulate --run`): the scenario's `duration` simulated as fast as the CPU goes,
//! with no listener, and what each flow and priority level got over it. The same scenario and seed give the same
//! report.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::scenario::SimError;
use crate::simulator::{SimOptions, Simulator};

/// What one flow of the scenario got over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowRun {
    /// The scenario's name of the flow.
    pub name: String,
    /// The priority level its requests went to (the last one, if the configuration changed during the run).
    pub priority_level: String,
    /// The flow schema they matched; the flow's own name on a level the scenario defines directly.
    pub flow_schema: String,
    /// Requests that began executing.
    pub dispatched: u64,
    /// Requests rejected with 429, by reason (`queue-full`, `concurrency-limit`, `time-out`).
    pub rejected: BTreeMap<String, u64>,
    /// The time average over the run of the initial seats of its requests while they execute (not counting their
    /// additional latency): its share of the level, as kube-apiserver's fair-queuing tests measure it.
    pub mean_executing_seats: f64,
    /// The mean time its dispatched requests waited in a queue (0 for those that found a seat at once).
    pub mean_wait_seconds: f64,
    /// The 99th percentile of the same waits (nearest rank).
    pub p99_wait_seconds: f64,
}

/// What one priority level did over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelRun {
    pub name: String,
    /// Its limit at the end of the run (CurrentCL; the fixed `concurrency_limit` of a level the scenario defines).
    pub concurrency_limit: u32,
    pub dispatched: u64,
    pub rejected: BTreeMap<String, u64>,
    /// The time average of the seats its requests held (their widest, additional latency included).
    pub mean_seats_in_use: f64,
    /// The time average of the requests waiting in its queues.
    pub mean_waiting_requests: f64,
}

/// The report of a virtual-time run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub duration_seconds: f64,
    pub seed: u64,
    pub kubernetes_version: String,
    pub flows: Vec<FlowRun>,
    pub levels: Vec<LevelRun>,
}

/// Runs the scenario's `duration` in virtual time, with `opts.seed` ([`SimOptions::new`] takes the scenario's `seed`,
/// else 1).
pub fn run(opts: SimOptions) -> Result<RunReport, SimError> {
    let sim = Simulator::try_new(opts)?;
    Ok(sim.run_to_end())
}
