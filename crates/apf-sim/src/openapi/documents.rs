//! The OpenAPI documents: v3 per group-version, v2 whole, from the resources discovery announces (their verbs
//! decide the operations) and the schemas of [`super::schema`].
use serde_json::{json, Map, Value};

use super::schema::{self, Def, ListType, Ty};
use crate::discovery::{self, Resource};
use crate::writes::PATCH_TYPES;
use apf::KubeVersion;

/// Which dialect a document is written in.
#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    V2,
    V3,
}

impl Dialect {
    fn reference(self, name: &str) -> String {
        match self {
            Dialect::V2 => format!("#/definitions/{name}"),
            Dialect::V3 => format!("#/components/schemas/{name}"),
        }
    }
}

fn type_schema(d: Dialect, ty: &Ty, doc: &str) -> Value {
    let mut s = match ty {
        Ty::Str => json!({"type": "string"}),
        Ty::Int => json!({"type": "integer", "format": "int32"}),
        Ty::Int64 => json!({"type": "integer", "format": "int64"}),
        Ty::Bool => json!({"type": "boolean"}),
        // v3 ignores the siblings of a $ref, so kube-openapi wraps it in allOf there.
        Ty::Ref(name) => match d {
            Dialect::V2 => json!({"$ref": d.reference(name)}),
            Dialect::V3 => json!({"allOf": [{"$ref": d.reference(name)}]}),
        },
        Ty::List(item, kind) => {
            let mut s = json!({"type": "array", "items": type_schema(d, item, "")});
            let t = match kind {
                ListType::Atomic => "atomic",
                ListType::Set | ListType::MergedSet => "set",
                ListType::Map(_) => "map",
            };
            s["x-kubernetes-list-type"] = json!(t);
            if let ListType::Map(key) = kind {
                s["x-kubernetes-list-map-keys"] = json!([key]);
                s["x-kubernetes-patch-merge-key"] = json!(key);
            }
            if matches!(kind, ListType::Map(_) | ListType::MergedSet) {
                s["x-kubernetes-patch-strategy"] = json!("merge");
            }
            s
        }
        Ty::Map(item) => {
            json!({"type": "object", "additionalProperties": type_schema(d, item, "")})
        }
    };
    if !doc.is_empty() {
        s["description"] = json!(doc);
    }
    s
}

fn definition(d: Dialect, def: &Def) -> Value {
    if def.time {
        return json!({"description": def.doc, "type": "string", "format": "date-time"});
    }
    let properties: Map<String, Value> = def
        .fields
        .iter()
        .map(|f| (f.name.to_string(), type_schema(d, &f.ty, f.doc)))
        .collect();
    let mut s = json!({"description": def.doc, "type": "object"});
    if !properties.is_empty() {
        s["properties"] = Value::Object(properties);
    }
    let required: Vec<&str> = def
        .fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name)
        .collect();
    if !required.is_empty() {
        s["required"] = json!(required);
    }
    if def.open {
        s["x-kubernetes-preserve-unknown-fields"] = json!(true);
    }
    if let Some((group, version, kind)) = &def.gvk {
        s["x-kubernetes-group-version-kind"] =
            json!([{"group": group, "kind": kind, "version": version}]);
    }
    s
}

fn param(d: Dialect, name: &str, location: &str, ty: &str, doc: &str) -> Value {
    let mut p = json!({"name": name, "in": location, "description": doc});
    match d {
        Dialect::V2 => {
            p["type"] = json!(ty);
            p["uniqueItems"] = json!(true);
        }
        Dialect::V3 => p["schema"] = json!({"type": ty, "uniqueItems": true}),
    }
    if location == "path" {
        p["required"] = json!(true);
    }
    p
}

/// What an operation does, as kube-openapi's `x-kubernetes-action` names it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    List,
    Get,
    Post,
    Put,
    Patch,
    Delete,
    DeleteCollection,
}

impl Action {
    /// (the discovery verb that allows it ([`Resource::allows`]), its HTTP method, its `x-kubernetes-action`)
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Action::List => ("list", "get", "list"),
            Action::Get => ("get", "get", "get"),
            Action::Post => ("create", "post", "post"),
            Action::Put => ("update", "put", "put"),
            Action::Patch => ("patch", "patch", "patch"),
            Action::Delete => ("delete", "delete", "delete"),
            Action::DeleteCollection => ("deletecollection", "delete", "deletecollection"),
        }
    }
}

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|first| first.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// `FlowcontrolApiserver`, `Coordination`, `Core`: how kube-openapi's operation ids and tags name a group.
fn group_id(r: &Resource) -> String {
    match r.gvr.group {
        "" => "Core".to_string(),
        g => g
            .trim_end_matches(".k8s.io")
            .split('.')
            .map(upper_first)
            .collect(),
    }
}

/// One operation of `r`; `all_namespaces`: the list of a namespaced kind across namespaces.
fn operation(d: Dialect, r: &Resource, action: Action, all_namespaces: bool) -> Value {
    let package = schema::package(r);
    let kind_ref = format!("{package}.{}", r.kind);
    let status_ref = format!("{}.Status", schema::META);
    // (operation id's verb, its word before the kind, description, response schema)
    let (verb, collection, summary, response) = match action {
        Action::List => (
            "list",
            "",
            format!("list or watch objects of kind {}", r.kind),
            format!("{package}.{}List", r.kind),
        ),
        Action::Get => (
            "read",
            "",
            format!("read the specified {}", r.kind),
            kind_ref.clone(),
        ),
        Action::Post => (
            "create",
            "",
            format!("create a {}", r.kind),
            kind_ref.clone(),
        ),
        Action::Put => (
            "replace",
            "",
            format!("replace the specified {}", r.kind),
            kind_ref.clone(),
        ),
        Action::Patch => (
            "patch",
            "",
            format!("partially update the specified {}", r.kind),
            kind_ref.clone(),
        ),
        Action::Delete => (
            "delete",
            "",
            format!("delete a {}", r.kind),
            status_ref.clone(),
        ),
        Action::DeleteCollection => (
            "delete",
            "Collection",
            format!("delete collection of {}", r.kind),
            status_ref,
        ),
    };
    let scope = if r.namespaced && !all_namespaces {
        "Namespaced"
    } else {
        ""
    };
    let suffix = if all_namespaces {
        "ForAllNamespaces"
    } else {
        ""
    };
    let group = group_id(r);
    let version = r.gvr.version;
    let mut op = json!({
        "description": summary,
        "operationId": format!("{verb}{group}{}{collection}{scope}{}{suffix}", upper_first(version), r.kind),
        "tags": [format!("{}{}_{version}", group[..1].to_lowercase(), &group[1..])],
        "x-kubernetes-action": action.words().2,
        "x-kubernetes-group-version-kind": {"group": r.gvr.group, "kind": r.kind, "version": version},
    });
    let mut params = vec![param(d, "pretty", "query", "string", "Indent the output.")];
    let q = |name: &str, ty: &str, doc: &str| param(d, name, "query", ty, doc);
    let dry_run = || {
        q(
            "dryRun",
            "string",
            "All: check the request without persisting it. The simulated apiserver refuses it (400 Bad Request).",
        )
    };
    let selectors = || {
        [
            q("labelSelector", "string", "Only objects with these labels."),
            q(
                "fieldSelector",
                "string",
                "Only objects with these fields (metadata.name, metadata.namespace).",
            ),
        ]
    };
    let delete_options = format!("{}.DeleteOptions", schema::META);
    // (media types, schema, required) of the request body.
    let body: Option<(Vec<&str>, String, bool)> = match action {
        Action::List => {
            params.extend(selectors());
            params.push(q(
                "resourceVersion",
                "string",
                "Start a watch after this version.",
            ));
            params.push(q(
                "timeoutSeconds",
                "integer",
                "End the call after this long.",
            ));
            params.push(q("watch", "boolean", "Stream the changes as watch events."));
            None
        }
        Action::Get => None,
        Action::Post | Action::Put | Action::Patch => {
            params.push(dry_run());
            params.push(q(
                "fieldManager",
                "string",
                "The name of the actor making the change.",
            ));
            params.push(q(
                "fieldValidation",
                "string",
                "What to do with fields the kind does not have: Ignore, Warn (the default) or Strict \
                 (400 Bad Request).",
            ));
            if action == Action::Patch {
                params.push(q(
                    "force",
                    "boolean",
                    "An apply takes the fields other managers own.",
                ));
                Some((
                    PATCH_TYPES.to_vec(),
                    format!("{}.Patch", schema::META),
                    true,
                ))
            } else {
                Some((vec!["application/json"], kind_ref, true))
            }
        }
        Action::Delete | Action::DeleteCollection => {
            params.push(dry_run());
            if action == Action::DeleteCollection {
                params.extend(selectors());
            }
            Some((vec!["application/json"], delete_options, false))
        }
    };
    let codes: &[&str] = match action {
        Action::Post => &["201"],
        // An apply creates what does not exist.
        Action::Patch => &["200", "201"],
        _ => &["200"],
    };
    let produces: &[&str] = match action {
        Action::List => &["application/json", "application/json;stream=watch"],
        _ => &["application/json"],
    };
    let mut responses = Map::new();
    match d {
        Dialect::V3 => {
            if let Some((types, schema_name, required)) = &body {
                let content: Map<String, Value> = types
                    .iter()
                    .map(|t| {
                        (
                            t.to_string(),
                            json!({"schema": {"$ref": d.reference(schema_name)}}),
                        )
                    })
                    .collect();
                op["requestBody"] = json!({"content": content, "required": required});
            }
            let content: Map<String, Value> = produces
                .iter()
                .map(|t| {
                    (
                        t.to_string(),
                        json!({"schema": {"$ref": d.reference(&response)}}),
                    )
                })
                .collect();
            for code in codes {
                responses.insert(
                    code.to_string(),
                    json!({"description": "OK", "content": content}),
                );
            }
        }
        Dialect::V2 => {
            if let Some((types, schema_name, required)) = &body {
                params.push(json!({"name": "body", "in": "body", "required": required,
                    "schema": {"$ref": d.reference(schema_name)}}));
                op["consumes"] = json!(types);
            } else {
                op["consumes"] = json!(["*/*"]);
            }
            op["produces"] = json!(produces);
            op["schemes"] = json!(["https"]);
            for code in codes {
                responses.insert(
                    code.to_string(),
                    json!({"description": "OK", "schema": {"$ref": d.reference(&response)}}),
                );
            }
        }
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    op["responses"] = Value::Object(responses);
    op["parameters"] = json!(params);
    op
}

/// The paths of `r` with the operations its verbs allow.
fn paths(d: Dialect, r: &Resource, out: &mut Map<String, Value>) {
    let base = if r.gvr.group.is_empty() {
        format!("/api/{}", r.gvr.version)
    } else {
        format!("/apis/{}/{}", r.gvr.group, r.gvr.version)
    };
    let collection = if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.gvr.resource)
    } else {
        format!("{base}/{}", r.gvr.resource)
    };
    let mut add = |path: String, actions: &[Action], params: Vec<Value>, all_namespaces: bool| {
        let mut item: Map<String, Value> = actions
            .iter()
            .filter(|a| r.allows(a.words().0))
            .map(|a| (a.words().1.to_string(), operation(d, r, *a, all_namespaces)))
            .collect();
        if !item.is_empty() {
            if !params.is_empty() {
                item.insert("parameters".into(), json!(params));
            }
            out.insert(path, Value::Object(item));
        }
    };
    let mut scope = Vec::new();
    if r.namespaced {
        scope.push(param(
            d,
            "namespace",
            "path",
            "string",
            "The object's namespace.",
        ));
    }
    add(
        collection.clone(),
        &[Action::List, Action::Post, Action::DeleteCollection],
        scope.clone(),
        false,
    );
    let mut item_params = scope;
    item_params.push(param(d, "name", "path", "string", "The object's name."));
    add(
        format!("{collection}/{{name}}"),
        &[Action::Get, Action::Put, Action::Patch, Action::Delete],
        item_params,
        false,
    );
    if r.namespaced {
        add(
            format!("{base}/{}", r.gvr.resource),
            &[Action::List],
            Vec::new(),
            true,
        );
    }
}

fn info(v: KubeVersion) -> Value {
    json!({"title": "Kubernetes", "version": v.git_version()})
}

/// The definitions of `resources`, and the meta types, by name.
fn definitions(d: Dialect, v: KubeVersion, resources: &[Resource]) -> Map<String, Value> {
    let mut defs: Vec<Def> = resources
        .iter()
        .flat_map(|r| schema::definitions(v, r))
        .collect();
    defs.extend(super::meta::definitions());
    defs.iter()
        .map(|def| (def.name.clone(), definition(d, def)))
        .collect()
}

/// `(path after /openapi/v3/, document)` of every group-version the cluster of `v` serves.
pub(super) fn group_versions(v: KubeVersion) -> Vec<(String, Value)> {
    let all = discovery::resources(v);
    let mut gvs: Vec<(&str, &str)> = Vec::new();
    for r in &all {
        if !gvs.contains(&(r.gvr.group, r.gvr.version)) {
            gvs.push((r.gvr.group, r.gvr.version));
        }
    }
    gvs.into_iter()
        .map(|(group, version)| {
            let resources: Vec<Resource> = all
                .iter()
                .copied()
                .filter(|r| r.gvr.group == group && r.gvr.version == version)
                .collect();
            let mut p = Map::new();
            for r in &resources {
                paths(Dialect::V3, r, &mut p);
            }
            let doc = json!({
                "openapi": "3.0.0",
                "info": info(v),
                "paths": p,
                "components": {
                    "schemas": definitions(Dialect::V3, v, &resources),
                    "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
                },
            });
            let path = if group.is_empty() {
                format!("api/{version}")
            } else {
                format!("apis/{group}/{version}")
            };
            (path, doc)
        })
        .collect()
}

/// The one v2 document of the cluster of `v`.
pub(super) fn v2(v: KubeVersion) -> Value {
    let all = discovery::resources(v);
    let mut p = Map::new();
    for r in &all {
        paths(Dialect::V2, r, &mut p);
    }
    json!({
        "swagger": "2.0",
        "info": info(v),
        "paths": p,
        "definitions": definitions(Dialect::V2, v, &all),
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Gvr;

    /// Discovery's verbs decide: a resource that allows deletecollection gets it on its collection, in both dialects.
    #[test]
    fn the_verbs_decide_the_operations() {
        let r = Resource {
            gvr: Gvr {
                group: "coordination.k8s.io",
                version: "v1",
                resource: "leases",
            },
            kind: "Lease",
            singular: "lease",
            namespaced: true,
            verbs: &["deletecollection", "get", "list"],
            short_names: &[],
        };
        for d in [Dialect::V2, Dialect::V3] {
            let mut out = Map::new();
            paths(d, &r, &mut out);
            let collection = &out["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"];
            let delete = &collection["delete"];
            assert_eq!(delete["x-kubernetes-action"], "deletecollection");
            assert_eq!(
                delete["operationId"],
                "deleteCoordinationV1CollectionNamespacedLease"
            );
            assert!(collection.get("post").is_none());
            let item = &out["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"];
            let methods: Vec<&String> = item.as_object().unwrap().keys().collect();
            assert_eq!(methods, ["get", "parameters"]);
            assert_eq!(
                out["/apis/coordination.k8s.io/v1/leases"]["get"]["operationId"],
                "listCoordinationV1LeaseForAllNamespaces"
            );
        }
    }
}
