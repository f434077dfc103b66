//! `apf-monitor check --review`: the configuration review on the cluster's objects (and the traffic its first
//! replica shows in `dump_requests`) or on files, with `check`'s exit status: 0 nothing found, 1 a warning,
//! 2 a critical finding, 3 the objects could not be read.
use std::process::ExitCode;

use anyhow::{bail, Result};
use serde::Serialize;

use super::output::{errln, out, outln};
use super::{init_logging, load_config, CheckArgs, OutputFormat};
use apf::plan::{infer_server_concurrency, DEFAULT_SERVER_CONCURRENCY};
use apf::review::{review as run_review, Finding, ReviewInput, Severity};

#[derive(Debug, Serialize)]
struct ReviewReport {
    /// Where the objects came from.
    source: String,
    server_concurrency: u32,
    findings: Vec<Finding>,
}

pub async fn review(args: CheckArgs) -> Result<ExitCode> {
    let config = load_config(&args.common, Some(&args.source), None)?;
    init_logging(config.log.format, "warn")?;
    let (objects, served, traffic, source, minor) = if args.objects.is_empty() {
        let c = super::objects::read_cluster(&config, true).await?;
        let source = format!("the objects {} serves, and its dump_requests", c.replica);
        let objects = apf::model::FlowcontrolObjects {
            flow_schemas: c.flow_schemas,
            priority_levels: c.priority_levels,
        };
        (objects, Some(c.served_nominal), c.traffic, source, c.minor)
    } else {
        let objects = super::objects::read_files(&args.objects)?;
        let source = args
            .objects
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        (objects, None, Vec::new(), source, None)
    };
    if objects.priority_levels.is_empty() {
        bail!("the review needs the PriorityLevelConfigurations too: `kubectl get flowschemas,prioritylevelconfigurations -o yaml`");
    }
    let server_concurrency = args
        .server_concurrency
        .or_else(|| infer_server_concurrency(&objects.priority_levels, served.as_ref()?))
        .unwrap_or(DEFAULT_SERVER_CONCURRENCY);
    let findings = run_review(&ReviewInput {
        flow_schemas: &objects.flow_schemas,
        priority_levels: &objects.priority_levels,
        server_concurrency,
        traffic: &traffic,
        version: minor.map(|m| apf::KubeVersion::new(m, 0)),
    });
    let code = match findings.iter().map(|f| f.severity).max() {
        None => 0,
        Some(Severity::Warning) => 1,
        Some(Severity::Critical) => 2,
    };
    let report = ReviewReport {
        source,
        server_concurrency,
        findings,
    };
    match args.output {
        OutputFormat::Json => outln!("{}", serde_json::to_string_pretty(&report)?)?,
        OutputFormat::Table => out!("{}", render(&report))?,
        OutputFormat::Manifests => {
            let docs: Vec<&str> = report
                .findings
                .iter()
                .filter_map(|f| f.manifest.as_deref())
                .map(str::trim_end)
                .collect();
            if docs.is_empty() {
                errln!("no finding proposes a manifest: nothing to apply");
            } else {
                outln!("{}", docs.join("\n---\n"))?;
            }
        }
    }
    Ok(ExitCode::from(code))
}

fn render(r: &ReviewReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for f in &r.findings {
        let _ = writeln!(
            out,
            "{} {} {}",
            f.severity.label().to_uppercase(),
            f.check,
            f.object
        );
        let _ = writeln!(out, "  why: {}", f.why);
        let _ = writeln!(out, "  fix: {}", f.fix);
        if let Some(m) = &f.manifest {
            let _ = writeln!(out, "  manifest (kubectl apply -f -):");
            for line in m.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    let critical = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Critical)
        .count();
    let _ = writeln!(
        out,
        "{} finding{} ({critical} critical) in {} (server concurrency {})",
        r.findings.len(),
        if r.findings.len() == 1 { "" } else { "s" },
        r.source,
        r.server_concurrency
    );
    out
}
