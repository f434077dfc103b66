//! The OpenAPI documents of the simulated cluster, as kube-apiserver serves them: v3 (`/openapi/v3`, an index of
//! one document per group-version, each at a URL with the document's hash) and v2 (`/openapi/v2`, one document),
//! from one set of schemas ([`schema`]). kubectl reads them to validate what it sends: a PATCH operation of a kind
//! that takes the `fieldValidation` parameter tells it the server checks fields itself (`fieldValidation=Strict`,
//! answered here by [`unknown_fields`]), and the schemas tell `kubectl apply` how to merge.
//!
//! v2 is served in JSON only: a client that accepts nothing but protobuf (client-go's `OpenAPISchema`, which kubectl
//! uses only where v3 is missing) gets 406 Not Acceptable.
mod core;
mod documents;
mod flowcontrol;
mod meta;
pub(crate) mod schema;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::Value;
use std::sync::Arc;

use super::discovery;
use super::status::ApiError;
use apf::KubeVersion;
use schema::{Def, Ty};

/// The documents of one simulated release, rendered once.
struct Documents {
    /// `(path after /openapi/v3/, its document as JSON, the document's hash)`.
    v3: Vec<(String, Vec<u8>, String)>,
    v2: Vec<u8>,
}

impl Documents {
    fn new(v: KubeVersion) -> Documents {
        let v3 = documents::group_versions(v)
            .into_iter()
            .map(|(path, doc)| {
                let body = serde_json::to_vec(&doc).unwrap_or_default();
                let hash = fnv_hex(&body);
                (path, body, hash)
            })
            .collect();
        Documents {
            v3,
            v2: serde_json::to_vec(&documents::v2(v)).unwrap_or_default(),
        }
    }
}

fn fnv_hex(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v2`, `/openapi/v3` and `/openapi/v3/{group-version path}`.
pub(crate) fn routes(v: KubeVersion) -> Router {
    Router::new()
        .route("/openapi/v2", get(v2))
        .route("/openapi/v3", get(v3_index))
        .route("/openapi/v3/", get(v3_index))
        .route("/openapi/v3/{*path}", get(v3_document))
        .with_state(Arc::new(Documents::new(v)))
}

/// Whether the request accepts JSON (no Accept, `*/*`, `application/*` and `application/json` do).
fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) else {
        return true;
    };
    accept.split(',').any(|media| {
        let media = media.split(';').next().unwrap_or_default().trim();
        matches!(media, "" | "*/*" | "application/*" | "application/json")
    })
}

fn json(headers: &HeaderMap, body: Vec<u8>) -> Response {
    if !accepts_json(headers) {
        return not_acceptable();
    }
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn not_acceptable() -> Response {
    let e = ApiError::BadRequest(
        "only application/json is served here (the simulated apiserver has no protobuf)".into(),
    );
    let mut status = e.status();
    status["code"] = 406.into();
    status["reason"] = "NotAcceptable".into();
    (StatusCode::NOT_ACCEPTABLE, axum::Json(status)).into_response()
}

async fn v2(State(docs): State<Arc<Documents>>, headers: HeaderMap) -> Response {
    json(&headers, docs.v2.clone())
}

async fn v3_index(State(docs): State<Arc<Documents>>, headers: HeaderMap) -> Response {
    let paths: serde_json::Map<String, Value> = docs
        .v3
        .iter()
        .map(|(path, _, hash)| {
            let url = format!("/openapi/v3/{path}?hash={hash}");
            (path.clone(), serde_json::json!({"serverRelativeURL": url}))
        })
        .collect();
    json(
        &headers,
        serde_json::to_vec(&serde_json::json!({"paths": paths})).unwrap_or_default(),
    )
}

async fn v3_document(
    State(docs): State<Arc<Documents>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    match docs.v3.iter().find(|(p, _, _)| *p == path) {
        Some((_, body, _)) => json(&headers, body.clone()),
        None => ApiError::no_such_path().into_response(),
    }
}

/// The fields of `object` (a `kind` of API version `api`, `v1beta3` or `flowcontrol.apiserver.k8s.io/v1beta3`, on
/// Kubernetes `v`) its schema does not have, as kube-apiserver's strict decoding names them:
/// `unknown field "spec.rules[0].subjects[0].bar"`. Nothing for a kind the cluster does not serve.
pub(crate) fn unknown_fields(v: KubeVersion, api: &str, kind: &str, object: &Value) -> Vec<String> {
    let (group, version) = match api.rsplit_once('/') {
        Some((group, version)) => (Some(group), version),
        None => (None, api),
    };
    let Some(r) = discovery::resources(v).into_iter().find(|r| {
        r.gvr.version == version && r.kind == kind && group.is_none_or(|g| g == r.gvr.group)
    }) else {
        return Vec::new();
    };
    let defs: Vec<Def> = schema::definitions(v, &r)
        .into_iter()
        .chain(meta::definitions())
        .collect();
    let mut out = Vec::new();
    let top = format!("{}.{kind}", schema::package(&r));
    walk(&defs, &top, object, "", &mut out);
    out.into_iter()
        .map(|path| format!("unknown field \"{path}\""))
        .collect()
}

fn walk(defs: &[Def], name: &str, value: &Value, at: &str, out: &mut Vec<String>) {
    let Some(d) = defs.iter().find(|d| d.name == name) else {
        return;
    };
    let Some(fields) = value.as_object() else {
        return;
    };
    if d.open || d.time {
        return;
    }
    for (key, v) in fields {
        let path = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        match d.fields.iter().find(|f| f.name == key) {
            None => out.push(path),
            Some(field) => walk_type(defs, &field.ty, v, &path, out),
        }
    }
}

fn walk_type(defs: &[Def], ty: &Ty, value: &Value, at: &str, out: &mut Vec<String>) {
    match ty {
        Ty::Ref(name) => walk(defs, name, value, at, out),
        Ty::List(item, _) => {
            for (i, v) in value.as_array().into_iter().flatten().enumerate() {
                walk_type(defs, item, v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
