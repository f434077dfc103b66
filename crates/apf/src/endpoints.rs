//! Where kube-apiserver serves APF's state and objects, and the RBAC rule a reader needs for each.

use super::KubeVersion;

/// APF's gauges and counters are among kube-apiserver's metrics.
pub const METRICS_PATH: &str = "/metrics";
/// `/metrics` asking for these families only (`name[]`, prometheus/client_golang `promhttp`, 1.24 and later); a
/// handler without the filter ignores the parameter and serves every family.
pub fn metrics_path(families: &[String]) -> String {
    let mut path = format!("{METRICS_PATH}?");
    for (i, family) in families.iter().enumerate() {
        if i > 0 {
            path.push('&');
        }
        path.push_str("name[]=");
        path.push_str(family);
    }
    path
}

/// A 403 on `/metrics` means this rule is missing.
pub const METRICS_RBAC_RULE: &str = "nonResourceURLs: [\"/metrics\"], verbs: [\"get\"]";

/// kube-apiserver's three APF debug dumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dump {
    PriorityLevels,
    Queues,
    Requests,
}

impl Dump {
    pub const fn path(self) -> &'static str {
        match self {
            Dump::PriorityLevels => "/debug/api_priority_and_fairness/dump_priority_levels",
            Dump::Queues => "/debug/api_priority_and_fairness/dump_queues",
            Dump::Requests => "/debug/api_priority_and_fairness/dump_requests",
        }
    }
}

/// The query parameter of `dump_requests` that adds each request's user, verb and resource (any non-empty value).
pub const REQUEST_DETAILS_PARAM: &str = "includeRequestDetails";

/// The path of `dump_requests`, with request details when asked for.
pub fn dump_requests_path(request_details: bool) -> String {
    if request_details {
        format!("{}?{REQUEST_DETAILS_PARAM}=1", Dump::Requests.path())
    } else {
        Dump::Requests.path().to_string()
    }
}

/// One rule covers all three dumps.
pub const DUMPS_RBAC_RULE: &str =
    "nonResourceURLs: [\"/debug/api_priority_and_fairness/*\"], verbs: [\"get\"]";

/// The API group of FlowSchemas and PriorityLevelConfigurations.
pub const FLOWCONTROL_GROUP: &str = "flowcontrol.apiserver.k8s.io";
pub const PRIORITY_LEVEL_CONFIGURATIONS: &str = "prioritylevelconfigurations";
pub const FLOW_SCHEMAS: &str = "flowschemas";
/// Reading the objects (from any served version) takes this rule.
pub const FLOWCONTROL_RBAC_RULE: &str = "apiGroups: [\"flowcontrol.apiserver.k8s.io\"], resources: [\"flowschemas\", \"prioritylevelconfigurations\"], verbs: [\"get\", \"list\", \"watch\"]";

/// The API versions whose objects `model` reads, newest first: a reader tries them in turn until one is served.
/// v1alpha1 is left out: only 1.18-1.20 serve it, and 1.20 serves v1beta1 as well.
pub const FLOWCONTROL_READ_VERSIONS: [&str; 4] = ["v1", "v1beta3", "v1beta2", "v1beta1"];

/// `/apis/flowcontrol.apiserver.k8s.io/{version}/{resource}`.
pub fn flowcontrol_path(version: &str, resource: &str) -> String {
    format!("/apis/{FLOWCONTROL_GROUP}/{version}/{resource}")
}

/// The watch of the objects at `list_path` from `resource_version` (its list's), as client-go's reflector asks for
/// it: bookmarks allowed (the server may send its progress, so that a watch started again resumes where it was),
/// ended by the server after `timeout_seconds` (then started again from the last version seen). The version is
/// opaque: escaped for the query.
pub fn watch_path(list_path: &str, resource_version: &str, timeout_seconds: u64) -> String {
    let mut version = String::with_capacity(resource_version.len());
    for b in resource_version.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            version.push(char::from(b));
        } else {
            version.push_str(&format!("%{b:02X}"));
        }
    }
    format!(
        "{list_path}?watch=true&resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}"
    )
}

/// The `apiVersion` of an object of that API version, e.g. `flowcontrol.apiserver.k8s.io/v1`.
pub fn flowcontrol_api_version(version: &str) -> String {
    format!("{FLOWCONTROL_GROUP}/{version}")
}

/// The `flowcontrol.apiserver.k8s.io` API versions a Kubernetes version serves (k8s.io/api `flowcontrol/` lifecycle; the Deprecated API Migration Guide).
pub fn served_api_versions(v: KubeVersion) -> Vec<&'static str> {
    let m = v.minor;
    let mut out = Vec::new();
    if (18..=20).contains(&m) {
        out.push("v1alpha1");
    }
    if (20..=25).contains(&m) {
        out.push("v1beta1");
    }
    if (23..=28).contains(&m) {
        out.push("v1beta2");
    }
    if (26..=31).contains(&m) {
        out.push("v1beta3");
    }
    if m >= 29 {
        out.push("v1");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_starts_at_its_list_version_escaped() {
        assert_eq!(
            watch_path(&flowcontrol_path("v1", FLOW_SCHEMAS), "123", 290),
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas?watch=true&resourceVersion=123\
             &allowWatchBookmarks=true&timeoutSeconds=290"
        );
        assert!(watch_path("/x", "a+b/c=", 1).contains("resourceVersion=a%2Bb%2Fc%3D&"));
    }

    #[test]
    fn api_versions() {
        assert_eq!(
            served_api_versions(KubeVersion::new(20, 0)),
            vec!["v1alpha1", "v1beta1"]
        );
        assert_eq!(
            served_api_versions(KubeVersion::new(29, 0)),
            vec!["v1beta3", "v1"]
        );
        assert_eq!(served_api_versions(KubeVersion::new(35, 0)), vec!["v1"]);
    }

    #[test]
    fn every_known_version_serves_one_that_is_read() {
        for minor in KubeVersion::MIN_MINOR..=KubeVersion::MAX_MINOR {
            let served = served_api_versions(KubeVersion::new(minor, 0));
            assert!(
                FLOWCONTROL_READ_VERSIONS.iter().any(|r| served.contains(r)),
                "1.{minor}"
            );
        }
    }

    #[test]
    fn paths_and_rules_agree() {
        assert_eq!(
            flowcontrol_path("v1", PRIORITY_LEVEL_CONFIGURATIONS),
            "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations"
        );
        assert_eq!(
            dump_requests_path(true),
            "/debug/api_priority_and_fairness/dump_requests?includeRequestDetails=1"
        );
        // The dumps' rule covers every dump path; the objects' rule names the group and both resources.
        let prefix = DUMPS_RBAC_RULE
            .split('"')
            .nth(1)
            .and_then(|p| p.strip_suffix('*'))
            .unwrap();
        for d in [Dump::PriorityLevels, Dump::Queues, Dump::Requests] {
            assert!(d.path().starts_with(prefix), "{d:?}");
        }
        for word in [
            FLOWCONTROL_GROUP,
            PRIORITY_LEVEL_CONFIGURATIONS,
            FLOW_SCHEMAS,
        ] {
            assert!(FLOWCONTROL_RBAC_RULE.contains(word), "{word}");
        }
        assert!(METRICS_RBAC_RULE.contains(METRICS_PATH));
    }
}
