//! The bearer token a simulated cluster may require: a request without `Authorization: Bearer <token>` gets 401
//! and a Status, as from kube-apiserver's token authenticator. The health and version endpoints stay open, as
//! kube-apiserver's default `system:public-info-viewer` binding leaves them to anonymous clients.

use super::status::ApiError;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Paths any client may read without credentials.
const PUBLIC: [&str; 4] = ["/healthz", "/livez", "/readyz", "/version"];

/// The token of `Authorization: Bearer <token>` (the scheme in any case, as Go's bearer authenticator reads it).
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Compares in time independent of where the strings differ.
pub(super) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Middleware: passes requests that carry `token` (and the public paths), answers 401 to the others.
pub(super) async fn require_token(
    State(token): State<Arc<str>>,
    request: Request,
    next: Next,
) -> Response {
    let public = PUBLIC.contains(&request.uri().path());
    if public || bearer(&request).is_some_and(|t| same(t, &token)) {
        return next.run(request).await;
    }
    ApiError::Unauthorized.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    async fn status(auth: Option<&str>, path: &str) -> u16 {
        let app = Router::new()
            .route("/api", get(|| async { "api" }))
            .route("/healthz", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(
                Arc::<str>::from("s3cret"),
                require_token,
            ));
        let mut req = axum::http::Request::builder().uri(path);
        if let Some(a) = auth {
            req = req.header(header::AUTHORIZATION, a);
        }
        let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let code = resp.status().as_u16();
        if code == 401 {
            let body = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                (v["kind"].as_str(), v["code"].as_u64()),
                (Some("Status"), Some(401))
            );
        }
        code
    }

    #[tokio::test]
    async fn only_the_token_passes() {
        assert_eq!(status(Some("Bearer s3cret"), "/api").await, 200);
        assert_eq!(status(Some("bearer s3cret"), "/api").await, 200);
        assert_eq!(status(None, "/api").await, 401);
        assert_eq!(status(Some("Bearer wrong!"), "/api").await, 401);
        assert_eq!(status(Some("Basic s3cret"), "/api").await, 401);
        assert_eq!(status(Some("Bearer "), "/api").await, 401);
        assert_eq!(status(None, "/healthz").await, 200);
    }
}
