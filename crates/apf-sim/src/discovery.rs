//! The resources the simulated cluster serves and the discovery documents that announce them, as
//! kube-apiserver shapes them (Kubernetes API Concepts, "Discovery API"): `/api` (APIVersions), `/api/v1` and
//! `/apis/GROUP/VERSION` (APIResourceList), `/apis` (APIGroupList) and `/apis/GROUP` (APIGroup).
//!
//! Only the unaggregated documents are served: a client asking for aggregated discovery
//! (`application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`) gets plain `application/json` and
//! falls back to them, as client-go does against servers older than 1.26.

use super::store::Gvr;
use apf::endpoints::{
    served_api_versions, FLOWCONTROL_GROUP, FLOW_SCHEMAS, PRIORITY_LEVEL_CONFIGURATIONS,
};
use apf::KubeVersion;
use serde_json::{json, Value};

/// One served resource in one API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resource {
    pub gvr: Gvr,
    pub kind: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    /// What the simulator implements, as discovery announces it.
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
}

impl Resource {
    /// `discovery.k8s.io/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        group_version(self.gvr.group, self.gvr.version)
    }

    /// `endpointslices.discovery.k8s.io`, or `endpoints` for the core group: how errors name the resource.
    pub fn qualified_name(&self) -> String {
        if self.gvr.group.is_empty() {
            self.gvr.resource.to_string()
        } else {
            format!("{}.{}", self.gvr.resource, self.gvr.group)
        }
    }

    /// `FlowSchema.flowcontrol.apiserver.k8s.io`, or `Endpoints` for the core group: how validation errors name
    /// the kind.
    pub fn qualified_kind(&self) -> String {
        if self.gvr.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.gvr.group)
        }
    }

    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

const READ: &[&str] = &["get", "list", "watch"];
/// As discovery lists them: sorted.
const FLOWCONTROL_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
pub(super) const DISCOVERY_GROUP: &str = "discovery.k8s.io";
pub(super) const COORDINATION_GROUP: &str = "coordination.k8s.io";

pub(super) const NAMESPACES: Gvr = Gvr {
    group: "",
    version: "v1",
    resource: "namespaces",
};
pub(super) const ENDPOINTS: Gvr = Gvr {
    group: "",
    version: "v1",
    resource: "endpoints",
};
pub(super) const ENDPOINT_SLICES: Gvr = Gvr {
    group: DISCOVERY_GROUP,
    version: "v1",
    resource: "endpointslices",
};
pub(super) const TOKEN_REVIEWS: Gvr = Gvr {
    group: "authentication.k8s.io",
    version: "v1",
    resource: "tokenreviews",
};
pub(super) const SUBJECT_ACCESS_REVIEWS: Gvr = Gvr {
    group: "authorization.k8s.io",
    version: "v1",
    resource: "subjectaccessreviews",
};
pub(super) const LEASES: Gvr = Gvr {
    group: COORDINATION_GROUP,
    version: "v1",
    resource: "leases",
};

/// Every resource the cluster of Kubernetes `v` serves; the flowcontrol ones in each API version `v` serves.
pub(super) fn resources(v: KubeVersion) -> Vec<Resource> {
    let mut out = vec![
        Resource {
            gvr: NAMESPACES,
            kind: "Namespace",
            singular: "namespace",
            namespaced: false,
            verbs: READ,
            short_names: &["ns"],
        },
        Resource {
            gvr: ENDPOINTS,
            kind: "Endpoints",
            singular: "endpoints",
            namespaced: true,
            verbs: READ,
            short_names: &["ep"],
        },
        Resource {
            gvr: ENDPOINT_SLICES,
            kind: "EndpointSlice",
            singular: "endpointslice",
            namespaced: true,
            verbs: READ,
            short_names: &[],
        },
        Resource {
            gvr: LEASES,
            kind: "Lease",
            singular: "lease",
            namespaced: true,
            verbs: &["create", "get", "list", "patch", "watch"],
            short_names: &[],
        },
        // Reviews are answered, never stored ([`super::reviews`]).
        Resource {
            gvr: TOKEN_REVIEWS,
            kind: "TokenReview",
            singular: "tokenreview",
            namespaced: false,
            verbs: &["create"],
            short_names: &[],
        },
        Resource {
            gvr: SUBJECT_ACCESS_REVIEWS,
            kind: "SubjectAccessReview",
            singular: "subjectaccessreview",
            namespaced: false,
            verbs: &["create"],
            short_names: &[],
        },
    ];
    for version in flowcontrol_versions(v) {
        out.push(Resource {
            gvr: Gvr {
                group: FLOWCONTROL_GROUP,
                version,
                resource: FLOW_SCHEMAS,
            },
            kind: "FlowSchema",
            singular: "flowschema",
            namespaced: false,
            // Written as users write them: kubectl apply, replace, edit, delete.
            verbs: FLOWCONTROL_VERBS,
            short_names: &[],
        });
        out.push(Resource {
            gvr: Gvr {
                group: FLOWCONTROL_GROUP,
                version,
                resource: PRIORITY_LEVEL_CONFIGURATIONS,
            },
            kind: "PriorityLevelConfiguration",
            singular: "prioritylevelconfiguration",
            namespaced: false,
            verbs: FLOWCONTROL_VERBS,
            short_names: &[],
        });
    }
    out
}

/// The flowcontrol API versions of `v`, preferred (newest) first, as discovery orders them.
fn flowcontrol_versions(v: KubeVersion) -> Vec<&'static str> {
    let mut versions = served_api_versions(v);
    versions.reverse();
    versions
}

/// The resource of `resources` served at `/{group}/{version}/{resource}`, if any.
pub(super) fn find(
    resources: &[Resource],
    group: &str,
    version: &str,
    resource: &str,
) -> Option<Resource> {
    resources
        .iter()
        .copied()
        .find(|r| r.gvr.group == group && r.gvr.version == version && r.gvr.resource == resource)
}

/// `/api`: the core group's versions and where this replica is reached.
pub(super) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// The named groups (not the core group) with their versions, preferred first.
fn groups(v: KubeVersion) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in resources(v) {
        if r.gvr.group.is_empty() {
            continue;
        }
        match out.iter_mut().find(|(g, _)| *g == r.gvr.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.gvr.version) {
                    versions.push(r.gvr.version);
                }
            }
            None => out.push((r.gvr.group, vec![r.gvr.version])),
        }
    }
    out
}

fn group_document(group: &str, versions: &[&str]) -> Value {
    let gv =
        |version: &str| json!({"groupVersion": group_version(group, version), "version": version});
    json!({
        "name": group,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(|v| gv(v)).unwrap_or(Value::Null),
    })
}

/// `/apis`: an APIGroupList.
pub(super) fn api_group_list(v: KubeVersion) -> Value {
    let groups: Vec<Value> = groups(v)
        .iter()
        .map(|(g, versions)| group_document(g, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`: an APIGroup, or `None` for a group the cluster does not serve.
pub(super) fn api_group(v: KubeVersion, group: &str) -> Option<Value> {
    let (name, versions) = groups(v).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_document(name, &versions);
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("kind".into(), json!("APIGroup"));
        obj.insert("apiVersion".into(), json!("v1"));
    }
    Some(doc)
}

/// `/api/v1` or `/apis/{group}/{version}`: an APIResourceList, or `None` for a version the cluster does not serve.
pub(super) fn api_resource_list(v: KubeVersion, group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = resources(v)
        .iter()
        .filter(|r| r.gvr.group == group && r.gvr.version == version)
        .map(|r| {
            let mut doc = json!({
                "name": r.gvr.resource,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": r.verbs,
            });
            if let (false, Some(obj)) = (r.short_names.is_empty(), doc.as_object_mut()) {
                obj.insert("shortNames".into(), json!(r.short_names));
            }
            doc
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let mut doc = json!({
        "kind": "APIResourceList",
        "groupVersion": group_version(group, version),
        "resources": resources,
    });
    // kube-apiserver sets apiVersion on the named groups' lists only.
    if let (false, Some(obj)) = (group.is_empty(), doc.as_object_mut()) {
        obj.insert("apiVersion".into(), json!("v1"));
    }
    Some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_the_version() {
        let list = api_group_list(KubeVersion::new(29, 0));
        let fc = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == FLOWCONTROL_GROUP)
            .unwrap();
        assert_eq!(fc["preferredVersion"]["version"], "v1");
        assert_eq!(
            fc["versions"][1]["groupVersion"],
            "flowcontrol.apiserver.k8s.io/v1beta3"
        );
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|g| g["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                DISCOVERY_GROUP,
                COORDINATION_GROUP,
                "authentication.k8s.io",
                "authorization.k8s.io",
                FLOWCONTROL_GROUP
            ]
        );
        let old = api_group(KubeVersion::new(22, 0), FLOWCONTROL_GROUP).unwrap();
        assert_eq!(old["kind"], "APIGroup");
        assert_eq!(old["preferredVersion"]["version"], "v1beta1");
        assert!(api_group(KubeVersion::new(22, 0), "apps").is_none());
    }

    #[test]
    fn resource_lists_say_verbs_and_scope() {
        let v = KubeVersion::new(34, 0);
        let core = api_resource_list(v, "", "v1").unwrap();
        assert!(core.get("apiVersion").is_none());
        let ep = &core["resources"].as_array().unwrap()[1];
        assert_eq!(
            (ep["name"].as_str(), ep["namespaced"].as_bool()),
            (Some("endpoints"), Some(true))
        );
        let leases = api_resource_list(v, COORDINATION_GROUP, "v1").unwrap();
        assert_eq!(leases["apiVersion"], "v1");
        assert!(leases["resources"][0]["verbs"]
            .as_array()
            .unwrap()
            .contains(&json!("patch")));
        let fc = api_resource_list(v, FLOWCONTROL_GROUP, "v1").unwrap();
        assert_eq!(fc["resources"][0]["namespaced"], false);
        assert!(api_resource_list(v, FLOWCONTROL_GROUP, "v1beta3").is_none());
        let served = resources(v);
        assert!(find(&served, FLOWCONTROL_GROUP, "v1", FLOW_SCHEMAS).is_some());
        assert!(find(&served, FLOWCONTROL_GROUP, "v1beta2", FLOW_SCHEMAS).is_none());
    }
}
