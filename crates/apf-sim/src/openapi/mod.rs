//! The OpenAPI documents of the simulated cluster, as kube-apiserver serves them: v3 (`/openapi/v3`, an index of
//! one document per group-version, each at a URL with the document's hash) and v2 (`/openapi/v2`, one document, in
//! JSON or in gnostic's protobuf, [`proto`]), from one set of schemas ([`schema`]). kubectl reads them to validate
//! what it sends: a PATCH operation of a kind that takes the `fieldValidation` parameter tells it the server checks
//! fields itself (`fieldValidation=Strict`, answered here by [`unknown_fields`]), the schemas tell `kubectl apply`
//! how to merge, and `kubectl explain` prints them (v3, or v2 with `--output plaintext-openapiv2`).
mod check;
mod core;
mod documents;
mod flowcontrol;
mod meta;
mod proto;
pub(crate) mod schema;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Map};
use std::sync::Arc;

use super::status::ApiError;
use apf::KubeVersion;

pub(crate) use check::{type_errors, unknown_fields};

const JSON: &str = "application/json";
/// The media types of the v2 document in protobuf: client-go asks for the first; kube-openapi takes both and
/// answers with the second, which Go's `mime.ParseMediaType` can read (`@` is not allowed in a media type).
const PROTOBUF: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
];

/// The documents of one simulated release, rendered once.
struct Documents {
    /// `(path after /openapi/v3/, its document as JSON)`.
    v3: Vec<(String, Bytes)>,
    v3_index: Bytes,
    v2_json: Bytes,
    v2_protobuf: Bytes,
}

impl Documents {
    fn new(v: KubeVersion) -> Documents {
        let mut index = Map::new();
        let v3 = documents::group_versions(v)
            .into_iter()
            .map(|(path, doc)| {
                let body = serde_json::to_vec(&doc).unwrap_or_default();
                // The URL changes with the document: clients may cache what they read at it for good.
                let url = format!("/openapi/v3/{path}?hash={}", fnv_hex(&body));
                index.insert(path.clone(), json!({"serverRelativeURL": url}));
                (path, Bytes::from(body))
            })
            .collect();
        let v2 = documents::v2(v);
        Documents {
            v3,
            v3_index: serde_json::to_vec(&json!({"paths": index}))
                .unwrap_or_default()
                .into(),
            v2_json: serde_json::to_vec(&v2).unwrap_or_default().into(),
            v2_protobuf: proto::document(&v2).into(),
        }
    }
}

/// FNV-1a (64 bits) in hex: a stable digest of a document for its URL.
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

/// The first media type of the request's Accept that is JSON (`application/json`, `application/*`, `*/*`) or one of
/// `others`, in the client's order (q=0 refuses one); JSON when there is no Accept. `None`: nothing served fits.
fn negotiate(headers: &HeaderMap, others: &[&'static str]) -> Option<&'static str> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) else {
        return Some(JSON);
    };
    accept.split(',').find_map(|entry| {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
        });
        if refused {
            return None;
        }
        match media.as_str() {
            "" | "*/*" | "application/*" | JSON => Some(JSON),
            m => others.iter().copied().find(|o| *o == m),
        }
    })
}

fn respond(media: Option<&'static str>, served: &[&str], body: Bytes) -> Response {
    match media {
        Some(media) => ([(header::CONTENT_TYPE, media)], body).into_response(),
        None => ApiError::NotAcceptable(format!(
            "only the following media types are accepted: {}",
            served.join(", ")
        ))
        .into_response(),
    }
}

/// A JSON document, or 406 to a client that does not take JSON.
fn json_only(headers: &HeaderMap, body: &Bytes) -> Response {
    respond(negotiate(headers, &[]), &[JSON], body.clone())
}

async fn v2(State(docs): State<Arc<Documents>>, headers: HeaderMap) -> Response {
    let (media, body) = match negotiate(&headers, &PROTOBUF) {
        Some(JSON) => (Some(JSON), docs.v2_json.clone()),
        Some(_) => (Some(PROTOBUF[1]), docs.v2_protobuf.clone()),
        None => (None, Bytes::new()),
    };
    respond(media, &[JSON, PROTOBUF[0], PROTOBUF[1]], body)
}

async fn v3_index(State(docs): State<Arc<Documents>>, headers: HeaderMap) -> Response {
    json_only(&headers, &docs.v3_index)
}

async fn v3_document(
    State(docs): State<Arc<Documents>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    match docs.v3.iter().find(|(p, _)| *p == path) {
        Some((_, body)) => json_only(&headers, body),
        None => ApiError::no_such_path().into_response(),
    }
}

#[cfg(test)]
mod tests;
