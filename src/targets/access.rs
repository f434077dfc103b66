//! Apiserver access through the kube crate: a kubeconfig (a file, a context, `$KUBECONFIG`, `~/.kube/config`) or
//! the pod's service account, with whatever credentials they carry (tokens re-read as they rotate, exec plugins such
//! as `aws eks get-token` or kubelogin run and refreshed, client certificates), and the cluster's CA.
use std::time::Duration;

use crate::targets::KubernetesConfig;

use super::{ScrapeClient, Target, Transport};

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("cannot read the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "no apiserver access: no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a pod ({0}); give \
         --kubeconfig, targets.kubernetes.kubeconfig, or --target URL"
    )]
    Infer(kube::config::InferConfigError),
    #[error("the kubeconfig's context {context:?}: {source}")]
    Context {
        context: String,
        source: kube::config::KubeconfigError,
    },
    #[error("cannot reach the apiserver at {url}: {source}")]
    Client { url: String, source: kube::Error },
    #[error("cannot build the client for {url}: {source}")]
    ScrapeClient {
        url: String,
        source: super::ClientError,
    },
    #[error("{address}: not an address to dial ({reason})")]
    Address { address: String, reason: String },
}

/// The access `targets.kubernetes` (or `--kubeconfig`, `--context`) describes.
pub async fn access(k: &KubernetesConfig) -> Result<kube::Config, AccessError> {
    let options = kube::config::KubeConfigOptions {
        context: k.context.clone(),
        ..Default::default()
    };
    match (&k.kubeconfig, &k.context) {
        (Some(path), _) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                AccessError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|source| AccessError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })
        }
        (None, Some(context)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|source| AccessError::Context {
                context: context.clone(),
                source,
            }),
        (None, None) => kube::Config::infer().await.map_err(AccessError::Infer),
    }
}

/// A client for the API itself (discovery, the Lease).
pub fn client(config: &kube::Config) -> Result<kube::Client, AccessError> {
    kube::Client::try_from(config.clone()).map_err(|source| AccessError::Client {
        url: config.cluster_url.to_string(),
        source,
    })
}

/// One replica dialled at `address` (`IP:port`), its certificate verified against the cluster CA for
/// `server_name`, with the access' own credentials: the replica's `apiserver` label is its address. The scheme is
/// the access' own (a cluster served over plain HTTP, as a local test cluster may be, is dialled so).
pub fn replica(
    config: &kube::Config,
    address: &str,
    server_name: &str,
    timeout: Duration,
) -> Result<Target, AccessError> {
    let bad = |reason: String| AccessError::Address {
        address: address.to_string(),
        reason,
    };
    let scheme = config.cluster_url.scheme_str().unwrap_or("https");
    let url = format!("{scheme}://{address}");
    let mut config = config.clone();
    config.cluster_url = url.parse().map_err(|e| bad(format!("{e}")))?;
    config.tls_server_name = Some(server_name.to_string());
    let base_url = reqwest::Url::parse(&url).map_err(|e| bad(e.to_string()))?;
    Ok(Target {
        name: address.to_string(),
        base_url,
        transport: scrape_transport(&config)?,
        timeout,
    })
}

/// The API server URL itself, for when the replicas cannot be told apart (see `discovery`): what is scraped
/// there comes from whichever replica answers.
pub fn through_service(config: &kube::Config, timeout: Duration) -> Result<Target, AccessError> {
    let url = config.cluster_url.to_string();
    let base_url = reqwest::Url::parse(&url).map_err(|e| AccessError::Address {
        address: url.clone(),
        reason: e.to_string(),
    })?;
    Ok(Target {
        name: super::default_name(&base_url),
        base_url,
        transport: scrape_transport(config)?,
        timeout,
    })
}

/// The scrape client of a replica reached with this access: its credentials are the client's own.
fn scrape_transport(config: &kube::Config) -> Result<Transport, AccessError> {
    let client = ScrapeClient::new(config).map_err(|source| AccessError::ScrapeClient {
        url: config.cluster_url.to_string(),
        source,
    })?;
    Ok(Transport {
        client,
        token: None,
    })
}
