//! The HTTP client a replica is scraped with, whether it was given by URL or reached with the kube crate's access:
//! hyper's own, with the TLS, credentials and headers of a `kube::Config` (kube's `ConfigExt` parts, as kube's own
//! client is built), so that the size of hyper's read buffer can be ours.
use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// Hyper reads a response into a buffer that grows to ~400 KiB by default, and takes a fresh one for each chunk
/// while the previous chunk is still held. Buffers that large are mapped apart by malloc (our 256 KiB threshold) and
/// faulted in page by page as the kernel copies into them: on the 1.34 `/metrics`, that cost as much as the rest of
/// the download. Up to 128 KiB they come from the heap and are reused. Smaller costs the round: each chunk is a
/// hand-over between hyper's connection task and ours (fixed 64 KiB buffers: a 100 MB round 28 ms against 20 ms at
/// this size and 13-15 ms at hyper's default, for the same idle CPU; `cargo bench --bench round`, README
/// "Performance").
const READ_BUFFER_MAX: usize = 128 * 1024;

/// Idle connections kept per replica: a scrape and a dump can overlap.
const IDLE_PER_HOST: usize = 4;

pub type Request = http::Request<Empty<Bytes>>;
pub type Response = http::Response<Incoming>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error(
        "the access names a proxy ({0}), which apf-monitor does not dial through: scrape from where the \
         apiserver is reachable directly"
    )]
    Proxy(String),
}

/// One replica's client: cheap to clone, shared by every request to it.
#[derive(Clone)]
pub struct ScrapeClient(BoxCloneSyncService<Request, Response, BoxError>);

impl ScrapeClient {
    /// The client `config` describes: its URL (with any path prefix, as a proxy in front of the apiserver needs),
    /// CA (a file re-read as it rotates), client certificate, TLS server name, token or exec plugin, and
    /// impersonation headers; no redirect followed, no compression asked for.
    pub fn new(config: &kube::Config) -> Result<Self, ClientError> {
        if let Some(proxy) = &config.proxy_url {
            return Err(ClientError::Proxy(proxy.to_string()));
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(config.connect_timeout);
        let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
        builder
            .http1_max_buf_size(READ_BUFFER_MAX)
            .pool_max_idle_per_host(IDLE_PER_HOST);
        // A plain-HTTP URL (`kubectl proxy`, a local test cluster) gets no TLS set up: with no CA given, that would
        // load the system's trust store for nothing, or fail where it has none.
        if config.cluster_url.scheme() == Some(&http::uri::Scheme::HTTP) {
            Self::layered(config, builder.build(http))
        } else {
            let https = config.rustls_https_connector_with_connector(http)?;
            Self::layered(config, builder.build(https))
        }
    }

    /// The kube access' layers over `client`: the base URL, the credentials, the impersonation headers.
    fn layered<C>(
        config: &kube::Config,
        client: hyper_util::client::legacy::Client<C, Empty<Bytes>>,
    ) -> Result<Self, ClientError>
    where
        C: Connect + Clone + Send + Sync + 'static,
    {
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(client);
        Ok(Self(BoxCloneSyncService::new(service)))
    }

    /// Sends `request` (its URI a path: the base URL is the client's).
    pub async fn send(&self, request: Request) -> Result<Response, BoxError> {
        self.0.clone().oneshot(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_in_the_access_is_refused_by_name() {
        let mut config = kube::Config::new("https://10.0.0.1:6443".parse().unwrap());
        config.proxy_url = Some("http://proxy.corp:3128".parse().unwrap());
        match ScrapeClient::new(&config) {
            Err(ClientError::Proxy(proxy)) => assert!(proxy.contains("proxy.corp:3128"), "{proxy}"),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a proxy was accepted"),
        }
    }
}
