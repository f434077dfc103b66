//! `apf-monitor advise`: how fast may this client go. Watches the replicas for a window (or reads a Prometheus, or a
//! running daemon's `/api/v1/status`), then per client: the seats its flow can count on, what its requests cost, the
//! rate that sustains, what it sends, and the flag to set; worst first.
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::output::{out, outln};
use super::{SourceArgs, TargetArgs};
use crate::analyze::{ClientAdvice, ClientRecommendation};

#[derive(Debug, Args)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Only this client: a user name, or a service account's name alone (`provider-aws` for
    /// system:serviceaccount:crossplane-system:provider-aws).
    #[arg(long, value_name = "USER", conflicts_with = "flow")]
    pub user: Option<String>,
    /// Only this flow (its flow distinguisher: a user, or a namespace for by-namespace flow schemas).
    #[arg(long, value_name = "FLOW")]
    pub flow: Option<String>,
    /// kube-apiserver audit logs (plain, gzipped or rotated) of the window: each user's own request rate and user
    /// agent, and users no dump shows. Repeatable; replaces the config's audit.files.
    #[arg(long = "audit", value_name = "FILE")]
    pub audit: Vec<PathBuf>,
    /// With --audit: the FlowSchemas and PriorityLevelConfigurations that classify the events where no replica
    /// serves them (read through a Prometheus): `kubectl get flowschemas,prioritylevelconfigurations -o yaml`.
    /// Repeatable.
    #[arg(long = "objects", value_name = "FILE", requires = "audit")]
    pub objects: Vec<PathBuf>,
    /// Read a running `apf-monitor serve`'s /api/v1/status (e.g. http://127.0.0.1:9864) instead of watching.
    #[arg(long, value_name = "URL", conflicts_with_all = ["targets", "prometheus", "audit"])]
    pub daemon: Option<String>,
    /// With --daemon: a file holding a bearer token for a daemon that protects its reads (`web.auth.protect_reads`),
    /// re-read at each run; e.g. a service account's token.
    #[arg(long, value_name = "FILE", requires = "daemon")]
    pub token_file: Option<PathBuf>,
    /// How long to watch the replicas (default: the config's analysis.window, 1m).
    #[arg(long, value_name = "DURATION", value_parser = crate::values::parse_duration)]
    pub window: Option<Duration>,
    /// `table`, or `json`: {"clients": [...]}.
    #[arg(long, value_enum, default_value = "table")]
    pub output: AdviseFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AdviseFormat {
    Table,
    Json,
}

pub async fn advise(args: AdviseArgs) -> Result<ExitCode> {
    let (clients, recommendations) = match &args.daemon {
        Some(url) => {
            from_daemon(
                url,
                args.token_file.as_deref(),
                args.common.certificate_authority.as_deref(),
            )
            .await?
        }
        None => {
            let report = super::window::watch(&super::window::Watch {
                common: &args.common,
                source: &args.source,
                audit: &args.audit,
                objects: &args.objects,
                window: args.window,
                purpose: "--daemon URL",
            })
            .await?;
            (report.clients, report.recommendations)
        }
    };
    let chosen: Vec<ClientAdvice> = clients.into_iter().filter(|c| wanted(&args, c)).collect();
    if chosen.is_empty() {
        let what = match (&args.user, &args.flow) {
            (Some(u), _) => format!("no client of user {u}"),
            (_, Some(f)) => format!("no client of flow {f}"),
            _ => "no client".to_string(),
        };
        bail!(
            "{what} was seen in a priority level's top flows or the audit events of the window: a flow shows once \
             the replicas' dump_requests list its requests (it is idle, or read through a Prometheus, which has no \
             dumps: give --audit), or widen --window"
        );
    }
    // The recommendations of the clients chosen.
    let recommendations: Vec<ClientRecommendation> = recommendations
        .into_iter()
        .filter(|r| {
            chosen
                .iter()
                .any(|c| c.cluster == r.cluster && c.name() == r.client)
        })
        .collect();
    match args.output {
        AdviseFormat::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "recommendations": recommendations,
                "clients": chosen,
            }))?
        )?,
        AdviseFormat::Table => out!("{}", table(&recommendations, &chosen))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `c` is the client asked for: `--user` names the user or a service account's name alone.
fn wanted(args: &AdviseArgs, c: &ClientAdvice) -> bool {
    if let Some(user) = &args.user {
        let Some(u) = c.user.as_deref() else {
            return false;
        };
        return u == user || u.rsplit(':').next() == Some(user.as_str());
    }
    if let Some(flow) = &args.flow {
        return c.flow.as_deref() == Some(flow.as_str());
    }
    true
}

/// The clients a running daemon advises (`GET /api/v1/status`), per replica and one recommendation each, with a
/// bearer token from `token_file` and the daemon's CA (`--certificate-authority`) where it serves TLS (`web.tls`).
async fn from_daemon(
    url: &str,
    token_file: Option<&std::path::Path>,
    ca: Option<&std::path::Path>,
) -> Result<(Vec<ClientAdvice>, Vec<ClientRecommendation>)> {
    #[derive(serde::Deserialize)]
    struct Status {
        #[serde(default)]
        clients: Vec<serde_json::Value>,
        #[serde(default)]
        recommendations: Vec<serde_json::Value>,
    }
    let status_url = format!("{}/api/v1/status", url.trim_end_matches('/'));
    // The client every target starts from: no redirect carries the token elsewhere.
    let builder = crate::targets::client_builder(url, Duration::from_secs(10), ca)?
        .timeout(Duration::from_secs(30));
    let mut request = builder.build()?.get(&status_url);
    if let Some(path) = token_file {
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?;
        request = request.bearer_auth(token.trim());
    }
    let response = request.send().await.with_context(|| {
        format!("cannot read {status_url}: is `apf-monitor serve` listening there?")
    })?;
    match response.status() {
        s if s.is_success() => {}
        s @ (reqwest::StatusCode::UNAUTHORIZED | reqwest::StatusCode::FORBIDDEN) => bail!(
            "{status_url} answered {s}: the daemon protects its reads (web.auth.protect_reads): give --token-file \
             with a token RBAC allows to get /api/v1/status"
        ),
        s => bail!("{status_url} answered {s}: give the address of `apf-monitor serve` (its --listen)"),
    }
    let body = response
        .bytes()
        .await
        .with_context(|| format!("cannot read {status_url}"))?;
    let status: Status = serde_json::from_slice(&body)
        .with_context(|| format!("{status_url} is not apf-monitor's status JSON"))?;
    let clients = status
        .clients
        .into_iter()
        .map(|c| serde_json::from_value(c).context("a client of the status JSON does not read"))
        .collect::<Result<_>>()?;
    let recommendations = status
        .recommendations
        .into_iter()
        .map(|r| {
            serde_json::from_value(r).context("a recommendation of the status JSON does not read")
        })
        .collect::<Result<_>>()?;
    Ok((clients, recommendations))
}

/// One line per client and its recommendation, then the per-replica table and each row's advice.
fn table(recommendations: &[ClientRecommendation], clients: &[ClientAdvice]) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), apf::advice::shown);
    let mut out = String::new();
    if !recommendations.is_empty() {
        let header = [
            "CLIENT",
            "SENDS/s",
            "REPLICAS",
            "TIGHTEST",
            "LEVEL",
            "SUSTAINS/s",
            "SETTINGS",
        ];
        let rows: Vec<Vec<String>> =
            std::iter::once(header.iter().map(|h| h.to_string()).collect())
                .chain(recommendations.iter().map(|r| {
                    vec![
                        r.client.clone(),
                        f(r.observed_requests_per_second),
                        r.replicas.len().to_string(),
                        r.tightest_apiserver.clone(),
                        r.priority_level.clone(),
                        f(r.sustainable_requests_per_second),
                        format!("{} {}", if r.change { "set" } else { "ceiling" }, r.flags),
                    ]
                }))
                .collect();
        out.push_str(&super::table::columns(&rows));
        out.push('\n');
        for r in recommendations {
            out.push_str(&format!("- {}\n", r.advice));
        }
        out.push_str("\nPer replica:\n");
    }
    let header = [
        "CLIENT",
        "REPLICA",
        "LEVEL",
        "SHARE",
        "COST",
        "SUSTAINS/s",
        "SENDS/s",
        "QPS",
        "BURST",
        "CONCURRENCY",
    ];
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(clients.iter().map(|c| {
            vec![
                c.name().to_string(),
                c.apiserver.clone(),
                c.priority_level.clone(),
                format!("{}/{}", f(c.fair_share_seats), f(c.limit_seats)),
                format!("{} x {}s", f(c.seats_per_request), f(c.seconds_per_request)),
                f(c.sustainable_requests_per_second),
                f(c.observed_requests_per_second),
                c.recommended_qps.map_or("-".into(), apf::advice::number),
                c.recommended_burst.to_string(),
                c.recommended_concurrency.to_string(),
            ]
        }))
        .collect();
    out.push_str(&super::table::columns(&rows));
    out.push('\n');
    for c in clients {
        out.push_str(&format!("- {}\n", c.advice));
    }
    out
}
