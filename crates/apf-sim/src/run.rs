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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use apf::KubeVersion;

    fn run_yaml(yaml: &str) -> RunReport {
        let scenario = Scenario::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}"));
        run(SimOptions::new(KubeVersion::new(34, 0), scenario)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn flow<'a>(r: &'a RunReport, name: &str) -> &'a FlowRun {
        r.flows.iter().find(|f| f.name == name).unwrap()
    }

    #[test]
    fn a_thread_calls_waits_thinks_and_stops_after_its_calls() {
        // Plenty of seats: 2 threads x 5 calls of 1 s with 1 s between, from 2 s in: all done by 11 s.
        let r = run_yaml(
            "duration: 20s\npriority_levels: [{name: roomy, concurrency_limit: 10, queues: 4, hand_size: 2}]\n\
             flows:\n- {name: a, priority_level: roomy, threads: 2, calls: 5, start: 2s, duration: 1s, think: 1s, seats: 2}\n",
        );
        let a = flow(&r, "a");
        assert_eq!((a.dispatched, a.rejected.len()), (10, 0));
        // 2 threads x 5 s executing x 2 seats over 20 s.
        assert!((a.mean_executing_seats - 1.0).abs() < 1e-9, "{a:?}");
        assert_eq!((a.mean_wait_seconds, a.p99_wait_seconds), (0.0, 0.0));
        assert_eq!(
            (a.priority_level.as_str(), a.flow_schema.as_str()),
            ("roomy", "a")
        );
    }

    #[test]
    fn a_token_bucket_paces_the_threads_at_its_qps() {
        // 10 threads with nothing to wait for but a bucket of 5/s, burst 1: 5 calls a second.
        let r = run_yaml(
            "duration: 60s\npriority_levels: [{name: roomy, concurrency_limit: 100, queues: 4, hand_size: 2}]\n\
             flows:\n- {name: a, priority_level: roomy, threads: 10, duration: 100ms, qps: 5, burst: 1}\n",
        );
        let a = flow(&r, "a");
        assert!((299..=301).contains(&a.dispatched), "{a:?}");
    }

    #[test]
    fn a_rejected_call_is_tried_again_after_a_second() {
        // One seat, no queues, two threads calling 10 s requests without a pause: the first holds the seat (at 0,
        // 10 and 20 s its answer and its next call come together, the seat freed first), the second is refused at
        // 0 s and at each second after, 21 times by 20 s.
        let r = run_yaml(
            "duration: 20s\npriority_levels: [{name: tight, concurrency_limit: 1, queues: 0}]\n\
             flows:\n- {name: a, priority_level: tight, threads: 2, duration: 10s}\n",
        );
        let a = flow(&r, "a");
        assert_eq!(a.dispatched, 3, "{a:?}");
        assert_eq!(a.rejected.get("concurrency-limit"), Some(&21), "{a:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_report_and_another_seed_another() {
        let yaml = |seed: u64| {
            format!(
                "duration: 30s\nseed: {seed}\nflows:\n- {{name: a, user: alice, duration: 1s, rate: [{{at: 0s, rps: 20}}]}}\n"
            )
        };
        assert_eq!(run_yaml(&yaml(3)), run_yaml(&yaml(3)));
        assert_ne!(run_yaml(&yaml(3)), run_yaml(&yaml(4)));
    }
}
