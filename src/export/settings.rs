//! The `web` section: how the HTTP API is served (TLS) and who may use it.
use std::path::PathBuf;

use serde::Deserialize;

/// `web:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// HTTPS only, with this certificate and key (re-read when they change).
    #[serde(default)]
    pub tls: Option<super::tls::TlsFiles>,
    #[serde(default)]
    pub auth: AuthConfig,
}

/// `web.auth:`: how callers of the HTTP API are authenticated and authorized.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Unset: `kubernetes` in a pod; elsewhere writes are refused unless apf-monitor listens on loopback only.
    pub mode: Option<AuthMode>,
    /// Mode `tokens`: the accepted bearer tokens, one a line (`#` starts a comment); re-read when it changes.
    pub tokens_file: Option<PathBuf>,
    /// Reads (`/metrics`, `/api/v1/*`, the page) need an authorized caller too; `/healthz` and `/readyz` stay open.
    pub protect_reads: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// A TokenReview of the bearer token, then a SubjectAccessReview of the path and the verb, as kube-rbac-proxy
    /// does.
    Kubernetes,
    /// Any token of `tokens_file`.
    Tokens,
    /// Nobody is asked anything.
    None,
}

impl AuthConfig {
    pub fn validate(&self, at: &impl Fn(&str) -> String) -> Result<(), String> {
        match (self.mode, &self.tokens_file) {
            (Some(AuthMode::Tokens), None) => Err(format!(
                "web.auth.mode tokens needs web.auth.tokens_file, the file of accepted tokens{}",
                at("mode")
            )),
            (mode, Some(_)) if mode != Some(AuthMode::Tokens) => Err(format!(
                "web.auth.tokens_file is read only with web.auth.mode: tokens{}",
                at("tokens_file")
            )),
            (Some(AuthMode::None), _) if self.protect_reads => Err(format!(
                "web.auth.protect_reads needs a caller to check: set web.auth.mode to kubernetes or tokens{}",
                at("protect_reads")
            )),
            _ => Ok(()),
        }
    }
}
