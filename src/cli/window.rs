//! One analysis window of the replicas, watched as the daemon's rounds watch them (or one read of a Prometheus),
//! shared by the commands that need rates: `advise` and `plan --load`.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::output::errln;
use super::{init_command_logging, load_config, SourceArgs, TargetArgs};
use crate::analyze::{Analysis, ApiserverReport, Point, ReplicaHistory, StatusReport};
use crate::daemon::{analysis_of, Replica};

/// What to watch, from a command's flags.
pub(super) struct Watch<'a> {
    pub common: &'a TargetArgs,
    pub source: &'a SourceArgs,
    /// Audit logs of the window (replace the config's audit.files when given).
    pub audit: &'a [PathBuf],
    /// FlowSchemas and PriorityLevelConfigurations for replicas that serve none (read through a Prometheus).
    pub objects: &'a [PathBuf],
    pub window: Option<Duration>,
    /// The command's other way to a report, named when there is no replica: `--daemon URL`.
    pub purpose: &'a str,
}

/// One window of the replicas (or one read of the Prometheus sources), analysed as the daemon does, with the
/// audit events of that window.
pub(super) async fn watch(args: &Watch<'_>) -> Result<StatusReport> {
    let mut config = load_config(args.common, Some(args.source), None)?;
    if !args.audit.is_empty() {
        config.audit.files = args.audit.to_vec();
    }
    init_command_logging(&config, args.common)?;
    let mut analysis = analysis_of(&config);
    if let Some(w) = args.window {
        if w.is_zero() {
            bail!("--window 0s: give a window of at least one scrape interval, e.g. 30s");
        }
        analysis.window_seconds = w.as_secs_f64();
    }
    let mut report = if config.targets.prometheus.is_empty() {
        let replicas = super::replicas(&config).await?;
        watch_replicas(&replicas, &analysis, config.scrape.interval.0, args.purpose).await?
    } else {
        super::check::check_prometheus(&config, &analysis).await?
    };
    if !args.objects.is_empty() {
        let (flow_schemas, priority_levels, _) = super::matching::from_files(args.objects)?;
        let objects = std::sync::Arc::new(apf::model::FlowcontrolObjects {
            flow_schemas,
            priority_levels,
        });
        for a in report.apiservers.iter_mut().filter(|a| a.objects.is_none()) {
            std::sync::Arc::make_mut(a).objects = Some(objects.clone());
        }
    }
    if !config.audit.files.is_empty() {
        report.audit = super::check::audit_of_window(&config, &report, &analysis);
    }
    for a in &report.apiservers {
        for e in &a.errors {
            errln!("warning: {}: {e}", a.display_name());
        }
    }
    crate::analyze::advise(&mut report);
    Ok(report)
}

/// Scrapes every replica each `interval` for the window, as the daemon's rounds do, and analyses each history.
async fn watch_replicas(
    replicas: &[Replica],
    analysis: &Analysis,
    interval: Duration,
    purpose: &str,
) -> Result<StatusReport> {
    if replicas.is_empty() {
        bail!("no replica to watch: give --target URL or --prometheus URL (or {purpose})");
    }
    errln!(
        "watching {} replica{} for {} (the analysis window; --window to change) ...",
        replicas.len(),
        if replicas.len() == 1 { "" } else { "s" },
        humantime::format_duration(Duration::from_secs_f64(analysis.window_seconds))
    );
    let started = Instant::now();
    let window = Duration::from_secs_f64(analysis.window_seconds);
    let mut histories: Vec<ReplicaHistory> = vec![ReplicaHistory::default(); replicas.len()];
    let mut last: Vec<ApiserverReport> = Vec::new();
    let mut objects: BTreeMap<usize, std::sync::Arc<apf::model::FlowcontrolObjects>> =
        BTreeMap::new();
    loop {
        let round_started = Instant::now();
        let rounds =
            super::check::scrape_round(replicas, Some(crate::analyze::FLOWS_PER_SCHEMA)).await;
        let at = started.elapsed().as_secs_f64();
        last.clear();
        for (i, (replica, mut round)) in replicas.iter().zip(rounds).enumerate() {
            let errors = super::check::problems(&round);
            if let Some(o) = round.objects.take() {
                objects.insert(i, std::sync::Arc::new(o.objects));
            }
            if let Some(mut snap) = round.snapshot.take() {
                snap.attach_configs(objects.get(&i).iter().flat_map(|o| &o.priority_levels));
                histories[i].push(Point {
                    at,
                    wall_time: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                        .to_string(),
                    snapshot: std::sync::Arc::new(snap),
                });
            }
            histories[i].prune(at, analysis.window_seconds, analysis.lookback_seconds);
            let mut a = analysis.analyze_replica(&replica.target.name, &histories[i], at);
            if a.levels.is_empty() {
                a.apiserver = replica.target.name.clone();
            }
            a.errors = errors;
            a.objects = objects.get(&i).cloned();
            last.push(a);
        }
        if started.elapsed() >= window {
            break;
        }
        let next = round_started + interval;
        tokio::time::sleep_until(next.into()).await;
    }
    Ok(StatusReport {
        apiservers: last.into_iter().map(std::sync::Arc::new).collect(),
        ..Default::default()
    })
}
