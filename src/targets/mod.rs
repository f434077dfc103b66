//! Where to scrape: the replicas, each with its own HTTP client, credentials and timeout: given by URL (static), or
//! discovered from the endpoints of the `kubernetes` Service with the kube crate's apiserver access.
pub mod access;
pub mod discovery;
mod settings;
mod token;

pub use settings::{
    KubernetesConfig, PrometheusTarget, StaticTarget, TargetsConfig, DEFAULT_PROMETHEUS_SELECTOR,
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
    #[error("target {target}: {what} {path} holds no valid PEM: {source}")]
    Pem {
        target: String,
        what: &'static str,
        path: String,
        source: reqwest::Error,
    },
    #[error("target {target}: cannot build the HTTP client: {source}")]
    Client {
        target: String,
        source: reqwest::Error,
    },
    #[error("two targets are both named {0:?}: give each a distinct `name`")]
    DuplicateName(String),
}

/// One kube-apiserver replica, ready to scrape.
#[derive(Clone)]
pub struct Target {
    /// The `apiserver` label: the configured name, else the URL's `host:port` (a discovered replica: `IP:port`).
    pub name: String,
    /// Where requests go (with `tls_server_name`, the host is that name, resolved to the configured address).
    pub base_url: Url,
    pub transport: Transport,
    pub timeout: Duration,
}

/// How requests reach the replica.
#[derive(Clone)]
pub enum Transport {
    /// A static target: our own client, a bearer token file re-read as it rotates.
    Http {
        client: reqwest::Client,
        token: Option<TokenFile>,
    },
    /// A replica reached with the apiserver access of the kube crate (kubeconfig, exec plugins, the pod's
    /// service account), dialled at its own address.
    Kube(kube::Client),
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

impl Target {
    pub fn url(&self, path_and_query: &str) -> Url {
        let mut url = self.base_url.clone();
        let base = url.path().trim_end_matches('/').to_string();
        match path_and_query.split_once('?') {
            Some((path, query)) => {
                url.set_path(&format!("{base}{path}"));
                url.set_query(Some(query));
            }
            None => url.set_path(&format!("{base}{path_and_query}")),
        }
        url
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
        .user_agent(concat!("apf-monitor/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(ca) = ca_file {
        let pem = read_file(target, "ca_file", ca)?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| TargetError::Pem {
                target: target.to_string(),
                what: "ca_file",
                path: ca.display().to_string(),
                source,
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
    let read = |what: &'static str, path: &std::path::Path| read_file(&name, what, path);
    let pem_err = |what: &'static str, path: &std::path::Path, source| TargetError::Pem {
        target: name.clone(),
        what,
        path: path.display().to_string(),
        source,
    };

    // The apiserver never redirects these paths (the base client follows none).
    let mut builder =
        client_builder(&name, timeout, t.ca_file.as_deref())?.pool_max_idle_per_host(4);
    if let (Some(cert), Some(key)) = (&t.client_cert_file, &t.client_key_file) {
        let mut pem = read("client_cert_file", cert)?;
        pem.push(b'\n');
        pem.extend(read("client_key_file", key)?);
        builder = builder.identity(
            reqwest::Identity::from_pem(&pem).map_err(|e| pem_err("client_key_file", key, e))?,
        );
    }
    if t.insecure_skip_verify {
        tracing::warn!(
            target = %name,
            "insecure_skip_verify is on: the apiserver's certificate is NOT verified and the bearer token can be \
             stolen by anyone on the path. Set ca_file instead."
        );
        builder = builder.danger_accept_invalid_certs(true);
    }
    let mut base_url = url.clone();
    if let Some(server_name) = &t.tls_server_name {
        // Verify the certificate against `server_name` while connecting to the configured address: the URL's host
        // becomes the name (sent as SNI and checked), and the name resolves to the configured address.
        if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if let Ok(ip) = host.parse::<std::net::IpAddr>() {
                builder = builder.resolve(server_name, std::net::SocketAddr::new(ip, port));
                let _ = base_url.set_host(Some(server_name));
            } else {
                tracing::warn!(target = %name, "tls_server_name is only used when the URL holds an IP address");
            }
        }
    }
    let client = builder.build().map_err(|source| TargetError::Client {
        target: name.clone(),
        source,
    })?;
    Ok(Target {
        name,
        base_url,
        transport: Transport::Http {
            client,
            token: t.bearer_token_file.clone().map(TokenFile::new),
        },
        timeout,
    })
}
