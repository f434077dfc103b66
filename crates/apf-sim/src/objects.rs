//! The objects a simulated cluster starts with and maintains, in the JSON of the real API: the default
//! FlowSchemas and PriorityLevelConfigurations of the version (in each served API version), the namespaces, and
//! the `kubernetes` Endpoints and EndpointSlices naming every replica, as kube-apiserver's endpoint reconciler
//! writes them (kubernetes/kubernetes pkg/controlplane/reconcilers).

use super::discovery::{ENDPOINTS, ENDPOINT_SLICES, NAMESPACES};
use super::store::{Gvr, ObjectKey, Store};
use apf::defaults::{default_flow_schemas, default_priority_levels};
use apf::endpoints::{self, FLOWCONTROL_GROUP};
use apf::KubeVersion;
use serde_json::{json, Value};
use std::net::SocketAddr;

/// Now, as an object's `creationTimestamp` spells it: objects that exist from the start were created when the
/// cluster started (kubectl's AGE column counts from then).
pub(super) fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
/// The label that ties an EndpointSlice to its Service (discovery.k8s.io/v1 `LabelServiceName`).
pub(super) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The Service whose endpoints are the apiservers.
const KUBERNETES: &str = "kubernetes";
const DEFAULT_NAMESPACE: &str = "default";
/// The port name the reconciler gives the apiservers' port.
const PORT_NAME: &str = "https";

/// The store's key of an object.
pub(super) fn key(gvr: Gvr, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        gvr,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// Writes the objects every cluster of `v` has from the start: namespaces and the default flowcontrol objects.
pub(super) fn seed(store: &Store, v: KubeVersion) {
    let created = now();
    for ns in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        let object = json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                "name": ns,
                "uid": uid("Namespace", ns),
                "creationTimestamp": created,
                "labels": {"kubernetes.io/metadata.name": ns},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        store.put(key(NAMESPACES, "", ns), object);
    }
    write_defaults(store, v, &created, |_, _| true);
}

/// Writes the default object `name` of `resource` (flowschemas or prioritylevelconfigurations) again, in every API
/// version `v` serves: what kube-apiserver does when a mandatory one is deleted.
pub(super) fn restore_default(store: &Store, v: KubeVersion, resource: &str, name: &str) {
    write_defaults(store, v, &now(), |r, n| r == resource && n == name);
}

/// Writes the default flowcontrol objects of `v` that `wanted(resource, name)` accepts, in each served API version.
fn write_defaults(
    store: &Store,
    v: KubeVersion,
    created: &str,
    wanted: impl Fn(&str, &str) -> bool,
) {
    for r in super::discovery::resources(v)
        .iter()
        .filter(|r| r.gvr.group == FLOWCONTROL_GROUP)
    {
        for mut object in flowcontrol_objects(v, r.gvr.version, r.gvr.resource, created) {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if !wanted(r.gvr.resource, &name) {
                continue;
            }
            if let Some(obj) = object.as_object_mut() {
                obj.insert("kind".into(), json!(r.kind));
                obj.insert("apiVersion".into(), json!(r.api_version()));
            }
            store.put(key(r.gvr, "", &name), object);
        }
    }
}

/// The flowcontrol resources of `v` in its preferred (newest) API version: where APF reads its configuration.
pub(super) fn preferred_flowcontrol(v: KubeVersion) -> Option<(Gvr, Gvr)> {
    let api = *endpoints::served_api_versions(v).last()?;
    let gvr = |resource| {
        super::discovery::resources(v)
            .into_iter()
            .find(|r| {
                r.gvr.group == FLOWCONTROL_GROUP
                    && r.gvr.version == api
                    && r.gvr.resource == resource
            })
            .map(|r| r.gvr)
    };
    Some((
        gvr(endpoints::FLOW_SCHEMAS)?,
        gvr(endpoints::PRIORITY_LEVEL_CONFIGURATIONS)?,
    ))
}

/// The FlowSchemas and PriorityLevelConfigurations in `store`, as APF reads them: the default levels in their
/// definition order (the order metrics and old dumps list them in), then the others by name. An object that does
/// not read as its kind (writes are validated, so none should) is left out with a warning.
pub(super) fn configuration(
    store: &Store,
    v: KubeVersion,
) -> (Vec<apf::FlowSchema>, Vec<apf::PriorityLevelConfig>) {
    let Some((fs_gvr, plc_gvr)) = preferred_flowcontrol(v) else {
        return (Vec::new(), Vec::new());
    };
    let read = |gvr: Gvr| -> Vec<Vec<u8>> {
        store
            .list(gvr, None)
            .0
            .into_iter()
            .map(|o| serde_json::to_vec(&json!({"items": [o]})).unwrap_or_default())
            .collect()
    };
    let mut schemas = Vec::new();
    for item in read(fs_gvr) {
        match apf::model::parse_flow_schemas(&item) {
            Ok(mut list) => schemas.append(&mut list),
            Err(e) => {
                tracing::warn!(error = %e, "a stored FlowSchema does not read as one; left out")
            }
        }
    }
    let mut levels = Vec::new();
    for item in read(plc_gvr) {
        match apf::model::parse_priority_level_configurations(&item) {
            Ok(mut list) => levels.append(&mut list),
            Err(e) => tracing::warn!(
                error = %e,
                "a stored PriorityLevelConfiguration does not read as one; left out"
            ),
        }
    }
    let defaults: Vec<String> = default_priority_levels(v)
        .into_iter()
        .map(|l| l.name)
        .collect();
    let rank = |name: &str| {
        defaults
            .iter()
            .position(|d| d == name)
            .unwrap_or(usize::MAX)
    };
    levels.sort_by(|a, b| (rank(&a.name), &a.name).cmp(&(rank(&b.name), &b.name)));
    (schemas, levels)
}

/// The configuration a cluster of `v` starts with: its default objects, read as [`configuration`] reads them.
pub fn default_configuration(
    v: KubeVersion,
) -> (Vec<apf::FlowSchema>, Vec<apf::PriorityLevelConfig>) {
    let store = Store::new();
    seed(&store, v);
    configuration(&store, v)
}

/// Writes the `kubernetes` Endpoints and EndpointSlices for the replicas at `addrs`, in order. An EndpointSlice
/// has one port list for all its endpoints, so replicas on different ports get one slice per port: `kubernetes`
/// for the first replica's port, `kubernetes-PORT` for the others (each labelled with the Service name, which is
/// how clients find them). Slices of ports no replica uses any more are deleted.
pub(super) fn write_endpoints(store: &Store, addrs: &[SocketAddr]) {
    // A rewrite keeps the stored creation time (`Store::put`): `created` is for a new object.
    let created = now();
    let mut by_port: Vec<(u16, Vec<&SocketAddr>)> = Vec::new();
    for a in addrs {
        match by_port.iter_mut().find(|(p, _)| *p == a.port()) {
            Some((_, group)) => group.push(a),
            None => by_port.push((a.port(), vec![a])),
        }
    }
    let subsets: Vec<Value> = by_port
        .iter()
        .map(|(port, group)| {
            json!({
                "addresses": group.iter().map(|a| json!({"ip": a.ip().to_string()})).collect::<Vec<_>>(),
                "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}],
            })
        })
        .collect();
    let mut endpoints = json!({
        "kind": "Endpoints",
        "apiVersion": "v1",
        "metadata": {
            "name": KUBERNETES,
            "namespace": DEFAULT_NAMESPACE,
            "uid": uid("Endpoints", KUBERNETES),
            "creationTimestamp": created,
            // The reconciler keeps the mirroring controller off this object: it writes the slices itself.
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
        },
    });
    if let (false, Some(obj)) = (subsets.is_empty(), endpoints.as_object_mut()) {
        obj.insert("subsets".into(), json!(subsets));
    }
    store.put(key(ENDPOINTS, DEFAULT_NAMESPACE, KUBERNETES), endpoints);

    let slice_name = |i: usize, port: u16| {
        if i == 0 {
            KUBERNETES.to_string()
        } else {
            format!("{KUBERNETES}-{port}")
        }
    };
    let mut wanted = Vec::new();
    // With no replica left the primary slice stays, empty, as the Service does.
    let groups: Vec<(u16, Vec<&SocketAddr>)> = if by_port.is_empty() {
        vec![(0, Vec::new())]
    } else {
        by_port
    };
    for (i, (port, group)) in groups.iter().enumerate() {
        let name = slice_name(i, *port);
        let family = match group.first() {
            Some(SocketAddr::V6(_)) => "IPv6",
            _ => "IPv4",
        };
        let ports = if group.is_empty() {
            json!([])
        } else {
            json!([{"name": PORT_NAME, "port": port, "protocol": "TCP"}])
        };
        let slice = json!({
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {
                "name": name,
                "namespace": DEFAULT_NAMESPACE,
                "uid": uid("EndpointSlice", &name),
                "creationTimestamp": created,
                "labels": {SERVICE_NAME_LABEL: KUBERNETES},
            },
            "addressType": family,
            "endpoints": group.iter().map(|a| json!({
                "addresses": [a.ip().to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
            })).collect::<Vec<_>>(),
            "ports": ports,
        });
        store.put(key(ENDPOINT_SLICES, DEFAULT_NAMESPACE, &name), slice);
        wanted.push(name);
    }
    let (slices, _) = store.list(ENDPOINT_SLICES, Some(DEFAULT_NAMESPACE));
    for s in slices {
        let Some(name) = s["metadata"]["name"].as_str() else {
            continue;
        };
        let ours = s["metadata"]["labels"][SERVICE_NAME_LABEL] == KUBERNETES;
        if ours && !wanted.iter().any(|w| w == name) {
            let _ = store.delete(&key(ENDPOINT_SLICES, DEFAULT_NAMESPACE, name));
        }
    }
}

/// A stable UID per object name.
pub(super) fn uid(kind: &str, name: &str) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in kind.bytes().chain(name.bytes()) {
        h ^= b as u128;
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    uuid_text(h)
}

/// 128 bits in the 8-4-4-4-12 form of a Kubernetes UID.
pub(super) fn uuid_text(v: u128) -> String {
    let s = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &s[0..8],
        &s[8..12],
        &s[12..16],
        &s[16..20],
        &s[20..32]
    )
}

/// The metadata of a default flowcontrol object: the store sets `resourceVersion`.
fn flowcontrol_metadata(kind: &str, name: &str, created: &str) -> Value {
    json!({
        "name": name,
        "uid": uid(kind, name),
        "generation": 1,
        "creationTimestamp": created,
        "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"},
    })
}

/// The rules of the default FlowSchemas (B), close enough for a reader of subjects and resources.
fn flow_schema_rules(name: &str) -> Value {
    let user = |n: &str| json!({"kind": "User", "user": {"name": n}});
    let group = |n: &str| json!({"kind": "Group", "group": {"name": n}});
    let sa = |ns: &str, n: &str| json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": ns, "name": n}});
    let all_resources = json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]);
    let all_urls = json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]);
    let leases = json!([{"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]);
    let everyone = vec![
        group("system:unauthenticated"),
        group("system:authenticated"),
    ];
    let (subjects, resource_rules, non_resource_rules) = match name {
        "exempt" => (vec![group("system:masters")], all_resources, all_urls),
        "probes" => (
            everyone,
            json!([]),
            json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]),
        ),
        "system-leader-election" => (
            vec![
                user("system:kube-controller-manager"),
                user("system:kube-scheduler"),
                sa("kube-system", "*"),
            ],
            leases,
            json!([]),
        ),
        // Endpoints and configmaps too, as the real object has them (k8s.io/apiserver bootstrap/default.go): with
        // leases alone system-leader-election, ahead of it, would match all it matches.
        "workload-leader-election" => (
            vec![sa("kube-system", "*")],
            json!([
                {"verbs": ["get", "create", "update"], "apiGroups": [""], "resources": ["endpoints", "configmaps"], "namespaces": ["*"]},
                {"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]},
            ]),
            json!([]),
        ),
        "endpoint-controller" => (
            vec![
                user("system:kube-controller-manager"),
                sa("kube-system", "endpoint-controller"),
            ],
            json!([{"verbs": ["get", "create", "update"], "apiGroups": [""], "resources": ["endpoints"], "namespaces": ["*"]}]),
            json!([]),
        ),
        "system-node-high" => (
            vec![group("system:nodes")],
            json!([{"verbs": ["*"], "apiGroups": ["", "coordination.k8s.io"], "resources": ["nodes", "nodes/status", "leases"], "clusterScope": true, "namespaces": ["*"]}]),
            json!([]),
        ),
        "system-nodes" => (vec![group("system:nodes")], all_resources, all_urls),
        "kube-controller-manager" => (
            vec![user("system:kube-controller-manager")],
            all_resources,
            all_urls,
        ),
        "kube-scheduler" => (vec![user("system:kube-scheduler")], all_resources, all_urls),
        "kube-system-service-accounts" => (vec![sa("kube-system", "*")], all_resources, all_urls),
        "service-accounts" => (
            vec![group("system:serviceaccounts")],
            all_resources,
            all_urls,
        ),
        _ => (everyone, all_resources, all_urls),
    };
    let mut rule = serde_json::Map::new();
    rule.insert("subjects".into(), Value::Array(subjects));
    if resource_rules.as_array().is_some_and(|a| !a.is_empty()) {
        rule.insert("resourceRules".into(), resource_rules);
    }
    if non_resource_rules.as_array().is_some_and(|a| !a.is_empty()) {
        rule.insert("nonResourceRules".into(), non_resource_rules);
    }
    json!([rule])
}

/// The default objects of `resource` (flowschemas or prioritylevelconfigurations) of Kubernetes `v` as API
/// version `api` spells them, without kind and apiVersion.
fn flowcontrol_objects(v: KubeVersion, api: &str, resource: &str, created: &str) -> Vec<Value> {
    match resource {
        endpoints::PRIORITY_LEVEL_CONFIGURATIONS => default_priority_levels(v)
                .iter()
                .map(|p| {
                    let spec = p.spec(api);
                    json!({
                        "metadata": flowcontrol_metadata("PriorityLevelConfiguration", &p.name, created),
                        "spec": spec,
                        "status": {"conditions": []},
                    })
                })
                .collect(),
        endpoints::FLOW_SCHEMAS => default_flow_schemas(v)
                .iter()
                .map(|f| {
                    let mut spec = json!({
                        "priorityLevelConfiguration": {"name": f.priority_level},
                        "matchingPrecedence": f.precedence,
                        "rules": flow_schema_rules(f.name),
                    });
                    if let (Some(d), Some(obj)) = (f.distinguisher.method_type(), spec.as_object_mut()) {
                        obj.insert("distinguisherMethod".into(), json!({"type": d}));
                    }
                    json!({
                        "metadata": flowcontrol_metadata("FlowSchema", f.name, created),
                        "spec": spec,
                        "status": {"conditions": [{"type": "Dangling", "status": "False", "reason": "Found"}]},
                    })
                })
                .collect(),
        _ => Vec::new(),
    }
}
