//! HTTP plumbing shared by Slack, webhook and Alertmanager: secret URLs read per send, status classification, and
//! error texts that never carry a URL's secret parts.
use std::path::PathBuf;
use std::time::Duration;

use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use super::NotifyError;

/// A URL given inline or in a file (a mounted Secret, re-read at each send so a rotation is picked up).
#[derive(Clone)]
pub(crate) enum UrlSource {
    Inline(Url),
    File(PathBuf),
}

impl UrlSource {
    /// Checks the inline URL or the file now, so a broken config fails at start-up with a clear error.
    pub(crate) fn new(
        inline: Option<&str>,
        file: Option<&PathBuf>,
        key: &str,
    ) -> Result<Self, String> {
        match (inline, file) {
            (Some(text), None) => parse_secret_url(text)
                .map(UrlSource::Inline)
                .map_err(|e| format!("{key}: {e}")),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("{key}_file {}: {e}", path.display()))?;
                parse_secret_url(&text)
                    .map_err(|e| format!("{key}_file {}: {e}", path.display()))?;
                Ok(UrlSource::File(path.clone()))
            }
            _ => Err(format!("give {key} or {key}_file (one)")),
        }
    }

    pub(crate) async fn resolve(&self) -> Result<Url, NotifyError> {
        match self {
            UrlSource::Inline(url) => Ok(url.clone()),
            UrlSource::File(path) => {
                // An unreadable file may be a Secret being re-mounted: worth another try.
                let text =
                    tokio::fs::read_to_string(path)
                        .await
                        .map_err(|e| NotifyError::Retryable {
                            message: format!("cannot read URL file {}: {e}", path.display()),
                            retry_after: None,
                        })?;
                parse_secret_url(&text).map_err(|e| {
                    NotifyError::Permanent(format!("URL file {}: {e}", path.display()))
                })
            }
        }
    }
}

/// Parses a URL without ever echoing it: the error says what is wrong, not what was written.
pub(crate) fn parse_secret_url(text: &str) -> Result<Url, String> {
    let text = text.trim();
    // `host:port/path` would be "relative URL without a base": what is missing is the scheme.
    if !text.contains("://") {
        return Err("the URL must start with http:// or https://".into());
    }
    let url = Url::parse(text).map_err(|e| format!("not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the URL must start with http:// or https://".into());
    }
    if url.host_str().is_none() {
        return Err("the URL has no host".into());
    }
    Ok(url)
}

/// `https://hooks.slack.com`: what may appear in logs and errors of a URL whose path or query is a secret.
pub(crate) fn redact(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{}://{h}:{p}", url.scheme()),
        (Some(h), None) => format!("{}://{h}", url.scheme()),
        _ => format!("{}://", url.scheme()),
    }
}

/// A token from a file, trimmed; re-read at each send.
pub(crate) async fn read_token(path: &PathBuf) -> Result<String, NotifyError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| NotifyError::Retryable {
            message: format!("cannot read token file {}: {e}", path.display()),
            retry_after: None,
        })?;
    Ok(text.trim().to_string())
}

pub(crate) fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .user_agent(crate::USER_AGENT)
        .build()
        .map_err(|e| format!("cannot build HTTP client: {}", describe(&e.without_url())))
}

/// What came back from a POST.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub retry_after: Option<Duration>,
    pub body: String,
}

/// One POST of a JSON body. `shown` is how the URL may be named in the error (redacted or not).
pub(crate) async fn post_json(
    client: &reqwest::Client,
    url: Url,
    shown: &str,
    body: Vec<u8>,
    bearer: Option<&str>,
) -> Result<Reply, NotifyError> {
    let mut req = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(token) = bearer {
        req = req.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let resp = req.send().await.map_err(|e| NotifyError::Retryable {
        message: format!("POST {shown}: {}", describe(&e.without_url())),
        retry_after: None,
    })?;
    let status = resp.status();
    let retry_after = retry_after(resp.headers());
    // The body only matters for error texts; a broken body after a 2xx is still a delivery.
    let body = resp.text().await.unwrap_or_default();
    Ok(Reply {
        status,
        retry_after,
        body,
    })
}

/// 2xx: delivered. 429, 5xx (and 408): try again. Any other status: the request itself is wrong.
pub(crate) fn classify(reply: &Reply, shown: &str) -> Result<(), NotifyError> {
    let status = reply.status;
    if status.is_success() {
        return Ok(());
    }
    // A web server's or a proxy's page is told as one, not pasted as markup.
    let text = match crate::scrape::html_page(None, reply.body.as_bytes()) {
        Some(page) => format!("{page}: is this the receiver's URL?"),
        None => super::format::truncate_chars(reply.body.trim(), 200),
    };
    let message = if text.is_empty() {
        format!("POST {shown}: HTTP {status}")
    } else {
        format!("POST {shown}: HTTP {status}: {text}")
    };
    if status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
    {
        Err(NotifyError::Retryable {
            message,
            retry_after: reply.retry_after,
        })
    } else {
        Err(NotifyError::Permanent(message))
    }
}

/// `Retry-After` in seconds (what Slack sends); an HTTP date is ignored and the backoff applies.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.min(3600)))
}

/// An error and its causes ("error sending request: tcp connect error: Connection refused"), for errors already
/// stripped of their URL.
pub(crate) fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_scheme_and_host_only() {
        let url = Url::parse("https://hooks.slack.com/services/T000/B000/XXXXSECRET").unwrap();
        assert_eq!(redact(&url), "https://hooks.slack.com");
        let url = Url::parse("http://user:pw@127.0.0.1:9093/x?token=s").unwrap();
        assert_eq!(redact(&url), "http://127.0.0.1:9093");
    }

    #[test]
    fn bad_secret_urls_are_not_echoed() {
        let err = parse_secret_url("hooks.slack.com/services/SECRET").unwrap_err();
        assert_eq!(err, "the URL must start with http:// or https://");
        let err = parse_secret_url("ftp://h/SECRET").unwrap_err();
        assert!(!err.contains("SECRET"), "{err}");
    }

    fn reply(code: u16, body: &str) -> Reply {
        Reply {
            status: StatusCode::from_u16(code).unwrap(),
            retry_after: None,
            body: body.into(),
        }
    }

    #[test]
    fn statuses() {
        assert!(classify(&reply(200, "ok"), "x").is_ok());
        assert!(matches!(
            classify(&reply(429, ""), "x"),
            Err(NotifyError::Retryable { .. })
        ));
        assert!(matches!(
            classify(&reply(503, ""), "x"),
            Err(NotifyError::Retryable { .. })
        ));
        match classify(&reply(404, "channel_not_found"), "https://hooks.slack.com") {
            Err(NotifyError::Permanent(m)) => assert!(m.contains("channel_not_found"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A web server's page: said to be one, its markup left out.
        let page =
            "<!DOCTYPE html>\n<html><body><p>Nothing matches the given URI</p></body></html>";
        match classify(&reply(404, page), "http://127.0.0.1:8080") {
            Err(NotifyError::Permanent(m)) => assert_eq!(
                m,
                "POST http://127.0.0.1:8080: HTTP 404 Not Found: an HTML page: is this the receiver's URL?"
            ),
            other => panic!("{other:?}"),
        }
    }
}
