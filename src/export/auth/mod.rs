//! Who may use the HTTP API. Writes (a silence's POST and DELETE, `/-/reload`, and any later write: every method
//! but GET and HEAD) need an authorized caller unless the operator chose otherwise; reads need one with
//! `web.auth.protect_reads`; `/healthz` and `/readyz` stay open for the kubelet.
//!
//! The caller shows a bearer token (`Authorization: Bearer ...`). Mode `kubernetes` asks the cluster, as
//! kube-rbac-proxy and controller-runtime's secure metrics do: a TokenReview says who the token is, a
//! SubjectAccessReview whether that user may use the request's path with the lower-cased method as verb
//! (`nonResourceAttributes`), so RBAC grants it. Mode `tokens` accepts the tokens of a file. Unset: `kubernetes` in
//! a pod; elsewhere writes are refused unless apf-monitor listens on loopback only.
mod review;
mod tokens;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::settings::{AuthConfig, AuthMode};
use crate::targets::KubernetesConfig;
pub use review::Reviewer;
pub use tokens::TokensFile;

/// What a request does, for the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The kubelet's probes.
    Open,
    Read,
    Write,
}

fn access(method: &Method, path: &str) -> Access {
    if method != Method::GET && method != Method::HEAD {
        return Access::Write;
    }
    if path == "/healthz" || path == "/readyz" {
        Access::Open
    } else {
        Access::Read
    }
}

/// The answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No token, or one nobody knows: 401.
    Unauthenticated(String),
    /// A known caller without the right: 403 with the reason.
    Forbidden(String),
    /// The cluster could not be asked: 503, nothing allowed.
    Unavailable(String),
}

/// How callers are checked.
enum Check {
    /// Mode `none`, or loopback only with no mode: everyone may do everything.
    Everyone,
    /// No mode on a listener beyond loopback, outside a cluster: reads are open, writes refused.
    RefuseWrites(SocketAddr),
    Tokens(TokensFile),
    Kubernetes(Reviewer),
}

/// The guard in front of every route.
pub struct Guard {
    check: Check,
    protect_reads: bool,
}

/// Whether apf-monitor runs in a pod: the variables kubelet sets for every container.
fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("web.auth.mode kubernetes reviews callers through the apiserver, which cannot be reached: {0}")]
    Access(#[from] crate::targets::access::AccessError),
    #[error(
        "web.auth.protect_reads needs a caller to check: set web.auth.mode (kubernetes or tokens) on {0}, which is \
         not in a cluster"
    )]
    ReadsWithoutMode(SocketAddr),
    #[error("web.auth.tokens_file {path}: {source}")]
    Tokens {
        path: String,
        source: std::io::Error,
    },
}

impl Guard {
    /// The guard `auth` describes for a listener on `listen`; mode `kubernetes` uses `kubernetes`' apiserver
    /// access, as discovery does.
    pub async fn build(
        auth: &AuthConfig,
        kubernetes: &KubernetesConfig,
        listen: SocketAddr,
    ) -> Result<Guard, GuardError> {
        let mode = auth.mode.or(in_cluster().then_some(AuthMode::Kubernetes));
        let check = match mode {
            Some(AuthMode::Kubernetes) => {
                let config = crate::targets::access::access(kubernetes).await?;
                Check::Kubernetes(Reviewer::new(crate::targets::access::client(&config)?))
            }
            Some(AuthMode::Tokens) => {
                let path = auth.tokens_file.clone().unwrap_or_default();
                let file = TokensFile::open(&path).map_err(|source| GuardError::Tokens {
                    path: path.display().to_string(),
                    source,
                })?;
                Check::Tokens(file)
            }
            Some(AuthMode::None) => Check::Everyone,
            None if auth.protect_reads => return Err(GuardError::ReadsWithoutMode(listen)),
            None if listen.ip().is_loopback() => Check::Everyone,
            None => Check::RefuseWrites(listen),
        };
        Ok(Guard {
            check,
            protect_reads: auth.protect_reads,
        })
    }

    /// What the start-up log says: which mode guards what.
    pub fn describe(&self) -> String {
        let reads = if self.protect_reads {
            "reads need the same"
        } else {
            "reads are open"
        };
        match &self.check {
            Check::Everyone => "open to every caller (web.auth.mode none, or loopback only)".to_string(),
            Check::RefuseWrites(listen) => format!(
                "writes refused: {listen} is reachable beyond loopback and web.auth.mode is not set; reads are open"
            ),
            Check::Tokens(_) => format!("writes need a token of web.auth.tokens_file; {reads}"),
            Check::Kubernetes(_) => format!(
                "writes need a Kubernetes user RBAC allows (TokenReview, SubjectAccessReview); {reads}"
            ),
        }
    }

    async fn decide(&self, method: &Method, path: &str, token: Option<&str>) -> Decision {
        let needed = match access(method, path) {
            Access::Open => false,
            Access::Read => self.protect_reads,
            Access::Write => true,
        };
        if !needed {
            return Decision::Allowed;
        }
        let missing = || {
            Decision::Unauthenticated(
                "this request needs a bearer token (Authorization: Bearer TOKEN)".into(),
            )
        };
        match &self.check {
            Check::Everyone => Decision::Allowed,
            Check::RefuseWrites(listen) => Decision::Forbidden(format!(
                "writes are refused: apf-monitor listens on {listen}, beyond loopback, and web.auth.mode is not set; \
                 set it to kubernetes or tokens (or none, to let anyone who reaches the port write)"
            )),
            Check::Tokens(file) => match token {
                None => missing(),
                Some(t) if file.accepts(t) => Decision::Allowed,
                Some(_) => Decision::Unauthenticated(
                    "the bearer token is not one of web.auth.tokens_file".into(),
                ),
            },
            Check::Kubernetes(reviewer) => match token {
                None => missing(),
                Some(t) => {
                    reviewer
                        .review(t, path, &method.as_str().to_ascii_lowercase())
                        .await
                }
            },
        }
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case).
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

/// Middleware: runs the request when the guard allows it, else answers 401, 403 or 503 with the reason.
pub async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let decision = guard
        .decide(request.method(), &path, bearer(&request))
        .await;
    let (status, message) = match decision {
        Decision::Allowed => return next.run(request).await,
        Decision::Unauthenticated(m) => (StatusCode::UNAUTHORIZED, m),
        Decision::Forbidden(m) => (StatusCode::FORBIDDEN, m),
        Decision::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m),
    };
    let mut response = super::json_error(status, message);
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"apf-monitor\""),
        );
    }
    response.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_open_other_gets_read_everything_else_writes() {
        assert_eq!(access(&Method::GET, "/healthz"), Access::Open);
        assert_eq!(access(&Method::HEAD, "/readyz"), Access::Open);
        assert_eq!(access(&Method::GET, "/metrics"), Access::Read);
        assert_eq!(access(&Method::GET, "/api/v1/silences"), Access::Read);
        assert_eq!(access(&Method::POST, "/api/v1/silences"), Access::Write);
        assert_eq!(access(&Method::DELETE, "/api/v1/silences/x"), Access::Write);
        assert_eq!(access(&Method::POST, "/-/reload"), Access::Write);
        assert_eq!(access(&Method::POST, "/healthz"), Access::Write);
    }

    fn guard(check: Check, protect_reads: bool) -> Guard {
        Guard {
            check,
            protect_reads,
        }
    }

    #[tokio::test]
    async fn without_a_mode_a_wide_listener_refuses_writes_and_serves_reads() {
        let g = guard(Check::RefuseWrites("0.0.0.0:9864".parse().unwrap()), false);
        assert_eq!(
            g.decide(&Method::GET, "/metrics", None).await,
            Decision::Allowed
        );
        let d = g.decide(&Method::POST, "/-/reload", Some("t")).await;
        assert!(
            matches!(&d, Decision::Forbidden(m) if m.contains("web.auth.mode")),
            "{d:?}"
        );
    }

    #[tokio::test]
    async fn tokens_guard_writes_and_reads_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# on-call\ns3cret\n").unwrap();
        let g = guard(Check::Tokens(TokensFile::open(&path).unwrap()), true);
        assert_eq!(
            g.decide(&Method::GET, "/healthz", None).await,
            Decision::Allowed
        );
        assert!(matches!(
            g.decide(&Method::GET, "/metrics", None).await,
            Decision::Unauthenticated(_)
        ));
        assert_eq!(
            g.decide(&Method::GET, "/metrics", Some("s3cret")).await,
            Decision::Allowed
        );
        assert!(matches!(
            g.decide(&Method::POST, "/-/reload", Some("# on-call"))
                .await,
            Decision::Unauthenticated(_)
        ));
    }

    #[tokio::test]
    async fn build_picks_the_default_from_the_listener() {
        let k = KubernetesConfig::default();
        let auth = AuthConfig::default();
        if in_cluster() {
            return;
        }
        let g = Guard::build(&auth, &k, "127.0.0.1:9864".parse().unwrap())
            .await
            .unwrap();
        assert!(matches!(g.check, Check::Everyone));
        let g = Guard::build(&auth, &k, "0.0.0.0:9864".parse().unwrap())
            .await
            .unwrap();
        assert!(matches!(g.check, Check::RefuseWrites(_)));
        let reads = AuthConfig {
            protect_reads: true,
            ..AuthConfig::default()
        };
        assert!(Guard::build(&reads, &k, "127.0.0.1:9864".parse().unwrap())
            .await
            .is_err());
    }
}
