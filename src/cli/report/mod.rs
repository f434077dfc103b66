//! `apf-monitor report`: an APF incident read out of a Prometheus's history, replica by replica, with when
//! apf-monitor's own rules would have warned. The history is read with the queries of a fleet round asked over a
//! range, made into the same snapshots, analysed by the same derivations and judged by the same rules and life
//! cycle as the daemon, step by step.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use super::init_logging;
use super::output::{out, outln};
use crate::alert::replay::{Episode, Replay};
use crate::analyze::incidents::{incidents, IncidentOptions, Timeline, Timelines};
use crate::analyze::{Analysis, ReplicaHistory, StatusReport};
use crate::config::Config;
use crate::scrape::prometheus::{read_range, resolution, PrometheusSource, STEPS_PER_QUERY};
use crate::values;
use apf::model::ReplicaKey;

mod html;
mod shape;
mod text;

use shape::{IncidentReport, Report};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReportOutput {
    Table,
    Markdown,
    Json,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The Prometheus (or Thanos, Mimir, a provider's managed Prometheus) holding the apiservers' history.
    /// Repeatable; default: the config's targets.prometheus.
    #[arg(long = "prometheus", value_name = "URL", value_parser = values::parse_target_url)]
    pub prometheus: Vec<values::TargetUrl>,
    /// The apiservers' series.
    #[arg(long, value_name = "SELECTOR", default_value = crate::targets::DEFAULT_PROMETHEUS_SELECTOR)]
    pub selector: String,
    /// The label naming a series' cluster (a series without it belongs to no cluster).
    #[arg(long, value_name = "LABEL", default_value = "cluster")]
    pub cluster_label: String,
    /// The label naming a series' replica.
    #[arg(long, value_name = "LABEL", default_value = "instance")]
    pub apiserver_label: String,
    /// Start of the window: RFC 3339 (2026-11-24T10:00:00Z), or a duration before now (-6h, 90m).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: String,
    /// End of the window: RFC 3339, `now`, or a duration before now.
    #[arg(
        long,
        value_name = "TIME",
        default_value = "now",
        allow_hyphen_values = true
    )]
    pub to: String,
    /// Time between two points read, e.g. 30s. Default: the data's own resolution (the apiservers' scrape
    /// interval), coarser where the window would hold more than 5000 points.
    #[arg(long, value_name = "DURATION", value_parser = values::parse_interval)]
    pub step: Option<values::Interval>,
    /// The config file whose rules (thresholds, `for`), analysis window and Prometheus sources are replayed;
    /// default: the built-in rules.
    #[arg(long, value_name = "FILE", env = "APF_MONITOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// A PEM bundle of the CA that signed the --prometheus URLs' certificates.
    #[arg(long, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// The longest one query may take, e.g. 3m. Default: a minute (or the config's scrape.timeout if longer, or
    /// a source's own timeout).
    #[arg(long, value_name = "DURATION", value_parser = values::parse_interval)]
    pub timeout: Option<values::Interval>,
    /// The PriorityLevelConfigurations in force (`kubectl get prioritylevelconfigurations -o yaml`, the API's
    /// JSON, or manifests): with them the queues' capacity is known, and the rules that read it replay.
    /// Repeatable; `-` reads standard input.
    #[arg(long = "objects", value_name = "FILE")]
    pub objects: Vec<PathBuf>,
    /// Also stretches where a level ran out of headroom without rejecting.
    #[arg(long)]
    pub include_pressure: bool,
    /// `table` (worst first), `markdown` (for a postmortem) or `json`.
    #[arg(long, value_enum, default_value = "table")]
    pub output: ReportOutput,
    /// Also write a self-contained HTML page with a chart per incident (no external scripts, styles or fonts).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// The most points the default step gives a window: a month stays cheap (a 9-minute step).
const DEFAULT_MAX_STEPS: f64 = 5000.0;
/// The most points any step may give a window.
const MAX_STEPS: f64 = 50_000.0;
/// How far before an incident an alert that was already on counts as a warning of it.
const LOOKBACK_SECONDS: f64 = 3600.0;

pub async fn run(args: ReportArgs) -> Result<()> {
    init_logging(crate::config::LogFormat::Text, "warn")?;
    let now = SystemTime::now();
    let from = values::parse_time(&args.from, now).map_err(|e| anyhow::anyhow!("--from {e}"))?;
    let to = values::parse_time(&args.to, now).map_err(|e| anyhow::anyhow!("--to {e}"))?;
    let (from, to) = (values::unix_seconds(from), values::unix_seconds(to));
    if from >= to {
        bail!("--from {} must be before --to {}", args.from, args.to);
    }
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let rules = crate::daemon::build_rules(&config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", config_name(&args)))?;
    let analysis = crate::daemon::analysis_of(&config);
    let sources = sources(&args, &config)?;
    let levels = if args.objects.is_empty() {
        Vec::new()
    } else {
        super::objects::read_files(&args.objects)?.priority_levels
    };

    let mut report = Report {
        from: rfc3339(from),
        to: rfc3339(to),
        step: String::new(),
        sources: sources.iter().map(|s| s.url.clone()).collect(),
        ..Default::default()
    };
    // How the step was chosen, for the error that finds no series.
    let mut chosen = "--step";
    let step = match args.step {
        Some(s) => {
            let step = s.0.as_secs_f64();
            let points = (to - from) / step;
            if points > MAX_STEPS {
                bail!(
                    "--step {} gives {points:.0} points from {} to {}; at most {MAX_STEPS:.0}: give --step {} or a \
                     shorter window",
                    humantime::format_duration(s.0),
                    report.from,
                    report.to,
                    whole_duration((to - from) / MAX_STEPS)
                );
            }
            step
        }
        None => {
            let (step, found) = default_step(&sources[0], from, to)
                .await
                .map_err(|e| source_error(&sources[0], e))?;
            chosen = if found {
                "the data's own resolution; --step sets another"
            } else {
                "no limit series with two samples to infer the data's resolution from; --step sets another"
            };
            step
        }
    };
    report.step = whole_duration(step);

    let mut timelines = Timelines::default();
    let mut episodes = Vec::new();
    let mut seen: BTreeSet<ReplicaKey> = BTreeSet::new();
    for source in &sources {
        // A replay per source: each walks the window from its start, and the rules' clock must not go back.
        let mut replay = Replay::new(rules.clone());
        let held = read_source(
            source,
            from,
            to,
            step,
            &analysis,
            &levels,
            &seen,
            &mut replay,
            &mut timelines,
        )
        .await
        .map_err(|e| source_error(source, e))?;
        episodes.extend(replay.finish());
        seen.extend(held);
    }
    if seen.is_empty() {
        bail!(
            "no apiserver series from {} to {}, read every {} ({chosen}), at {} for the selector {}: check \
             --from/--to, --selector (the apiservers' job), and that this Prometheus scrapes the apiservers' /metrics",
            report.from,
            report.to,
            report.step,
            report.sources.join(", "),
            sources
                .iter()
                .map(|s| s.selector.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    report.replicas = seen.len();
    let options = IncidentOptions {
        include_pressure: args.include_pressure,
        merge_gap_seconds: (2.0 * step).max(300.0),
    };
    let timelines = timelines.finish();
    let episodes = &episodes;
    let mut found: Vec<(IncidentReport, &Timeline)> = timelines
        .iter()
        .flat_map(|t| {
            incidents(t, options)
                .into_iter()
                .map(move |i| (shape::incident(&i, episodes, LOOKBACK_SECONDS), t))
        })
        .collect();
    found.sort_by(|a, b| {
        b.0.rejected_total.total_cmp(&a.0.rejected_total).then(
            b.0.peak_rejected_per_second
                .total_cmp(&a.0.peak_rejected_per_second),
        )
    });
    if let Some(path) = &args.html {
        let page = html::page(&report, &found);
        std::fs::write(path, page).with_context(|| format!("--html {}", path.display()))?;
    }
    report.incidents = found.into_iter().map(|(i, _)| i).collect();
    match args.output {
        ReportOutput::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
        ReportOutput::Table => out!("{}", text::table(&report)),
        ReportOutput::Markdown => out!("{}", text::markdown(&report)),
    }
}

fn config_name(args: &ReportArgs) -> String {
    args.config
        .as_ref()
        .map_or("the built-in rules".into(), |p| p.display().to_string())
}

/// The --prometheus URLs with the flags' selector and labels, or the config's sources.
fn sources(args: &ReportArgs, config: &Config) -> Result<Vec<PrometheusSource>> {
    let mut targets = if args.prometheus.is_empty() {
        config.targets.prometheus.clone()
    } else {
        args.prometheus
            .iter()
            .cloned()
            .map(|url| crate::targets::PrometheusTarget {
                selector: args.selector.clone(),
                cluster_label: args.cluster_label.clone(),
                apiserver_label: args.apiserver_label.clone(),
                ..crate::targets::PrometheusTarget::from_url(url)
            })
            .collect()
    };
    if targets.is_empty() {
        bail!("give --prometheus URL (or a config with targets.prometheus)");
    }
    if let Some(ca) = &args.certificate_authority {
        for t in &mut targets {
            t.ca_file = Some(ca.clone());
        }
    }
    // A range query over a long window takes longer than a round's: a minute each, unless the source or the flag
    // says.
    let timeout = match args.timeout {
        Some(t) => {
            for target in &mut targets {
                target.timeout = None;
            }
            t.0
        }
        None => config.scrape.timeout.0.max(Duration::from_secs(60)),
    };
    targets
        .iter()
        .map(|t| PrometheusSource::build(t, timeout).map_err(anyhow::Error::from))
        .collect()
}

/// The data's own resolution (the time between the store's samples of the replicas' limits; a minute where it
/// holds none), coarser where the window would hold more than [`DEFAULT_MAX_STEPS`] points.
async fn default_step(source: &PrometheusSource, from: f64, to: f64) -> Result<(f64, bool)> {
    let mut found = None;
    for probe in [(from + to) / 2.0, to, (from + 600.0).min(to)] {
        found = resolution(source, probe).await?;
        if found.is_some() {
            break;
        }
    }
    let data = found.unwrap_or(60.0).round().max(1.0);
    Ok((
        data.max(((to - from) / DEFAULT_MAX_STEPS).ceil()),
        found.is_some(),
    ))
}

/// A source's error, said of that Prometheus; a query it did not answer in time gets the advice that works for
/// `report` (the scrape's own, to raise scrape.timeout, is the daemon's).
fn source_error(source: &PrometheusSource, e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<crate::scrape::ScrapeError>() {
        Some(crate::scrape::ScrapeError::Timeout(d)) => anyhow::anyhow!(
            "Prometheus {}: no answer to a query within {}: the Prometheus is slow or unreachable; give a longer \
             --timeout, a shorter window (--from/--to), a coarser --step or a narrower --selector, or check the \
             network",
            source.url,
            humantime::format_duration(*d)
        ),
        _ => e.context(format!("Prometheus {}", source.url)),
    }
}

/// One source's history, step by step: each replica's snapshots (with the `levels` given) into its history, the
/// analysis's report of each step into the timelines and the rules. Replicas in `skip` (held by an earlier source) are left out. Returns the
/// replicas it held.
#[allow(clippy::too_many_arguments)]
async fn read_source(
    source: &PrometheusSource,
    from: f64,
    to: f64,
    step: f64,
    analysis: &Analysis,
    levels: &[apf::PriorityLevelConfig],
    skip: &BTreeSet<ReplicaKey>,
    replay: &mut Replay,
    timelines: &mut Timelines,
) -> Result<BTreeSet<ReplicaKey>> {
    let mut histories: BTreeMap<ReplicaKey, ReplicaHistory> = BTreeMap::new();
    let total = ((to - from) / step).floor() as usize + 1;
    let mut done = 0;
    while done < total {
        let start = from + step * done as f64;
        let steps = (total - done).min(STEPS_PER_QUERY);
        let moments = read_range(source, start, step, steps).await?;
        for moment in moments {
            let mut status = StatusReport::default();
            for (key, mut snapshot) in moment.replicas {
                if skip.contains(&key) || !snapshot.has_apf() {
                    continue;
                }
                snapshot.attach_configs(levels);
                let history = histories.entry(key.clone()).or_default();
                let snapshot = Arc::new(snapshot);
                history.push(crate::analyze::Point {
                    at: moment.time,
                    wall_time: rfc3339(moment.time),
                    snapshot: snapshot.clone(),
                });
                history.prune(
                    moment.time,
                    analysis.window_seconds,
                    analysis.lookback_seconds,
                );
                let mut report = analysis.analyze_replica(&key.apiserver, history, moment.time);
                report.cluster = key.cluster.clone();
                report.read_through = Some(source.name.clone());
                timelines.push(moment.time, &key, &snapshot, &report);
                status.apiservers.push(report.into());
            }
            replay.step(moment.time, &status);
        }
        done += steps;
    }
    Ok(histories.into_keys().collect())
}

/// Unix seconds as RFC 3339 to the second, UTC.
pub(super) fn rfc3339(seconds: f64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs_f64(seconds.max(0.0)))
        .to_string()
}

/// Seconds as a duration a person and `--step` read: `30s`, `2m`, `1h 30m`.
fn whole_duration(seconds: f64) -> String {
    humantime::format_duration(Duration::from_secs(seconds.ceil().max(1.0) as u64)).to_string()
}

/// The episodes of the rules on `incident`'s level and replica that were on in its span or the hour before.
pub(super) fn alerts_of<'e>(
    episodes: &'e [Episode],
    replica: &'e ReplicaKey,
    level: &'e str,
    from: f64,
    to: f64,
) -> impl Iterator<Item = &'e Episode> {
    episodes.iter().filter(move |e| {
        e.replica == *replica
            && e.labels.get("priority_level").map(String::as_str) == Some(level)
            && e.overlaps(from, to)
    })
}
