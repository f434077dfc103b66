use super::*;
use crate::discovery;
use crate::objects;
use crate::store::Store;
use serde_json::{json, Value};

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
    assert!(limited(34, "v1").get("nominalConcurrencyShares").is_some());
    assert!(limited(34, "v1").get("assuredConcurrencyShares").is_none());
    assert!(limited(24, "v1beta1")
        .get("assuredConcurrencyShares")
        .is_some());
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
                let api = r.gvr.version;
                assert_eq!(
                    (
                        unknown_fields(v, api, r.kind, &o),
                        type_errors(v, api, r.kind, &o)
                    ),
                    (Vec::new(), Vec::new()),
                    "1.{minor} {o}"
                );
            }
        }
    }
}

#[test]
fn accept_chooses_json_or_protobuf_in_the_clients_order() {
    let with = |accept: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, accept.parse().unwrap());
        negotiate(&headers, &PROTOBUF)
    };
    assert_eq!(negotiate(&HeaderMap::new(), &PROTOBUF), Some(JSON));
    assert_eq!(with("application/json, */*"), Some(JSON));
    assert_eq!(with(PROTOBUF[0]), Some(PROTOBUF[0]));
    assert_eq!(
        with(&format!("{}, application/json", PROTOBUF[1])),
        Some(PROTOBUF[1])
    );
    assert_eq!(
        with(&format!("{};q=0, application/*", PROTOBUF[0])),
        Some(JSON)
    );
    assert_eq!(with("application/yaml"), None);
    assert_eq!(with("application/json;q=0"), None);
}

async fn get(v: KubeVersion, uri: &str, accept: Option<&str>) -> (u16, String, Vec<u8>) {
    use tower::ServiceExt;
    let mut req = axum::http::Request::get(uri);
    if let Some(accept) = accept {
        req = req.header(header::ACCEPT, accept);
    }
    let resp = routes(v)
        .oneshot(req.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let media = resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, media, body.to_vec())
}

#[tokio::test]
async fn the_index_leads_to_every_document_and_406_answers_what_is_not_served() {
    let v = KubeVersion::new(29, 0);
    let (status, media, body) = get(v, "/openapi/v3", None).await;
    assert_eq!((status, media.as_str()), (200, JSON));
    let index: Value = serde_json::from_slice(&body).unwrap();
    let mut paths: Vec<&String> = index["paths"].as_object().unwrap().keys().collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "api/v1",
            "apis/authentication.k8s.io/v1",
            "apis/authorization.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
            "apis/discovery.k8s.io/v1",
            "apis/flowcontrol.apiserver.k8s.io/v1",
            "apis/flowcontrol.apiserver.k8s.io/v1beta3",
        ]
    );
    // The hash is the document's: another release's documents are at other URLs.
    let (_, _, other) = get(KubeVersion::new(31, 0), "/openapi/v3", None).await;
    let other: Value = serde_json::from_slice(&other).unwrap();
    for (path, entry) in index["paths"].as_object().unwrap() {
        let url = entry["serverRelativeURL"].as_str().unwrap();
        let (status, _, body) = get(v, url, Some("application/json")).await;
        assert_eq!(status, 200, "{url}");
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["openapi"], "3.0.0");
        assert!(url.starts_with(&format!("/openapi/v3/{path}?hash=")));
        assert_ne!(other["paths"][path]["serverRelativeURL"], url);
    }
    let (status, media, body) = get(
        v,
        "/openapi/v3/apis/flowcontrol.apiserver.k8s.io/v1",
        Some("application/yaml"),
    )
    .await;
    assert_eq!((status, media.as_str()), (406, JSON));
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("NotAcceptable"))
    );
    assert_eq!(get(v, "/openapi/v3/apis/apps/v1", None).await.0, 404);
    let (status, media, body) = get(v, "/openapi/v2", Some(PROTOBUF[0])).await;
    assert_eq!((status, media.as_str()), (200, PROTOBUF[1]));
    assert_eq!(body, proto::document(&documents::v2(v)));
    let (status, media, body) = get(v, "/openapi/v2", Some("*/*")).await;
    assert_eq!((status, media.as_str()), (200, JSON));
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["swagger"],
        "2.0"
    );
}

/// A protobuf message's fields as they are on the wire, for the tests: `(number, varint or bytes)`; panics on what
/// the encoder never writes.
fn fields(mut buf: &[u8]) -> Vec<(u32, Result<u64, &[u8]>)> {
    fn varint(buf: &mut &[u8]) -> u64 {
        let mut v = 0;
        for shift in (0..64).step_by(7) {
            let b = buf[0];
            *buf = &buf[1..];
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return v;
            }
        }
        panic!("varint too long")
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf);
        let field = u32::try_from(key >> 3).unwrap();
        match key & 7 {
            0 => out.push((field, Ok(varint(&mut buf)))),
            2 => {
                let len = usize::try_from(varint(&mut buf)).unwrap();
                out.push((field, Err(&buf[..len])));
                buf = &buf[len..];
            }
            wire => panic!("wire type {wire}"),
        }
    }
    out
}

/// The length-delimited fields numbered `n`.
fn all(msg: &[u8], n: u32) -> Vec<&[u8]> {
    fields(msg)
        .into_iter()
        .filter_map(|(f, v)| (f == n).then_some(v.err()).flatten())
        .collect()
}

fn one(msg: &[u8], n: u32) -> &[u8] {
    let found = all(msg, n);
    assert_eq!(found.len(), 1, "field {n}");
    found[0]
}

fn text(msg: &[u8], n: u32) -> &str {
    std::str::from_utf8(one(msg, n)).unwrap()
}

/// The value of the `Named*` pair called `name` among the fields `n`.
fn named<'a>(msg: &'a [u8], n: u32, name: &str) -> &'a [u8] {
    all(msg, n)
        .into_iter()
        .find(|pair| text(pair, 1) == name)
        .map(|pair| one(pair, 2))
        .unwrap_or_else(|| panic!("no {name}"))
}

/// Read back with gnostic's field numbers (openapiv2/OpenAPIv2.proto), the protobuf says what the JSON says.
#[test]
fn the_protobuf_document_decodes_to_the_json_one() {
    let v = KubeVersion::new(34, 0);
    let json = documents::v2(v);
    let doc = proto::document(&json);
    assert_eq!(text(&doc, 1), "2.0");
    assert_eq!(text(one(&doc, 2), 1), "Kubernetes");
    let definitions = one(&doc, 9);
    assert_eq!(
        all(definitions, 1).len(),
        json["definitions"].as_object().unwrap().len()
    );
    assert_eq!(
        all(one(&doc, 8), 2).len(),
        json["paths"].as_object().unwrap().len()
    );

    let fs = named(definitions, 1, "io.k8s.api.flowcontrol.v1.FlowSchema");
    let gvk = named(fs, 31, "x-kubernetes-group-version-kind");
    let yaml: Value = serde_saphyr::from_str(text(gvk, 2)).unwrap();
    assert_eq!(
        yaml,
        json!([{"group": "flowcontrol.apiserver.k8s.io", "kind": "FlowSchema", "version": "v1"}])
    );
    let spec = named(one(fs, 25), 1, "spec");
    assert_eq!(
        text(spec, 1),
        "#/definitions/io.k8s.api.flowcontrol.v1.FlowSchemaSpec"
    );
    let limited = named(
        definitions,
        1,
        "io.k8s.api.flowcontrol.v1.LimitedPriorityLevelConfiguration",
    );
    let shares = named(one(limited, 25), 1, "nominalConcurrencyShares");
    assert_eq!(
        (text(one(shares, 22), 1), text(shares, 2)),
        ("integer", "int32")
    );
    let conditions = named(
        one(
            named(definitions, 1, "io.k8s.api.flowcontrol.v1.FlowSchemaStatus"),
            25,
        ),
        1,
        "conditions",
    );
    assert_eq!(text(one(conditions, 22), 1), "array");
    assert_eq!(
        text(one(one(conditions, 23), 1), 1),
        "#/definitions/io.k8s.api.flowcontrol.v1.FlowSchemaCondition"
    );
    assert_eq!(
        text(named(conditions, 31, "x-kubernetes-list-type"), 2),
        "\"map\""
    );
    let labels = named(
        one(
            named(
                definitions,
                1,
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            ),
            25,
        ),
        1,
        "labels",
    );
    assert_eq!(text(one(one(one(labels, 21), 1), 22), 1), "string");

    // The PATCH of a FlowSchema: its query parameters (ParametersItem > Parameter > NonBodyParameter > query
    // sub-schema) and its body (> BodyParameter).
    let item = named(
        one(&doc, 8),
        2,
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}",
    );
    let patch = one(item, 8);
    assert_eq!(text(patch, 5), "patchFlowcontrolApiserverV1FlowSchema");
    let params: Vec<&[u8]> = all(patch, 8).into_iter().map(|p| one(p, 1)).collect();
    let query: Vec<&str> = params
        .iter()
        .flat_map(|p| all(p, 2))
        .map(|non_body| text(one(non_body, 3), 4))
        .collect();
    assert!(
        query.contains(&"fieldValidation") && query.contains(&"fieldManager"),
        "{query:?}"
    );
    let body = params.iter().flat_map(|p| all(p, 1)).next().unwrap();
    assert_eq!(
        text(one(body, 5), 1),
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    assert!(all(patch, 7)
        .iter()
        .any(|c| *c == b"application/strategic-merge-patch+json"));
    // The path's own parameter, `name`, is a path sub-schema (NonBodyParameter field 4).
    assert_eq!(text(one(one(one(one(item, 9), 1), 2), 4), 4), "name");
    let action = named(patch, 13, "x-kubernetes-action");
    assert_eq!(text(action, 2), "\"patch\"");
    let ok = named(one(patch, 9), 1, "200");
    assert_eq!(
        text(one(one(one(ok, 1), 2), 1), 1),
        "#/definitions/io.k8s.api.flowcontrol.v1.FlowSchema"
    );
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
            let v = KubeVersion::new(33, 0);
            assert_eq!(
                (
                    unknown_fields(v, api, kind, o),
                    type_errors(v, api, kind, o)
                ),
                (Vec::new(), Vec::new()),
                "{o}"
            );
        }
    }
}

#[test]
fn values_of_the_wrong_type_are_named_as_gos_decoder_names_them() {
    let v = KubeVersion::new(34, 0);
    let fs = json!({
        "metadata": {"name": "x", "labels": {"a": 1}, "generation": 2, "creationTimestamp": 5},
        "spec": {"matchingPrecedence": "high", "priorityLevelConfiguration": {"name": "p"},
            "distinguisherMethod": null,
            "rules": [{"subjects": [{"kind": "User", "user": "alice"}], "resourceRules": "all"}, "none"]},
    });
    let at = |s: &str, field: &str, ty: &str| {
        format!("json: cannot unmarshal {s} into Go struct field {field} of type {ty}")
    };
    assert_eq!(
        type_errors(v, "v1", "FlowSchema", &fs),
        [
            at("number", "ObjectMeta.metadata.creationTimestamp", "v1.Time"),
            at("number", "ObjectMeta.metadata.labels", "string"),
            at("string", "FlowSchemaSpec.spec.matchingPrecedence", "int32"),
            at(
                "string",
                "PolicyRulesWithSubjects.spec.rules.resourceRules",
                "[]v1.ResourcePolicyRule"
            ),
            at(
                "string",
                "Subject.spec.rules.subjects.user",
                "v1.UserSubject"
            ),
            at(
                "string",
                "FlowSchemaSpec.spec.rules",
                "v1.PolicyRulesWithSubjects"
            ),
        ]
    );
    assert!(unknown_fields(v, "v1", "FlowSchema", &fs).is_empty());
    let plc = json!({"spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 2.5, "lendablePercent": 3000000000_i64}}});
    assert_eq!(
        type_errors(
            v,
            "flowcontrol.apiserver.k8s.io/v1",
            "PriorityLevelConfiguration",
            &plc
        ),
        [
            at(
                "number 3000000000",
                "LimitedPriorityLevelConfiguration.spec.limited.lendablePercent",
                "int32"
            ),
            at(
                "number 2.5",
                "LimitedPriorityLevelConfiguration.spec.limited.nominalConcurrencyShares",
                "int32"
            ),
        ]
    );
}
