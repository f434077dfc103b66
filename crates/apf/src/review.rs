//! The configuration review (`check --review`, `apf_config_findings`): what is wrong with a cluster's FlowSchemas and
//! PriorityLevelConfigurations before it hurts. Each finding names the object, why it matters and the fix; the
//! default objects of every version give none.
use std::collections::BTreeSet;

use serde::Serialize;

use crate::endpoints::flowcontrol_api_version;
use crate::limits::{max_seats, seat_limits};
use crate::matching::in_matching_order;
use crate::{
    object_name, subject_of, FlowSchema, KubeVersion, NonResourceRule, PolicyRules,
    PriorityLevelConfig, ResourceRule, Subject,
};

/// What the review looks at: the objects, the seats of a replica, and the users seen in the replicas' flows.
pub struct ReviewInput<'a> {
    pub flow_schemas: &'a [FlowSchema],
    pub priority_levels: &'a [PriorityLevelConfig],
    pub server_concurrency: u32,
    /// (flow schema, priority level, user) of requests seen in `dump_requests`.
    pub traffic: &'a [(String, String, String)],
    /// The replicas' Kubernetes version (how wide a request may be); the newest known when not known.
    pub version: Option<KubeVersion>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The check's name: the `check` label of `apf_config_findings`.
    pub check: &'static str,
    pub severity: Severity,
    /// `FlowSchema/NAME` or `PriorityLevelConfiguration/NAME`.
    pub object: String,
    pub why: String,
    pub fix: String,
    /// A manifest to apply, where one fits.
    pub manifest: Option<String>,
}

/// Every check and the severity of its findings: `apf_config_findings` has a series for each, at 0 when it finds
/// nothing.
pub const CHECKS: [(&str, Severity); 7] = [
    ("dangling_flow_schema", Severity::Warning),
    ("unreachable_priority_level", Severity::Warning),
    ("shadowed_flow_schema", Severity::Warning),
    ("exempt_grant", Severity::Critical),
    ("flow_share_below_one_request", Severity::Warning),
    ("operator_in_shared_level", Severity::Warning),
    ("level_narrower_than_a_request", Severity::Warning),
];

/// The schemas kube-apiserver ships as exempt grants: system:masters and the health probes.
const SYSTEM_EXEMPT_SCHEMAS: [&str; 2] = ["exempt", "probes"];

/// Service accounts of operators and agents that run the cluster itself (namespace or name, as they install by
/// default): throttled with everyone's workload they lose leader elections and fall behind.
const CLUSTER_OPERATORS: [&str; 24] = [
    "cilium",
    "calico",
    "tigera-operator",
    "aws-node",
    "kube-proxy",
    "coredns",
    "cluster-autoscaler",
    "karpenter",
    "cert-manager",
    "argocd",
    "flux-system",
    "istio-system",
    "linkerd",
    "ingress-nginx",
    "external-dns",
    "metrics-server",
    "kube-state-metrics",
    "prometheus",
    "gatekeeper-system",
    "kyverno",
    "ebs-csi-controller-sa",
    "vpa-recommender",
    "keda",
    "velero",
];

pub fn review(input: &ReviewInput) -> Vec<Finding> {
    let mut out = Vec::new();
    dangling_schemas(input, &mut out);
    unreachable_levels(input, &mut out);
    shadowed_schemas(input, &mut out);
    exempt_grants(input, &mut out);
    queues_below_one_request(input, &mut out);
    operators_in_shared_levels(input, &mut out);
    levels_narrower_than_a_request(input, &mut out);
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.object.cmp(&b.object)));
    out
}

fn level<'a>(input: &'a ReviewInput, name: &str) -> Option<&'a PriorityLevelConfig> {
    input.priority_levels.iter().find(|l| l.name == name)
}

fn dangling_schemas(input: &ReviewInput, out: &mut Vec<Finding>) {
    for fs in input.flow_schemas {
        if level(input, &fs.priority_level).is_none() {
            out.push(Finding {
                check: "dangling_flow_schema",
                severity: Severity::Warning,
                object: format!("FlowSchema/{}", fs.name),
                why: format!(
                    "it points to priority level {}, which does not exist: kube-apiserver ignores the schema, so the \
                     requests it was meant for fall through to lower-precedence schemas",
                    fs.priority_level
                ),
                fix: format!(
                    "create PriorityLevelConfiguration {} or point the schema to an existing level",
                    fs.priority_level
                ),
                manifest: None,
            });
        }
    }
}

fn unreachable_levels(input: &ReviewInput, out: &mut Vec<Finding>) {
    let used: BTreeSet<&str> = input
        .flow_schemas
        .iter()
        .map(|fs| fs.priority_level.as_str())
        .collect();
    for pl in input.priority_levels {
        if !used.contains(pl.name.as_str()) {
            out.push(Finding {
                check: "unreachable_priority_level",
                severity: Severity::Warning,
                object: format!("PriorityLevelConfiguration/{}", pl.name),
                why: format!(
                    "no FlowSchema sends requests to it, yet its {} shares take seats from every other level (only \
                     what it lends comes back)",
                    pl.shares_or_default()
                ),
                fix: "point a FlowSchema to it, or delete it".into(),
                manifest: None,
            });
        }
    }
}

/// Every user has one of these two groups: a rule for both (or `*`) covers everyone.
fn covers_everyone(subjects: &[Subject]) -> bool {
    let has_group = |g: &str| subjects.iter().any(|s| *s == Subject::Group(g.into()));
    subjects
        .iter()
        .any(|s| matches!(s, Subject::Group(g) | Subject::User(g) if g == "*"))
        || (has_group("system:authenticated") && has_group("system:unauthenticated"))
}

/// Whether every request `b` matches, `a` matches too.
fn subject_covers(a: &[Subject], b: &Subject) -> bool {
    if covers_everyone(a) {
        return true;
    }
    a.iter().any(|s| {
        s == b
            || match (s, b) {
                (
                    Subject::ServiceAccount { namespace, name },
                    Subject::ServiceAccount { namespace: bn, .. },
                ) => name == "*" && namespace == bn,
                (Subject::Group(g), Subject::ServiceAccount { namespace, .. }) => {
                    g == "system:serviceaccounts"
                        || *g == format!("system:serviceaccounts:{namespace}")
                }
                _ => false,
            }
    })
}

/// `a` holds every value of `b` (a lone `*` holds all).
fn list_covers(a: &[String], b: &[String]) -> bool {
    (a.len() == 1 && a[0] == "*") || b.iter().all(|x| a.contains(x))
}

fn resource_rule_covers(a: &ResourceRule, b: &ResourceRule) -> bool {
    list_covers(&a.verbs, &b.verbs)
        && list_covers(&a.api_groups, &b.api_groups)
        && list_covers(&a.resources, &b.resources)
        && (!b.cluster_scope || a.cluster_scope)
        && (b.namespaces.is_empty() || list_covers(&a.namespaces, &b.namespaces))
}

fn url_covers(a: &str, b: &str) -> bool {
    if a == "*" || a == b {
        return true;
    }
    // A prefix rule covers the paths under it, and prefix rules under it.
    let prefix = a.strip_suffix('*').unwrap_or(a);
    let prefix = if prefix.ends_with('/') {
        prefix.to_string()
    } else {
        format!("{prefix}/")
    };
    b.starts_with(&prefix)
}

fn non_resource_rule_covers(a: &NonResourceRule, b: &NonResourceRule) -> bool {
    list_covers(&a.verbs, &b.verbs)
        && b.non_resource_urls
            .iter()
            .all(|u| a.non_resource_urls.iter().any(|au| url_covers(au, u)))
}

/// Whether schema `a` matches every request schema `b` matches: each (subject, rule) pair of `b` is covered by one
/// rule of `a`. Sufficient, not necessary: an overlap split across rules of `a` is not seen.
fn schema_covers(a: &FlowSchema, b: &FlowSchema) -> bool {
    let covered = |rules: &PolicyRules| {
        rules.subjects.iter().all(|s| {
            rules.resource_rules.iter().all(|r| {
                a.rules.iter().any(|ar| {
                    subject_covers(&ar.subjects, s)
                        && ar.resource_rules.iter().any(|x| resource_rule_covers(x, r))
                })
            }) && rules.non_resource_rules.iter().all(|r| {
                a.rules.iter().any(|ar| {
                    subject_covers(&ar.subjects, s)
                        && ar
                            .non_resource_rules
                            .iter()
                            .any(|x| non_resource_rule_covers(x, r))
                })
            })
        })
    };
    !b.rules.is_empty() && b.rules.iter().all(covered)
}

fn shadowed_schemas(input: &ReviewInput, out: &mut Vec<Finding>) {
    // Dangling schemas are skipped by kube-apiserver: they neither shadow nor count as shadowed.
    let live: Vec<&FlowSchema> = in_matching_order(input.flow_schemas)
        .into_iter()
        .filter(|fs| level(input, &fs.priority_level).is_some())
        .collect();
    for (i, b) in live.iter().enumerate() {
        // catch-all is the fallback by design: global-default covers it in every version.
        if b.name == "catch-all" {
            continue;
        }
        if let Some(a) = live[..i].iter().find(|a| schema_covers(a, b)) {
            out.push(Finding {
                check: "shadowed_flow_schema",
                severity: Severity::Warning,
                object: format!("FlowSchema/{}", b.name),
                why: format!(
                    "FlowSchema {} (matchingPrecedence {}) matches every request this one matches and is tried \
                     first, so no request ever reaches it (nor its level {})",
                    a.name, a.precedence, b.priority_level
                ),
                fix: format!(
                    "give {} a matchingPrecedence below {} (lower numbers match first), or narrow {}",
                    b.name, a.precedence, a.name
                ),
                manifest: None,
            });
        }
    }
}

fn exempt_grants(input: &ReviewInput, out: &mut Vec<Finding>) {
    for fs in input.flow_schemas {
        let exempt_level = level(input, &fs.priority_level).is_some_and(|l| l.exempt);
        if exempt_level && !SYSTEM_EXEMPT_SCHEMAS.contains(&fs.name.as_str()) {
            out.push(Finding {
                check: "exempt_grant",
                severity: Severity::Critical,
                object: format!("FlowSchema/{}", fs.name),
                why: format!(
                    "it sends requests to the exempt level {}, which is never limited or queued: one runaway \
                     client it matches can take every seat of the apiserver, and APF cannot protect anyone",
                    fs.priority_level
                ),
                fix: "point it to a limited level (workload-high, or a level of its own with enough shares)".into(),
                manifest: None,
            });
        }
    }
}

fn queues_below_one_request(input: &ReviewInput, out: &mut Vec<Finding>) {
    let limits = seat_limits(input.priority_levels, input.server_concurrency);
    for (pl, limits) in input.priority_levels.iter().zip(limits) {
        let (Some(queues), Some(hand)) = (pl.queues, pl.hand_size) else {
            continue;
        };
        if !pl.queuing || queues == 0 {
            continue;
        }
        // Fair queuing shares the seats among busy queues; a flow is dealt `hand` of them.
        let share = f64::from(limits.nominal) * f64::from(hand) / f64::from(queues);
        if share < 1.0 {
            let queues_fit = (limits.nominal * hand).max(1);
            out.push(Finding {
                check: "flow_share_below_one_request",
                severity: Severity::Warning,
                object: format!("PriorityLevelConfiguration/{}", pl.name),
                why: format!(
                    "{} seats (per replica, at {} seats in all) over {queues} queues, {hand} per flow: with every \
                     queue busy a flow's fair share is {share:.2} of a request, so each flow's requests wait for \
                     everyone else's",
                    limits.nominal, input.server_concurrency
                ),
                fix: format!(
                    "use at most {queues_fit} queues (nominal seats × handSize), or raise the level's shares"
                ),
                manifest: None,
            });
        }
    }
}

/// A request may hold up to the level's max seats (the work estimator's cap); a level whose limit is below that
/// admits such a request only when nothing else runs there.
fn levels_narrower_than_a_request(input: &ReviewInput, out: &mut Vec<Finding>) {
    let version = input
        .version
        .unwrap_or(KubeVersion::new(KubeVersion::MAX_MINOR, 0));
    let limits = seat_limits(input.priority_levels, input.server_concurrency);
    for (pl, limits) in input.priority_levels.iter().zip(limits) {
        if pl.exempt {
            continue;
        }
        let widest = max_seats(version, pl, limits.nominal);
        if widest > limits.nominal {
            out.push(Finding {
                check: "level_narrower_than_a_request",
                severity: Severity::Warning,
                object: format!("PriorityLevelConfiguration/{}", pl.name),
                why: format!(
                    "its nominal limit is {} seats (at {} seats in all) and a request may hold up to {widest} (a wide \
                     LIST): such a request runs only when nothing else does, and everyone else waits behind it",
                    limits.nominal, input.server_concurrency
                ),
                fix: format!(
                    "raise its shares until the nominal limit reaches {widest} seats (`apf-monitor plan --set {}.shares=N`)",
                    pl.name
                ),
                manifest: None,
            });
        }
    }
}

fn operators_in_shared_levels(input: &ReviewInput, out: &mut Vec<Finding>) {
    let mut seen = BTreeSet::new();
    for (schema, level_name, user) in input.traffic {
        if level_name != "global-default" && level_name != "workload-low" {
            continue;
        }
        let Some((namespace, name)) = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|r| r.split_once(':'))
        else {
            continue;
        };
        // `cilium`, `cilium-operator`, `cilium-agent`: the install's namespace or account, or one named after it.
        let named = |s: &str, o: &str| s == o || s.starts_with(&format!("{o}-"));
        let Some(operator) = CLUSTER_OPERATORS
            .iter()
            .find(|o| named(namespace, o) || named(name, o))
        else {
            continue;
        };
        if !seen.insert(user.clone()) {
            continue;
        }
        let schema_for_it = serde_json::json!({
            "apiVersion": flowcontrol_api_version("v1"),
            "kind": "FlowSchema",
            "metadata": {"name": object_name("", user)},
            "spec": {
                "matchingPrecedence": 1000,
                "priorityLevelConfiguration": {"name": "workload-high"},
                "distinguisherMethod": {"type": "ByNamespace"},
                "rules": [{
                    "subjects": [subject_of(user)],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                       "clusterScope": true, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }],
            },
        });
        let manifest = serde_saphyr::to_string(&schema_for_it).ok();
        out.push(Finding {
            check: "operator_in_shared_level",
            severity: Severity::Warning,
            object: format!("FlowSchema/{schema}"),
            why: format!(
                "{user} ({operator}, which runs the cluster itself) lands in {level_name} through {schema}, with \
                 everyone's workload: when that level is busy its requests queue or get 429, and it falls behind or \
                 loses its leader election"
            ),
            fix: format!(
                "give it a FlowSchema of its own ahead of {schema} (matchingPrecedence 1000, below service-accounts' \
                 9000) on workload-high"
            ),
            manifest,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(n: &str) -> Subject {
        Subject::User(n.into())
    }

    fn all_rules(subjects: Vec<Subject>) -> PolicyRules {
        PolicyRules {
            subjects,
            resource_rules: vec![ResourceRule {
                verbs: vec!["*".into()],
                api_groups: vec!["*".into()],
                resources: vec!["*".into()],
                cluster_scope: true,
                namespaces: vec!["*".into()],
            }],
            non_resource_rules: vec![],
        }
    }

    fn schema(name: &str, precedence: u32, level: &str, rules: Vec<PolicyRules>) -> FlowSchema {
        FlowSchema {
            name: name.into(),
            precedence,
            priority_level: level.into(),
            distinguisher: crate::Distinguisher::ByUser,
            rules,
        }
    }

    #[test]
    fn a_schema_covering_another_ahead_of_it_shadows_it() {
        let wide = schema(
            "wide",
            100,
            "x",
            vec![all_rules(vec![
                Subject::Group("system:authenticated".into()),
                Subject::Group("system:unauthenticated".into()),
            ])],
        );
        let narrow = schema("narrow", 200, "x", vec![all_rules(vec![user("alice")])]);
        assert!(schema_covers(&wide, &narrow));
        assert!(!schema_covers(&narrow, &wide));
        let sa_ns = schema(
            "ns",
            100,
            "x",
            vec![all_rules(vec![Subject::ServiceAccount {
                namespace: "a".into(),
                name: "*".into(),
            }])],
        );
        let sa = schema(
            "sa",
            200,
            "x",
            vec![all_rules(vec![Subject::ServiceAccount {
                namespace: "a".into(),
                name: "b".into(),
            }])],
        );
        assert!(schema_covers(&sa_ns, &sa));
        let pl = PriorityLevelConfig {
            name: "x".into(),
            queuing: true,
            exempt: false,
            queues: Some(64),
            hand_size: Some(6),
            queue_length_limit: Some(50),
            shares: Some(30),
            lendable_percent: Some(0),
            borrowing_limit_percent: None,
        };
        let schemas = [sa, sa_ns];
        let findings = review(&ReviewInput {
            flow_schemas: &schemas,
            priority_levels: &[pl],
            server_concurrency: 600,
            traffic: &[],
            version: None,
        });
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].check, "shadowed_flow_schema");
        assert_eq!(findings[0].object, "FlowSchema/sa");
    }

    #[test]
    fn url_prefixes_cover_what_is_under_them() {
        assert!(url_covers("/apis/*", "/apis/apps"));
        assert!(url_covers("/healthz", "/healthz/etcd"));
        assert!(url_covers("*", "/x"));
        assert!(!url_covers("/healthz", "/livez"));
    }
}
