//! Which field manager owns which field of an object, kept in `metadata.managedFields` as kube-apiserver keeps it
//! (FieldsV1: `{"f:spec": {"f:holderIdentity": {}}}`), so that a server-side apply conflicts the way leader
//! election relies on: an apply that would change a field another manager set is refused with 409 Conflict unless
//! forced (Kubernetes docs, "Server-Side Apply": "Conflicts"). kube-lease-manager takes an orphaned Lease with an
//! apply, and the loser of a race must get that conflict rather than overwrite the winner.
//!
//! Simplified: ownership is by leaf field; a write takes the fields it sets from any other manager (where the real
//! apply would share fields whose values agree), a `null` drops the field's owners, and an apply does not remove
//! the fields its manager applied before and leaves out now.

use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// A field: its path from the object's root, e.g. `["spec", "holderIdentity"]`.
type Path = Vec<String>;

/// The operation a write records its fields under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    fields: BTreeSet<Path>,
}

/// Every leaf a patch sets or removes, with its value (`null` removes), below the fields the server owns.
fn leaves(patch: &Value) -> Vec<(Path, Value)> {
    fn walk(v: &Value, path: &mut Path, out: &mut Vec<(Path, Value)>) {
        match v.as_object() {
            Some(fields) if !fields.is_empty() => {
                for (k, child) in fields {
                    path.push(k.clone());
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ => out.push((path.clone(), v.clone())),
        }
    }
    let mut out = Vec::new();
    if let Some(fields) = patch.as_object() {
        for (k, v) in fields {
            // kind, apiVersion and metadata are the server's (labels and annotations aside, which leases rarely use).
            if k != "kind" && k != "apiVersion" && k != "metadata" {
                walk(v, &mut vec![k.clone()], &mut out);
            }
        }
    }
    out
}

fn value_at<'a>(object: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(object, |v, k| v.get(k))
}

fn paths_of(fields_v1: &Value) -> BTreeSet<Path> {
    fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(fields) = v.as_object() else {
            return;
        };
        if fields.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, child) in fields {
            if let Some(name) = k.strip_prefix("f:") {
                path.push(name.to_string());
                walk(child, path, out);
                path.pop();
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(fields_v1, &mut Vec::new(), &mut out);
    out
}

fn fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut node = &mut root;
        for k in p {
            let next = node
                .entry(format!("f:{k}"))
                .or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            match next.as_object_mut() {
                Some(m) => node = m,
                None => break,
            }
        }
    }
    Value::Object(root)
}

fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_string(),
            operation: e["operation"].as_str().unwrap_or_default().to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: e["time"].as_str().unwrap_or_default().to_string(),
            fields: paths_of(&e["fieldsV1"]),
        })
        .collect()
}

/// The fields an apply by `manager` would change that another manager owns: `(other manager, .a.b)`.
pub(super) fn conflicts(current: &Value, patch: &Value, manager: &str) -> Vec<(String, String)> {
    let owners = entries(current);
    let mut out = Vec::new();
    for (path, value) in leaves(patch) {
        if value.is_null() || value_at(current, &path) == Some(&value) {
            continue;
        }
        for e in owners.iter().filter(|e| e.manager != manager) {
            if e.fields.contains(&path) {
                out.push((e.manager.clone(), format!(".{}", path.join("."))));
            }
        }
    }
    out
}

/// Records in `object` that `manager` set the fields of `patch` (and that those `patch` nulls have no owner).
pub(super) fn record(
    object: &mut Value,
    patch: &Value,
    manager: &str,
    operation: Operation,
    api_version: &str,
    time: &str,
) {
    let mut all = entries(object);
    let changed = leaves(patch);
    for e in &mut all {
        for (path, _) in &changed {
            e.fields.remove(path);
        }
    }
    let set: BTreeSet<Path> = changed
        .into_iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(p, _)| p)
        .collect();
    if !set.is_empty() {
        match all
            .iter_mut()
            .find(|e| e.manager == manager && e.operation == operation.as_str())
        {
            Some(e) => {
                e.fields.extend(set);
                e.time = time.to_string();
            }
            None => all.push(Entry {
                manager: manager.to_string(),
                operation: operation.as_str().to_string(),
                api_version: api_version.to_string(),
                time: time.to_string(),
                fields: set,
            }),
        }
    }
    let managed: Vec<Value> = all
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(&e.fields),
            })
        })
        .collect();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if managed.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(managed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "2025-01-01T00:00:00Z";

    #[test]
    fn an_apply_conflicts_with_another_managers_field_only_when_it_changes_it() {
        let mut lease = json!({"metadata": {"name": "l"}, "spec": {}});
        let a = json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 3}});
        assert!(conflicts(&lease, &a, "ma").is_empty());
        lease["spec"] = a["spec"].clone();
        record(
            &mut lease,
            &a,
            "ma",
            Operation::Apply,
            "coordination.k8s.io/v1",
            T,
        );
        assert_eq!(
            lease["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}})
        );
        // Another manager changing the holder conflicts; the same value does not; the owner itself never does.
        let b = json!({"spec": {"holderIdentity": "b", "leaseDurationSeconds": 3}});
        assert_eq!(
            conflicts(&lease, &b, "mb"),
            vec![("ma".to_string(), ".spec.holderIdentity".to_string())]
        );
        assert!(conflicts(&lease, &b, "ma").is_empty());
        // A null (a release) leaves the field without owner: the next apply is free.
        let release = json!({"spec": {"holderIdentity": null, "leaseDurationSeconds": null}});
        record(
            &mut lease,
            &release,
            "ma",
            Operation::Update,
            "coordination.k8s.io/v1",
            T,
        );
        assert!(lease["metadata"].get("managedFields").is_none());
        lease["spec"] = json!({});
        assert!(conflicts(&lease, &b, "mb").is_empty());
    }

    #[test]
    fn an_update_takes_the_fields_it_sets() {
        let mut lease = json!({"metadata": {}, "spec": {"renewTime": "x"}});
        let renew = json!({"spec": {"renewTime": "x"}});
        record(&mut lease, &renew, "ma", Operation::Apply, "v", T);
        record(&mut lease, &renew, "mb", Operation::Update, "v", T);
        let managed = lease["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(managed.len(), 1);
        assert_eq!(managed[0]["manager"], "mb");
        assert_eq!(managed[0]["operation"], "Update");
        let round = paths_of(&managed[0]["fieldsV1"]);
        assert!(round.contains(&vec!["spec".to_string(), "renewTime".to_string()]));
    }
}
