//! Server-side printing: a list or get that asks for `application/json;as=Table;v=v1;g=meta.k8s.io` (kubectl get
//! does) gets a `meta.k8s.io/v1` Table with the columns kube-apiserver prints for that kind
//! (kubernetes/kubernetes pkg/printers/internalversion/printers.go), so `kubectl get flowschemas` shows the
//! priority level and precedence, not only NAME and AGE.

use super::discovery::Resource;
use apf::KubeVersion;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// Whether the request's Accept header asks for a Table first-class (kubectl's get does; other clients do not).
pub(super) fn wanted(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| {
        let params: Vec<&str> = first.split(';').map(str::trim).collect();
        params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io")
    })
}

/// Go's `duration.HumanDuration` (k8s.io/apimachinery/pkg/util/duration), as the AGE column spells ages.
fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(object: &Value) -> String {
    let created = object["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339(t).ok());
    match created {
        Some(t) => human_duration(SystemTime::now().duration_since(t).unwrap_or_default()),
        None => "<unknown>".into(),
    }
}

/// The first three values joined by commas, then "+ N more...", as kubectl's printers shorten lists.
fn first_three(values: &[String], empty: &str) -> String {
    if values.is_empty() {
        return empty.to_string();
    }
    let shown = values.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    if values.len() > 3 {
        format!("{shown} + {} more...", values.len() - 3)
    } else {
        shown
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<none>".into(),
        other => other.to_string(),
    }
}

/// A column: name and type, and what it shows.
fn column(name: &str, kind: &str, description: &str) -> Value {
    let mut c = json!({"name": name, "type": kind, "format": "", "description": description, "priority": 0});
    if name == "Name" {
        c["format"] = json!("name");
    }
    c
}

/// The columns kube-apiserver prints `r` with, or `None` for a kind without its own (a client then prints NAME and
/// AGE).
pub(super) fn columns(r: &Resource, v: KubeVersion) -> Option<Vec<Value>> {
    let name = column("Name", "string", "Name must be unique within a namespace.");
    let age = column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.");
    Some(match r.kind {
        "FlowSchema" => vec![
            name,
            column(
                "PriorityLevel",
                "string",
                "The priority level the matching requests are assigned to.",
            ),
            column("MatchingPrecedence", "string", "Lower numbers match first."),
            column(
                "DistinguisherMethod",
                "string",
                "How matching requests are divided into flows.",
            ),
            age,
            column(
                "MissingPL",
                "string",
                "indicates if the referenced priority level exists",
            ),
        ],
        "PriorityLevelConfiguration" => {
            // The internal type's field was renamed in 1.26, with v1beta3.
            let shares = if v.at_least(26) {
                "NominalConcurrencyShares"
            } else {
                "AssuredConcurrencyShares"
            };
            vec![
                name,
                column("Type", "string", "Exempt or Limited."),
                column(
                    shares,
                    "string",
                    "The level's share of the server's concurrency limit.",
                ),
                column("Queues", "string", "The number of queues."),
                column(
                    "HandSize",
                    "string",
                    "The queues each flow is shuffle-sharded to.",
                ),
                column(
                    "QueueLengthLimit",
                    "string",
                    "The most requests waiting in one queue.",
                ),
                age,
            ]
        }
        "EndpointSlice" => vec![
            name,
            column(
                "AddressType",
                "string",
                "The type of address carried by this EndpointSlice.",
            ),
            column("Ports", "string", "The ports of the endpoints."),
            column("Endpoints", "string", "The addresses of the endpoints."),
            age,
        ],
        "Endpoints" => vec![
            name,
            column(
                "Endpoints",
                "string",
                "The addresses and ports of the endpoints.",
            ),
            age,
        ],
        "Lease" => vec![
            name,
            column(
                "Holder",
                "string",
                "The identity of the holder of the Lease.",
            ),
            age,
        ],
        "Namespace" => vec![
            name,
            column("Status", "string", "The phase of the namespace."),
            age,
        ],
        _ => return None,
    })
}

fn cells(r: &Resource, o: &Value, levels: &[String]) -> Vec<Value> {
    let name = json!(o["metadata"]["name"]);
    let age = json!(age(o));
    match r.kind {
        "FlowSchema" => {
            let level = o["spec"]["priorityLevelConfiguration"]["name"]
                .as_str()
                .unwrap_or("");
            let missing = if levels.iter().any(|l| l == level) {
                "False"
            } else {
                "True"
            };
            let distinguisher = o["spec"]["distinguisherMethod"]["type"]
                .as_str()
                .unwrap_or("*");
            vec![
                name,
                json!(level),
                o["spec"]["matchingPrecedence"].clone(),
                json!(distinguisher),
                age,
                json!(missing),
            ]
        }
        "PriorityLevelConfiguration" => {
            let limited = &o["spec"]["limited"];
            let queuing = &limited["limitResponse"]["queuing"];
            let shares = if limited.is_null() {
                o["spec"]["exempt"]["nominalConcurrencyShares"].clone()
            } else if limited["nominalConcurrencyShares"].is_null() {
                limited["assuredConcurrencyShares"].clone()
            } else {
                limited["nominalConcurrencyShares"].clone()
            };
            let or_none = |v: &Value| {
                if v.is_null() {
                    json!("<none>")
                } else {
                    v.clone()
                }
            };
            vec![
                name,
                o["spec"]["type"].clone(),
                or_none(&shares),
                or_none(&queuing["queues"]),
                or_none(&queuing["handSize"]),
                or_none(&queuing["queueLengthLimit"]),
                age,
            ]
        }
        "EndpointSlice" => {
            let ports: Vec<String> = o["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| text(&p["port"]))
                .collect();
            let addresses: Vec<String> = o["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                .map(|a| text(&a))
                .collect();
            vec![
                name,
                o["addressType"].clone(),
                json!(first_three(&ports, "<unset>")),
                json!(first_three(&addresses, "<unset>")),
                age,
            ]
        }
        "Endpoints" => {
            let mut pairs = Vec::new();
            for s in o["subsets"].as_array().into_iter().flatten() {
                for a in s["addresses"].as_array().into_iter().flatten() {
                    for p in s["ports"].as_array().into_iter().flatten() {
                        pairs.push(format!("{}:{}", text(&a["ip"]), text(&p["port"])));
                    }
                }
            }
            vec![name, json!(first_three(&pairs, "<none>")), age]
        }
        "Lease" => vec![
            name,
            json!(o["spec"]["holderIdentity"].as_str().unwrap_or("")),
            age,
        ],
        "Namespace" => vec![name, o["status"]["phase"].clone(), age],
        _ => Vec::new(),
    }
}

/// The Table of `objects` of `r`, or `None` when the kind has no columns (the caller answers with the list).
/// `include_object` is the request's `includeObject`: `Metadata` (default), `Object` or `None`.
pub(super) fn table(
    r: &Resource,
    columns: &[Value],
    objects: &[Value],
    resource_version: Option<String>,
    include_object: &str,
    priority_levels: &[String],
) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(r, o, priority_levels)});
            let object = match include_object {
                "None" => None,
                "Object" => Some(o.clone()),
                _ => Some(json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"].clone(),
                })),
            };
            if let Some(object) = object {
                row["object"] = object;
            }
            row
        })
        .collect();
    let mut metadata = json!({});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery;

    #[test]
    fn kubectl_asks_for_tables_first() {
        assert!(wanted("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"));
        assert!(!wanted("application/json"));
        assert!(!wanted("application/json, */*"));
    }

    #[test]
    fn ages_as_go_prints_them() {
        let h = |s: u64| human_duration(Duration::from_secs(s));
        assert_eq!(h(5), "5s");
        assert_eq!(h(119), "119s");
        assert_eq!(h(150), "2m30s");
        assert_eq!(h(600), "10m");
        assert_eq!(h(3 * 3600 + 120), "3h2m");
        assert_eq!(h(30 * 3600), "30h");
        assert_eq!(h(3 * 86400 + 3600), "3d1h");
        assert_eq!(h(100 * 86400), "100d");
        assert_eq!(h(3 * 365 * 86400), "3y");
    }

    #[test]
    fn rows_carry_the_columns_of_their_kind() {
        let v = KubeVersion::new(34, 0);
        let rs = discovery::resources(v);
        let plc = rs
            .iter()
            .find(|r| r.kind == "PriorityLevelConfiguration")
            .unwrap();
        let exempt = json!({"metadata": {"name": "exempt", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0}}});
        let t = table(
            plc,
            &columns(plc, v).unwrap(),
            &[exempt],
            Some("7".into()),
            "Metadata",
            &[],
        );
        assert_eq!(
            t["columnDefinitions"][2]["name"],
            "NominalConcurrencyShares"
        );
        assert_eq!(t["rows"][0]["cells"][1], "Exempt");
        assert_eq!(t["rows"][0]["cells"][3], "<none>");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let slices = rs.iter().find(|r| r.kind == "EndpointSlice").unwrap();
        let endpoints: Vec<Value> = (1..=4)
            .map(|i| json!({"addresses": [format!("127.0.0.{i}")]}))
            .collect();
        let slice = json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
            "endpoints": endpoints, "ports": [{"port": 6443}]});
        let t = table(
            slices,
            &columns(slices, v).unwrap(),
            &[slice],
            None,
            "None",
            &[],
        );
        assert_eq!(t["rows"][0]["cells"][2], "6443");
        assert_eq!(
            t["rows"][0]["cells"][3],
            "127.0.0.1,127.0.0.2,127.0.0.3 + 1 more..."
        );
        assert!(t["rows"][0].get("object").is_none());
        let fs = rs.iter().find(|r| r.kind == "FlowSchema").unwrap();
        let schema = json!({"metadata": {"name": "x"}, "spec": {"priorityLevelConfiguration": {"name": "gone"}, "matchingPrecedence": 5}});
        let t = table(
            fs,
            &columns(fs, v).unwrap(),
            &[schema],
            None,
            "Metadata",
            &["global-default".into()],
        );
        assert_eq!(t["rows"][0]["cells"][3], "*");
        assert_eq!(t["rows"][0]["cells"][5], "True");
    }
}
