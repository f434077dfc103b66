//! `apf-monitor simulate --run`: the scenario's `duration` simulated once in virtual time, as fast as the CPU goes,
//! and what each flow and priority level got over it (the library's [`apf_sim::run`]), as a table or as JSON.
use anyhow::{Context, Result};

use super::demo::{seed, version_and_scenario};
use super::output::{out, outln};
use super::table::{columns, wait};
use super::{RunOutput, SimulateArgs};
use crate::analyze::round::shown;

pub(super) async fn run(args: &SimulateArgs) -> Result<()> {
    let (version, scenario) = version_and_scenario(&args.kubernetes_version, &args.scenario)?;
    let opts = apf_sim::SimOptions {
        seed: seed(args.seed, &scenario),
        server_concurrency: args.server_concurrency,
        ..apf_sim::SimOptions::new(version, scenario)
    };
    let name = args.scenario.clone();
    // CPU-bound from start to end: off the runtime's workers.
    let report = tokio::task::spawn_blocking(move || apf_sim::run(opts))
        .await
        .context("the virtual-time run stopped")?
        .map_err(|e| anyhow::anyhow!("--scenario {name:?}: {e}"))?;
    match args.output {
        RunOutput::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
        RunOutput::Table => out!("{}", table(&report)),
    }
}

/// The requests rejected, by reason: `3 queue-full, 1 time-out`, or `0`.
fn rejected(by_reason: &std::collections::BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = by_reason
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(", ")
    }
}

/// A row per flow, then a row per priority level that had requests; the idle ones named on a line.
fn table(report: &apf_sim::RunReport) -> String {
    let mut out = format!(
        "virtual-time run: {}s of the scenario on Kubernetes v{}, seed {}\n\n",
        shown(report.duration_seconds),
        report.kubernetes_version,
        report.seed
    );
    let header = [
        "FLOW",
        "PRIORITY LEVEL",
        "DISPATCHED",
        "REJECTED",
        "MEAN SEATS",
        "MEAN WAIT",
        "P99 WAIT",
    ];
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(report.flows.iter().map(|f| {
            vec![
                f.name.clone(),
                f.priority_level.clone(),
                f.dispatched.to_string(),
                rejected(&f.rejected),
                shown(f.mean_executing_seats),
                wait(f.mean_wait_seconds),
                wait(f.p99_wait_seconds),
            ]
        }))
        .collect();
    out.push_str(&columns(&rows));
    let (busy, idle): (Vec<&apf_sim::LevelRun>, Vec<&apf_sim::LevelRun>) =
        report.levels.iter().partition(|l| {
            l.dispatched > 0
                || l.rejected.values().any(|n| *n > 0)
                || l.mean_seats_in_use > 0.0
                || l.mean_waiting_requests > 0.0
        });
    if !busy.is_empty() {
        let header = [
            "PRIORITY LEVEL",
            "LIMIT",
            "DISPATCHED",
            "REJECTED",
            "MEAN SEATS IN USE",
            "MEAN WAITING",
        ];
        let rows: Vec<Vec<String>> =
            std::iter::once(header.iter().map(|h| h.to_string()).collect())
                .chain(busy.iter().map(|l| {
                    vec![
                        l.name.clone(),
                        l.concurrency_limit.to_string(),
                        l.dispatched.to_string(),
                        rejected(&l.rejected),
                        shown(l.mean_seats_in_use),
                        shown(l.mean_waiting_requests),
                    ]
                }))
                .collect();
        out.push('\n');
        out.push_str(&columns(&rows));
    }
    if !idle.is_empty() {
        let names: Vec<&str> = idle.iter().map(|l| l.name.as_str()).collect();
        out.push_str(&format!("idle priority levels: {}\n", names.join(", ")));
    }
    out.push_str(
        "MEAN SEATS: a flow's seats while its requests execute (additional latency not counted), averaged over the \
         run; a level's counts every seat held.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn flow(name: &str, rejected: &[(&str, u64)], seats: f64, wait: f64) -> apf_sim::FlowRun {
        apf_sim::FlowRun {
            name: name.into(),
            priority_level: "test".into(),
            flow_schema: name.into(),
            dispatched: 40,
            rejected: rejected.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            mean_executing_seats: seats,
            mean_wait_seconds: wait,
            p99_wait_seconds: wait * 3.0,
        }
    }

    fn level(name: &str, dispatched: u64) -> apf_sim::LevelRun {
        apf_sim::LevelRun {
            name: name.into(),
            concurrency_limit: 4,
            dispatched,
            rejected: BTreeMap::new(),
            mean_seats_in_use: if dispatched > 0 { 3.5 } else { 0.0 },
            mean_waiting_requests: 0.0,
        }
    }

    #[test]
    fn a_row_per_flow_and_per_busy_level_with_rejections_by_reason() {
        let report = apf_sim::RunReport {
            duration_seconds: 40.0,
            seed: 7,
            kubernetes_version: "1.34.0".into(),
            flows: vec![
                flow("client0", &[("queue-full", 3), ("time-out", 1)], 2.0, 0.25),
                flow("client1", &[], 1.5, 0.0),
            ],
            levels: vec![level("test", 80), level("exempt", 0), level("catch-all", 0)],
        };
        let text = table(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "virtual-time run: 40s of the scenario on Kubernetes v1.34.0, seed 7"
        );
        assert_eq!(
            lines[2],
            "FLOW     PRIORITY LEVEL  DISPATCHED  REJECTED                  MEAN SEATS  MEAN WAIT  P99 WAIT"
        );
        assert_eq!(
            lines[3],
            "client0  test            40          3 queue-full, 1 time-out  2           250ms      750ms"
        );
        assert_eq!(
            lines[4],
            "client1  test            40          0                         1.50        0          0"
        );
        assert_eq!(
            lines[6],
            "PRIORITY LEVEL  LIMIT  DISPATCHED  REJECTED  MEAN SEATS IN USE  MEAN WAITING"
        );
        assert_eq!(
            lines[7],
            "test            4      80          0         3.50               0"
        );
        assert_eq!(lines[8], "idle priority levels: exempt, catch-all");
    }
}
