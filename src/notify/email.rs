//! Email over SMTP (lettre, tokio, rustls). `tls: starttls` requires STARTTLS (a server that does not offer it is
//! refused, never used in plaintext), `tls: tls` is implicit TLS (465), `tls: none` is plain SMTP for a local relay,
//! only because it was configured (warned about once at start-up).
//!
//! The message is multipart/alternative (text and HTML) with Alertmanager's subject
//! (`[FIRING:2] APFHeadroomLow workload-low`). The password (inline or a file re-read at each send) is never logged.
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use html_escape::{encode_double_quoted_attribute, encode_text};
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use super::format::{annotation, identity_labels, rfc3339, severity, title};
use super::{Notification, NotifyError, Receiver, SendFuture};
use crate::alert::Alert;
use crate::notify::{EmailConfig, EmailTls};

type Transport = AsyncSmtpTransport<Tokio1Executor>;

#[derive(Clone)]
enum Password {
    None,
    Inline(String),
    File(PathBuf),
}

pub struct Email {
    name: String,
    /// `host:port` as configured, for messages.
    smarthost: String,
    host: String,
    port: u16,
    tls: EmailTls,
    ca_pem: Option<Vec<u8>>,
    from: Mailbox,
    to: Vec<Mailbox>,
    username: Option<String>,
    password: Password,
    timeout: Duration,
    /// Built at the first send (the connection pool needs the runtime) and again when the password changes.
    transport: Mutex<Option<(Option<String>, Transport)>>,
}

impl Email {
    pub fn new(name: &str, cfg: &EmailConfig, timeout: Duration) -> Result<Self, String> {
        let (host, port) = cfg
            .smarthost
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| format!("smarthost {:?}: write it as host:port", cfg.smarthost))?;
        let from: Mailbox = cfg
            .from
            .parse()
            .map_err(|e| format!("from {:?} is not an email address: {e}", cfg.from))?;
        if cfg.to.is_empty() {
            return Err("to: at least one address".into());
        }
        let to = cfg
            .to
            .iter()
            .map(|t| {
                t.parse::<Mailbox>()
                    .map_err(|e| format!("to {t:?} is not an email address: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let password = match (&cfg.password, &cfg.password_file) {
            (Some(_), Some(_)) => return Err("password or password_file, not both".into()),
            (Some(p), None) => Password::Inline(p.clone()),
            (None, Some(path)) => {
                std::fs::metadata(path)
                    .map_err(|e| format!("password_file {}: {e}", path.display()))?;
                Password::File(path.clone())
            }
            (None, None) => Password::None,
        };
        if !matches!(password, Password::None) && cfg.username.is_none() {
            return Err("a password needs a username".into());
        }
        let ca_pem = match &cfg.ca_file {
            Some(path) => {
                let pem =
                    std::fs::read(path).map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                Certificate::from_pem(&pem)
                    .map_err(|e| format!("ca_file {}: no PEM certificate ({e})", path.display()))?;
                Some(pem)
            }
            None => None,
        };
        if cfg.tls == EmailTls::None {
            tracing::warn!(
                receiver = name,
                smarthost = %cfg.smarthost,
                "email receiver sends in plaintext (tls: none): use it only for a relay on this host or network"
            );
        }
        Ok(Self {
            name: name.to_string(),
            smarthost: cfg.smarthost.clone(),
            host: host.to_string(),
            port,
            tls: cfg.tls,
            ca_pem,
            from,
            to,
            username: cfg.username.clone(),
            password,
            timeout,
            transport: Mutex::new(None),
        })
    }

    async fn password(&self) -> Result<Option<String>, NotifyError> {
        match &self.password {
            Password::None => Ok(None),
            Password::Inline(p) => Ok(Some(p.clone())),
            Password::File(path) => tokio::fs::read_to_string(path)
                .await
                .map(|p| Some(p.trim_end_matches(['\r', '\n']).to_string()))
                .map_err(|e| NotifyError::Retryable {
                    message: format!("cannot read password_file {}: {e}", path.display()),
                    retry_after: None,
                }),
        }
    }

    fn tls_parameters(&self) -> Result<TlsParameters, NotifyError> {
        let mut b = TlsParameters::builder(self.host.clone());
        if let Some(pem) = &self.ca_pem {
            let cert = Certificate::from_pem(pem)
                .map_err(|e| NotifyError::Permanent(format!("ca_file: {e}")))?;
            b = b.add_root_certificate(cert);
        }
        b.build()
            .map_err(|e| NotifyError::Permanent(format!("TLS setup for {}: {e}", self.smarthost)))
    }

    fn transport(&self, password: Option<String>) -> Result<Transport, NotifyError> {
        let mut cached = self.transport.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((p, t)) = cached.as_ref() {
            if *p == password {
                return Ok(t.clone());
            }
        }
        let builder = match self.tls {
            EmailTls::Starttls => Transport::starttls_relay(&self.host)
                .map_err(|e| self.classify(e))?
                .tls(Tls::Required(self.tls_parameters()?)),
            EmailTls::Tls => Transport::relay(&self.host)
                .map_err(|e| self.classify(e))?
                .tls(Tls::Wrapper(self.tls_parameters()?)),
            EmailTls::None => Transport::builder_dangerous(&self.host),
        };
        let mut builder = builder.port(self.port).timeout(Some(self.timeout));
        if let (Some(user), Some(pass)) = (&self.username, &password) {
            builder = builder.credentials(Credentials::new(user.clone(), pass.clone()));
        }
        let transport = builder.build();
        *cached = Some((password, transport.clone()));
        Ok(transport)
    }

    fn message(&self, n: &Notification) -> Result<Message, NotifyError> {
        let mut b = Message::builder().from(self.from.clone()).subject(title(n));
        for to in &self.to {
            b = b.to(to.clone());
        }
        b.multipart(MultiPart::alternative_plain_html(
            text_body(n),
            html_body(n),
        ))
        .map_err(|e| NotifyError::Permanent(format!("cannot build the email: {e}")))
    }

    /// 4xx replies and connection trouble are worth another try; 5xx replies, a missing STARTTLS and TLS failures
    /// are not.
    fn classify(&self, e: lettre::transport::smtp::Error) -> NotifyError {
        let text = super::http::describe(&e);
        let at = &self.smarthost;
        if e.is_permanent() {
            NotifyError::Permanent(format!("SMTP {at}: {text}"))
        } else if e.is_transient() {
            NotifyError::Retryable {
                message: format!("SMTP {at}: {text}"),
                retry_after: None,
            }
        } else if e.is_client() && text.contains("STARTTLS") {
            NotifyError::Permanent(format!(
                "SMTP {at} does not offer STARTTLS, which tls: starttls requires; not sending in plaintext \
                 (use tls: tls for port 465, or tls: none only for a local relay)"
            ))
        } else if e.is_tls() || tls_handshake_failed(&e) {
            NotifyError::Permanent(format!(
                "SMTP {at}: TLS failed (check the server certificate or ca_file): {text}"
            ))
        } else if e.is_client() {
            NotifyError::Permanent(format!("SMTP {at}: {text}"))
        } else {
            NotifyError::Retryable {
                message: format!("SMTP {at}: {text}"),
                retry_after: None,
            }
        }
    }

    async fn post(&self, n: &Notification) -> Result<(), NotifyError> {
        let message = self.message(n)?;
        let password = self.password().await?;
        let transport = self.transport(password)?;
        transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| self.classify(e))
    }
}

impl Receiver for Email {
    fn name(&self) -> &str {
        &self.name
    }

    fn send<'a>(&'a self, notification: &'a Notification) -> SendFuture<'a> {
        Box::pin(self.post(notification))
    }
}

/// lettre reports a rejected certificate as a connection error; underneath is the TLS library's error wrapped in
/// an `InvalidData` I/O error. Another try would meet the same certificate.
fn tls_handshake_failed(e: &lettre::transport::smtp::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::InvalidData {
                return true;
            }
        }
        source = err.source();
    }
    false
}

fn status(a: &Alert) -> &'static str {
    if a.is_resolved() {
        "RESOLVED"
    } else {
        "FIRING"
    }
}

fn headline(a: &Alert) -> String {
    [status(a), a.alertname(), severity(a), &identity_labels(a)]
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn text_body(n: &Notification) -> String {
    let mut out = format!("{}\n", title(n));
    for a in &n.alerts {
        out.push_str(&format!("\n{}\n", headline(a)));
        if let Some(s) = annotation(a, "summary") {
            out.push_str(&format!("Summary: {s}\n"));
        }
        if let Some(d) = annotation(a, "description") {
            out.push_str(&format!("Description: {d}\n"));
        }
        if let Some(f) = annotation(a, "top_flows") {
            out.push_str(&format!("Top flows:\n{f}\n"));
        }
        if let Some(r) = annotation(a, "remediation") {
            out.push_str(&format!("Remediation: {r}\n"));
        }
        if let Some(m) = annotation(a, "remediation_manifest") {
            out.push_str(&format!("Manifest:\n{}\n", m.trim_end()));
        }
        if let Some(u) = annotation(a, "runbook_url") {
            out.push_str(&format!("Runbook: {u}\n"));
        }
        out.push_str(&format!("Since: {}\n", rfc3339(a.starts_at)));
        if let Some(end) = a.ends_at {
            out.push_str(&format!("Resolved: {}\n", rfc3339(end)));
        }
    }
    if !n.external_url.is_empty() {
        out.push_str(&format!("\napf-monitor: {}\n", n.external_url));
    }
    out
}

pub fn html_body(n: &Notification) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head><body style=\"font-family: sans-serif\">\n",
    );
    out.push_str(&format!("<h2>{}</h2>\n", encode_text(&title(n))));
    for a in &n.alerts {
        let colour = match (a.is_resolved(), severity(a)) {
            (true, _) => "#2eb886",
            (false, "critical") => "#d00000",
            _ => "#daa038",
        };
        out.push_str(&format!(
            "<div style=\"border-left: 4px solid {colour}; padding-left: 8px; margin-bottom: 16px\">\n<h3>{}</h3>\n",
            encode_text(&headline(a))
        ));
        if let Some(s) = annotation(a, "summary") {
            out.push_str(&format!("<p><b>{}</b></p>\n", encode_text(s)));
        }
        if let Some(d) = annotation(a, "description") {
            out.push_str(&format!(
                "<p style=\"white-space: pre-wrap\">{}</p>\n",
                encode_text(d)
            ));
        }
        if let Some(f) = annotation(a, "top_flows") {
            out.push_str(&format!(
                "<p>Top flows:</p>\n<pre>{}</pre>\n",
                encode_text(f)
            ));
        }
        if let Some(r) = annotation(a, "remediation") {
            out.push_str(&format!("<p>Remediation: {}</p>\n", encode_text(r)));
        }
        if let Some(m) = annotation(a, "remediation_manifest") {
            out.push_str(&format!("<pre>{}</pre>\n", encode_text(m.trim_end())));
        }
        if let Some(u) = annotation(a, "runbook_url") {
            out.push_str(&format!("<p>{}</p>\n", link(u, "Runbook")));
        }
        out.push_str(&format!("<p>Since {}", rfc3339(a.starts_at)));
        if let Some(end) = a.ends_at {
            out.push_str(&format!(", resolved {}", rfc3339(end)));
        }
        out.push_str("</p>\n</div>\n");
    }
    if !n.external_url.is_empty() {
        out.push_str(&format!(
            "<p>{}</p>\n",
            link(&n.external_url, "Open apf-monitor")
        ));
    }
    out.push_str("</body></html>\n");
    out
}

/// A link only to http(s) (no `javascript:` from a label value); anything else is shown as text.
fn link(url: &str, text: &str) -> String {
    if url.starts_with("https://") || url.starts_with("http://") {
        format!(
            "<a href=\"{}\">{}</a>",
            encode_double_quoted_attribute(url),
            encode_text(text)
        )
    } else {
        format!("{}: {}", encode_text(text), encode_text(url))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::UNIX_EPOCH;

    use super::*;

    fn notification() -> Notification {
        let annotations = BTreeMap::from([
            (
                "summary".to_string(),
                "<script>alert(1)</script> & co".to_string(),
            ),
            ("remediation".to_string(), "move 10 shares".to_string()),
            ("runbook_url".to_string(), "javascript:alert(1)".to_string()),
        ]);
        Notification {
            receiver: "mail".into(),
            group_key: "{}".into(),
            group_labels: BTreeMap::from([("alertname".to_string(), "APFHeadroomLow".to_string())]),
            common_labels: BTreeMap::new(),
            common_annotations: BTreeMap::new(),
            alerts: vec![Alert {
                labels: BTreeMap::from([("alertname".to_string(), "APFHeadroomLow".to_string())]),
                annotations,
                starts_at: UNIX_EPOCH,
                ends_at: None,
                generator_url: String::new(),
            }],
            external_url: "http://apf\"monitor/?a=1&b=<2>".into(),
        }
    }

    #[test]
    fn html_is_escaped() {
        let html = html_body(&notification());
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"));
        assert!(!html.contains("<script>"));
        assert!(!html.contains("href=\"javascript:"));
        // A link's URL is an attribute value: the double quote is escaped too.
        assert!(html.contains(
            "href=\"http://apf&quot;monitor/?a=1&amp;b=&lt;2&gt;\">Open apf-monitor</a>"
        ));
        // A URL that is not http(s) is shown as text.
        assert!(html.contains("<p>Runbook: javascript:alert(1)</p>"));
    }

    #[test]
    fn text_has_the_content() {
        let text = text_body(&notification());
        assert!(text.starts_with("[FIRING:1] APFHeadroomLow\n"));
        assert!(text.contains("Remediation: move 10 shares"));
    }

    fn config(from: &str, smarthost: &str) -> EmailConfig {
        EmailConfig {
            smarthost: smarthost.into(),
            tls: EmailTls::Starttls,
            from: from.into(),
            to: vec!["sre@example.com".into()],
            username: None,
            password: None,
            password_file: None,
            ca_file: None,
        }
    }

    #[tokio::test]
    async fn password_file_is_read_at_each_send() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "first\n").unwrap();
        let mut cfg = config("a@b.c", "127.0.0.1:25");
        cfg.username = Some("apf".into());
        cfg.password_file = Some(path.clone());
        let e = Email::new("m", &cfg, Duration::from_secs(1)).unwrap();
        assert_eq!(e.password().await.unwrap().as_deref(), Some("first"));
        e.transport(Some("first".into())).unwrap();
        std::fs::write(&path, "second").unwrap();
        assert_eq!(e.password().await.unwrap().as_deref(), Some("second"));
        e.transport(Some("second".into())).unwrap();
        let cached = e.transport.lock().unwrap();
        assert_eq!(
            cached.as_ref().and_then(|(p, _)| p.as_deref()),
            Some("second")
        );
    }

    #[test]
    fn config_errors_are_clear() {
        let t = Duration::from_secs(1);
        let e = Email::new("m", &config("not an address", "smtp:587"), t)
            .err()
            .unwrap();
        assert!(
            e.contains("from \"not an address\" is not an email address"),
            "{e}"
        );
        let e = Email::new("m", &config("a@b.c", "smtp"), t).err().unwrap();
        assert!(e.contains("host:port"), "{e}");
        assert!(Email::new("m", &config("APF <a@b.c>", "smtp:587"), t).is_ok());
    }
}
