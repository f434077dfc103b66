//! The OpenAPI documents: v3 per group-version, v2 whole, from the resources discovery announces (their verbs
//! decide the operations) and the schemas of [`super::schema`].
use serde_json::{json, Map, Value};

use super::schema::{self, Def, ListType, Ty};
use crate::discovery::{self, Resource};
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
        Ty::Bool => json!({"type": "boolean"}),
        // v3 ignores the siblings of a $ref, so kube-openapi wraps it in allOf there.
        Ty::Ref(name) => match d {
            Dialect::V2 => json!({"$ref": d.reference(name)}),
            Dialect::V3 => json!({"allOf": [{"$ref": d.reference(name)}]}),
        },
        Ty::List(item, kind) => {
            let mut s = json!({"type": "array", "items": type_schema(d, item, "")});
            let (t, keys) = match kind {
                ListType::Atomic => ("atomic", None),
                ListType::Set => ("set", None),
                ListType::Map(key) => ("map", Some(*key)),
            };
            s["x-kubernetes-list-type"] = json!(t);
            if let Some(key) = keys {
                s["x-kubernetes-list-map-keys"] = json!([key]);
                s["x-kubernetes-patch-merge-key"] = json!(key);
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

/// The parameters of a write, as kube-apiserver takes them.
fn write_params(d: Dialect, patch: bool) -> Vec<Value> {
    let mut out = vec![
        param(d, "fieldManager", "query", "string", "The name of the actor making the change."),
        param(
            d,
            "fieldValidation",
            "query",
            "string",
            "What to do with fields the kind does not have: Ignore, Warn (the default) or Strict (400 Bad Request).",
        ),
    ];
    if patch {
        out.push(param(
            d,
            "force",
            "query",
            "boolean",
            "An apply takes the fields other managers own.",
        ));
    }
    out
}

const PATCH_TYPES: [&str; 3] = [
    "application/apply-patch+yaml",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// One operation of `r`: `action` is x-kubernetes-action (list, get, post, put, patch, delete).
fn operation(d: Dialect, r: &Resource, action: &str, package: &str) -> Value {
    let kind_ref = format!("{package}.{}", r.kind);
    let (verb, summary, response) = match action {
        "list" => (
            "list",
            format!("list or watch objects of kind {}", r.kind),
            format!("{package}.{}List", r.kind),
        ),
        "get" => (
            "read",
            format!("read the specified {}", r.kind),
            kind_ref.clone(),
        ),
        "post" => ("create", format!("create a {}", r.kind), kind_ref.clone()),
        "put" => (
            "replace",
            format!("replace the specified {}", r.kind),
            kind_ref.clone(),
        ),
        "patch" => (
            "patch",
            format!("partially update the specified {}", r.kind),
            kind_ref.clone(),
        ),
        _ => (
            "delete",
            format!("delete a {}", r.kind),
            format!("{}.Status", schema::META),
        ),
    };
    let tag = format!(
        "{}_{}",
        r.gvr.group.split('.').next().unwrap_or("core"),
        r.gvr.version
    );
    let mut op = json!({
        "description": summary,
        "operationId": format!("{verb}{}{}", r.gvr.version, r.kind),
        "tags": [tag],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": r.gvr.group, "kind": r.kind, "version": r.gvr.version},
    });
    let mut params = vec![param(d, "pretty", "query", "string", "Indent the output.")];
    let body = match action {
        "post" | "put" => {
            params.extend(write_params(d, false));
            Some((
                vec!["application/json", "application/yaml"],
                kind_ref.clone(),
            ))
        }
        "patch" => {
            params.extend(write_params(d, true));
            Some((PATCH_TYPES.to_vec(), format!("{}.Patch", schema::META)))
        }
        "list" => {
            for (name, doc) in [
                ("labelSelector", "Only objects with these labels."),
                (
                    "fieldSelector",
                    "Only objects with these fields (metadata.name, metadata.namespace).",
                ),
                ("resourceVersion", "Start a watch after this version."),
                ("timeoutSeconds", "End the call after this long."),
                ("watch", "Stream the changes as watch events."),
            ] {
                let ty = if name == "watch" {
                    "boolean"
                } else if name == "timeoutSeconds" {
                    "integer"
                } else {
                    "string"
                };
                params.push(param(d, name, "query", ty, doc));
            }
            None
        }
        _ => None,
    };
    let ok = if action == "post" { "201" } else { "200" };
    let produces = ["application/json", "application/yaml"];
    match d {
        Dialect::V3 => {
            if let Some((types, schema_name)) = &body {
                let content: Map<String, Value> = types
                    .iter()
                    .map(|t| {
                        (
                            t.to_string(),
                            json!({"schema": {"$ref": d.reference(schema_name)}}),
                        )
                    })
                    .collect();
                op["requestBody"] = json!({"content": content, "required": true});
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
            op["responses"] = json!({ok: {"description": "OK", "content": content}, "401": {"description": "Unauthorized"}});
        }
        Dialect::V2 => {
            if let Some((types, schema_name)) = &body {
                params.push(json!({"name": "body", "in": "body", "required": true,
                    "schema": {"$ref": d.reference(schema_name)}}));
                op["consumes"] = json!(types);
            } else {
                op["consumes"] = json!(["*/*"]);
            }
            op["produces"] = json!(produces);
            op["schemes"] = json!(["https"]);
            op["responses"] = json!({ok: {"description": "OK", "schema": {"$ref": d.reference(&response)}},
                "401": {"description": "Unauthorized"}});
        }
    }
    op["parameters"] = json!(params);
    op
}

/// The paths of `r` with the operations its verbs allow.
fn paths(d: Dialect, r: &Resource, out: &mut Map<String, Value>) {
    let package = schema::package(r);
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
    let namespace = param(d, "namespace", "path", "string", "The object's namespace.");
    let name = param(d, "name", "path", "string", "The object's name.");
    let mut add = |path: String, ops: &[(&str, &str)], path_params: Vec<Value>| {
        let mut item = Map::new();
        for (verb, action) in ops {
            if r.allows(verb) {
                let method = match *action {
                    "list" | "get" => "get",
                    other => other,
                };
                item.insert(method.to_string(), operation(d, r, action, &package));
            }
        }
        if !item.is_empty() {
            if !path_params.is_empty() {
                item.insert("parameters".into(), json!(path_params));
            }
            out.insert(path, Value::Object(item));
        }
    };
    let scope = if r.namespaced {
        vec![namespace.clone()]
    } else {
        Vec::new()
    };
    add(
        collection.clone(),
        &[("list", "list"), ("create", "post")],
        scope.clone(),
    );
    let mut item_params = scope;
    item_params.push(name);
    add(
        format!("{collection}/{{name}}"),
        &[
            ("get", "get"),
            ("update", "put"),
            ("patch", "patch"),
            ("delete", "delete"),
        ],
        item_params,
    );
    if r.namespaced {
        // Every namespace's objects.
        add(
            format!("{base}/{}", r.gvr.resource),
            &[("list", "list")],
            Vec::new(),
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
