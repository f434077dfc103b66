//! Which FlowSchema, priority level and flow a request gets, as kube-apiserver decides: the FlowSchemas sorted by
//! matchingPrecedence then name, the first whose rules match wins (kubernetes/kubernetes
//! staging/src/k8s.io/apiserver/pkg/util/flowcontrol/rule.go for the rules, apf_controller.go `startRequest` for the
//! order, the catch-all fallback and the flow distinguisher).
use serde::Serialize;

use super::{
    Distinguisher, FlowSchema, NonResourceRule, PolicyRules, PriorityLevelConfig, ResourceRule,
    Subject,
};

/// A request as APF sees it: who sends it and what it asks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    pub user: String,
    /// Every group of the user, the authenticator's implied ones included ([`implied_groups`]).
    pub groups: Vec<String>,
    /// The Kubernetes verb (`get`, `list`, `watch`, `create`, ...) or, for a non-resource URL, the HTTP method in
    /// lower case.
    pub verb: String,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Resource {
        /// `""` for the core group.
        api_group: String,
        resource: String,
        subresource: Option<String>,
        /// `None` for a cluster-scoped request (or a list across every namespace).
        namespace: Option<String>,
    },
    NonResource {
        path: String,
    },
}

impl Default for Target {
    fn default() -> Self {
        Target::NonResource { path: "/".into() }
    }
}

/// The verbs kube-apiserver gives a resource request (k8s.io/apiserver `pkg/endpoints/request/requestinfo.go`): from
/// the HTTP method (`get`, `create`, `update`, `patch`, `delete`), `list` and `deletecollection` on a collection,
/// `watch` and `proxy` from the path.
pub const RESOURCE_VERBS: [&str; 9] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "proxy",
];

/// A non-resource request's verb is its HTTP method in lower case.
pub const NON_RESOURCE_VERBS: [&str; 7] =
    ["get", "head", "post", "put", "patch", "delete", "options"];

/// The groups kube-apiserver's authenticators add to a user (k8s.io/apiserver pkg/authentication: `group.
/// AuthenticatedGroupAdder`, the service-account authenticator): `system:authenticated` for everyone but
/// `system:anonymous` (who is `system:unauthenticated`), and `system:serviceaccounts` plus
/// `system:serviceaccounts:NAMESPACE` for a service account.
pub fn implied_groups(user: &str) -> Vec<String> {
    if user == "system:anonymous" {
        return vec!["system:unauthenticated".into()];
    }
    let mut groups = Vec::new();
    if let Some((namespace, _)) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        groups.push("system:serviceaccounts".to_string());
        groups.push(format!("system:serviceaccounts:{namespace}"));
    }
    groups.push("system:authenticated".into());
    groups
}

/// Where a request lands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Match {
    pub flow_schema: String,
    pub priority_level: String,
    /// The user (ByUser) or namespace (ByNamespace); empty without a distinguisher, and on a level with one queue
    /// or none (exempt, reject), where kube-apiserver does not compute it.
    pub flow_distinguisher: String,
    pub matching_precedence: u32,
    /// True when no FlowSchema matched and kube-apiserver falls back to catch-all.
    pub fallback: bool,
    /// Schemas that point to a priority level that does not exist: kube-apiserver skips them.
    pub dangling_skipped: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    #[error("no FlowSchema matches and there is no catch-all FlowSchema to fall back to")]
    NoCatchAll,
}

/// `x` is in `list`, or `list` is exactly the wildcard (validation keeps a wildcard alone in its list).
fn contains(list: &[String], x: &str, wildcard: &str) -> bool {
    (list.len() == 1 && list[0] == wildcard) || list.iter().any(|y| y == x)
}

fn matches_subject(request: &Request, subject: &Subject) -> bool {
    match subject {
        Subject::User(name) => name == "*" || *name == request.user,
        Subject::Group(name) => name == "*" || request.groups.iter().any(|g| g == name),
        Subject::ServiceAccount { namespace, name } => {
            let Some(rest) = request.user.strip_prefix("system:serviceaccount:") else {
                return false;
            };
            if name == "*" {
                rest.strip_prefix(namespace.as_str())
                    .is_some_and(|r| r.starts_with(':'))
            } else {
                rest == format!("{namespace}:{name}")
            }
        }
        Subject::Other => false,
    }
}

fn matches_resource_rule(rule: &ResourceRule, verb: &str, target: &Target) -> bool {
    let Target::Resource {
        api_group,
        resource,
        subresource,
        namespace,
    } = target
    else {
        return false;
    };
    let resource = match subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.clone(),
    };
    contains(&rule.verbs, verb, "*")
        && contains(&rule.resources, &resource, "*")
        && contains(&rule.api_groups, api_group, "*")
        && match namespace {
            None => rule.cluster_scope,
            Some(ns) => contains(&rule.namespaces, ns, "*"),
        }
}

/// `*` matches every path; `/healthz` the path itself and everything under `/healthz/`; `/apis/*` everything under
/// `/apis/`.
fn matches_non_resource_url(urls: &[String], path: &str) -> bool {
    urls.iter().any(|rule| {
        if rule == "*" || rule == path {
            return true;
        }
        let mut prefix = rule.strip_suffix('*').unwrap_or(rule).to_string();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        path.starts_with(&prefix)
    })
}

fn matches_non_resource_rule(rule: &NonResourceRule, verb: &str, target: &Target) -> bool {
    let Target::NonResource { path } = target else {
        return false;
    };
    contains(&rule.verbs, verb, "*") && matches_non_resource_url(&rule.non_resource_urls, path)
}

fn matches_rules(request: &Request, rules: &PolicyRules) -> bool {
    if !rules.subjects.iter().any(|s| matches_subject(request, s)) {
        return false;
    }
    match request.target {
        Target::Resource { .. } => rules
            .resource_rules
            .iter()
            .any(|r| matches_resource_rule(r, &request.verb, &request.target)),
        Target::NonResource { .. } => rules
            .non_resource_rules
            .iter()
            .any(|r| matches_non_resource_rule(r, &request.verb, &request.target)),
    }
}

/// Whether any rule of the schema matches the request.
pub fn matches(schema: &FlowSchema, request: &Request) -> bool {
    schema.rules.iter().any(|r| matches_rules(request, r))
}

/// The schemas in the order kube-apiserver tries them: matchingPrecedence, then name.
pub fn in_matching_order(schemas: &[FlowSchema]) -> Vec<&FlowSchema> {
    let mut sorted: Vec<&FlowSchema> = schemas.iter().collect();
    sorted.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
    sorted
}

/// The FlowSchema, priority level and flow distinguisher `request` gets.
pub fn match_request(
    schemas: &[FlowSchema],
    levels: &[PriorityLevelConfig],
    request: &Request,
) -> Result<Match, MatchError> {
    let level = |name: &str| levels.iter().find(|l| l.name == name);
    let mut dangling = Vec::new();
    let mut chosen = None;
    for fs in in_matching_order(schemas) {
        if level(&fs.priority_level).is_none() {
            dangling.push(fs.name.clone());
            continue;
        }
        if matches(fs, request) {
            chosen = Some((fs, false));
            break;
        }
    }
    let (fs, fallback) = match chosen {
        Some(c) => c,
        None => (
            schemas
                .iter()
                .find(|s| s.name == "catch-all")
                .ok_or(MatchError::NoCatchAll)?,
            true,
        ),
    };
    // The distinguisher splits a level's queues; with one queue or none it is not computed.
    let queues = level(&fs.priority_level)
        .filter(|l| l.queuing)
        .and_then(|l| l.queues)
        .unwrap_or(0);
    let flow_distinguisher = if queues > 1 {
        match (fs.distinguisher, &request.target) {
            (Distinguisher::ByUser, _) => request.user.clone(),
            (Distinguisher::ByNamespace, Target::Resource { namespace, .. }) => {
                namespace.clone().unwrap_or_default()
            }
            _ => String::new(),
        }
    } else {
        String::new()
    };
    Ok(Match {
        flow_schema: fs.name.clone(),
        priority_level: fs.priority_level.clone(),
        flow_distinguisher,
        matching_precedence: fs.precedence,
        fallback,
        dangling_skipped: dangling,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn non_resource_urls_match_exactly_as_prefixes_or_everything() {
        let urls = strings(&["/healthz", "/apis/*"]);
        assert!(matches_non_resource_url(&urls, "/healthz"));
        assert!(matches_non_resource_url(&urls, "/healthz/etcd"));
        assert!(!matches_non_resource_url(&urls, "/healthzx"));
        assert!(matches_non_resource_url(&urls, "/apis/apps"));
        assert!(!matches_non_resource_url(&urls, "/api/v1"));
        assert!(matches_non_resource_url(&strings(&["*"]), "/anything"));
    }

    #[test]
    fn service_account_subjects_match_by_namespace_and_name() {
        let sa = |ns: &str, name: &str| Subject::ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
        };
        let req = |user: &str| Request {
            user: user.into(),
            ..Default::default()
        };
        let kube_system = req("system:serviceaccount:kube-system:foo");
        assert!(matches_subject(&kube_system, &sa("kube-system", "*")));
        assert!(matches_subject(&kube_system, &sa("kube-system", "foo")));
        assert!(!matches_subject(&kube_system, &sa("kube-system", "bar")));
        // A namespace that only starts the same does not match.
        assert!(!matches_subject(
            &req("system:serviceaccount:kube-system-x:foo"),
            &sa("kube-system", "*")
        ));
        assert!(!matches_subject(&req("alice"), &sa("kube-system", "*")));
    }

    #[test]
    fn implied_groups_are_the_authenticators() {
        assert_eq!(
            implied_groups("system:anonymous"),
            ["system:unauthenticated"]
        );
        assert_eq!(implied_groups("alice"), ["system:authenticated"]);
        assert_eq!(
            implied_groups("system:serviceaccount:monitoring:agent"),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:monitoring",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn wildcards_stand_alone_and_cluster_scope_needs_the_flag() {
        let rule = ResourceRule {
            verbs: strings(&["*"]),
            api_groups: strings(&[""]),
            resources: strings(&["pods", "pods/log"]),
            cluster_scope: false,
            namespaces: strings(&["default"]),
        };
        let target = |sub: Option<&str>, ns: Option<&str>| Target::Resource {
            api_group: String::new(),
            resource: "pods".into(),
            subresource: sub.map(str::to_string),
            namespace: ns.map(str::to_string),
        };
        assert!(matches_resource_rule(
            &rule,
            "get",
            &target(None, Some("default"))
        ));
        assert!(matches_resource_rule(
            &rule,
            "get",
            &target(Some("log"), Some("default"))
        ));
        assert!(!matches_resource_rule(
            &rule,
            "get",
            &target(Some("exec"), Some("default"))
        ));
        assert!(!matches_resource_rule(&rule, "list", &target(None, None)));
        assert!(!matches_resource_rule(
            &rule,
            "get",
            &target(None, Some("other"))
        ));
    }
}
