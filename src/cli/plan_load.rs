//! `apf-monitor plan --load`: what a change will do under the load the replicas carry. Watches them for a window
//! (or reads a Prometheus), then replays each replica's load through its objects and through the changed ones
//! (`--set`, `--apply`) in the simulator ([`crate::analyze::predict`]): 429s, waits, limits and headroom per level and
//! per flow, before and after.
use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::output::{errln, out, outln};
use super::plan::cell;
use super::plan::{PlanArgs, PlanOutput};
use super::table::{columns, wait};
use crate::analyze::predict::{self, LevelPrediction, Prediction, ReplaySettings};
use crate::analyze::round::shown;
use crate::analyze::ApiserverReport;
use apf::model::FlowcontrolObjects;

/// A row of one replica's prediction, named by its replica.
#[derive(Debug, Serialize)]
struct Row<'a, T> {
    apiserver: &'a str,
    #[serde(flatten)]
    row: &'a T,
}

/// A replica and what was predicted for it, or why nothing could be.
#[derive(Debug, Serialize)]
struct ReplicaRow {
    apiserver: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    kubernetes_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    seeds: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lead_in_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warm_up_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    assumptions: Vec<String>,
    /// The flow schemas whose bursts were replayed as they came, scrape by scrape.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bursty_flow_schemas: Vec<String>,
    /// Why no prediction was made for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    unpredictable: Option<String>,
}

pub(super) async fn plan_load(args: PlanArgs) -> Result<()> {
    if !args.files.is_empty() {
        bail!(
            "--load replays the replicas' objects under their load: --file does not go with it (give the change \
             with --set, or whole objects with --apply FILE)"
        );
    }
    let applied = if args.apply.is_empty() {
        FlowcontrolObjects::default()
    } else {
        super::objects::read_files(&args.apply)?
    };
    if args.set.is_empty() && applied.flow_schemas.is_empty() && applied.priority_levels.is_empty()
    {
        bail!("nothing changes: give --set LEVEL.FIELD=N or --apply FILE");
    }
    if matches!(args.output, PlanOutput::Manifests) {
        bail!(
            "--output manifests writes the levels --set changes, with no window to watch: run it without --load \
             (the --apply files are manifests already)"
        );
    }
    let report = super::window::watch(&super::window::Watch {
        common: &args.common,
        source: &args.source,
        audit: &args.audit,
        objects: &args.objects,
        window: args.window,
        purpose: "--file FILE, without --load",
    })
    .await?;
    let mut jobs = Vec::new();
    let mut rows = Vec::new();
    for a in &report.apiservers {
        match changed_objects(a, &args, &applied) {
            Ok((after, changed)) => {
                let concurrency = args
                    .server_concurrency
                    .unwrap_or_else(|| predict::server_concurrency(a));
                // Audit events carry no replica: the cluster's.
                let audit = report
                    .audit
                    .iter()
                    .find(|r| r.cluster == a.cluster)
                    .cloned();
                jobs.push((a.clone(), audit, after, changed, concurrency));
            }
            Err(why) => rows.push(unpredictable(a, why.to_string())),
        }
    }
    // Each replica's replays are CPU-bound for about a second: off the runtime's workers.
    let results = tokio::task::spawn_blocking(move || {
        jobs.into_iter()
            .map(|(a, audit, after, changed, concurrency)| {
                let p = predict::predict(
                    &a,
                    audit.as_ref(),
                    &after,
                    &changed,
                    concurrency,
                    &ReplaySettings::default(),
                );
                (a, p)
            })
            .collect::<Vec<_>>()
    })
    .await
    .context("the prediction stopped")?;
    let mut predictions = Vec::new();
    for (a, p) in results {
        match p {
            Ok(p) => {
                rows.push(ReplicaRow {
                    apiserver: p.apiserver.clone(),
                    kubernetes_version: Some(p.kubernetes_version.clone()),
                    server_concurrency: Some(p.server_concurrency),
                    seeds: p.seeds.clone(),
                    lead_in_seconds: Some(p.lead_in_seconds),
                    warm_up_seconds: Some(p.warm_up_seconds),
                    measured_seconds: Some(p.measured_seconds),
                    assumptions: p.assumptions.clone(),
                    bursty_flow_schemas: p.bursty_flow_schemas.clone(),
                    unpredictable: None,
                });
                predictions.push(p);
            }
            Err(why) => rows.push(unpredictable(&a, why.to_string())),
        }
    }
    for r in rows.iter().filter(|r| r.unpredictable.is_some()) {
        errln!(
            "warning: {}: no prediction: {}",
            r.apiserver,
            r.unpredictable.as_deref().unwrap_or_default()
        );
    }
    if predictions.is_empty() {
        bail!("no replica could be predicted (the reasons are above)");
    }
    let levels: Vec<Row<'_, LevelPrediction>> = predictions
        .iter()
        .flat_map(|p| {
            p.levels.iter().map(|l| Row {
                apiserver: &p.apiserver,
                row: l,
            })
        })
        .collect();
    let flows: Vec<Row<'_, predict::FlowPrediction>> = predictions
        .iter()
        .flat_map(|p| {
            p.flows.iter().map(|f| Row {
                apiserver: &p.apiserver,
                row: f,
            })
        })
        .collect();
    let json = serde_json::json!({ "levels": levels, "flows": flows, "replicas": rows });
    match args.output {
        PlanOutput::Json => outln!("{}", serde_json::to_string_pretty(&json)?),
        PlanOutput::Yaml => out!("{}", serde_saphyr::to_string(&json)?),
        PlanOutput::Table | PlanOutput::Manifests => {
            let text: String = predictions.iter().map(table).collect::<Vec<_>>().join("\n");
            out!("{text}")
        }
    }
}

fn unpredictable(a: &ApiserverReport, why: String) -> ReplicaRow {
    ReplicaRow {
        apiserver: a.display_name(),
        kubernetes_version: a.kubernetes_version.clone(),
        server_concurrency: None,
        seeds: Vec::new(),
        lead_in_seconds: None,
        warm_up_seconds: None,
        measured_seconds: None,
        assumptions: Vec::new(),
        bursty_flow_schemas: Vec::new(),
        unpredictable: Some(why),
    }
}

/// The replica's objects with `--apply`'s put in force and `--set` applied, and the levels the change touches.
fn changed_objects(
    a: &ApiserverReport,
    args: &PlanArgs,
    applied: &FlowcontrolObjects,
) -> Result<(FlowcontrolObjects, BTreeSet<String>)> {
    let Some(before) = a.objects.as_deref() else {
        bail!("{}", predict::Unpredictable::NoObjects);
    };
    Ok(predict::changed(before, applied, &args.set)?)
}

/// `a` or `a → b`, as `plan`'s table says a change.
fn moved(before: String, after: String) -> String {
    cell(Some(before), Some(after))
}

/// One replica's prediction: its levels, its flows, what was assumed.
pub(super) fn table(p: &Prediction) -> String {
    let mut out = format!(
        "{} (Kubernetes v{}, {} seats): the window's load replayed {}s, the change made, {}s more, then {}s \
         measured; seeds {}.\n\n",
        p.apiserver,
        p.kubernetes_version,
        p.server_concurrency,
        shown(p.lead_in_seconds),
        shown(p.warm_up_seconds),
        shown(p.measured_seconds),
        p.seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let header = [
        "",
        "PRIORITY LEVEL",
        "COUNTED 429/S",
        "429/S",
        "MEAN WAIT",
        "P99 WAIT",
        "LIMIT",
        "HEADROOM",
    ];
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(p.levels.iter().map(|l| {
            let (b, a) = (&l.before, &l.after);
            vec![
                if l.changed { "*" } else { "" }.to_string(),
                l.priority_level.clone(),
                l.window_rejected_per_second
                    .map_or_else(|| "-".to_string(), shown),
                moved(shown(b.rejected_per_second), shown(a.rejected_per_second)),
                moved(wait(b.mean_wait_seconds), wait(a.mean_wait_seconds)),
                moved(wait(b.p99_wait_seconds), wait(a.p99_wait_seconds)),
                moved(shown(b.limit_seats.round()), shown(a.limit_seats.round())),
                moved(
                    shown(b.headroom_seats.round()),
                    shown(a.headroom_seats.round()),
                ),
            ]
        }))
        .collect();
    out.push_str(&columns(&rows));
    let header = [
        "FLOW",
        "SENDS/S",
        "PRIORITY LEVEL",
        "429/S",
        "MEAN WAIT",
        "P99 WAIT",
    ];
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(p.flows.iter().map(|f| {
            let (b, a) = (&f.before, &f.after);
            vec![
                f.name.clone(),
                shown(f.requests_per_second),
                moved(b.priority_level.clone(), a.priority_level.clone()),
                moved(shown(b.rejected_per_second), shown(a.rejected_per_second)),
                moved(wait(b.mean_wait_seconds), wait(a.mean_wait_seconds)),
                moved(wait(b.p99_wait_seconds), wait(a.p99_wait_seconds)),
            ]
        }))
        .collect();
    out.push('\n');
    out.push_str(&columns(&rows));
    out.push_str(
        "\n* the levels the change touches. COUNTED: the 429s the replica counted over the window, which the replay \
         before the change should give. LIMIT and HEADROOM in seats, time averages; 429/s and waits are means over \
         the seeds (their ranges in --output json).\nAssumed:\n",
    );
    for a in &p.assumptions {
        out.push_str(&format!("  - {a}\n"));
    }
    out
}
