//! PriorityLevelConfiguration objects (`flowcontrol.apiserver.k8s.io`, any served version), read into APF's own
//! [`PriorityLevelConfig`].
use serde::Deserialize;

use crate::{
    Distinguisher, FlowSchema, NonResourceRule, PolicyRules, PriorityLevelConfig, ResourceRule,
    Subject,
};

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    metadata: Metadata,
    #[serde(default)]
    spec: Spec,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default, rename = "type")]
    kind: String,
    limited: Option<Limited>,
    /// From 1.28: exempt's shares count in the sum every level's NominalCL divides by.
    exempt: Option<Exempt>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Exempt {
    nominal_concurrency_shares: Option<u32>,
    lendable_percent: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Limited {
    nominal_concurrency_shares: Option<u32>,
    assured_concurrency_shares: Option<u32>,
    lendable_percent: Option<u32>,
    borrowing_limit_percent: Option<u32>,
    limit_response: Option<LimitResponse>,
}

#[derive(Deserialize)]
struct LimitResponse {
    #[serde(default, rename = "type")]
    kind: String,
    queuing: Option<Queuing>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Queuing {
    queues: Option<u32>,
    hand_size: Option<u32>,
    queue_length_limit: Option<u32>,
}

/// Reads a `PriorityLevelConfigurationList` as any API version serves it.
pub fn parse_priority_level_configurations(
    json: &[u8],
) -> Result<Vec<PriorityLevelConfig>, serde_json::Error> {
    let list: List = serde_json::from_slice(json)?;
    Ok(list.items.into_iter().map(Item::into_config).collect())
}

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The parser's message names the line and column.
    #[error("not YAML or JSON: {0}")]
    Syntax(String),
    #[error("document {document}: not a PriorityLevelConfiguration: {error}")]
    Shape {
        document: usize,
        error: serde_json::Error,
    },
}

/// The flowcontrol objects of a file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowcontrolObjects {
    pub priority_levels: Vec<PriorityLevelConfig>,
    pub flow_schemas: Vec<FlowSchema>,
}

/// The PriorityLevelConfigurations and FlowSchemas of a file in any form users have them: `kubectl get ... -o yaml`
/// (a `List`), the API's JSON (`PriorityLevelConfigurationList`, `FlowSchemaList`, whose items carry no `kind`), or
/// manifests (one object per YAML document). Objects of other kinds are skipped.
pub fn parse_flowcontrol_documents(text: &str) -> Result<FlowcontrolObjects, DocumentError> {
    const PLC: &str = "PriorityLevelConfiguration";
    const FS: &str = "FlowSchema";
    let mut out = FlowcontrolObjects::default();
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| DocumentError::Syntax(e.without_snippet().to_string()))?;
    for (i, value) in documents.into_iter().enumerate() {
        let document = i + 1;
        let items = |v: &serde_json::Value| -> Vec<serde_json::Value> {
            v["items"].as_array().cloned().unwrap_or_default()
        };
        let objects: Vec<(String, serde_json::Value)> =
            match value["kind"].as_str().unwrap_or_default() {
                "PriorityLevelConfigurationList" => {
                    items(&value).into_iter().map(|o| (PLC.into(), o)).collect()
                }
                "FlowSchemaList" => items(&value).into_iter().map(|o| (FS.into(), o)).collect(),
                "List" => items(&value)
                    .into_iter()
                    .map(|o| (o["kind"].as_str().unwrap_or_default().to_string(), o))
                    .collect(),
                kind => vec![(kind.to_string(), value)],
            };
        for (kind, object) in objects {
            let shape = |error| DocumentError::Shape { document, error };
            match kind.as_str() {
                PLC => out
                    .priority_levels
                    .push(Item::deserialize(&object).map_err(shape)?.into_config()),
                FS => out
                    .flow_schemas
                    .push(FsItem::deserialize(&object).map_err(shape)?.into_schema()),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// The PriorityLevelConfigurations of a file ([`parse_flowcontrol_documents`]).
pub fn parse_priority_level_documents(
    text: &str,
) -> Result<Vec<PriorityLevelConfig>, DocumentError> {
    Ok(parse_flowcontrol_documents(text)?.priority_levels)
}

/// Reads a `FlowSchemaList` as any API version serves it.
pub fn parse_flow_schemas(json: &[u8]) -> Result<Vec<FlowSchema>, serde_json::Error> {
    #[derive(Deserialize)]
    struct FsList {
        #[serde(default)]
        items: Vec<FsItem>,
    }
    let list: FsList = serde_json::from_slice(json)?;
    Ok(list.items.into_iter().map(FsItem::into_schema).collect())
}

/// One PriorityLevelConfiguration object, as a watch event carries it (any API version).
pub fn parse_priority_level_configuration(
    object: &serde_json::Value,
) -> Result<PriorityLevelConfig, serde_json::Error> {
    Ok(Item::deserialize(object)?.into_config())
}

/// One FlowSchema object, as a watch event carries it (any API version).
pub fn parse_flow_schema(object: &serde_json::Value) -> Result<FlowSchema, serde_json::Error> {
    Ok(FsItem::deserialize(object)?.into_schema())
}

/// The `metadata.resourceVersion` of a list or an object: where a watch of what it holds starts. `None` when
/// absent or empty.
pub fn resource_version(json: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Versioned {
        #[serde(default)]
        metadata: ListMetadata,
    }
    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct ListMetadata {
        #[serde(default)]
        resource_version: String,
    }
    let v: Versioned = serde_json::from_slice(json).ok()?;
    Some(v.metadata.resource_version).filter(|rv| !rv.is_empty())
}

#[derive(Deserialize)]
struct FsItem {
    metadata: Metadata,
    #[serde(default)]
    spec: FsSpec,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FsSpec {
    matching_precedence: Option<u32>,
    #[serde(default)]
    priority_level_configuration: NameRef,
    distinguisher_method: Option<TypeField>,
    #[serde(default)]
    rules: Vec<FsRules>,
}

#[derive(Deserialize, Default)]
struct NameRef {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct TypeField {
    #[serde(default, rename = "type")]
    kind: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct FsRules {
    subjects: Vec<FsSubject>,
    resource_rules: Vec<FsResourceRule>,
    non_resource_rules: Vec<FsNonResourceRule>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct FsSubject {
    kind: String,
    user: Option<NameRef>,
    group: Option<NameRef>,
    service_account: Option<FsServiceAccount>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FsServiceAccount {
    namespace: String,
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct FsResourceRule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    cluster_scope: bool,
    namespaces: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct FsNonResourceRule {
    verbs: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

impl FsItem {
    fn into_schema(self) -> FlowSchema {
        let spec = self.spec;
        FlowSchema {
            name: self.metadata.name,
            // The API's default (SetDefaults_FlowSchemaSpec).
            precedence: spec.matching_precedence.unwrap_or(1000),
            priority_level: spec.priority_level_configuration.name,
            distinguisher: match spec.distinguisher_method.as_ref().map(|d| d.kind.as_str()) {
                Some("ByUser") => Distinguisher::ByUser,
                Some("ByNamespace") => Distinguisher::ByNamespace,
                _ => Distinguisher::None,
            },
            rules: spec
                .rules
                .into_iter()
                .map(|r| PolicyRules {
                    subjects: r
                        .subjects
                        .into_iter()
                        .map(
                            |s| match (s.kind.as_str(), s.user, s.group, s.service_account) {
                                ("User", Some(u), _, _) => Subject::User(u.name),
                                ("Group", _, Some(g), _) => Subject::Group(g.name),
                                ("ServiceAccount", _, _, Some(sa)) => Subject::ServiceAccount {
                                    namespace: sa.namespace,
                                    name: sa.name,
                                },
                                _ => Subject::Other,
                            },
                        )
                        .collect(),
                    resource_rules: r
                        .resource_rules
                        .into_iter()
                        .map(|rr| ResourceRule {
                            verbs: rr.verbs,
                            api_groups: rr.api_groups,
                            resources: rr.resources,
                            cluster_scope: rr.cluster_scope,
                            namespaces: rr.namespaces,
                        })
                        .collect(),
                    non_resource_rules: r
                        .non_resource_rules
                        .into_iter()
                        .map(|nr| NonResourceRule {
                            verbs: nr.verbs,
                            non_resource_urls: nr.non_resource_urls,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

impl Item {
    fn into_config(self) -> PriorityLevelConfig {
        let item = self;
        let limited = item.spec.limited;
        let exempt = item.spec.exempt;
        let response = limited.as_ref().and_then(|l| l.limit_response.as_ref());
        let queuing = response
            .filter(|r| r.kind == "Queue")
            .and_then(|r| r.queuing.as_ref());
        PriorityLevelConfig {
            name: item.metadata.name,
            exempt: item.spec.kind == "Exempt",
            queuing: queuing.is_some(),
            queues: queuing.and_then(|q| q.queues),
            hand_size: queuing.and_then(|q| q.hand_size),
            queue_length_limit: queuing.and_then(|q| q.queue_length_limit),
            shares: match (&limited, &exempt) {
                (Some(l), _) => l
                    .nominal_concurrency_shares
                    .or(l.assured_concurrency_shares),
                (None, Some(e)) => e.nominal_concurrency_shares,
                (None, None) => None,
            },
            lendable_percent: match (&limited, &exempt) {
                (Some(l), _) => l.lendable_percent,
                (None, Some(e)) => e.lendable_percent,
                (None, None) => None,
            },
            borrowing_limit_percent: limited.as_ref().and_then(|l| l.borrowing_limit_percent),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_spelling_of_the_spec() {
        let json = br#"{"items": [
            {"metadata": {"name": "exempt"}, "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 10, "lendablePercent": 5}}},
            {"metadata": {"name": "catch-all"}, "spec": {"type": "Limited", "limited": {"assuredConcurrencyShares": 5, "limitResponse": {"type": "Reject"}}}},
            {"metadata": {"name": "workload-low"}, "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 100, "lendablePercent": 90, "borrowingLimitPercent": 20,
                "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}}}
        ]}"#;
        let pls = parse_priority_level_configurations(json).unwrap();
        assert_eq!(
            (pls[0].exempt, pls[0].shares, pls[0].lendable_percent),
            (true, Some(10), Some(5))
        );
        assert!(pls[1].rejects());
        assert_eq!((pls[1].shares, pls[1].queue_capacity()), (Some(5), None));
        let wl = &pls[2];
        assert!(wl.queuing && !wl.rejects());
        assert_eq!(
            (wl.shares, wl.lendable_percent, wl.borrowing_limit_percent),
            (Some(100), Some(90), Some(20))
        );
        assert_eq!(wl.queue_capacity(), Some(6400));
    }

    #[test]
    fn one_object_of_a_watch_event_and_the_version_of_a_list() {
        let fs: serde_json::Value = serde_json::from_str(
            r#"{"kind": "FlowSchema", "metadata": {"name": "mine", "resourceVersion": "7"},
                "spec": {"priorityLevelConfiguration": {"name": "own"}, "matchingPrecedence": 800}}"#,
        )
        .unwrap();
        let schema = parse_flow_schema(&fs).unwrap();
        assert_eq!(
            (
                schema.name.as_str(),
                schema.priority_level.as_str(),
                schema.precedence
            ),
            ("mine", "own", 800)
        );
        let pl = serde_json::json!({"metadata": {"name": "own"}, "spec": {"type": "Limited",
            "limited": {"nominalConcurrencyShares": 5, "limitResponse": {"type": "Reject"}}}});
        let level = parse_priority_level_configuration(&pl).unwrap();
        assert_eq!((level.name.as_str(), level.shares), ("own", Some(5)));
        assert!(parse_flow_schema(&serde_json::json!({"spec": {}})).is_err());

        let list =
            br#"{"kind": "FlowSchemaList", "metadata": {"resourceVersion": "42"}, "items": []}"#;
        assert_eq!(resource_version(list).as_deref(), Some("42"));
        assert_eq!(resource_version(br#"{"metadata": {}, "items": []}"#), None);
        assert_eq!(resource_version(b"not json"), None);
    }

    #[test]
    fn every_default_level_reads_back_from_its_spec_in_every_served_version() {
        use crate::{
            defaults::default_priority_levels, endpoints::served_api_versions, KubeVersion,
        };
        for minor in KubeVersion::MIN_MINOR..=KubeVersion::MAX_MINOR {
            let v = KubeVersion::new(minor, 0);
            let levels = default_priority_levels(v);
            for api in served_api_versions(v) {
                let items: Vec<serde_json::Value> = levels
                    .iter()
                    .map(|l| serde_json::json!({"metadata": {"name": l.name}, "spec": l.spec(api)}))
                    .collect();
                let list = serde_json::json!({"items": items}).to_string();
                assert_eq!(
                    parse_priority_level_configurations(list.as_bytes()).unwrap(),
                    levels,
                    "1.{minor} {api}"
                );
                // The same objects as manifests, one YAML document each.
                let docs: String = levels
                    .iter()
                    .map(|l| {
                        let object = serde_json::json!({"kind": "PriorityLevelConfiguration",
                            "metadata": {"name": l.name}, "spec": l.spec(api)});
                        format!("---\n{}", serde_saphyr::to_string(&object).unwrap())
                    })
                    .collect();
                assert_eq!(
                    parse_priority_level_documents(&docs).unwrap(),
                    levels,
                    "1.{minor} {api}"
                );
            }
        }
    }
}
