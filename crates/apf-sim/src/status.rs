//! Errors as the Kubernetes API reports them: an HTTP status and a `Status` object (meta/v1), shared by the
//! simulator's resource handlers and its Lease store.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::discovery::Resource;
use super::selector::SelectorError;

/// An error as the API reports it: an HTTP status and a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The server has nothing in a media type the request's Accept takes.
    #[error("{0}")]
    NotAcceptable(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("{0}")]
    Gone(String),
    #[error("Unauthorized")]
    Unauthorized,
}

impl ApiError {
    fn code_and_reason(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            ApiError::AlreadyExists(_) => (StatusCode::CONFLICT, "AlreadyExists"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
            ApiError::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
            ApiError::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType")
            }
            ApiError::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, "NotAcceptable"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
            ApiError::Gone(_) => (StatusCode::GONE, "Expired"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
        }
    }

    /// The `Status` object (meta/v1) of this error.
    pub fn status(&self) -> Value {
        let (code, reason) = self.code_and_reason();
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": reason,
            "details": {},
            "code": code.as_u16(),
        })
    }

    /// The 404 of an object: `leases.coordination.k8s.io "x" not found`.
    pub fn object_not_found(r: &Resource, name: &str) -> Self {
        ApiError::NotFound(format!("{} \"{name}\" not found", r.qualified_name()))
    }

    /// The 404 of a path that names nothing the cluster serves.
    pub fn no_such_path() -> Self {
        ApiError::NotFound("the server could not find the requested resource".into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (code, _) = self.code_and_reason();
        (code, Json(self.status())).into_response()
    }
}

impl From<SelectorError> for ApiError {
    fn from(e: SelectorError) -> Self {
        ApiError::BadRequest(e.to_string())
    }
}
