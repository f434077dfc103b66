//! HTTP against one replica: bounded, streaming bodies; errors classified into the `reason` label of
//! `apf_monitor_scrape_errors_total`.
mod backoff;
mod metrics;
pub mod objects;
pub mod prometheus;
mod round;
mod settings;

pub use backoff::{EndpointState, Verdict, UNAVAILABLE_RETRY};
pub use metrics::ScrapeMetrics;
pub use objects::fetch_flowcontrol_list;
pub use round::{scrape_replica, EndpointResult, ReplicaScrape, ScrapePlan};
pub use settings::ScrapeConfig;

use std::time::Duration;

use crate::errors::chain_of;
use crate::targets::Target;
use apf::endpoints::{self, Dump};

/// What is fetched from each replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Metrics,
    DumpPriorityLevels,
    DumpQueues,
    DumpRequests,
    /// The flowcontrol objects (PriorityLevelConfigurations and FlowSchemas): listed, then watched.
    PriorityLevelConfigurations,
    /// A Prometheus' query API holding the replicas' `/metrics` (a Prometheus source, not a replica).
    Prometheus,
}

impl Endpoint {
    pub const ALL: [Endpoint; 6] = [
        Endpoint::Metrics,
        Endpoint::DumpPriorityLevels,
        Endpoint::DumpQueues,
        Endpoint::DumpRequests,
        Endpoint::PriorityLevelConfigurations,
        Endpoint::Prometheus,
    ];

    /// The `endpoint` label.
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Metrics => "metrics",
            Endpoint::DumpPriorityLevels => "dump_priority_levels",
            Endpoint::DumpQueues => "dump_queues",
            Endpoint::DumpRequests => "dump_requests",
            Endpoint::PriorityLevelConfigurations => "priority_level_configurations",
            Endpoint::Prometheus => "prometheus",
        }
    }

    /// The endpoint of an `endpoint` label, as error reports name it.
    pub fn from_label(label: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.label() == label)
    }

    pub fn is_dump(self) -> bool {
        self.dump().is_some()
    }

    /// The RBAC rule a 403 on this endpoint says is missing.
    pub fn rbac_hint(self) -> &'static str {
        match self {
            Endpoint::Metrics => endpoints::METRICS_RBAC_RULE,
            Endpoint::PriorityLevelConfigurations => endpoints::FLOWCONTROL_RBAC_RULE,
            Endpoint::DumpPriorityLevels | Endpoint::DumpQueues | Endpoint::DumpRequests => {
                endpoints::DUMPS_RBAC_RULE
            }
            // Not Kubernetes RBAC: the query API's own access control (a proxy, the provider's IAM).
            Endpoint::Prometheus => {
                "to query the Prometheus API (its own access control, not RBAC)"
            }
        }
    }

    /// The debug dump this endpoint reads, if it is one.
    pub fn dump(self) -> Option<Dump> {
        match self {
            Endpoint::DumpPriorityLevels => Some(Dump::PriorityLevels),
            Endpoint::DumpQueues => Some(Dump::Queues),
            Endpoint::DumpRequests => Some(Dump::Requests),
            Endpoint::Metrics | Endpoint::PriorityLevelConfigurations | Endpoint::Prometheus => {
                None
            }
        }
    }
}

/// Why a request failed; [`ScrapeError::reason`] is the metric label.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScrapeError {
    #[error("no response within {0:?}: the apiserver is slow or unreachable; raise scrape.timeout or check the network")]
    Timeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("HTTP {status}: {detail}")]
    Http { status: u16, detail: String },
    #[error("throttled by the apiserver (HTTP 429){}", retry_after.map(|d| format!(", Retry-After {}s", d.as_secs())).unwrap_or_default())]
    Throttled { retry_after: Option<Duration> },
    #[error("response larger than scrape.max_body_bytes ({limit} bytes): cut off; raise the limit if this replica is that big")]
    TooLarge { limit: u64 },
    #[error("reading the response failed: {0}")]
    Body(String),
    #[error("cannot read the response: {0}")]
    Parse(String),
    #[error("bearer token: {0}")]
    Token(String),
    /// A Prometheus API refused the query, or answered for only part of its stores.
    #[error("the query failed: {0}")]
    Query(String),
}

/// The `reason` label of `apf_monitor_scrape_errors_total`: one per kind of [`ScrapeError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorReason {
    Timeout,
    Connect,
    Http4xx,
    Http5xx,
    HttpOther,
    Throttled,
    TooLarge,
    Body,
    Parse,
    Token,
    Query,
}

impl ErrorReason {
    /// Every value, so that error counters exist at 0 from start-up.
    pub const ALL: [ErrorReason; 11] = [
        ErrorReason::Timeout,
        ErrorReason::Connect,
        ErrorReason::Http4xx,
        ErrorReason::Http5xx,
        ErrorReason::Throttled,
        ErrorReason::TooLarge,
        ErrorReason::Body,
        ErrorReason::Parse,
        ErrorReason::Token,
        ErrorReason::HttpOther,
        ErrorReason::Query,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ErrorReason::Timeout => "timeout",
            ErrorReason::Connect => "connect",
            ErrorReason::Http4xx => "http_4xx",
            ErrorReason::Http5xx => "http_5xx",
            ErrorReason::HttpOther => "http_other",
            ErrorReason::Throttled => "throttled",
            ErrorReason::TooLarge => "too_large",
            ErrorReason::Body => "body",
            ErrorReason::Parse => "parse",
            ErrorReason::Token => "token",
            ErrorReason::Query => "query",
        }
    }
}

impl ScrapeError {
    /// The error's kind: its `reason` label.
    pub fn reason(&self) -> ErrorReason {
        match self {
            ScrapeError::Timeout(_) => ErrorReason::Timeout,
            ScrapeError::Connect(_) => ErrorReason::Connect,
            ScrapeError::Http { status, .. } if (400..500).contains(status) => ErrorReason::Http4xx,
            ScrapeError::Http { status, .. } if *status >= 500 => ErrorReason::Http5xx,
            ScrapeError::Http { .. } => ErrorReason::HttpOther,
            ScrapeError::Throttled { .. } => ErrorReason::Throttled,
            ScrapeError::TooLarge { .. } => ErrorReason::TooLarge,
            ScrapeError::Body(_) => ErrorReason::Body,
            ScrapeError::Parse(_) => ErrorReason::Parse,
            ScrapeError::Token(_) => ErrorReason::Token,
            ScrapeError::Query(_) => ErrorReason::Query,
        }
    }

    /// 403 or 404: the endpoint is not for us (RBAC) or not there (APF off, an old version, a proxy).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ScrapeError::Http {
                status: 403 | 404,
                ..
            }
        )
    }
}

/// Where a body's chunks go as they arrive.
pub trait BodySink: Send {
    /// The `Accept` header to send: the formats this sink reads, when it reads more than one.
    fn accepts(&self) -> Option<&'static str> {
        None
    }
    /// The response's `Content-Type`, before its first chunk.
    fn content_type(&mut self, _content_type: Option<&str>) {}
    fn accept(&mut self, chunk: bytes::Bytes) -> impl std::future::Future<Output = ()> + Send;
}

/// The whole body, for the small ones (dumps, object lists).
impl BodySink for Vec<u8> {
    async fn accept(&mut self, chunk: bytes::Bytes) {
        self.extend_from_slice(&chunk);
    }
}

/// GETs `path` from the target and hands the body to `sink` as it arrives, at most `max_body` bytes, all
/// within the target's timeout. No compression is asked for: it costs the apiserver CPU (EKS guide).
pub async fn fetch(
    target: &Target,
    path: &str,
    max_body: u64,
    sink: &mut impl BodySink,
) -> Result<(), ScrapeError> {
    let request = request(target, path, sink.accepts())?;
    within(target, async {
        let response = send(target, request).await?;
        read(response, max_body, sink).await
    })
    .await
}

/// `request` sent to the target; its response's head.
async fn send(
    target: &Target,
    request: crate::targets::client::Request,
) -> Result<crate::targets::client::Response, ScrapeError> {
    target
        .transport
        .client
        .send(request)
        .await
        .map_err(classify)
}

/// `work` (a request sent, and what of its answer is read at once) within the target's timeout.
async fn within<T>(
    target: &Target,
    work: impl std::future::Future<Output = Result<T, ScrapeError>>,
) -> Result<T, ScrapeError> {
    match tokio::time::timeout(target.timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(ScrapeError::Timeout(target.timeout)),
    }
}

/// The GET of `path` (the client adds the base URL): our user agent, `accept`, and for a static target the bearer
/// token file's current token. The kube access adds its own credentials (token files re-read, exec plugins
/// refreshed).
fn request(
    target: &Target,
    path: &str,
    accept: Option<&'static str>,
) -> Result<crate::targets::client::Request, ScrapeError> {
    let mut request = http::Request::get(path).header(http::header::USER_AGENT, crate::USER_AGENT);
    if let Some(accept) = accept {
        request = request.header(http::header::ACCEPT, accept);
    }
    if let Some(token) = &target.transport.token {
        let token = token
            .current()
            .map_err(|e| ScrapeError::Token(e.to_string()))?;
        let mut value = http::HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
            ScrapeError::Token("the bearer token is not a valid header value".into())
        })?;
        // hyper keeps a sensitive value out of its logs and HPACK tables.
        value.set_sensitive(true);
        request = request.header(http::header::AUTHORIZATION, value);
    }
    request
        .body(http_body_util::Empty::new())
        .map_err(|e| ScrapeError::Body(format!("cannot build the request for {path}: {e}")))
}

/// The request with the token file's current token as its bearer (re-read when the file changed).
pub(crate) fn with_token(
    request: reqwest::RequestBuilder,
    token: Option<&crate::targets::TokenFile>,
) -> Result<reqwest::RequestBuilder, ScrapeError> {
    Ok(match token {
        Some(token) => {
            let token = token
                .current()
                .map_err(|e| ScrapeError::Token(e.to_string()))?;
            request.bearer_auth(&*token)
        }
        None => request,
    })
}

/// What a person is asked when an apiserver's endpoint answered with an HTML page.
const APISERVER_URL_HINT: &str =
    "is this the apiserver's URL? (a web server or a proxy answered, not kube-apiserver)";

/// `an HTML page (text/html; charset=utf-8)` when a body is one, by its content type or else by its first bytes:
/// what an error says instead of the page's markup.
pub(crate) fn html_page(content_type: Option<&str>, start: &[u8]) -> Option<String> {
    let declared = content_type.is_some_and(|t| {
        let t = t.trim_start().to_ascii_lowercase();
        t.starts_with("text/html") || t.starts_with("application/xhtml")
    });
    let head = String::from_utf8_lossy(&start[..start.len().min(64)])
        .trim_start()
        .to_ascii_lowercase();
    let looks = head.starts_with("<!doctype html") || head.starts_with("<html");
    (declared || looks).then(|| match content_type {
        Some(t) => format!("an HTML page ({t})"),
        None => "an HTML page".to_string(),
    })
}

/// The body (and its content type) of a response whose status says it is one; else why not: 429 with its
/// `Retry-After`, any other status with a short excerpt of its body.
async fn success<B>(response: http::Response<B>) -> Result<(B, Option<String>), ScrapeError>
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
{
    use http_body_util::BodyExt;
    let status = response.status();
    if status.as_u16() == 429 {
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        return Err(ScrapeError::Throttled { retry_after });
    }
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = response.into_body();
    if !status.is_success() {
        // A short excerpt of the body says why (an apiserver Status); never the whole thing, and never an HTML
        // page's markup (a web server's or a proxy's page: told as one).
        let mut detail = String::new();
        if let Some(Ok(frame)) = body.frame().await {
            if let Some(chunk) = frame.data_ref() {
                detail = match html_page(content_type.as_deref(), chunk) {
                    Some(page) => format!("{page}: {APISERVER_URL_HINT}"),
                    None => String::from_utf8_lossy(&chunk[..chunk.len().min(300)])
                        .trim()
                        .replace('\n', " "),
                };
            }
        }
        return Err(ScrapeError::Http {
            status: status.as_u16(),
            detail,
        });
    }
    // An HTML page is no answer of the apiserver's, whatever the endpoint: said as such rather than as markup that
    // does not parse.
    if let Some(page) = html_page(content_type.as_deref(), &[]) {
        return Err(ScrapeError::Parse(format!(
            "HTTP {status}: {page}: {APISERVER_URL_HINT}",
            status = status.as_u16()
        )));
    }
    Ok((body, content_type))
}

/// The status and body of a response, whichever client got it.
async fn read<B>(
    response: http::Response<B>,
    max_body: u64,
    sink: &mut impl BodySink,
) -> Result<(), ScrapeError>
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: std::error::Error,
{
    use http_body_util::BodyExt;
    let (mut body, content_type) = success(response).await?;
    sink.content_type(content_type.as_deref());
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ScrapeError::Body(chain_of(&e)))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        total += chunk.len() as u64;
        if total > max_body {
            return Err(ScrapeError::TooLarge { limit: max_body });
        }
        sink.accept(chunk).await;
    }
    Ok(())
}

/// The GET of `path` whose body comes as long as the server sends it (a watch): the response's head within the
/// target's timeout, the body for the caller to read and bound.
pub(crate) async fn open(
    target: &Target,
    path: &str,
) -> Result<crate::targets::client::Body, ScrapeError> {
    let request = request(target, path, None)?;
    within(target, async {
        let response = send(target, request).await?;
        Ok(success(response).await?.0)
    })
    .await
}

/// A request that got no response: the kube access' credentials (an exec plugin failing, a token file gone) or the
/// connection (refused, TLS).
fn classify(e: tower::BoxError) -> ScrapeError {
    match e.downcast::<kube::Error>() {
        Ok(kube) => match *kube {
            kube::Error::Auth(e) => ScrapeError::Token(chain_of(&e)),
            other => ScrapeError::Connect(with_tls_hint(chain_of(&other))),
        },
        Err(other) => ScrapeError::Connect(with_tls_hint(chain_of(&*other))),
    }
}

/// A certificate the client does not accept is a matter of TLS, not of the network or of RBAC: say what to give.
fn with_tls_hint(chain: String) -> String {
    if chain.contains("NotValidForName") {
        return format!(
            "{chain}: the server's certificate does not name the host dialled; give the name it was issued for \
             (tls_server_name in the config; a kubeconfig's tls-server-name)"
        );
    }
    const UNTRUSTED: [&str; 3] = [
        "UnknownIssuer",
        "invalid peer certificate",
        "certificate verify failed",
    ];
    if UNTRUSTED.iter().any(|s| chain.contains(s)) {
        format!(
            "{chain}: the server's certificate is not trusted; give the CA that signed it \
             (--certificate-authority FILE, ca_file in the config, or a kubeconfig that holds it)"
        )
    } else {
        chain
    }
}

/// `Retry-After` is seconds or an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    if let Ok(secs) = value.trim().parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate_parse(value.trim())?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

fn httpdate_parse(value: &str) -> Option<std::time::SystemTime> {
    // `Sun, 06 Nov 1994 08:49:37 GMT` -> RFC 3339, which humantime reads.
    let parts: Vec<&str> = value.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let m = MONTHS.iter().position(|x| x == month)? + 1;
    humantime::parse_rfc3339(&format!("{year}-{m:02}-{day:0>2}T{time}Z")).ok()
}

/// `timeout` is the target's: reqwest times out only the connect, which is bounded by the same value. reqwest's own
/// message is terse ("error sending request"): the chain of causes says what went wrong (TLS, refused...).
pub(crate) fn classify_reqwest(e: reqwest::Error, timeout: Duration) -> ScrapeError {
    if e.is_timeout() {
        return ScrapeError::Timeout(timeout);
    }
    if e.is_connect() {
        return ScrapeError::Connect(with_tls_hint(chain_of(&e)));
    }
    ScrapeError::Body(chain_of(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_refused_says_what_to_give() {
        let unknown = "error sending request: client error (Connect): invalid peer certificate: UnknownIssuer";
        let hint = with_tls_hint(unknown.into());
        assert!(
            hint.contains("not trusted") && hint.contains("--certificate-authority"),
            "{hint}"
        );
        let name = "error sending request: invalid peer certificate: NotValidForName";
        let hint = with_tls_hint(name.into());
        assert!(
            hint.contains("tls_server_name") && !hint.contains("--certificate-authority"),
            "{hint}"
        );
        assert_eq!(
            with_tls_hint("tcp connect error: Connection refused".into()),
            "tcp connect error: Connection refused"
        );
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::ZERO)
        );
        let later = std::time::SystemTime::now() + Duration::from_secs(3600);
        let text = httpdate::fmt(later);
        let d = parse_retry_after(&text).unwrap();
        assert!(
            d > Duration::from_secs(3500) && d <= Duration::from_secs(3600),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    mod httpdate {
        pub fn fmt(t: std::time::SystemTime) -> String {
            // humantime gives RFC 3339; rebuild the IMF-fixdate form from it.
            let s = humantime::format_rfc3339_seconds(t).to_string();
            let (date, time) = s.trim_end_matches('Z').split_once('T').unwrap();
            let mut d = date.split('-');
            let (y, m, day) = (d.next().unwrap(), d.next().unwrap(), d.next().unwrap());
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            format!(
                "Mon, {day} {} {y} {time} GMT",
                MONTHS[m.parse::<usize>().unwrap() - 1]
            )
        }
    }
}
