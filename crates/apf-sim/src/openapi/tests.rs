use super::*;
use crate::objects;
use crate::store::Store;
use serde_json::json;

fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v.as_str()) {
                    ("$ref", Some(r)) => out.push(r.to_string()),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

fn v3(v: KubeVersion, path: &str) -> Value {
    documents::group_versions(v)
        .into_iter()
        .find(|(p, _)| p == path)
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("no {path}"))
}

#[test]
fn one_document_per_served_group_version() {
    let paths: Vec<String> = documents::group_versions(KubeVersion::new(28, 0))
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        paths,
        [
            "api/v1",
            "apis/discovery.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
            "apis/authentication.k8s.io/v1",
            "apis/authorization.k8s.io/v1",
            "apis/flowcontrol.apiserver.k8s.io/v1beta3",
            "apis/flowcontrol.apiserver.k8s.io/v1beta2",
        ]
    );
}

#[test]
fn every_reference_resolves_in_both_dialects() {
    for minor in [20, 27, 28, 34] {
        let v = KubeVersion::new(minor, 0);
        for (path, doc) in documents::group_versions(v) {
            let mut all = Vec::new();
            refs(&doc, &mut all);
            assert!(!all.is_empty());
            for r in all {
                let name = r.trim_start_matches("#/components/schemas/");
                assert!(
                    doc["components"]["schemas"].get(name).is_some(),
                    "1.{minor} {path}: {r}"
                );
            }
        }
        let doc = documents::v2(v);
        let mut all = Vec::new();
        refs(&doc, &mut all);
        for r in all {
            let name = r.trim_start_matches("#/definitions/");
            assert!(doc["definitions"].get(name).is_some(), "1.{minor} v2: {r}");
        }
    }
}

#[test]
fn the_schemas_follow_the_release_and_the_api_version() {
    let limited = |minor: u32, api: &str| {
        let doc = v3(
            KubeVersion::new(minor, 0),
            &format!("apis/flowcontrol.apiserver.k8s.io/{api}"),
        );
        doc["components"]["schemas"]
            [format!("io.k8s.api.flowcontrol.{api}.LimitedPriorityLevelConfiguration")]
            ["properties"]
            .clone()
    };
    assert!(limited(28, "v1beta2")
        .get("assuredConcurrencyShares")
        .is_some());
    assert!(limited(28, "v1beta3")
        .get("nominalConcurrencyShares")
        .is_some());
    assert!(limited(34, "v1").get("lendablePercent").is_some());
    assert!(limited(25, "v1beta2").get("lendablePercent").is_none());
    let spec = |minor: u32, api: &str| {
        v3(
            KubeVersion::new(minor, 0),
            &format!("apis/flowcontrol.apiserver.k8s.io/{api}"),
        )["components"]["schemas"]
            [format!("io.k8s.api.flowcontrol.{api}.PriorityLevelConfigurationSpec")]["properties"]
            .clone()
    };
    assert!(spec(27, "v1beta3").get("exempt").is_none());
    assert!(spec(28, "v1beta3").get("exempt").is_some());
}

/// What kubectl looks for before it leaves validation to the server and merges with the schema.
#[test]
fn a_patch_of_a_kind_takes_field_validation_and_strategic_merge() {
    let doc = v3(
        KubeVersion::new(34, 0),
        "apis/flowcontrol.apiserver.k8s.io/v1",
    );
    let patch = &doc["paths"]["/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "flowcontrol.apiserver.k8s.io", "kind": "FlowSchema", "version": "v1"})
    );
    assert!(patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
    assert!(patch["requestBody"]["content"]
        .get("application/strategic-merge-patch+json")
        .is_some());
    let kind = &doc["components"]["schemas"]["io.k8s.api.flowcontrol.v1.FlowSchema"];
    assert_eq!(
        kind["x-kubernetes-group-version-kind"][0]["kind"],
        "FlowSchema"
    );
    // Leases take no delete: discovery's verbs decide.
    let leases = v3(KubeVersion::new(34, 0), "apis/coordination.k8s.io/v1");
    let item =
        &leases["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"];
    assert!(item.get("patch").is_some() && item.get("delete").is_none());
}

#[test]
fn unknown_fields_are_named_by_their_path() {
    let v = KubeVersion::new(34, 0);
    let object = json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": "x", "labelz": {}},
        "spec": {"priorityLevelConfiguration": {"name": "p"}, "colour": "red",
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "u", "uid": 1}}]}]},
    });
    assert_eq!(
        unknown_fields(v, "v1", "FlowSchema", &object),
        [
            "unknown field \"metadata.labelz\"",
            "unknown field \"spec.colour\"",
            "unknown field \"spec.rules[0].subjects[0].user.uid\"",
        ]
    );
    // v1beta2 has no nominalConcurrencyShares.
    let plc = json!({"spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5}}});
    assert_eq!(
        unknown_fields(
            KubeVersion::new(28, 0),
            "v1beta2",
            "PriorityLevelConfiguration",
            &plc
        ),
        ["unknown field \"spec.limited.nominalConcurrencyShares\""]
    );
    // Nor has any object a cluster starts with: the flowcontrol defaults, the namespaces, the `kubernetes`
    // Endpoints and EndpointSlices.
    for minor in [20, 26, 28, 29, 34] {
        let v = KubeVersion::new(minor, 0);
        let store = Store::new();
        objects::seed(&store, v);
        objects::write_endpoints(
            &store,
            &[
                "127.0.0.2:6443".parse().unwrap(),
                "127.0.0.3:6444".parse().unwrap(),
            ],
        );
        for r in discovery::resources(v).iter().filter(|r| r.allows("list")) {
            for o in store.list(r.gvr, None).0 {
                assert_eq!(
                    unknown_fields(v, r.gvr.version, r.kind, &o),
                    Vec::<String>::new(),
                    "1.{minor} {o}"
                );
            }
        }
    }
}

#[test]
fn json_is_served_unless_only_protobuf_is_accepted() {
    let mut headers = HeaderMap::new();
    assert!(accepts_json(&headers));
    headers.insert(header::ACCEPT, "application/json, */*".parse().unwrap());
    assert!(accepts_json(&headers));
    headers.insert(
        header::ACCEPT,
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
            .parse()
            .unwrap(),
    );
    assert!(!accepts_json(&headers));
}

#[test]
fn the_other_kinds_are_checked_down_to_what_the_simulator_models() {
    let v = KubeVersion::new(34, 0);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l", "namespace": "default"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2025-01-01T00:00:00.000000Z",
            "holder": "b"},
        "colour": "red",
    });
    assert_eq!(
        unknown_fields(v, "v1", "Lease", &lease),
        ["unknown field \"colour\"", "unknown field \"spec.holder\""]
    );
    // 1.31 brought coordinated leader election's fields.
    let coordinated = json!({"spec": {"strategy": "OldestEmulationVersion"}});
    assert!(unknown_fields(v, "v1", "Lease", &coordinated).is_empty());
    assert_eq!(
        unknown_fields(KubeVersion::new(30, 0), "v1", "Lease", &coordinated),
        ["unknown field \"spec.strategy\""]
    );
    let slice = json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"], "hints": {"forZones": []},
        "conditions": {"ready": true, "healthy": true}}]});
    assert_eq!(
        unknown_fields(v, "v1", "EndpointSlice", &slice),
        ["unknown field \"endpoints[0].conditions.healthy\""]
    );
}
/// The schemas know every field of kube-apiserver's own defaults (1.33, tests/fixtures).
#[test]
fn the_real_defaults_have_no_unknown_fields() {
    for name in ["flowschemas", "prioritylevelconfigurations"] {
        let path = format!(
            "{}/../../tests/fixtures/defaults-1.33-{name}.yaml.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()),
            &mut text,
        )
        .unwrap();
        let list: Value = serde_saphyr::from_str(&text).unwrap();
        let items = list["items"].as_array().unwrap();
        assert!(items.len() > 5, "{path}");
        for o in items {
            let kind = o["kind"].as_str().unwrap();
            let api = o["apiVersion"].as_str().unwrap();
            assert_eq!(
                unknown_fields(KubeVersion::new(33, 0), api, kind, o),
                Vec::<String>::new(),
                "{o}"
            );
        }
    }
}
