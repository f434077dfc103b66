//! `apf-monitor check`: one round (or a saved `/metrics`), the daemon's rules on it without `for`, a table or JSON,
//! and the Nagios/monitoring-plugins exit status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::output::{errln, out, outln};
use super::{init_command_logging, load_config, CheckArgs, OutputFormat};
use crate::analyze::{Analysis, LevelStatus, Problem, StatusReport};
use crate::daemon::{analysis_of, build_rules, Replica};

pub async fn check(args: CheckArgs) -> Result<ExitCode> {
    if args.review {
        return super::review::review(args).await;
    }
    if args.file.is_some() && !args.source.prometheus.is_empty() {
        bail!("--file and --prometheus are two sources: give one");
    }
    let config = load_config(&args.common, Some(&args.source), None)?;
    init_command_logging(&config, &args.common)?;
    // What a check needs of the config: its rules and targets (not its receivers: a check notifies nobody).
    let rules = build_rules(&config)?;
    let analysis = analysis_of(&config);
    let mut report = match &args.file {
        Some(path) => check_file(path, &analysis)?,
        None if !config.targets.prometheus.is_empty() => {
            let (report, problems) = prometheus_rows(&config, &analysis).await?;
            // The table says each in the source's row: logged too, it would be said twice.
            if !matches!(args.output, OutputFormat::Table) {
                log_source_problems(&problems);
            }
            report
        }
        None => check_targets(&super::replicas(&config).await?, &analysis).await?,
    };
    if args.file.is_none() && !config.audit.files.is_empty() {
        report.audit = audit_of_window(&config, &report, &analysis);
    }
    crate::analyze::advise(&mut report);
    apply_rules(&mut report, &rules);
    if args.file.is_none() && !config.targets.prometheus.is_empty() {
        // A fleet: the worst replica first, whatever cluster it is in.
        let worst = |a: &crate::analyze::ApiserverReport| {
            a.levels.iter().map(|l| l.status).max().unwrap_or_default()
        };
        report.apiservers.sort_by(|x, y| {
            worst(y)
                .cmp(&worst(x))
                .then_with(|| x.cluster.cmp(&y.cluster))
                .then_with(|| x.apiserver.cmp(&y.apiserver))
        });
    }
    let code = exit_status(&report);
    match args.output {
        OutputFormat::Json => outln!("{}", serde_json::to_string_pretty(&report)?)?,
        OutputFormat::Table => out!(
            "{}",
            super::table::render(&report, code, super::table::Style::for_stdout())
        )?,
        OutputFormat::Manifests => match manifests(&report) {
            Some(text) => out!("{text}")?,
            None => errln!(
                "no alert proposes a manifest: nothing to apply (`apf-monitor check` without --output shows why)"
            ),
        },
    }
    Ok(ExitCode::from(code))
}

/// Who got 429s over the last window, from the audit logs of `audit.files` (one look: the daemon follows them),
/// classified on the FlowSchemas the first replica served.
pub(super) fn audit_of_window(
    config: &crate::config::Config,
    report: &StatusReport,
    analysis: &Analysis,
) -> Vec<crate::analyze::AuditReport> {
    // The events belong to `audit.cluster`, else to the cluster of the replica whose objects classify them.
    let Some((objects, source, cluster)) = report
        .apiservers
        .iter()
        .filter(|a| config.audit.cluster.is_none() || a.cluster == config.audit.cluster)
        .find_map(|a| Some((a.objects.as_ref()?, a.display_name(), a.cluster.clone())))
    else {
        errln!("warning: audit.files: no replica served its FlowSchemas: the audit events are not classified");
        return Vec::new();
    };
    let since =
        std::time::SystemTime::now() - std::time::Duration::from_secs_f64(analysis.window_seconds);
    let (ledger, problems) = crate::audit::recent(&config.audit, objects, since);
    for p in problems {
        errln!("warning: {p}");
    }
    let mut a =
        crate::analyze::AuditReport::of(&ledger, analysis.window_seconds, analysis.top_flows);
    a.cluster = config.audit.cluster.clone().or(cluster);
    a.classified_on = Some(source);
    vec![a]
}

/// The distinct manifests the alerts propose (one per flow to isolate, however many replicas and rules propose it),
/// as one YAML stream; `None` when no alert has one.
pub fn manifests(report: &StatusReport) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for alert in &report.alerts {
        if let Some(m) = alert.annotations.get("remediation_manifest") {
            if !seen.contains(&m.as_str()) {
                seen.push(m);
            }
        }
    }
    if seen.is_empty() {
        return None;
    }
    let docs: Vec<&str> = seen.iter().map(|m| m.trim_end()).collect();
    Some(format!("{}\n", docs.join("\n---\n")))
}

fn check_file(path: &std::path::Path, analysis: &Analysis) -> Result<StatusReport> {
    use std::io::Read;
    let (name, bytes) = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("cannot read standard input")?;
        ("stdin".to_string(), buf)
    } else {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        (
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            bytes,
        )
    };
    // A paste often keeps its shell prompts (`$ kubectl get --raw /metrics | grep ...`, or zsh's `% ...`): they
    // are not metrics lines.
    let kept: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !is_shell_prompt(l))
        .collect();
    let bytes = kept.join(&b'\n');
    let mut builder = apf::model::SnapshotBuilder::new();
    let stats =
        apf::parse::exposition::parse_all(&bytes, apf::model::is_wanted_sample, &mut builder);
    let snapshot = builder.finish();
    let duplicates = snapshot.duplicate_series;
    let mut report = crate::analyze::analyze_single(&name, snapshot, analysis);
    if stats.invalid_lines > 0 {
        report.errors.push(Problem::Unreadable {
            lines: stats.invalid_lines,
            first: stats.first_errors.first().map(|e| e.to_string()),
        });
    }
    if duplicates > 0 {
        report
            .errors
            .push(Problem::DuplicateSeries { series: duplicates });
    }
    Ok(StatusReport {
        apiservers: vec![report.into()],
        ..Default::default()
    })
}

/// A shell prompt line of a paste: `$ cmd` (sh, bash) or `% cmd` (zsh, the macOS default), maybe indented.
fn is_shell_prompt(line: &[u8]) -> bool {
    let l = line.trim_ascii();
    l == b"$" || l == b"%" || l.starts_with(b"$ ") || l.starts_with(b"% ")
}

async fn check_targets(replicas: &[Replica], analysis: &Analysis) -> Result<StatusReport> {
    if replicas.is_empty() {
        bail!("no replica to check: give --target URL or --file PATH, or check the endpoints of the kubernetes Service");
    }
    let mut report = StatusReport::default();
    for (replica, mut round) in replicas.iter().zip(scrape_round(replicas, None).await) {
        let name = &replica.target.name;
        let errors = problems(&round);
        let objects = round.objects.take().map(|l| std::sync::Arc::new(l.objects));
        let mut a = match round.snapshot.take() {
            Some(mut snap) => {
                snap.attach_configs(objects.iter().flat_map(|o| &o.priority_levels));
                crate::analyze::analyze_single(name, snap, analysis)
            }
            None => crate::analyze::ApiserverReport {
                apiserver: name.clone(),
                ..Default::default()
            },
        };
        a.errors.extend(errors);
        a.objects = objects;
        report.apiservers.push(a.into());
    }
    Ok(report)
}

/// One scrape of every replica at once, as the daemon's rounds scrape each (keeping `flows_per_schema` of each
/// dump's flows, or all).
pub(super) async fn scrape_round(
    replicas: &[Replica],
    flows_per_schema: Option<usize>,
) -> Vec<crate::scrape::ReplicaScrape> {
    futures_util::future::join_all(replicas.iter().map(|r| {
        let settings = &r.spec.settings;
        let plan = crate::scrape::ScrapePlan {
            endpoints: settings.endpoints.clone(),
            request_details: settings.request_details,
            max_body_bytes: settings.max_body_bytes,
            max_line_bytes: settings.max_line_bytes,
            flows_per_schema,
            protobuf: settings.protobuf,
        };
        async move { crate::scrape::scrape_replica(&r.target, &plan).await }
    }))
    .await
}

/// What failed in a replica's round, each endpoint a problem of its own.
pub(super) fn problems(round: &crate::scrape::ReplicaScrape) -> Vec<Problem> {
    round
        .results
        .iter()
        .filter_map(|r| {
            r.outcome.as_ref().err().map(|e| Problem::Scrape {
                endpoint: r.endpoint,
                error: e.clone(),
            })
        })
        .collect()
}

/// Every replica of every cluster the configured Prometheus sources hold, now and one window earlier: the same
/// snapshots as a scrape gives, with rates, percentiles and trends over the window from the two.
pub(super) async fn check_prometheus(
    config: &crate::config::Config,
    analysis: &Analysis,
) -> Result<StatusReport> {
    let (report, problems) = prometheus_rows(config, analysis).await?;
    log_source_problems(&problems);
    Ok(report)
}

/// What a source that could not be read says: its name, its URL and the problem.
type SourceProblem = (String, String, String);

/// Each unread source, on standard error: for output that shows no table row to a person.
fn log_source_problems(problems: &[SourceProblem]) {
    for (source, url, problem) in problems {
        tracing::warn!(source = %source, url = %url, "{problem}");
    }
}

/// The report of every Prometheus source, a source that cannot be read a row of its own; and those sources'
/// problems, for the caller to log where no row shows them.
async fn prometheus_rows(
    config: &crate::config::Config,
    analysis: &Analysis,
) -> Result<(StatusReport, Vec<SourceProblem>)> {
    use crate::scrape::prometheus::{read_round, ObjectCounts, PrometheusSource};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    let sources = config
        .targets
        .prometheus
        .iter()
        .map(|p| {
            let mut source = PrometheusSource::build(p, config.scrape.timeout.0)?;
            source.flow_schema_costs |= !config.audit.files.is_empty();
            Ok::<_, crate::targets::TargetError>(source)
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Every source at once: a slow one costs its timeout once, not once per source after it.
    let rounds =
        futures_util::future::join_all(
            sources.iter().map(|source| {
                let mut counts = ObjectCounts::default();
                async move {
                    read_round(source, now, analysis.window_seconds, |_| true, &mut counts).await
                }
            }),
        )
        .await;
    let mut report = StatusReport::default();
    let mut problems = Vec::new();
    for (source, round) in sources.iter().zip(rounds) {
        // A source that cannot be read, or holds nothing, is a row of its own (as in the daemon): the other
        // sources are still reported, and the exit status says a part is missing.
        let problem = match round {
            Ok(round) if round.replicas.is_empty() => Problem::NoReplicas,
            Ok(round) => {
                if round.stale > 0 {
                    tracing::warn!(
                        source = %source.name,
                        "{} replica(s) left out: their newest samples are older than max_sample_age",
                        round.stale
                    );
                }
                for r in round.replicas {
                    let mut a = crate::analyze::analyze_pair(
                        &r.key.apiserver,
                        r.baseline,
                        r.snapshot,
                        analysis.window_seconds,
                        analysis,
                    );
                    a.cluster = r.key.cluster;
                    a.read_through = Some(source.name.clone());
                    report.apiservers.push(a.into());
                }
                continue;
            }
            Err(error) => Problem::Scrape {
                endpoint: crate::scrape::Endpoint::Prometheus,
                error,
            },
        };
        problems.push((source.name.clone(), source.url.clone(), problem.to_string()));
        report.apiservers.push(
            crate::analyze::ApiserverReport {
                apiserver: source.name.clone(),
                errors: vec![problem],
                ..Default::default()
            }
            .into(),
        );
    }
    Ok((report, problems))
}

/// The daemon's rules, as configured, on this one round (no `for`, so what holds now fires now): the alerts of the
/// report, and each level's status from the worst alert on it.
fn apply_rules(report: &mut StatusReport, rules: &crate::alert::Rules) {
    let candidates = rules.evaluate(report, |_| false);
    let view = crate::alert::AlertView {
        statuses: crate::alert::rules::level_statuses(&candidates),
        alerts: candidates
            .into_iter()
            .map(|c| crate::analyze::AlertReport {
                labels: c.labels,
                annotations: c.annotations,
                state: "firing".into(),
                active_since: None,
            })
            .collect(),
        notifier: None,
    };
    view.apply(report);
}

/// 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (no APF metric anywhere). A replica that could not be read is a
/// WARNING (the APFScrapeFailing rule), unless none could be read at all.
pub fn exit_status(report: &StatusReport) -> u8 {
    let with_levels: Vec<_> = report
        .apiservers
        .iter()
        .filter(|a| !a.levels.is_empty())
        .collect();
    if with_levels.is_empty() {
        return 3;
    }
    // Alerts without a level (APFScrapeFailing) count too.
    let alerts = report.alerts.iter().map(|a| {
        crate::alert::rules::severity_status(a.labels.get("severity").map(String::as_str))
    });
    let worst = with_levels
        .iter()
        .flat_map(|a| &a.levels)
        .map(|l| l.status)
        .chain(alerts)
        .max()
        .unwrap_or(LevelStatus::Ok);
    let code = match worst {
        LevelStatus::Ok => 0,
        LevelStatus::Warning => 1,
        LevelStatus::Critical => 2,
    };
    if report.apiservers.iter().any(|a| a.levels.is_empty()) {
        code.max(1)
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::AlertReport;

    fn alert(manifest: Option<&str>) -> AlertReport {
        AlertReport {
            labels: Default::default(),
            annotations: manifest
                .map(|m| [("remediation_manifest".to_string(), m.to_string())].into())
                .unwrap_or_default(),
            state: "firing".into(),
            active_since: None,
        }
    }

    #[test]
    fn manifests_come_once_each_as_one_yaml_stream() {
        let a = "kind: PriorityLevelConfiguration\n---\nkind: FlowSchema\n";
        let b = "kind: FlowSchema\nmetadata: {name: b}\n";
        let report = StatusReport {
            // Two replicas and two rules propose the same isolation; another alert proposes none.
            alerts: vec![alert(Some(a)), alert(None), alert(Some(a)), alert(Some(b))],
            ..Default::default()
        };
        assert_eq!(manifests(&report).unwrap(), format!("{}---\n{b}", a));
        assert_eq!(manifests(&StatusReport::default()), None);
    }
}
