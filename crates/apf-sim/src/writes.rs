//! The writes the simulated cluster takes: create (POST), update (PUT), patch and delete, of Leases
//! (`coordination.k8s.io/v1`: enough for leader election with kube-lease-manager or client-go's leaselock) and of
//! FlowSchemas and PriorityLevelConfigurations (what `kubectl apply`, `replace`, `edit` and `delete` send; their
//! defaulting and validation in [`super::admission`], through the [`Admit`] hook).
//!
//! Every patch type merges its body into the stored object as a JSON merge patch (RFC 7386: objects merge key by
//! key, `null` removes a field, anything else replaces): for a Lease, whose spec has no lists, that is what a
//! strategic-merge patch and a server-side apply (`application/apply-patch+yaml`, JSON or YAML) do too. An apply
//! of a Lease that does not exist creates it, and an apply that would change a field another field manager owns
//! gets 409 Conflict unless forced ([`super::ownership`]). A `metadata.resourceVersion` in the body is a
//! precondition, as in kube-apiserver (409 Conflict when the Lease changed since).

use super::discovery::Resource;
use super::objects::key;
use super::ownership::{self, Operation};
use super::status::ApiError;
use super::store::{Store, StoreError};
use serde_json::{json, Map, Value};

/// The checks and defaults of a kind, run on the object a write would store (and the stored one it replaces):
/// warnings to return, or the error that refuses the write.
pub(super) type Admit<'a> = &'a dyn Fn(Option<&Value>, &mut Value) -> Result<Vec<String>, ApiError>;

const MERGE_PATCH: &str = "application/merge-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";
const APPLY_PATCH: &str = "application/apply-patch+yaml";
/// The patch types a PATCH takes (JSON patch is refused, 415), as the OpenAPI documents announce them.
pub(super) const PATCH_TYPES: [&str; 3] = [MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH];

/// RFC 7386: `patch` merged into `target`.
fn merge(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Some(t) = target.as_object_mut() {
        for (k, v) in fields {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// A request body as a JSON object: JSON, or YAML where the content type allows it (apply).
fn parse_object(body: &[u8], yaml: bool) -> Result<Map<String, Value>, ApiError> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) if yaml => serde_saphyr::from_slice(body).map_err(|y| {
            ApiError::BadRequest(format!(
                "error decoding YAML: {} (as JSON: {e})",
                y.without_snippet()
            ))
        })?,
        Err(e) => return Err(ApiError::BadRequest(format!("error decoding JSON: {e}"))),
    };
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::BadRequest(
            "the body of the request must be a JSON object".into(),
        )),
    }
}

/// kind and apiVersion, when the body has them, must be the resource's.
fn check_type(r: &Resource, body: &Map<String, Value>, required: bool) -> Result<(), ApiError> {
    let api_version = r.api_version();
    for (field, want) in [("kind", r.kind), ("apiVersion", api_version.as_str())] {
        match body.get(field).and_then(Value::as_str) {
            Some(got) if got != want => {
                return Err(ApiError::BadRequest(format!(
                    "{field} {got:?} does not match the request's {want:?}"
                )))
            }
            None if required => {
                return Err(ApiError::BadRequest(format!(
                    "{field} must be set in an apply patch"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A DNS subdomain (RFC 1123), as object names must be.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn random_uid() -> String {
    super::objects::uuid_text(rand::random::<u128>())
}

fn store_error(r: &Resource, name: &str, e: StoreError) -> ApiError {
    let what = format!("{} \"{name}\"", r.qualified_name());
    match e {
        StoreError::AlreadyExists => ApiError::AlreadyExists(format!("{what} already exists")),
        StoreError::NotFound => ApiError::object_not_found(r, name),
    }
}

/// A new object from a create's body: named, in the request's namespace, with the fields the server sets.
fn new_object(
    r: &Resource,
    namespace: &str,
    mut body: Map<String, Value>,
    url_name: Option<&str>,
) -> Result<(String, Value), ApiError> {
    let mut meta = match body.remove("metadata") {
        Some(Value::Object(m)) => m,
        None => Map::new(),
        Some(_) => return Err(ApiError::BadRequest("metadata must be an object".into())),
    };
    let name = match (meta.get("name").and_then(Value::as_str), url_name) {
        (Some(n), Some(u)) if n != u => {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({u})"
            )))
        }
        (Some(n), _) => n.to_string(),
        (None, Some(u)) => u.to_string(),
        (None, None) => {
            return Err(ApiError::Invalid(format!(
                "{} \"\" is invalid: metadata.name: Required value: name is required",
                r.kind
            )))
        }
    };
    if !valid_name(&name) {
        return Err(ApiError::Invalid(format!(
            "{} {name:?} is invalid: metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must \
             consist of lower case alphanumeric characters, '-' or '.', and must start and end with an \
             alphanumeric character",
            r.kind
        )));
    }
    if let Some(ns) = meta.get("namespace").and_then(Value::as_str) {
        if ns != namespace {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
    }
    if meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|rv| !rv.is_empty())
    {
        return Err(ApiError::BadRequest(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    meta.insert("name".into(), json!(name));
    meta.insert("namespace".into(), json!(namespace));
    meta.insert("uid".into(), json!(random_uid()));
    meta.insert("creationTimestamp".into(), json!(super::objects::now()));
    meta.remove("resourceVersion");
    let mut object = Map::new();
    object.insert("kind".into(), json!(r.kind));
    object.insert("apiVersion".into(), json!(r.api_version()));
    object.insert("metadata".into(), Value::Object(meta));
    for (k, v) in body {
        if k != "kind" && k != "apiVersion" && !v.is_null() {
            object.insert(k, v);
        }
    }
    Ok((name, Value::Object(object)))
}

/// Who writes: the request's `fieldManager`, else (as kube-apiserver names managers) its User-Agent's product.
pub(super) fn manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    match field_manager.filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => user_agent
            .and_then(|ua| ua.split('/').next())
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    }
}

/// POST to a collection: the created object and the warnings, or 409 AlreadyExists.
pub(super) fn create(
    store: &Store,
    r: &Resource,
    namespace: &str,
    body: &[u8],
    manager: &str,
    admit: Admit<'_>,
) -> Result<(Value, Vec<String>), ApiError> {
    let body = parse_object(body, false)?;
    check_type(r, &body, false)?;
    let fields = Value::Object(body.clone());
    let (name, mut object) = new_object(r, namespace, body, None)?;
    let time = super::objects::now();
    ownership::record(
        &mut object,
        &fields,
        manager,
        Operation::Update,
        &r.api_version(),
        &time,
    );
    let warnings = admit(None, &mut object)?;
    let object = store
        .create(key(r.gvr, namespace, &name), object)
        .map_err(|e| store_error(r, &name, e))?;
    Ok((object, warnings))
}

/// PUT of `name`: the whole object replaced (its uid and creation time kept), with the warnings. A
/// `metadata.resourceVersion` in the body is a precondition.
pub(super) fn update(
    store: &Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    body: &[u8],
    manager: &str,
    admit: Admit<'_>,
) -> Result<(Value, Vec<String>), ApiError> {
    let mut body = parse_object(body, false)?;
    check_type(r, &body, false)?;
    let precondition = body
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("resourceVersion"))
        .and_then(|rv| rv.as_str().map(str::to_string))
        .filter(|rv| !rv.is_empty());
    let fields = Value::Object(body.clone());
    let (_, mut object) = new_object(r, namespace, body, Some(name))?;
    let what = format!("{} \"{name}\"", r.qualified_name());
    let time = super::objects::now();
    let mut warnings = Vec::new();
    let (object, _) = store.write(&key(r.gvr, namespace, name), |old| {
        let Some(old) = old else {
            return Err(ApiError::object_not_found(r, name));
        };
        if let Some(want) = &precondition {
            if old.pointer("/metadata/resourceVersion").and_then(Value::as_str) != Some(want) {
                return Err(ApiError::Conflict(format!(
                    "Operation cannot be fulfilled on {what}: the object has been modified; please apply your \
                     changes to the latest version and try again"
                )));
            }
        }
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in ["uid", "creationTimestamp", "managedFields"] {
                match old["metadata"].get(field) {
                    Some(v) => meta.insert(field.into(), v.clone()),
                    None => meta.remove(field),
                };
            }
        }
        ownership::record(&mut object, &fields, manager, Operation::Update, &r.api_version(), &time);
        warnings = admit(Some(old), &mut object)?;
        Ok(object)
    })?;
    Ok((object, warnings))
}

/// DELETE of `name`: the `Status` kube-apiserver answers for kinds that do not return the deleted object.
pub(super) fn delete(
    store: &Store,
    r: &Resource,
    namespace: &str,
    name: &str,
) -> Result<Value, ApiError> {
    let old = store
        .delete(&key(r.gvr, namespace, name))
        .map_err(|e| store_error(r, name, e))?;
    Ok(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": name,
            "group": r.gvr.group,
            "kind": r.gvr.resource,
            "uid": old["metadata"]["uid"],
        },
    }))
}

/// What a PATCH request says besides its body.
pub(super) struct PatchRequest<'a> {
    pub content_type: &'a str,
    /// The request's `fieldManager` (required for an apply).
    pub field_manager: Option<&'a str>,
    /// Falls back for the manager's name of other patches.
    pub user_agent: Option<&'a str>,
    /// `force=true`: an apply takes the fields other managers own instead of conflicting.
    pub force: bool,
}

/// PATCH of `name`: the patched object, whether an apply created it, and the warnings.
pub(super) fn patch(
    store: &Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    request: &PatchRequest<'_>,
    body: &[u8],
    admit: Admit<'_>,
) -> Result<(Value, bool, Vec<String>), ApiError> {
    let media = request
        .content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let apply = match media.as_str() {
        APPLY_PATCH => true,
        MERGE_PATCH | STRATEGIC_MERGE_PATCH => false,
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format ({other:?}); accepted media types \
                 include: {}",
            PATCH_TYPES.join(", ")
        )))
        }
    };
    if apply && request.field_manager.is_none_or(str::is_empty) {
        return Err(ApiError::BadRequest(
            "PATCH, application/apply-patch+yaml requires fieldManager to be set".into(),
        ));
    }
    let manager = manager_name(request.field_manager, request.user_agent);
    let operation = if apply {
        Operation::Apply
    } else {
        Operation::Update
    };
    let body = parse_object(body, apply)?;
    check_type(r, &body, apply)?;
    let precondition = body
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
        .map(str::to_string);
    if let Some(n) = body
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
    {
        if n != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
    }
    let mut patch = Value::Object(body.clone());
    // What the server owns is not the client's to change.
    if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "resourceVersion",
            "managedFields",
        ] {
            meta.remove(field);
        }
    }
    if let Some(obj) = patch.as_object_mut() {
        obj.remove("kind");
        obj.remove("apiVersion");
    }
    let what = format!("{} \"{name}\"", r.qualified_name());
    let time = super::objects::now();
    let mut warnings = Vec::new();
    let (object, created) = store.write(&key(r.gvr, namespace, name), |old| {
        let Some(old) = old else {
            // Server-side apply creates what does not exist; the other patches need an object.
            if !apply {
                return Err(ApiError::object_not_found(r, name));
            }
            let (_, mut object) = new_object(r, namespace, body, Some(name))?;
            ownership::record(&mut object, &patch, &manager, operation, &r.api_version(), &time);
            warnings = admit(None, &mut object)?;
            return Ok(object);
        };
        if let Some(want) = &precondition {
            if old.pointer("/metadata/resourceVersion").and_then(Value::as_str) != Some(want) {
                return Err(ApiError::Conflict(format!(
                    "Operation cannot be fulfilled on {what}: the object has been modified; please apply your \
                     changes to the latest version and try again"
                )));
            }
        }
        if apply && !request.force {
            let conflicts = ownership::conflicts(old, &patch, &manager);
            if !conflicts.is_empty() {
                let list: Vec<String> = conflicts
                    .iter()
                    .map(|(other, field)| format!("conflict with \"{other}\": {field}"))
                    .collect();
                return Err(ApiError::Conflict(format!(
                    "Apply failed with {} conflict{}: {}",
                    conflicts.len(),
                    if conflicts.len() == 1 { "" } else { "s" },
                    list.join(", ")
                )));
            }
        }
        let mut new = old.clone();
        merge(&mut new, &patch);
        ownership::record(&mut new, &patch, &manager, operation, &r.api_version(), &time);
        warnings = admit(Some(old), &mut new)?;
        Ok(new)
    })?;
    Ok((object, created, warnings))
}

/// The [`Admit`] of kinds with no rules of their own.
pub(super) fn admit_any(_: Option<&Value>, _: &mut Value) -> Result<Vec<String>, ApiError> {
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::{self, LEASES};
    use apf::KubeVersion;

    /// The writes as Leases see them: no rules of their own, no warnings.
    fn create(s: &Store, r: &Resource, ns: &str, body: &[u8], m: &str) -> Result<Value, ApiError> {
        super::create(s, r, ns, body, m, &admit_any).map(|(o, _)| o)
    }

    fn patch(
        s: &Store,
        r: &Resource,
        ns: &str,
        name: &str,
        request: &PatchRequest<'_>,
        body: &[u8],
    ) -> Result<(Value, bool), ApiError> {
        super::patch(s, r, ns, name, request, body, &admit_any).map(|(o, c, _)| (o, c))
    }

    /// A patch the old way round: content type, body, field manager; never forced.
    fn patch_as(
        s: &Store,
        r: &Resource,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        field_manager: Option<&str>,
    ) -> Result<(Value, bool), ApiError> {
        let request = PatchRequest {
            content_type,
            field_manager,
            user_agent: Some("kubectl/v1.32.4 (linux/amd64)"),
            force: false,
        };
        patch(s, r, ns, name, &request, body)
    }

    #[test]
    fn racing_applies_conflict_and_a_release_frees_the_fields() {
        let s = Store::new();
        let r = leases();
        create(
            &s,
            &r,
            "default",
            br#"{"metadata":{"name":"lock"}}"#,
            "test",
        )
        .unwrap();
        let take = |who: &str| {
            format!(
                r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","spec":{{"holderIdentity":"{who}"}}}}"#
            )
        };
        patch_as(
            &s,
            &r,
            "default",
            "lock",
            APPLY_PATCH,
            take("a").as_bytes(),
            Some("ma"),
        )
        .unwrap();
        let e = patch_as(
            &s,
            &r,
            "default",
            "lock",
            APPLY_PATCH,
            take("b").as_bytes(),
            Some("mb"),
        )
        .unwrap_err();
        assert_eq!(
            e,
            ApiError::Conflict(
                "Apply failed with 1 conflict: conflict with \"ma\": .spec.holderIdentity".into()
            )
        );
        // Forced, the apply wins.
        let forced = PatchRequest {
            content_type: APPLY_PATCH,
            field_manager: Some("mc"),
            user_agent: None,
            force: true,
        };
        let (o, _) = patch(&s, &r, "default", "lock", &forced, take("c").as_bytes()).unwrap();
        assert_eq!(o["spec"]["holderIdentity"], "c");
        assert_eq!(o["metadata"]["managedFields"][0]["manager"], "mc");
        // Released (a strategic-merge patch with nulls, recorded under the User-Agent's product), anyone applies.
        let release = br#"{"spec":{"holderIdentity":null}}"#;
        let (o, _) = patch_as(
            &s,
            &r,
            "default",
            "lock",
            STRATEGIC_MERGE_PATCH,
            release,
            None,
        )
        .unwrap();
        assert!(o["metadata"].get("managedFields").is_none());
        patch_as(
            &s,
            &r,
            "default",
            "lock",
            APPLY_PATCH,
            take("b").as_bytes(),
            Some("mb"),
        )
        .unwrap();
        assert_eq!(
            manager_name(None, Some("kubectl/v1.32.4 (linux/amd64)")),
            "kubectl"
        );
        assert_eq!(manager_name(Some(""), None), "unknown");
    }

    fn leases() -> Resource {
        discovery::find(
            &discovery::resources(KubeVersion::new(34, 0)),
            "coordination.k8s.io",
            "v1",
            "leases",
        )
        .unwrap()
    }

    #[test]
    fn merge_follows_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge(&mut t, &json!({"a": "z", "c": {"f": null}, "n": [1]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "n": [1]}));
    }

    #[test]
    fn create_then_conflicts_and_validates() {
        let s = Store::new();
        let r = leases();
        let body = br#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"lock"},"spec":{}}"#;
        let o = create(&s, &r, "default", body, "test").unwrap();
        assert_eq!(o["metadata"]["namespace"], "default");
        assert_eq!(o["metadata"]["uid"].as_str().unwrap().len(), 36);
        let e = create(&s, &r, "default", body, "test").unwrap_err();
        assert_eq!(
            e,
            ApiError::AlreadyExists("leases.coordination.k8s.io \"lock\" already exists".into())
        );
        let elsewhere = br#"{"metadata":{"name":"lock","namespace":"default"}}"#;
        assert!(matches!(
            create(&s, &r, "other", elsewhere, "test").unwrap_err(),
            ApiError::BadRequest(_)
        ));
        assert!(matches!(
            create(
                &s,
                &r,
                "default",
                br#"{"metadata":{"name":"Bad_Name"}}"#,
                "test"
            )
            .unwrap_err(),
            ApiError::Invalid(_)
        ));
        assert!(matches!(
            create(&s, &r, "default", b"[]", "test").unwrap_err(),
            ApiError::BadRequest(_)
        ));
        assert!(matches!(
            create(
                &s,
                &r,
                "default",
                br#"{"kind":"Pod","metadata":{"name":"x"}}"#,
                "test"
            )
            .unwrap_err(),
            ApiError::BadRequest(_)
        ));
    }

    #[test]
    fn patches_merge_and_null_removes() {
        let s = Store::new();
        let r = leases();
        let created = create(
            &s,
            &r,
            "default",
            br#"{"metadata":{"name":"lock"}}"#,
            "test",
        )
        .unwrap();
        let rv0: u64 = created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let apply = br#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","spec":{"holderIdentity":"a","leaseDurationSeconds":15}}"#;
        let (o, created) =
            patch_as(&s, &r, "default", "lock", APPLY_PATCH, apply, Some("m")).unwrap();
        assert!(!created);
        assert_eq!(o["spec"]["holderIdentity"], "a");
        let rv1: u64 = o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv1 > rv0);
        let release = br#"{"spec":{"holderIdentity":null,"leaseDurationSeconds":null}}"#;
        let (o, _) = patch_as(
            &s,
            &r,
            "default",
            "lock",
            "application/strategic-merge-patch+json",
            release,
            None,
        )
        .unwrap();
        assert_eq!(o["spec"], json!({}));
        assert_eq!(o["metadata"]["name"], "lock");
        // The name and uid stay the server's.
        let (o, _) = patch_as(
            &s,
            &r,
            "default",
            "lock",
            MERGE_PATCH,
            br#"{"metadata":{"uid":"x","labels":{"a":"b"}}}"#,
            None,
        )
        .unwrap();
        assert_ne!(o["metadata"]["uid"], "x");
        assert_eq!(o["metadata"]["labels"]["a"], "b");
        // A stale resourceVersion is a conflict.
        let stale = format!(
            r#"{{"metadata":{{"resourceVersion":"{rv0}"}},"spec":{{"holderIdentity":"b"}}}}"#
        );
        let e = patch_as(
            &s,
            &r,
            "default",
            "lock",
            MERGE_PATCH,
            stale.as_bytes(),
            None,
        )
        .unwrap_err();
        assert!(matches!(e, ApiError::Conflict(_)), "{e:?}");
        assert!(matches!(
            patch_as(&s, &r, "default", "nope", MERGE_PATCH, b"{}", None).unwrap_err(),
            ApiError::NotFound(_)
        ));
        assert!(matches!(
            patch_as(
                &s,
                &r,
                "default",
                "lock",
                "application/json-patch+json",
                b"[]",
                None
            )
            .unwrap_err(),
            ApiError::UnsupportedMediaType(_)
        ));
        assert!(matches!(
            patch_as(&s, &r, "default", "lock", APPLY_PATCH, apply, None).unwrap_err(),
            ApiError::BadRequest(_)
        ));
    }

    #[test]
    fn apply_creates_and_takes_yaml() {
        let s = Store::new();
        let r = leases();
        let yaml = b"apiVersion: coordination.k8s.io/v1\nkind: Lease\nspec:\n  holderIdentity: a\n";
        let (o, created) = patch_as(
            &s,
            &r,
            "kube-system",
            "new",
            "application/apply-patch+yaml; charset=utf-8",
            yaml,
            Some("m"),
        )
        .unwrap();
        assert!(created);
        assert_eq!(o["metadata"]["name"], "new");
        assert_eq!(o["spec"]["holderIdentity"], "a");
        assert!(s.get(&key(LEASES, "kube-system", "new")).is_some());
    }
}
