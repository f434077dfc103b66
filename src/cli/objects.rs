//! The FlowSchemas and PriorityLevelConfigurations `plan`, `match` and `check --review` work on: from files, or
//! from the first replica of the cluster that serves them (with what that replica says of its limits and traffic).
use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::scrape::{Endpoint, ScrapeError, ScrapePlan};
use apf::model::FlowcontrolObjects;
use apf::{endpoints, FlowSchema, PriorityLevelConfig};

/// The objects of `files`, read in order: an object in a later file replaces one of the same kind and name, as
/// `kubectl apply` would. `-` is standard input.
pub fn read_files(files: &[PathBuf]) -> Result<FlowcontrolObjects> {
    let mut out = FlowcontrolObjects::default();
    for path in files {
        let text = if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read standard input")?;
            text
        } else {
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?
        };
        let objects = apf::model::parse_flowcontrol_documents(&text)
            .with_context(|| format!("{}", path.display()))?;
        if objects.flow_schemas.is_empty() && objects.priority_levels.is_empty() {
            bail!(
                "{}: no FlowSchema or PriorityLevelConfiguration in it (expected `kubectl get \
                 flowschemas,prioritylevelconfigurations -o yaml`, the API's JSON list, or manifests)",
                path.display()
            );
        }
        for fs in objects.flow_schemas {
            out.flow_schemas.retain(|s| s.name != fs.name);
            out.flow_schemas.push(fs);
        }
        for pl in objects.priority_levels {
            out.priority_levels.retain(|l| l.name != pl.name);
            out.priority_levels.push(pl);
        }
    }
    Ok(out)
}

/// What one replica serves.
pub struct ClusterObjects {
    pub replica: String,
    pub flow_schemas: Vec<FlowSchema>,
    pub priority_levels: Vec<PriorityLevelConfig>,
    /// The nominal limit of each level, from its `/metrics`.
    pub served_nominal: BTreeMap<String, f64>,
    /// The minor version of its gitVersion.
    pub minor: Option<u32>,
    /// (flow schema, priority level, user) of the requests in its `dump_requests`, when asked for.
    pub traffic: Vec<(String, String, String)>,
}

/// The first replica of the config's targets (or of discovery) that serves both object lists.
pub async fn read_cluster(
    config: &crate::config::Config,
    with_traffic: bool,
) -> Result<ClusterObjects> {
    let replicas = super::replicas(config).await?;
    if replicas.is_empty() {
        bail!("no replica to read: give --file FILE, --target URL or --kubeconfig FILE");
    }
    let mut problems = Vec::new();
    let mut forbidden = false;
    for replica in &replicas {
        let settings = &replica.spec.settings;
        let max = settings.max_body_bytes;
        let fetch =
            |resource| crate::scrape::fetch_flowcontrol_list(&replica.target, resource, max);
        let (schemas, levels) = futures_util::future::join(
            fetch(endpoints::FLOW_SCHEMAS),
            fetch(endpoints::PRIORITY_LEVEL_CONFIGURATIONS),
        )
        .await;
        let ((fs_path, fs), (pl_path, pl)) = match (schemas, levels) {
            (Ok(fs), Ok(pl)) => (fs, pl),
            (Err(e), _) | (_, Err(e)) => {
                forbidden |= matches!(e, ScrapeError::Http { status: 403, .. });
                problems.push(format!("{}: {e}", replica.target.name));
                continue;
            }
        };
        let name = &replica.target.name;
        let flow_schemas =
            apf::model::parse_flow_schemas(&fs).with_context(|| format!("{name}: {fs_path}"))?;
        let priority_levels = apf::model::parse_priority_level_configurations(&pl)
            .with_context(|| format!("{name}: {pl_path}"))?;
        let mut endpoints = vec![Endpoint::Metrics];
        if with_traffic {
            endpoints.push(Endpoint::DumpRequests);
        }
        let plan = ScrapePlan {
            endpoints,
            request_details: true,
            max_body_bytes: max,
            max_line_bytes: settings.max_line_bytes,
            flows_per_schema: None,
            protobuf: settings.protobuf,
        };
        let round = crate::scrape::scrape_replica(&replica.target, &plan).await;
        let snapshot = round.snapshot.unwrap_or_default();
        return Ok(ClusterObjects {
            replica: name.clone(),
            flow_schemas,
            priority_levels,
            served_nominal: snapshot.nominal_limits(),
            minor: snapshot.minor(),
            traffic: snapshot.flow_users().collect(),
        });
    }
    // RBAC is the fix only for a refusal: a certificate, a connection or a timeout says its own.
    let rbac = if forbidden {
        format!("; the reader needs {}", endpoints::FLOWCONTROL_RBAC_RULE)
    } else {
        String::new()
    };
    bail!(
        "could not list the FlowSchemas and PriorityLevelConfigurations of any replica ({}){rbac}; or read them \
         from files (--file)",
        problems.join("; "),
    )
}
