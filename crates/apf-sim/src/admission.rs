//! What kube-apiserver fills in and checks on a write of a FlowSchema or a PriorityLevelConfiguration
//! (kubernetes/kubernetes `pkg/apis/flowcontrol/v1/defaults.go` and `pkg/apis/flowcontrol/validation/validation.go`),
//! and what one write means for the other API versions: it is one object, served in each of them.
use super::discovery::Resource;
use super::objects;
use super::status::ApiError;
use super::store::Store;
use apf::endpoints::{self, FLOWCONTROL_GROUP};
use apf::KubeVersion;
use serde_json::{json, Map, Value};

/// The objects kube-apiserver keeps in existence: deleted, they are created again at once (its configuration
/// ensurer, `pkg/registry/flowcontrol/ensurer`).
const MANDATORY: [&str; 2] = ["exempt", "catch-all"];

/// Whether writes of `r` go through these rules.
pub(super) fn applies(r: &Resource) -> bool {
    r.gvr.group == FLOWCONTROL_GROUP
}

/// `fieldValidation`: what a write does with fields the kind does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FieldValidation {
    Ignore,
    /// The server's default: the write succeeds with a warning per unknown field.
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::BadRequest(format!(
                "fieldValidation: invalid directive {other:?}: must be one of Ignore, Warn, Strict"
            ))),
        }
    }
}

/// The rules of a write of `r` on Kubernetes `v`: unknown fields (per `validation`), defaults, the generation, and
/// validation. Returns the warnings.
pub(super) fn admit(
    v: KubeVersion,
    r: &Resource,
    validation: FieldValidation,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Vec<String>, ApiError> {
    // Its JSON decoder refuses a value of the wrong type, whatever fieldValidation says.
    if let Some(e) = super::openapi::type_errors(v, r.gvr.version, r.kind, object)
        .into_iter()
        .next()
    {
        return Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            r.kind, r.gvr.version, r.kind
        )));
    }
    let mut warnings = Vec::new();
    if validation != FieldValidation::Ignore {
        let unknown = super::openapi::unknown_fields(v, r.gvr.version, r.kind, object);
        if validation == FieldValidation::Strict && !unknown.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                r.kind,
                r.gvr.version,
                r.kind,
                unknown.join(", ")
            )));
        }
        warnings = unknown;
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match r.kind {
        "FlowSchema" => default_flow_schema(object),
        _ => default_priority_level(v, r.gvr.version, object),
    }
    // The generation counts changes of the spec; the status is the server's, not the writer's.
    let generation = match old {
        None => 1,
        Some(old) => {
            let before = old["metadata"]["generation"].as_i64().unwrap_or(1);
            if old.get("spec") == object.get("spec") {
                before
            } else {
                before + 1
            }
        }
    };
    if let Some(o) = object.as_object_mut() {
        let status = old
            .and_then(|o| o.get("status").cloned())
            .unwrap_or_else(|| json!({}));
        o.insert("status".into(), status);
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("generation".into(), json!(generation));
        }
    }
    let errors = match r.kind {
        "FlowSchema" => validate_flow_schema(&object["spec"]),
        _ => validate_priority_level(v, r.gvr.version, &object["spec"]),
    };
    if !errors.is_empty() {
        let list = if errors.len() == 1 {
            errors[0].clone()
        } else {
            format!("[{}]", errors.join(", "))
        };
        return Err(ApiError::Invalid(format!(
            "{} \"{name}\" is invalid: {list}",
            r.qualified_kind()
        )));
    }
    Ok(warnings)
}

fn object_at<'a>(parent: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let o = parent.as_object_mut()?;
    o.entry(key).or_insert_with(|| json!({})).as_object_mut()
}

fn default_field(map: &mut Map<String, Value>, key: &str, value: u64) {
    if map
        .get(key)
        .is_none_or(|v| v.is_null() || v.as_u64() == Some(0))
    {
        map.insert(key.into(), json!(value));
    }
}

fn default_flow_schema(object: &mut Value) {
    if let Some(spec) = object_at(object, "spec") {
        default_field(spec, "matchingPrecedence", 1000);
    }
}

/// `nominalConcurrencyShares` from v1beta3, `assuredConcurrencyShares` before.
fn shares_key(api: &str) -> &'static str {
    if api == "v1" || api == "v1beta3" {
        "nominalConcurrencyShares"
    } else {
        "assuredConcurrencyShares"
    }
}

fn default_priority_level(v: KubeVersion, api: &str, object: &mut Value) {
    let Some(spec) = object_at(object, "spec") else {
        return;
    };
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or_default();
    if kind == "Exempt" && v.at_least(28) {
        if let Some(exempt) = spec
            .entry("exempt")
            .or_insert_with(|| json!({}))
            .as_object_mut()
        {
            for key in ["nominalConcurrencyShares", "lendablePercent"] {
                exempt.entry(key).or_insert(json!(0));
            }
        }
    }
    let Some(limited) = spec.get_mut("limited").and_then(Value::as_object_mut) else {
        return;
    };
    // v1 took 0 shares as a value of its own (1.29+); the older versions default 0 as unset.
    let key = shares_key(api);
    if api == "v1" {
        limited.entry(key).or_insert(json!(30));
    } else {
        default_field(limited, key, 30);
    }
    if v.at_least(26) {
        limited.entry("lendablePercent").or_insert(json!(0));
    }
    let Some(response) = limited
        .get_mut("limitResponse")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if response.get("type").and_then(Value::as_str) == Some("Queue") {
        if let Some(queuing) = response
            .entry("queuing")
            .or_insert_with(|| json!({}))
            .as_object_mut()
        {
            default_field(queuing, "queues", 64);
            default_field(queuing, "handSize", 8);
            default_field(queuing, "queueLengthLimit", 50);
        }
    }
}

fn required(errors: &mut Vec<String>, field: &str) {
    errors.push(format!("{field}: Required value"));
}

fn not_supported(errors: &mut Vec<String>, field: &str, got: &Value, allowed: &[&str]) {
    let quoted: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
    errors.push(format!(
        "{field}: Unsupported value: {got}: supported values: {}",
        quoted.join(", ")
    ));
}

fn non_empty_list(errors: &mut Vec<String>, value: &Value, field: &str) {
    if value.as_array().is_none_or(Vec::is_empty) {
        errors.push(format!("{field}: Required value: at least one is required"));
    }
}

fn validate_flow_schema(spec: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    if spec["priorityLevelConfiguration"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        required(&mut errors, "spec.priorityLevelConfiguration.name");
    }
    let precedence = &spec["matchingPrecedence"];
    if !precedence
        .as_u64()
        .is_some_and(|p| (1..=10_000).contains(&p))
    {
        errors.push(format!(
            "spec.matchingPrecedence: Invalid value: {precedence}: must be between 1 and 10000, inclusive"
        ));
    }
    if let Some(method) = spec.get("distinguisherMethod").filter(|m| !m.is_null()) {
        let t = &method["type"];
        if !matches!(t.as_str(), Some("ByUser" | "ByNamespace")) {
            not_supported(
                &mut errors,
                "spec.distinguisherMethod.type",
                t,
                &["ByNamespace", "ByUser"],
            );
        }
    }
    for (i, rule) in spec["rules"].as_array().into_iter().flatten().enumerate() {
        let at = format!("spec.rules[{i}]");
        non_empty_list(&mut errors, &rule["subjects"], &format!("{at}.subjects"));
        for (j, subject) in rule["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let field = format!("{at}.subjects[{j}]");
            let member = match subject["kind"].as_str() {
                Some("User") => subject["user"]["name"].as_str(),
                Some("Group") => subject["group"]["name"].as_str(),
                Some("ServiceAccount") => subject["serviceAccount"]["name"].as_str().filter(|_| {
                    subject["serviceAccount"]["namespace"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty())
                }),
                _ => {
                    not_supported(
                        &mut errors,
                        &format!("{field}.kind"),
                        &subject["kind"],
                        &["Group", "ServiceAccount", "User"],
                    );
                    continue;
                }
            };
            if member.is_none_or(str::is_empty) {
                required(&mut errors, &field);
            }
        }
        let resource_rules = rule["resourceRules"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let non_resource_rules = rule["nonResourceRules"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        if resource_rules.is_empty() && non_resource_rules.is_empty() {
            errors.push(format!(
                "{at}: Required value: at least one of resourceRules and nonResourceRules has to be non-empty"
            ));
        }
        for (j, rr) in resource_rules.iter().enumerate() {
            let field = format!("{at}.resourceRules[{j}]");
            for list in ["verbs", "apiGroups", "resources"] {
                non_empty_list(&mut errors, &rr[list], &format!("{field}.{list}"));
            }
            if rr["namespaces"].as_array().is_none_or(Vec::is_empty)
                && rr["clusterScope"] != json!(true)
            {
                errors.push(format!(
                    "{field}.namespaces: Required value: resource rules that are not cluster scoped must supply \
                     at least one namespace"
                ));
            }
        }
        for (j, nr) in non_resource_rules.iter().enumerate() {
            let field = format!("{at}.nonResourceRules[{j}]");
            for list in ["verbs", "nonResourceURLs"] {
                non_empty_list(&mut errors, &nr[list], &format!("{field}.{list}"));
            }
        }
    }
    errors
}

fn validate_priority_level(v: KubeVersion, api: &str, spec: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    match spec["type"].as_str() {
        Some("Exempt") => {
            if !spec["limited"].is_null() {
                errors
                    .push("spec.limited: Forbidden: must be nil if the type is not Limited".into());
            }
        }
        Some("Limited") => {
            let limited = &spec["limited"];
            if !limited.is_object() {
                errors.push(
                    "spec.limited: Required value: must not be empty when type is Limited".into(),
                );
                return errors;
            }
            let shares = &limited[shares_key(api)];
            let least = if api == "v1" { 0 } else { 1 };
            if shares.as_u64().is_none_or(|s| s < least) {
                errors.push(format!(
                    "spec.limited.{}: Invalid value: {shares}: must be {}",
                    shares_key(api),
                    if least == 0 {
                        "a non-negative integer"
                    } else {
                        "positive"
                    }
                ));
            }
            for key in ["lendablePercent", "borrowingLimitPercent"] {
                let value = &limited[key];
                if value.is_null() {
                    continue;
                }
                let max = if key == "lendablePercent" {
                    100
                } else {
                    u64::MAX
                };
                if !v.at_least(26) || value.as_u64().is_none_or(|p| p > max) {
                    errors.push(format!(
                        "spec.limited.{key}: Invalid value: {value}: must be {}",
                        if key == "lendablePercent" {
                            "between 0 and 100, inclusive"
                        } else {
                            "a non-negative integer"
                        }
                    ));
                }
            }
            let response = &limited["limitResponse"];
            match response["type"].as_str() {
                Some("Reject") => {
                    if !response["queuing"].is_null() {
                        errors.push(
                            "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited"
                                .into(),
                        );
                    }
                }
                Some("Queue") => {
                    let q = &response["queuing"];
                    let field = |name: &str| q[name].as_u64().unwrap_or(0);
                    let (queues, hand, length) = (
                        field("queues"),
                        field("handSize"),
                        field("queueLengthLimit"),
                    );
                    for (name, value) in [
                        ("queues", queues),
                        ("handSize", hand),
                        ("queueLengthLimit", length),
                    ] {
                        if value == 0 {
                            errors.push(format!(
                                "spec.limited.limitResponse.queuing.{name}: Invalid value: {}: must be positive",
                                q[name]
                            ));
                        }
                    }
                    if hand > queues {
                        errors.push(format!(
                            "spec.limited.limitResponse.queuing.handSize: Invalid value: {hand}: should not be \
                             greater than queues ({queues})"
                        ));
                    }
                }
                _ => not_supported(
                    &mut errors,
                    "spec.limited.limitResponse.type",
                    &response["type"],
                    &["Queue", "Reject"],
                ),
            }
        }
        _ => not_supported(
            &mut errors,
            "spec.type",
            &spec["type"],
            &["Exempt", "Limited"],
        ),
    }
    errors
}

/// `object` (as version `from` spells it) as version `to` spells it.
fn convert(object: &Value, kind: &str, from: &str, to: &str) -> Value {
    let mut out = object.clone();
    out["apiVersion"] = json!(endpoints::flowcontrol_api_version(to));
    if kind == "PriorityLevelConfiguration" && shares_key(from) != shares_key(to) {
        if let Some(limited) = out
            .pointer_mut("/spec/limited")
            .and_then(Value::as_object_mut)
        {
            if let Some(shares) = limited.remove(shares_key(from)) {
                limited.insert(shares_key(to).into(), shares);
            }
        }
    }
    out
}

/// After a write of `name` through `r`: the same object in every other API version the cluster serves, and a
/// mandatory object that was deleted created again.
pub(super) fn propagate(store: &Store, v: KubeVersion, r: &Resource, name: &str) {
    let written = store.get(&objects::key(r.gvr, "", name));
    for other in super::discovery::resources(v).into_iter().filter(|o| {
        o.gvr.group == FLOWCONTROL_GROUP && o.gvr.resource == r.gvr.resource && o.gvr != r.gvr
    }) {
        let key = objects::key(other.gvr, "", name);
        match &written {
            Some(object) => {
                store.put(
                    key,
                    convert(object, r.kind, r.gvr.version, other.gvr.version),
                );
            }
            None => {
                // Already gone in that version is the state a delete wants.
                let _ = store.delete(&key);
            }
        }
    }
    if written.is_none() && MANDATORY.contains(&name) {
        objects::restore_default(store, v, r.gvr.resource, name);
    }
}

#[cfg(test)]
mod tests {
    use super::super::api::{routes, ApiContext};
    use super::*;
    use axum::body::Body;
    use axum::http::{header, Method};
    use tokio_util::sync::CancellationToken;

    fn ctx(minor: u32) -> ApiContext {
        let v = KubeVersion::new(minor, 0);
        let c = ApiContext::new(Store::new(), v, None, CancellationToken::new());
        objects::seed(&c.store, v);
        c
    }

    async fn call(c: &ApiContext, method: Method, uri: &str, body: &str) -> (u16, Value) {
        use tower::ServiceExt;
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header(
                header::CONTENT_TYPE,
                "application/strategic-merge-patch+json",
            )
            .body(Body::from(body.to_string()))
            .unwrap();
        let resp = routes(c.clone()).oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    const PLCS: &str = "/apis/flowcontrol.apiserver.k8s.io/VERSION/prioritylevelconfigurations";
    const FSS: &str = "/apis/flowcontrol.apiserver.k8s.io/VERSION/flowschemas";

    fn at(path: &str, version: &str) -> String {
        path.replace("VERSION", version)
    }

    #[tokio::test]
    async fn a_level_written_in_one_version_is_served_defaulted_in_every_other() {
        let c = ctx(28);
        let body = r#"{"apiVersion":"flowcontrol.apiserver.k8s.io/v1beta3","kind":"PriorityLevelConfiguration",
            "metadata":{"name":"small"},"spec":{"type":"Limited","limited":{"nominalConcurrencyShares":5,
            "limitResponse":{"type":"Queue"}}}}"#;
        let (code, created) = call(&c, Method::POST, &at(PLCS, "v1beta3"), body).await;
        assert_eq!(code, 201, "{created}");
        assert_eq!(created["metadata"]["generation"], 1);
        let queuing = &created["spec"]["limited"]["limitResponse"]["queuing"];
        assert_eq!(
            (
                &queuing["queues"],
                &queuing["handSize"],
                &queuing["queueLengthLimit"]
            ),
            (&json!(64), &json!(8), &json!(50))
        );
        assert_eq!(created["spec"]["limited"]["lendablePercent"], 0);
        let (code, old) = call(
            &c,
            Method::GET,
            &format!("{}/small", at(PLCS, "v1beta2")),
            "",
        )
        .await;
        assert_eq!(code, 200);
        assert_eq!(old["apiVersion"], "flowcontrol.apiserver.k8s.io/v1beta2");
        assert_eq!(old["spec"]["limited"]["assuredConcurrencyShares"], 5);
        assert!(old["spec"]["limited"]
            .get("nominalConcurrencyShares")
            .is_none());
        assert_eq!(old["metadata"]["uid"], created["metadata"]["uid"]);

        // A patch through the old version changes the one object; the generation counts it.
        let (code, patched) = call(
            &c,
            Method::PATCH,
            &format!("{}/small", at(PLCS, "v1beta2")),
            r#"{"spec":{"limited":{"assuredConcurrencyShares":7}}}"#,
        )
        .await;
        assert_eq!(code, 200, "{patched}");
        assert_eq!(patched["metadata"]["generation"], 2);
        let (_, new) = call(
            &c,
            Method::GET,
            &format!("{}/small", at(PLCS, "v1beta3")),
            "",
        )
        .await;
        assert_eq!(new["spec"]["limited"]["nominalConcurrencyShares"], 7);

        // Deleted through one version, it is gone from all.
        let (code, status) = call(
            &c,
            Method::DELETE,
            &format!("{}/small", at(PLCS, "v1beta3")),
            "",
        )
        .await;
        assert_eq!((code, &status["status"]), (200, &json!("Success")));
        for version in ["v1beta2", "v1beta3"] {
            let (code, _) =
                call(&c, Method::GET, &format!("{}/small", at(PLCS, version)), "").await;
            assert_eq!(code, 404, "{version}");
        }
    }

    #[tokio::test]
    async fn invalid_objects_are_refused_with_the_field_and_the_rule() {
        let c = ctx(34);
        let plc = |queuing: &str| {
            format!(
                r#"{{"metadata":{{"name":"bad"}},"spec":{{"type":"Limited","limited":{{"limitResponse":
                {{"type":"Queue","queuing":{queuing}}}}}}}}}"#
            )
        };
        let (code, e) = call(
            &c,
            Method::POST,
            &at(PLCS, "v1"),
            &plc(r#"{"queues":4,"handSize":8}"#),
        )
        .await;
        assert_eq!(code, 422, "{e}");
        assert_eq!(e["reason"], "Invalid");
        assert_eq!(
            e["message"],
            "PriorityLevelConfiguration.flowcontrol.apiserver.k8s.io \"bad\" is invalid: \
             spec.limited.limitResponse.queuing.handSize: Invalid value: 8: should not be greater than queues (4)"
        );
        let (code, e) = call(
            &c,
            Method::POST,
            &at(PLCS, "v1"),
            r#"{"metadata":{"name":"bad"},"spec":{"type":"Unlimited"}}"#,
        )
        .await;
        assert_eq!(code, 422);
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("spec.type: Unsupported value: \"Unlimited\""),
            "{e}"
        );

        let fs = |precedence: u32| {
            format!(
                r#"{{"metadata":{{"name":"f"}},"spec":{{"priorityLevelConfiguration":{{"name":"workload-low"}},
                "matchingPrecedence":{precedence},"rules":[{{"subjects":[{{"kind":"User","user":{{"name":"bob"}}}}],
                "resourceRules":[{{"verbs":["*"],"apiGroups":["*"],"resources":["*"]}}]}}]}}}}"#
            )
        };
        let (code, e) = call(&c, Method::POST, &at(FSS, "v1"), &fs(20000)).await;
        assert_eq!(code, 422);
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains("spec.matchingPrecedence: Invalid value: 20000"),
            "{message}"
        );
        assert!(
            message.contains("resourceRules[0].namespaces: Required value"),
            "{message}"
        );
        assert!(
            message.starts_with("FlowSchema.flowcontrol.apiserver.k8s.io \"f\" is invalid: ["),
            "{message}"
        );
        let (code, e) = call(
            &c,
            Method::POST,
            &format!("{}?fieldValidation=Sometimes", at(FSS, "v1")),
            &fs(100),
        )
        .await;
        assert_eq!(code, 400, "{e}");
        // A value of the wrong type is refused whatever fieldValidation says, as Go's JSON decoder refuses it.
        let (code, e) = call(
            &c,
            Method::POST,
            &format!("{}?fieldValidation=Ignore", at(FSS, "v1")),
            &fs(100).replace("100", "\"100\""),
        )
        .await;
        assert_eq!(
            (code, e["message"].as_str().unwrap_or_default()),
            (
                400,
                "FlowSchema in version \"v1\" cannot be handled as a FlowSchema: json: cannot unmarshal string \
                 into Go struct field FlowSchemaSpec.spec.matchingPrecedence of type int32"
            )
        );
    }

    #[tokio::test]
    async fn a_put_replaces_and_a_deleted_mandatory_object_comes_back() {
        let c = ctx(34);
        let url = format!("{}/global-default", at(FSS, "v1"));
        let (_, mut object) = call(&c, Method::GET, &url, "").await;
        let uid = object["metadata"]["uid"].clone();
        object["spec"]["matchingPrecedence"] = json!(9800);
        let (code, replaced) = call(&c, Method::PUT, &url, &object.to_string()).await;
        assert_eq!(code, 200, "{replaced}");
        assert_eq!(replaced["spec"]["matchingPrecedence"], 9800);
        assert_eq!(replaced["metadata"]["uid"], uid);
        assert_eq!(replaced["metadata"]["generation"], 2);
        // A stale resourceVersion is a conflict.
        let (code, _) = call(&c, Method::PUT, &url, &object.to_string()).await;
        assert_eq!(code, 409);

        let catch_all = format!("{}/catch-all", at(FSS, "v1"));
        let (code, _) = call(&c, Method::DELETE, &catch_all, "").await;
        assert_eq!(code, 200);
        let (code, back) = call(&c, Method::GET, &catch_all, "").await;
        assert_eq!(
            (code, &back["spec"]["matchingPrecedence"]),
            (200, &json!(10000))
        );
    }
}
