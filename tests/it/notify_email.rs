//! The email receiver against a real SMTP server: aiosmtpd (Debian package python3-aiosmtpd) on a loopback port,
//! storing what it receives in a Maildir that the test reads back with Python's email parser.
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apf_monitor::alert::{Alert, LabelSet, Notification};
use apf_monitor::notify::{
    self, Delivery, DeliveryConfig, EmailConfig, EmailTls, NotifyError, NotifyMetrics, Outcome,
    ReceiverConfig,
};
use apf_monitor::values::{DurationValue, Interval};
use serde_json::Value;

use crate::common;

struct SmtpServer {
    child: Child,
    port: u16,
    maildir: tempfile::TempDir,
}

impl SmtpServer {
    fn start() -> SmtpServer {
        Self::start_with(&[])
    }

    /// `extra`: more aiosmtpd arguments (`--tlscert`/`--tlskey` for STARTTLS, `--smtpscert`/`--smtpskey` for TLS).
    fn start_with(extra: &[&std::ffi::OsStr]) -> SmtpServer {
        // Debian's Python (package python3-aiosmtpd) first; fails with the install hint when none has it.
        let python = common::external::python_with_aiosmtpd();
        let maildir = tempfile::tempdir().unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new(&python)
            .args(["-m", "aiosmtpd", "-n", "-l"])
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(maildir.path().join("mail"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 -m aiosmtpd");
        let mut server = SmtpServer {
            child,
            port,
            maildir,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("aiosmtpd exited at start-up: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "aiosmtpd did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn smarthost(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every stored message, parsed by Python's email package (headers, and the text and HTML bodies decoded).
    fn messages(&self) -> Vec<Value> {
        let dir = self.maildir.path().join("mail").join("new");
        if !dir.exists() {
            return Vec::new();
        }
        let script = r#"
import email, email.policy, json, os, sys
out = []
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    with open(os.path.join(d, name), 'rb') as f:
        m = email.message_from_binary_file(f, policy=email.policy.default)
    plain = m.get_body(('plain',))
    html = m.get_body(('html',))
    out.append({
        'subject': str(m['subject']),
        'from': str(m['from']),
        'to': str(m['to']),
        'content_type': m.get_content_type(),
        'parts': [p.get_content_type() for p in m.iter_parts()] if m.is_multipart() else [],
        'plain': plain.get_content() if plain is not None else None,
        'html': html.get_content() if html is not None else None,
    })
print(json.dumps(out))
"#;
        let out = Command::new(common::external::python_with_aiosmtpd())
            .args(["-c", script])
            .arg(&dir)
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn alert(apiserver: &str) -> Alert {
    Alert {
        labels: labels(&[
            ("alertname", "APFHeadroomLow"),
            ("severity", "warning"),
            ("apiserver", apiserver),
            ("priority_level", "workload-low"),
        ]),
        annotations: BTreeMap::from([
            (
                "summary".to_string(),
                "workload-low headroom <20% & falling".to_string(),
            ),
            (
                "description".to_string(),
                "headroom 3 of 40 seats (7.5%), 12 waiting".to_string(),
            ),
            (
                "top_flows".to_string(),
                "system:serviceaccount:ci:runner holds 30 seats".to_string(),
            ),
            (
                "remediation".to_string(),
                "move 10 shares from global-default to workload-low".to_string(),
            ),
            (
                "remediation_manifest".to_string(),
                "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n"
                    .to_string(),
            ),
            (
                "runbook_url".to_string(),
                "https://example.com/runbooks?a=1&b=2".to_string(),
            ),
        ]),
        starts_at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        ends_at: None,
        generator_url: "http://apf-monitor:8080/".into(),
    }
}

fn notification() -> Notification {
    Notification {
        receiver: "mail".into(),
        group_key: "{}".into(),
        group_labels: labels(&[
            ("alertname", "APFHeadroomLow"),
            ("priority_level", "workload-low"),
        ]),
        common_labels: labels(&[("alertname", "APFHeadroomLow")]),
        common_annotations: BTreeMap::new(),
        alerts: vec![alert("10.0.0.5:6443"), alert("10.0.0.6:6443")],
        external_url: "http://apf-monitor.example:8080".into(),
    }
}

fn email_config(smarthost: String, tls: EmailTls) -> ReceiverConfig {
    ReceiverConfig {
        name: "mail".into(),
        slack: None,
        email: Some(EmailConfig {
            smarthost,
            tls,
            from: "APF Monitor <apf@example.com>".into(),
            to: vec!["sre@example.com".into(), "oncall@example.com".into()],
            username: None,
            password: None,
            password_file: None,
            ca_file: None,
        }),
        webhook: None,
        alertmanager: None,
        console: None,
        delivery: DeliveryConfig {
            timeout: Interval(Duration::from_secs(10)),
            max_retry_duration: DurationValue(Duration::from_secs(20)),
            queue_capacity: 10,
        },
    }
}

#[tokio::test]
async fn plain_smtp_relay_gets_a_multipart_message() {
    let server = SmtpServer::start();
    let cfg = email_config(server.smarthost(), EmailTls::None);
    let metrics = NotifyMetrics::default();
    let d = Delivery::spawn(notify::build(&cfg).unwrap(), &cfg.delivery, metrics.clone());
    let before = SystemTime::now();
    d.enqueue(notification());
    let sent = common::eventually(Duration::from_secs(20), || async {
        let get = |o| metrics.count("mail", o);
        (get(Outcome::Sent) + get(Outcome::Failed) > 0)
            .then(|| (get(Outcome::Sent), get(Outcome::Failed)))
    })
    .await;
    assert_eq!(sent, Some((1, 0)));
    assert!(before.elapsed().unwrap() < Duration::from_secs(15));

    let messages = common::eventually(Duration::from_secs(5), || async {
        let m = server.messages();
        (!m.is_empty()).then_some(m)
    })
    .await
    .expect("a message in the Maildir");
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(m["subject"], "[FIRING:2] APFHeadroomLow workload-low");
    assert_eq!(m["from"], "APF Monitor <apf@example.com>");
    assert_eq!(m["to"], "sre@example.com, oncall@example.com");
    assert_eq!(m["content_type"], "multipart/alternative");
    assert_eq!(m["parts"], serde_json::json!(["text/plain", "text/html"]));

    let plain = m["plain"].as_str().unwrap();
    assert!(plain.contains(
        "FIRING APFHeadroomLow warning apiserver=10.0.0.5:6443 priority_level=workload-low"
    ));
    assert!(plain.contains("apiserver=10.0.0.6:6443"));
    assert!(
        plain.contains("Summary: workload-low headroom <20% & falling"),
        "{plain}"
    );
    assert!(plain.contains("headroom 3 of 40 seats (7.5%), 12 waiting"));
    assert!(plain.contains("system:serviceaccount:ci:runner holds 30 seats"));
    assert!(plain.contains("Remediation: move 10 shares from global-default to workload-low"));
    assert!(plain.contains("kind: PriorityLevelConfiguration"));
    assert!(plain.contains("Runbook: https://example.com/runbooks?a=1&b=2"));
    assert!(plain.contains("http://apf-monitor.example:8080"));

    let html = m["html"].as_str().unwrap();
    assert!(
        html.contains("workload-low headroom &lt;20% &amp; falling"),
        "{html}"
    );
    assert!(!html.contains("<20%"));
    assert!(html.contains("move 10 shares from global-default to workload-low"));
    assert!(html.contains(
        "<pre>apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration</pre>"
    ));
    assert!(html.contains("<a href=\"https://example.com/runbooks?a=1&amp;b=2\">Runbook</a>"));
    assert!(html.contains("<a href=\"http://apf-monitor.example:8080\">"));
}

#[tokio::test]
async fn starttls_required_never_falls_back_to_plaintext() {
    let server = SmtpServer::start();
    let cfg = email_config(server.smarthost(), EmailTls::Starttls);
    let receiver = notify::build(&cfg).unwrap();
    match receiver.send(&notification()).await {
        Err(NotifyError::Permanent(m)) => {
            assert!(m.contains("does not offer STARTTLS"), "{m}");
            assert!(m.contains(&server.smarthost()), "{m}");
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
    // Through a delivery: failed at once, not retried.
    let metrics = NotifyMetrics::default();
    let d = Delivery::spawn(receiver, &cfg.delivery, metrics.clone());
    d.enqueue(notification());
    let failed = common::eventually(Duration::from_secs(10), || async {
        let get = |o| metrics.count("mail", o);
        (get(Outcome::Failed) > 0).then(|| {
            (
                get(Outcome::Failed),
                get(Outcome::Retried),
                get(Outcome::Sent),
            )
        })
    })
    .await;
    assert_eq!(failed, Some((1, 0, 0)));
    assert!(
        server.messages().is_empty(),
        "nothing was sent in plaintext"
    );
}

#[tokio::test]
async fn unreachable_smtp_server_is_retryable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = email_config(format!("127.0.0.1:{port}"), EmailTls::None);
    match notify::build(&cfg).unwrap().send(&notification()).await {
        Err(NotifyError::Retryable { .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// A CA and a server certificate for 127.0.0.1, as PEM files: (dir, ca, cert, key).
fn pki() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test-smtp-ca");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ca_path, cert_path, key_path) = (
        dir.path().join("ca.pem"),
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
    );
    std::fs::write(&ca_path, ca.pem()).unwrap();
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (dir, ca_path, cert_path, key_path)
}

fn with_ca(mut cfg: ReceiverConfig, ca: &Path) -> ReceiverConfig {
    if let Some(e) = cfg.email.as_mut() {
        e.ca_file = Some(ca.to_path_buf());
    }
    cfg
}

/// An aiosmtpd speaking TLS (`cert_flag`/`key_flag` say which kind) with a certificate of a private CA, and one
/// notification delivered to it by a receiver that trusts that CA.
async fn delivered_with_private_ca(
    cert_flag: &str,
    key_flag: &str,
    tls: EmailTls,
) -> (SmtpServer, tempfile::TempDir) {
    let (dir, ca, cert, key) = pki();
    let server = SmtpServer::start_with(&[
        cert_flag.as_ref(),
        cert.as_os_str(),
        key_flag.as_ref(),
        key.as_os_str(),
    ]);
    let cfg = with_ca(email_config(server.smarthost(), tls), &ca);
    notify::build(&cfg)
        .unwrap()
        .send(&notification())
        .await
        .unwrap();
    (server, dir)
}

#[tokio::test]
async fn starttls_with_a_private_ca_delivers() {
    let (server, _dir) =
        delivered_with_private_ca("--tlscert", "--tlskey", EmailTls::Starttls).await;
    let m = server.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["subject"], "[FIRING:2] APFHeadroomLow workload-low");

    // Without the CA the certificate is not trusted: a permanent error, nothing sent.
    let cfg = email_config(server.smarthost(), EmailTls::Starttls);
    match notify::build(&cfg).unwrap().send(&notification()).await {
        Err(NotifyError::Permanent(m)) => assert!(m.contains("TLS failed"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.messages().len(), 1);
}

#[tokio::test]
async fn implicit_tls_with_a_private_ca_delivers() {
    let (server, _dir) =
        delivered_with_private_ca("--smtpscert", "--smtpskey", EmailTls::Tls).await;
    let m = server.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["to"], "sre@example.com, oncall@example.com");
}
