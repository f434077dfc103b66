//! `apf-monitor match`: which FlowSchema, priority level and flow a request gets, with kube-apiserver's own
//! matching (`apf::matching`), on the cluster's objects or on files.
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::output::{errln, out, outln};
use super::{init_logging, load_config, TargetArgs};
use apf::matching::{
    implied_groups, match_request, Match, Request, Target, NON_RESOURCE_VERBS, RESOURCE_VERBS,
};
use apf::{FlowSchema, PriorityLevelConfig};

#[derive(Debug, Args)]
pub struct MatchArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    /// FlowSchemas and PriorityLevelConfigurations from a file instead of the cluster: `kubectl get
    /// flowschemas,prioritylevelconfigurations -o yaml`, the API's JSON, or manifests. Repeatable; `-` reads
    /// standard input.
    #[arg(long = "file", short = 'f', value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The user sending the request, e.g. alice or system:serviceaccount:monitoring:agent.
    #[arg(long, value_name = "NAME", value_parser = crate::values::parse_subject_name)]
    pub user: String,
    /// A group of the user; repeatable. The groups kube-apiserver's authenticators add (system:authenticated,
    /// system:serviceaccounts, ...) are added too, unless --no-implied-groups.
    #[arg(long = "group", value_name = "NAME", value_parser = crate::values::parse_subject_name)]
    pub groups: Vec<String>,
    #[arg(long)]
    pub no_implied_groups: bool,
    /// The Kubernetes verb (get, list, watch, create, update, patch, delete, ...): needed with --resource, as
    /// FlowSchemas tell get, list and watch apart. With --non-resource-url, the HTTP method (default get).
    #[arg(long, value_name = "VERB")]
    pub verb: Option<String>,
    /// The API group of the resource; empty (the default) is the core group.
    #[arg(long, value_name = "GROUP", default_value = "")]
    pub api_group: String,
    /// The resource, e.g. pods or deployments.
    #[arg(long, value_name = "RESOURCE", conflicts_with = "non_resource_url")]
    pub resource: Option<String>,
    /// The subresource, e.g. status or log.
    #[arg(long, value_name = "NAME", requires = "resource")]
    pub subresource: Option<String>,
    /// The namespace (a DNS-1123 label, as kube-apiserver requires); without it a resource request is
    /// cluster-scoped (or lists across every namespace).
    #[arg(long, value_name = "NAME", requires = "resource", value_parser = crate::values::parse_namespace)]
    pub namespace: Option<String>,
    /// A non-resource request's path, e.g. /healthz or /metrics.
    #[arg(long, value_name = "PATH")]
    pub non_resource_url: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub output: MatchOutput,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MatchOutput {
    Table,
    Json,
}

#[derive(Debug, Serialize)]
struct MatchReport<'a> {
    #[serde(flatten)]
    matched: &'a Match,
    user: &'a str,
    groups: &'a [String],
    verb: &'a str,
    /// `list pods in default`, `get /healthz`.
    request: String,
    /// Where the objects came from.
    source: &'a str,
}

pub async fn run(args: MatchArgs) -> Result<()> {
    let request = request(&args)?;
    let (schemas, levels, source) = if args.files.is_empty() {
        let config = load_config(&args.common, None, None)?;
        init_logging(config.log.format, "warn")?;
        from_cluster(&config).await?
    } else {
        from_files(&args.files)?
    };
    let matched = match_request(&schemas, &levels, &request)?;
    let report = MatchReport {
        matched: &matched,
        user: &request.user,
        groups: &request.groups,
        verb: &request.verb,
        request: describe(&request),
        source: &source,
    };
    match args.output {
        MatchOutput::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
        MatchOutput::Table => out!("{}", render(&report, &schemas)),
    }
}

fn request(args: &MatchArgs) -> Result<Request> {
    let target = match (&args.resource, &args.non_resource_url) {
        (Some(resource), None) => Target::Resource {
            api_group: args.api_group.clone(),
            resource: resource.clone(),
            subresource: args.subresource.clone(),
            namespace: args.namespace.clone().filter(|n| !n.is_empty()),
        },
        (None, Some(path)) if path.starts_with('/') => Target::NonResource { path: path.clone() },
        (None, Some(path)) => {
            bail!("--non-resource-url {path}: a path starts with /, e.g. /healthz")
        }
        _ => bail!("give --resource R (with --verb) or --non-resource-url PATH"),
    };
    let verb = match (&args.verb, &target) {
        (Some(v), _) => v.to_ascii_lowercase(),
        (None, Target::NonResource { .. }) => "get".into(),
        (None, Target::Resource { .. }) => {
            bail!(
                "--verb is needed with --resource: one of {}",
                RESOURCE_VERBS.join(", ")
            )
        }
    };
    // kube-apiserver gives a request one of a few verbs: another one would match only a rule that names it, which
    // no real request does.
    let (known, what) = match &target {
        Target::Resource { .. } => (&RESOURCE_VERBS[..], "a resource request's verb"),
        Target::NonResource { .. } => (
            &NON_RESOURCE_VERBS[..],
            "a non-resource request's verb (its HTTP method)",
        ),
    };
    if !known.contains(&verb.as_str()) {
        bail!("--verb {verb}: not {what}; one of {}", known.join(", "));
    }
    if let Target::Resource { resource, .. } = &target {
        if let Some(hint) = resource_hint(resource) {
            errln!("warning: --resource {resource}: {hint}");
        }
    }
    let mut groups = args.groups.clone();
    if !args.no_implied_groups {
        for g in implied_groups(&args.user) {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    Ok(Request {
        user: args.user.clone(),
        groups,
        verb,
        target,
    })
}

/// What looks wrong in a resource name: kube-apiserver names resources in the plural and lower case (`pods`,
/// `deployments`), and a FlowSchema's rule names them so; any name can be a custom resource, so this warns only.
fn resource_hint(resource: &str) -> Option<String> {
    if resource.chars().any(|c| c.is_ascii_uppercase()) {
        return Some(format!(
            "resources are named in lower case ({}); a rule's resources are matched as written",
            resource.to_ascii_lowercase()
        ));
    }
    if !resource.ends_with('s') && resource != "*" {
        return Some(format!(
            "resources are named in the plural: did you mean {resource}s? A rule's resources are matched as written"
        ));
    }
    None
}

fn describe(r: &Request) -> String {
    match &r.target {
        Target::Resource {
            api_group,
            resource,
            subresource,
            namespace,
        } => format!(
            "{} {}{}{}{}",
            r.verb,
            resource,
            if api_group.is_empty() {
                String::new()
            } else {
                format!(".{api_group}")
            },
            subresource
                .as_deref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            namespace
                .as_deref()
                .map(|n| format!(" in namespace {n}"))
                .unwrap_or_else(|| " (cluster scope)".into())
        ),
        Target::NonResource { path } => format!("{} {path}", r.verb),
    }
}

pub(super) fn from_files(
    files: &[PathBuf],
) -> Result<(Vec<FlowSchema>, Vec<PriorityLevelConfig>, String)> {
    let objects = super::objects::read_files(files)?;
    let (schemas, levels) = (objects.flow_schemas, objects.priority_levels);
    if schemas.is_empty() || levels.is_empty() {
        bail!(
            "matching needs the FlowSchemas and the PriorityLevelConfigurations (found {} and {}): give both, e.g. \
             `kubectl get flowschemas,prioritylevelconfigurations -o yaml > apf.yaml`",
            schemas.len(),
            levels.len()
        );
    }
    let source = files
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Ok((schemas, levels, source))
}

pub(super) async fn from_cluster(
    config: &crate::config::Config,
) -> Result<(Vec<FlowSchema>, Vec<PriorityLevelConfig>, String)> {
    let c = super::objects::read_cluster(config, false).await?;
    let source = format!("the objects {} serves", c.replica);
    Ok((c.flow_schemas, c.priority_levels, source))
}

fn render(r: &MatchReport, schemas: &[FlowSchema]) -> String {
    use std::fmt::Write;
    let m = r.matched;
    let mut out = String::new();
    let _ = writeln!(out, "request         {} by {}", r.request, r.user);
    let _ = writeln!(out, "groups          {}", r.groups.join(", "));
    let _ = writeln!(
        out,
        "flow schema     {} (matchingPrecedence {}){}",
        m.flow_schema,
        m.matching_precedence,
        if m.fallback {
            ": no FlowSchema matches; kube-apiserver falls back to catch-all"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "priority level  {}", m.priority_level);
    let method = schemas
        .iter()
        .find(|s| s.name == m.flow_schema)
        .and_then(|s| s.distinguisher.method_type());
    let _ = writeln!(
        out,
        "flow            {}",
        match (m.flow_distinguisher.as_str(), method) {
            ("", Some(method)) => format!(
                "(none: {method}, but the level has one queue or none, so kube-apiserver does not split it)"
            ),
            ("", None) => "(none: the schema has no distinguisher; its requests are one flow)".into(),
            (d, Some(method)) => format!("{d} ({method})"),
            (d, None) => d.to_string(),
        }
    );
    if !m.dangling_skipped.is_empty() {
        let _ = writeln!(
            out,
            "skipped         {} (priority level missing: kube-apiserver ignores them)",
            m.dangling_skipped.join(", ")
        );
    }
    let _ = writeln!(out, "objects         {}", r.source);
    out
}
