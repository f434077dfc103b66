//! `apf-monitor plan`: every priority level's limits before and after `--set LEVEL.FIELD=N`, on the cluster's
//! PriorityLevelConfigurations or on files; the arithmetic is `apf::plan`'s (kube-apiserver's own).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::output::{out, outln};
use super::{init_logging, load_config, SourceArgs, TargetArgs};
use apf::endpoints::flowcontrol_api_version;
use apf::plan::{self, Change, PlanRow, DEFAULT_SERVER_CONCURRENCY};
use apf::PriorityLevelConfig;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    /// PriorityLevelConfigurations from a file instead of the cluster: `kubectl get prioritylevelconfigurations
    /// -o yaml`, the API's JSON, or manifests (several YAML documents). Repeatable; `-` reads standard input.
    #[arg(long = "file", short = 'f', value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// A change to try, e.g. workload-low.shares=150; FIELD is shares, lendablePercent, borrowingLimitPercent,
    /// queues, handSize or queueLengthLimit. Repeatable.
    #[arg(long = "set", value_name = "LEVEL.FIELD=N")]
    pub set: Vec<Change>,
    /// Seats per replica: the apiserver's --max-requests-inflight + --max-mutating-requests-inflight. Default:
    /// inferred from the nominal limits the cluster serves, else 600 (kube-apiserver's default).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub server_concurrency: Option<u32>,
    /// Predict what the change does under the load the replicas carry: watch them for --window (or read
    /// --prometheus), then replay each replica's load through its objects and through the changed ones, in the
    /// simulator (kube-apiserver's queueset): 429s, waits, limits and headroom per level and per flow, before and
    /// after.
    #[arg(long)]
    pub load: bool,
    /// With --load: how long to watch the replicas (default: the config's analysis.window, 1m).
    #[arg(long, value_name = "DURATION", value_parser = crate::values::parse_duration, requires = "load")]
    pub window: Option<Duration>,
    /// With --load: FlowSchemas and PriorityLevelConfigurations to put in force, as `kubectl apply -f FILE` would
    /// (an object of the same kind and name replaced), e.g. a remediation's manifests. Repeatable.
    #[arg(long = "apply", value_name = "FILE", requires = "load")]
    pub apply: Vec<PathBuf>,
    /// With --load and --prometheus: the cluster's FlowSchemas and PriorityLevelConfigurations (`kubectl get
    /// flowschemas,prioritylevelconfigurations -o yaml`), which a Prometheus does not hold. Repeatable.
    #[arg(long = "objects", value_name = "FILE", requires = "load")]
    pub objects: Vec<PathBuf>,
    /// With --load: kube-apiserver audit logs (plain, gzipped or rotated) of the window: each flow's own share of
    /// its flow schema's requests and 429s, execution time and user, where the dumps show only the top flows (or,
    /// through a Prometheus, none). Repeatable; replaces the config's audit.files.
    #[arg(long = "audit", value_name = "FILE", requires = "load")]
    pub audit: Vec<PathBuf>,
    #[command(flatten)]
    pub source: SourceArgs,
    #[arg(long, value_enum, default_value = "table")]
    pub output: PlanOutput,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PlanOutput {
    Table,
    Json,
    Yaml,
    /// The changed PriorityLevelConfigurations, ready for `kubectl apply -f -`.
    Manifests,
}

/// What `plan` prints as JSON or YAML.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    pub server_concurrency: u32,
    /// Where the server concurrency came from, in words.
    pub server_concurrency_source: String,
    /// Σ shares before and after: the denominator of every nominal limit.
    pub shares_sum_before: u64,
    pub shares_sum_after: u64,
    pub priority_levels: Vec<PlanRow>,
}

/// The levels to plan on and what is known of the server concurrency.
struct Input {
    levels: Vec<PriorityLevelConfig>,
    /// (replica, nominal limits it serves) when read from a cluster.
    served: Option<(String, BTreeMap<String, f64>)>,
    /// Whether the cluster lends and borrows seats (1.26+).
    borrowing: bool,
}

pub async fn plan(args: PlanArgs) -> Result<()> {
    if args.load {
        return super::plan_load::plan_load(args).await;
    }
    if !args.source.prometheus.is_empty() {
        bail!("--prometheus goes with --load: without it, plan reads the objects from a replica or --file");
    }
    let input = if args.files.is_empty() {
        let config = load_config(&args.common, None, None)?;
        init_logging(config.log.format, "warn")?;
        from_cluster(&config).await?
    } else {
        let levels = from_files(&args.files)?;
        Input {
            borrowing: plan::objects_borrow(&levels),
            levels,
            served: None,
        }
    };
    let (server_concurrency, source) = server_concurrency(&input, args.server_concurrency);
    let (rows, changed) = plan::plan(
        &input.levels,
        &args.set,
        server_concurrency,
        input.borrowing,
    )?;
    // The denominators of every nominal limit, from the rows (which hold every level's shares).
    let sum =
        |shares: fn(&PlanRow) -> u32| -> u64 { rows.iter().map(|r| u64::from(shares(r))).sum() };
    let (shares_sum_before, shares_sum_after) = (sum(|r| r.before.shares), sum(|r| r.after.shares));
    let report = PlanReport {
        server_concurrency,
        server_concurrency_source: source,
        shares_sum_before,
        shares_sum_after,
        priority_levels: rows,
    };
    match args.output {
        PlanOutput::Table => out!("{}", render_table(&report)),
        PlanOutput::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
        PlanOutput::Yaml => out!("{}", serde_saphyr::to_string(&report)?),
        PlanOutput::Manifests => {
            if changed.is_empty() {
                bail!("nothing changes: give --set LEVEL.FIELD=N");
            }
            out!("{}", manifests(&changed))
        }
    }
}

fn from_files(files: &[PathBuf]) -> Result<Vec<PriorityLevelConfig>> {
    let levels = super::objects::read_files(files)?.priority_levels;
    if levels.is_empty() {
        bail!(
            "no PriorityLevelConfiguration in {} (expected `kubectl get prioritylevelconfigurations -o yaml`, the \
             API's JSON list, or manifests of kind PriorityLevelConfiguration)",
            files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(levels)
}

/// The objects, the served nominal limits and the version of the first replica that answers.
async fn from_cluster(config: &crate::config::Config) -> Result<Input> {
    let c = super::objects::read_cluster(config, false).await?;
    // The version says whether seats are lent (1.26+); without it, the objects do (lendablePercent).
    let borrowing = c.minor.map_or_else(
        || plan::objects_borrow(&c.priority_levels),
        |minor| minor >= 26,
    );
    Ok(Input {
        levels: c.priority_levels,
        served: (!c.served_nominal.is_empty()).then_some((c.replica, c.served_nominal)),
        borrowing,
    })
}

/// The flag, else the value the served nominal limits imply, else kube-apiserver's default; and why.
fn server_concurrency(input: &Input, flag: Option<u32>) -> (u32, String) {
    let inferred = input.served.as_ref().map(|(replica, served)| {
        (
            replica,
            plan::infer_server_concurrency(&input.levels, served),
        )
    });
    match (flag, inferred) {
        (Some(n), Some((replica, Some(i)))) if i != n => (
            n,
            format!("--server-concurrency (the nominal limits {replica} serves imply {i})"),
        ),
        (Some(n), _) => (n, "--server-concurrency".into()),
        (None, Some((replica, Some(i)))) => (
            i,
            format!("inferred from the nominal limits {replica} serves"),
        ),
        (None, Some((replica, None))) => (
            DEFAULT_SERVER_CONCURRENCY,
            format!(
                "kube-apiserver's default (400 + 200 in flight): the nominal limits {replica} serves fit no server \
                 concurrency with these shares; give --server-concurrency N"
            ),
        ),
        (None, None) => (
            DEFAULT_SERVER_CONCURRENCY,
            "kube-apiserver's default (--max-requests-inflight 400 + --max-mutating-requests-inflight 200); give \
             --server-concurrency N for yours (EKS raises it with the control plane's size)"
                .into(),
        ),
    }
}

/// `a` or `a → b`.
pub(super) fn cell<T: PartialEq + std::fmt::Display>(
    before: Option<T>,
    after: Option<T>,
) -> String {
    let show = |v: &Option<T>| v.as_ref().map_or("-".to_string(), T::to_string);
    if before == after {
        show(&before)
    } else {
        format!("{} → {}", show(&before), show(&after))
    }
}

fn queues(l: &plan::LevelPlan) -> Option<String> {
    Some(format!(
        "{}/{}/{}",
        l.queues?, l.hand_size?, l.queue_length_limit?
    ))
}

pub fn render_table(r: &PlanReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Server concurrency {} per replica: {}.",
        r.server_concurrency, r.server_concurrency_source
    );
    let _ = writeln!(
        out,
        "Seats per replica: nominal = ceil({} × shares / {}), lower = nominal − lendable, upper = nominal + borrowing.",
        r.server_concurrency,
        cell(Some(r.shares_sum_before), Some(r.shares_sum_after))
    );
    let _ = writeln!(
        out,
        "\n  {:<26} {:>11} {:>10} {:>11} {:>16} {:>11} {:>11} {:>13}",
        "PRIORITY LEVEL",
        "SHARES",
        "LENDABLE%",
        "BORROWING%",
        "QUEUES/HAND/LEN",
        "NOMINAL",
        "LOWER",
        "UPPER"
    );
    for row in &r.priority_levels {
        let (b, a) = (&row.before, &row.after);
        let _ = writeln!(
            out,
            "{} {:<26} {:>11} {:>10} {:>11} {:>16} {:>11} {:>11} {:>13}",
            if row.changed { "*" } else { " " },
            row.priority_level,
            cell(Some(b.shares), Some(a.shares)),
            cell(Some(b.lendable_percent), Some(a.lendable_percent)),
            cell(b.borrowing_limit_percent, a.borrowing_limit_percent),
            cell(queues(b), queues(a)),
            cell(Some(b.nominal_limit_seats), Some(a.nominal_limit_seats)),
            cell(Some(b.lower_limit_seats), Some(a.lower_limit_seats)),
            cell(Some(b.upper_limit_seats), Some(a.upper_limit_seats)),
        );
    }
    if r.priority_levels.iter().any(|row| row.changed) {
        let _ = writeln!(
            out,
            "\n* changes. Every level's nominal limit moves when one level's shares do: they divide one server \
             concurrency. `--output manifests` writes the changed objects for kubectl apply."
        );
    }
    out
}

/// The changed objects as `flowcontrol.apiserver.k8s.io/v1` manifests (Kubernetes 1.29+).
pub fn manifests(changed: &[PriorityLevelConfig]) -> String {
    let mut out = String::from(
        "# flowcontrol.apiserver.k8s.io/v1 (Kubernetes 1.29+; v1beta3 on 1.26-1.28).\n\
         # apf.kubernetes.io/autoupdate-spec \"false\": kube-apiserver keeps the spec of its default objects that say\n\
         # \"true\" as it ships them, which would undo this change.\n",
    );
    for pl in changed {
        let object = serde_json::json!({
            "apiVersion": flowcontrol_api_version("v1"),
            "kind": "PriorityLevelConfiguration",
            "metadata": {
                "name": pl.name,
                "annotations": {"apf.kubernetes.io/autoupdate-spec": "false"},
            },
            "spec": pl.spec("v1"),
        });
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&object).unwrap_or_default());
    }
    out
}
