//! Where to scrape: the replicas, each with its own HTTP client, credentials and timeout: given by URL (static), or
//! discovered from the endpoints of the `kubernetes` Service with the kube crate's apiserver access.
pub mod access;
pub mod client;
pub mod discovery;
mod settings;
mod token;

pub use client::{ClientError, ScrapeClient};
pub use settings::{
    KubernetesConfig, PrometheusTarget, ShardConfig, StaticTarget, TargetsConfig,
    DEFAULT_PROMETHEUS_SELECTOR,
};
pub use token::{TokenError, TokenFile};

use std::time::Duration;

use reqwest::Url;

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("target {target}: cannot read {what} {path}: {source}")]
    ReadFile {
        target: String,
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("target {target}: {what} {path} holds no valid PEM: {reason}")]
    Pem {
        target: String,
        what: &'static str,
        path: String,
        reason: String,
    },
    #[error("target {target}: the URL is not one to dial: {reason}")]
    Url { target: String, reason: String },
    #[error("target {target}: cannot build the HTTP client: {source}")]
    Client {
        target: String,
        source: reqwest::Error,
    },
    #[error("target {target}: cannot build the HTTP client: {source}")]
    ScrapeClient {
        target: String,
        source: client::ClientError,
    },
    #[error("two targets are both named {0:?}: give each a distinct `name`")]
    DuplicateName(String),
}

/// One kube-apiserver replica, ready to scrape.
#[derive(Clone)]
pub struct Target {
    /// The `apiserver` label: the configured name, else the URL's `host:port` (a discovered replica: `IP:port`).
    pub name: String,
    /// The URL the replica was given or found at: where requests go (the client holds it too).
    pub base_url: Url,
    pub transport: Transport,
    pub timeout: Duration,
}

/// How requests reach the replica: its client and, for a static target, the bearer token file (re-read as it
/// rotates). A replica reached with the kube crate's access has its credentials in the client.
#[derive(Clone)]
pub struct Transport {
    pub client: ScrapeClient,
    pub token: Option<TokenFile>,
}

impl std::fmt::Debug for Target {
    // The token never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("base_url", &self.base_url.as_str())
            .finish()
    }
}

/// The default `apiserver` label of a URL: `host:port`.
pub fn default_name(url: &Url) -> String {
    let host = url.host_str().unwrap_or("unknown");
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

fn read_file(
    target: &str,
    what: &'static str,
    path: &std::path::Path,
) -> Result<Vec<u8>, TargetError> {
    std::fs::read(path).map_err(|source| TargetError::ReadFile {
        target: target.to_string(),
        what,
        path: path.display().to_string(),
        source,
    })
}

/// The HTTP client every target and source starts from: rustls, our user agent, the connect timeout, no redirects
/// (a redirect could carry the token to another host), and the roots of `ca_file` when one is given.
pub fn client_builder(
    target: &str,
    timeout: Duration,
    ca_file: Option<&std::path::Path>,
) -> Result<reqwest::ClientBuilder, TargetError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .user_agent(crate::USER_AGENT)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(ca) = ca_file {
        let pem = read_file(target, "ca_file", ca)?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| TargetError::Pem {
                target: target.to_string(),
                what: "ca_file",
                path: ca.display().to_string(),
                reason: source.to_string(),
            })?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    Ok(builder)
}

/// Builds every static target, each with its own timeout or `default_timeout` (`scrape.timeout`); warns loudly
/// about `insecure_skip_verify`.
pub fn build_static(
    targets: &[StaticTarget],
    default_timeout: Duration,
) -> Result<Vec<Target>, TargetError> {
    let mut built: Vec<Target> = Vec::with_capacity(targets.len());
    for t in targets {
        let target = build_one(t, default_timeout)?;
        if built.iter().any(|b| b.name == target.name) {
            return Err(TargetError::DuplicateName(target.name));
        }
        built.push(target);
    }
    Ok(built)
}

fn build_one(t: &StaticTarget, default_timeout: Duration) -> Result<Target, TargetError> {
    let url = t.url.0.clone();
    let name = t.name.clone().unwrap_or_else(|| default_name(&url));
    let timeout = t.timeout.map(|i| i.0).unwrap_or(default_timeout);
    let path_text = |path: &std::path::Path| path.display().to_string();

    // The target as the kube crate's access would describe it, for the one client every replica is scraped with;
    // the bearer token stays ours (re-read at once when the file changes).
    let cluster_url = url.as_str().parse().map_err(|e| TargetError::Url {
        target: name.clone(),
        reason: format!("{e}"),
    })?;
    let mut config = kube::Config::new(cluster_url);
    config.connect_timeout = Some(timeout);
    if let Some(ca) = &t.ca_file {
        // Checked here for a clear error; kube re-reads the file as it rotates (`root_cert_file`).
        config.root_cert = Some(pem_certificates(&name, "ca_file", ca)?);
        config.root_cert_file = Some(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&t.client_cert_file, &t.client_key_file) {
        pem_certificates(&name, "client_cert_file", cert)?;
        read_file(&name, "client_key_file", key)?;
        config.auth_info.client_certificate = Some(path_text(cert));
        config.auth_info.client_key = Some(path_text(key));
    }
    if t.insecure_skip_verify {
        tracing::warn!(
            target = %name,
            "insecure_skip_verify is on: the apiserver's certificate is NOT verified and the bearer token can be \
             stolen by anyone on the path. Set ca_file instead."
        );
        config.accept_invalid_certs = true;
    }
    // The address dialled stays the URL's; the certificate is verified for `tls_server_name` (sent as SNI).
    config.tls_server_name = t.tls_server_name.clone();
    let client = ScrapeClient::new(&config).map_err(|source| TargetError::ScrapeClient {
        target: name.clone(),
        source,
    })?;
    Ok(Target {
        name,
        base_url: url,
        transport: Transport {
            client,
            token: t.bearer_token_file.clone().map(TokenFile::new),
        },
        timeout,
    })
}

/// The certificates of a PEM file (DER, as kube takes them): at least one, or a clear error.
fn pem_certificates(
    target: &str,
    what: &'static str,
    path: &std::path::Path,
) -> Result<Vec<Vec<u8>>, TargetError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let pem = read_file(target, what, path)?;
    let bad = |reason: String| TargetError::Pem {
        target: target.to_string(),
        what,
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no CERTIFICATE block".into()));
    }
    Ok(certs)
}
