//! The HTTP client a replica is scraped with, whether it was given by URL or reached with the kube crate's access:
//! hyper's HTTP/1 connections, with the TLS, credentials and headers of a `kube::Config` (kube's `ConfigExt` parts,
//! as kube's own client is built).
//!
//! A connection is driven by the task that reads its response, not by a task of its own as in hyper-util's pooled
//! client: hyper hands a body over one read at a time, and waits for the reader to take each before it reads again,
//! so a connection in another task costs two wake-ups across threads per read (a 100 MB body: ~800 of them). Driven
//! in place, a read is a function call (docs/operations/performance.md: `cargo bench --bench round`).
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::Uri;
use http_body::Frame;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::client::legacy::connect::HttpConnector;
use kube::client::ConfigExt;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// Hyper reads a response into a buffer that grows to ~400 KiB by default, and takes a fresh one for each read
/// while the previous read's bytes are still held. Buffers that large are mapped apart by malloc (our 256 KiB
/// threshold) and faulted in page by page as the kernel copies into them: on the 1.34 `/metrics`, that cost as much
/// as the rest of the download. Up to 128 KiB they come from the heap and are reused.
const READ_BUFFER_MAX: usize = 128 * 1024;

/// Idle connections kept per replica: a scrape and a dump can overlap.
const IDLE_PER_HOST: usize = 4;

/// An idle connection older than this is closed rather than reused: kube-apiserver closes its own after 90 s
/// (`IdleTimeout` in k8s.io/apiserver `pkg/server/secure_serving.go`), and a replica gone for good should not keep
/// one open.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

pub type Request = http::Request<Empty<Bytes>>;
pub type Response = http::Response<Body>;

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
        // A plain-HTTP URL (`kubectl proxy`, a local test cluster) gets no TLS set up: with no CA given, that would
        // load the system's trust store for nothing, or fail where it has none.
        if config.cluster_url.scheme() == Some(&Scheme::HTTP) {
            Self::layered(config, Connections::new(http))
        } else {
            let https = config.rustls_https_connector_with_connector(http)?;
            Self::layered(config, Connections::new(https))
        }
    }

    /// The kube access' layers over `connections`: the base URL, the credentials, the impersonation headers.
    fn layered<C>(config: &kube::Config, connections: Connections<C>) -> Result<Self, ClientError>
    where
        Connections<C>:
            Service<Request, Response = Response, Error = BoxError> + Clone + Send + Sync + 'static,
        <Connections<C> as Service<Request>>::Future: Send + 'static,
    {
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(connections);
        Ok(Self(BoxCloneSyncService::new(service)))
    }

    /// Sends `request` (its URI a path: the base URL is the client's).
    pub async fn send(&self, request: Request) -> Result<Response, BoxError> {
        self.0.clone().oneshot(request).await
    }
}

/// Drives a connection: hyper's `Connection` future, whatever its transport.
type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// An HTTP/1 connection to a replica and what drives it.
struct Connection {
    /// `scheme://authority`: a connection is reused for the same only.
    origin: String,
    sender: http1::SendRequest<Empty<Bytes>>,
    driver: Driver,
    /// Since when it is idle, in the pool.
    idle_since: Instant,
}

impl Connection {
    /// Drives the connection until it can take a request: `false` when it closed meanwhile.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.driver.as_mut().poll(cx).is_ready() {
            // Closed, by either side: whatever the reason, it takes no more requests.
            return Poll::Ready(false);
        }
        self.sender.poll_ready(cx).map(|r| r.is_ok())
    }
}

/// The idle connections of one client, most recently used last.
type Pool = Arc<Mutex<Vec<Connection>>>;

/// The bottom of the client: connections to the request's origin, made with `connector` or taken from the pool.
#[derive(Clone)]
struct Connections<C> {
    connector: C,
    idle: Pool,
}

impl<C> Connections<C> {
    fn new(connector: C) -> Self {
        Self {
            connector,
            idle: Arc::default(),
        }
    }
}

impl<C> Service<Request> for Connections<C>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.send(request).await })
    }
}

impl<C> Connections<C>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
{
    async fn send(mut self, request: Request) -> Result<Response, BoxError> {
        let uri = request.uri().clone();
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(format!("{uri}: not an absolute URL").into());
        };
        let origin = format!("{scheme}://{authority}");
        let mut request = origin_form(request, authority);
        loop {
            let (mut connection, reused) = match self.idle_connection(&origin).await {
                Some(c) => (c, true),
                None => (self.connect(&uri, origin.clone()).await?, false),
            };
            let sent = connection.sender.try_send_request(request);
            match drive_until(&mut connection.driver, sent).await {
                Ok(response) => {
                    let pool = Arc::downgrade(&self.idle);
                    return Ok(response.map(|incoming| Body {
                        incoming,
                        connection: Some(connection),
                        pool,
                    }));
                }
                // A reused connection the server closed before it read the request: the request again, on
                // another (as hyper-util's client does).
                Err(mut e) if reused => match e.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(e.into_error().into()),
                },
                Err(e) => return Err(e.into_error().into()),
            }
        }
    }

    /// An idle connection to `origin` still open and ready, the most recently used first; those closed meanwhile
    /// or idle too long are dropped.
    async fn idle_connection(&self, origin: &str) -> Option<Connection> {
        loop {
            let mut connection = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let at = idle.iter().rposition(|c| c.origin == origin)?;
                idle.remove(at)
            };
            if connection.idle_since.elapsed() > IDLE_TIMEOUT {
                continue;
            }
            let ready = std::future::poll_fn(|cx| match connection.poll_ready(cx) {
                // Not ready at once: busy finishing the last response or closing; either way, not for us.
                Poll::Pending => Poll::Ready(false),
                ready => ready,
            })
            .await;
            if ready {
                return Some(connection);
            }
        }
    }

    async fn connect(&mut self, uri: &Uri, origin: String) -> Result<Connection, BoxError> {
        let io = self
            .connector
            .ready()
            .await
            .map_err(Into::into)?
            .call(uri.clone())
            .await
            .map_err(Into::into)?;
        let (sender, connection) = http1::Builder::new()
            .max_buf_size(READ_BUFFER_MAX)
            .handshake(io)
            .await?;
        Ok(Connection {
            origin,
            sender,
            driver: Box::pin(connection),
            idle_since: Instant::now(),
        })
    }
}

/// `sent` (the response to a request), driving the connection meanwhile. A connection that closes first is dropped,
/// which fails `sent` with why (and gives back a request it never sent).
async fn drive_until<T>(driver: &mut Driver, sent: impl Future<Output = T>) -> T {
    let mut sent = std::pin::pin!(sent);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = sent.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        if driver.as_mut().poll(cx).is_ready() {
            // A finished driver is not polled again; what stands in for it never finishes, and the connection's
            // sender, its dispatcher dropped, says it is closed.
            *driver = Box::pin(std::future::pending());
            return sent.as_mut().poll(cx);
        }
        Poll::Pending
    })
    .await
}

/// The request as HTTP/1 sends it to a server: its path alone, the host in `Host`.
fn origin_form(mut request: Request, authority: &Authority) -> Request {
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .map_or_else(Uri::default, Uri::from);
    *request.uri_mut() = path;
    if let Ok(host) = http::HeaderValue::from_str(authority.as_str()) {
        request
            .headers_mut()
            .entry(http::header::HOST)
            .or_insert(host);
    }
    request
}

/// A response's body, read by the task that reads it: each poll drives the connection. At its end the connection
/// goes back to its client's pool; dropped before its end, the connection is closed.
pub struct Body {
    incoming: Incoming,
    connection: Option<Connection>,
    pool: std::sync::Weak<Mutex<Vec<Connection>>>,
}

impl Body {
    fn release(&mut self) {
        let (Some(mut connection), Some(pool)) = (self.connection.take(), self.pool.upgrade())
        else {
            return;
        };
        connection.idle_since = Instant::now();
        let mut idle = pool.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() >= IDLE_PER_HOST {
            idle.remove(0);
        }
        idle.push(connection);
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        // Twice at most: the body, then (when nothing was there) the connection reading more into it.
        for _ in 0..2 {
            match Pin::new(&mut this.incoming).poll_frame(cx) {
                Poll::Ready(None) => {
                    this.release();
                    return Poll::Ready(None);
                }
                Poll::Ready(frame) => return Poll::Ready(frame),
                Poll::Pending => {}
            }
            let Some(connection) = this.connection.as_mut() else {
                return Poll::Pending;
            };
            if connection.driver.as_mut().poll(cx).is_ready() {
                // Closed: the body has its end or its error now.
                this.connection = None;
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server answering each GET with `hello`; closing each connection after its first answer when `close`.
    /// Counts the connections it accepted.
    async fn server(close: bool) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while stream.read(&mut byte).await.unwrap_or(0) == 1 {
                        head.push(byte[0]);
                        if head.ends_with(b"\r\n\r\n") {
                            head.clear();
                            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
                            if stream.write_all(answer).await.is_err() || close {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    fn client_of(url: &str) -> ScrapeClient {
        ScrapeClient::new(&kube::Config::new(url.parse().unwrap())).unwrap()
    }

    async fn get(client: &ScrapeClient) -> String {
        let request = http::Request::get("/metrics").body(Empty::new()).unwrap();
        let body = client.send(request).await.unwrap().into_body();
        String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_body_is_read() {
        let (url, accepted) = server(false).await;
        let client = client_of(&url);
        for _ in 0..3 {
            assert_eq!(get(&client).await, "hello");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_replaced() {
        let (url, accepted) = server(true).await;
        let client = client_of(&url);
        for _ in 0..3 {
            assert_eq!(get(&client).await, "hello");
            // The server's close reaches the idle connection before the next request.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_body_dropped_unread_closes_its_connection() {
        let (url, accepted) = server(false).await;
        let client = client_of(&url);
        let request = http::Request::get("/metrics").body(Empty::new()).unwrap();
        drop(client.send(request).await.unwrap());
        assert_eq!(get(&client).await, "hello");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

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
