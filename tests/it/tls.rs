//! TLS against an https stand-in apiserver with a certificate of its own CA: verified by default, `ca_file` and
//! `tls_server_name` make it pass, `insecure_skip_verify` is an explicit opt-out.
use crate::common;

use apf_monitor::values;
use std::sync::Arc;
use std::time::Duration;

use apf_monitor::config::Config;
use apf_monitor::targets::StaticTarget;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Pki {
    ca_pem: String,
    ca_der: Vec<u8>,
    server_config: Arc<rustls::ServerConfig>,
}

fn pki() -> Pki {
    pki_for(&["kubernetes.default.svc"])
}

/// A CA and a server certificate it signed for `names` (an IP address becomes an IP SAN).
fn pki_for(names: &[&str]) -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test-apiserver-ca");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    // For an apiserver, the certificate names the service, not the address the monitor connects to.
    let params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let server_config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
        server_config: Arc::new(server_config),
    }
}

/// A one-endpoint HTTPS server: every request gets the 1.35 capture.
async fn https_apiserver(server_config: Arc<rustls::ServerConfig>) -> std::net::SocketAddr {
    https_server(server_config, common::capture("1.35")).await
}

/// A one-endpoint HTTPS server: every request gets `body`, and its connection closed.
async fn https_server(
    server_config: Arc<rustls::ServerConfig>,
    body: Vec<u8>,
) -> std::net::SocketAddr {
    https_server_with(server_config, body, false).await.0
}

/// Every request gets `body`; each connection is closed after one answer unless `keep_alive`. The connections
/// accepted, counted.
async fn https_server_with(
    server_config: Arc<rustls::ServerConfig>,
    body: Vec<u8>,
    keep_alive: bool,
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config);
    let close = if keep_alive {
        ""
    } else {
        "connection: close\r\n"
    };
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n{close}\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    let answer = Arc::new(answer);
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(sock).await else {
                    return;
                };
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                loop {
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        if tls.write_all(&answer).await.is_err() {
                            return;
                        }
                        if !keep_alive {
                            let _ = tls.shutdown().await;
                            return;
                        }
                    }
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// A replica's TLS connection is kept for the next request once a response is read: one handshake, not one per
/// scrape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_is_reused_from_request_to_request() {
    use http_body_util::BodyExt;
    let pki = pki();
    let (addr, accepted) =
        https_server_with(pki.server_config.clone(), b"hello".to_vec(), true).await;
    let mut config = kube::Config::new(format!("https://{addr}").parse().unwrap());
    config.root_cert = Some(vec![pki.ca_der.clone()]);
    config.tls_server_name = Some("kubernetes.default.svc".into());
    let client = apf_monitor::targets::ScrapeClient::new(&config).unwrap();
    for _ in 0..3 {
        let request = http::Request::get("/metrics")
            .body(http_body_util::Empty::new())
            .unwrap();
        let response = client.send(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

async fn monitor_for(target: StaticTarget) -> (common::Monitor, String) {
    let mut config = Config::default();
    config.scrape.interval = values::Interval(Duration::from_millis(300));
    config.scrape.timeout = values::Interval(Duration::from_millis(300));
    config.scrape.debug_dumps = false;
    config.scrape.objects_interval = values::DurationValue(Duration::ZERO);
    config.analysis.window = values::Interval(Duration::from_secs(10));
    config.targets.static_targets = vec![target];
    let monitor = common::start_monitor(&config).await;
    let metrics = format!("{monitor}/metrics");
    (monitor, metrics)
}

async fn wait_metric(url: &str, pred: impl Fn(&str) -> bool) -> Option<String> {
    for _ in 0..200 {
        if let Some(body) = common::get_text(url).await {
            if pred(&body) {
                return Some(body);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn limit(body: &str) -> Option<f64> {
    common::sample_value(
        body,
        "apf_priority_level_limit_seats",
        &[("priority_level", "workload-low")],
    )
}

fn connect_errors(body: &str) -> f64 {
    common::sample_value(
        body,
        "apf_monitor_scrape_errors_total",
        &[("endpoint", "metrics"), ("reason", "connect")],
    )
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_verified_by_default_and_ca_file_with_server_name_passes() {
    let pki = pki();
    let addr = https_apiserver(pki.server_config.clone()).await;
    let url = values::parse_target_url(&format!("https://{addr}")).unwrap();

    // Unknown CA: refused, counted, nothing exported.
    let (_plain_monitor, plain) = monitor_for(StaticTarget {
        name: Some("untrusted".into()),
        ..StaticTarget::from_url(url.clone())
    })
    .await;
    let body = wait_metric(&plain, |b| connect_errors(b) >= 1.0)
        .await
        .expect("the unknown CA is refused");
    assert_eq!(limit(&body), None);

    // The CA file and the name on the certificate: verified and scraped.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (_good_monitor, good) = monitor_for(StaticTarget {
        name: Some("verified".into()),
        ca_file: Some(ca.clone()),
        tls_server_name: Some("kubernetes.default.svc".into()),
        ..StaticTarget::from_url(url.clone())
    })
    .await;
    wait_metric(&good, |b| limit(b) == Some(56.0))
        .await
        .expect("scraped over verified TLS");

    // The right CA but the address instead of the certificate's name: still refused.
    let (_wrong_name_monitor, wrong_name) = monitor_for(StaticTarget {
        name: Some("wrong-name".into()),
        ca_file: Some(ca),
        ..StaticTarget::from_url(url.clone())
    })
    .await;
    wait_metric(&wrong_name, |b| connect_errors(b) >= 1.0)
        .await
        .expect("a name mismatch is refused");

    // The explicit opt-out works (and is warned about at start-up).
    let (_insecure_monitor, insecure) = monitor_for(StaticTarget {
        name: Some("insecure".into()),
        insecure_skip_verify: true,
        ..StaticTarget::from_url(url)
    })
    .await;
    wait_metric(&insecure, |b| limit(b) == Some(56.0))
        .await
        .expect("insecure_skip_verify scrapes");
}

/// Mutual TLS: the stand-in demands a client certificate from its CA; `client_cert_file` + `client_key_file` give one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_pass_a_server_that_demands_them() {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server_cert = rcgen::CertificateParams::new(vec!["kubernetes.default.svc".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca, &ca_key)
        .unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client_cert = rcgen::CertificateParams::new(vec!["apf-monitor".to_string()])
        .unwrap()
        .signed_by(&client_key, &ca, &ca_key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let server_config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![server_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
        )
        .unwrap();
    let addr = https_apiserver(Arc::new(server_config)).await;
    let url = values::parse_target_url(&format!("https://{addr}")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ca_file = write("ca.crt", &ca.pem());
    let base = StaticTarget {
        ca_file: Some(ca_file),
        tls_server_name: Some("kubernetes.default.svc".into()),
        ..StaticTarget::from_url(url)
    };
    // Without a client certificate the handshake is refused.
    let (_anonymous_monitor, anonymous) = monitor_for(StaticTarget {
        name: Some("anonymous".into()),
        ..base.clone()
    })
    .await;
    wait_metric(&anonymous, |b| {
        limit(b).is_none() && scrape_errors(b) >= 1.0
    })
    .await
    .expect("refused without a client certificate");
    let (_mtls_monitor, mtls) = monitor_for(StaticTarget {
        name: Some("mtls".into()),
        client_cert_file: Some(write("client.crt", &client_cert.pem())),
        client_key_file: Some(write("client.key", &client_key.serialize_pem())),
        ..base
    })
    .await;
    wait_metric(&mtls, |b| limit(b) == Some(56.0))
        .await
        .expect("scraped with a client certificate");
}

fn scrape_errors(body: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.starts_with("apf_monitor_scrape_errors_total{") && l.contains("endpoint=\"metrics\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A Prometheus source over https: refused with an unknown CA, read with its `ca_file`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_source_is_verified_against_its_ca_file() {
    let pki = pki_for(&["127.0.0.1"]);
    // One answer to every query, the freshness query's included: the current time, a fresh sample.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let answer = format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{"instance":"10.0.0.5:6443","priority_level":"workload-low"}},"value":[1,"{now}"]}}]}}}}"#
    );
    let addr = https_server(pki.server_config.clone(), answer.as_bytes().to_vec()).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let check = move |ca_file: Option<&std::path::Path>| {
        let config = dir.path().join("config.yaml");
        let mut yaml = format!("targets:\n  prometheus:\n    - url: https://{addr}\n");
        if let Some(ca) = ca_file {
            yaml.push_str(&format!("      ca_file: {}\n", ca.display()));
        }
        std::fs::write(&config, yaml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["check", "--output", "json", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let ((code, out), (trusted_code, trusted)) =
        tokio::task::spawn_blocking(move || (check(None), check(Some(&ca))))
            .await
            .unwrap();
    // Unknown CA: refused, naming the certificate, UNKNOWN.
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("cannot connect") && out.contains("certificate"),
        "{out}"
    );
    // Its CA: read (every family answers the same number here, the level's limit included).
    assert_ne!(trusted_code, Some(3), "{trusted}");
    let report: serde_json::Value =
        serde_json::from_str(&trusted).unwrap_or_else(|e| panic!("{e}: {trusted}"));
    assert_eq!(
        report["apiservers"][0]["apiserver"], "10.0.0.5:6443",
        "{trusted}"
    );
    assert_eq!(
        report["apiservers"][0]["levels"][0]["limit_seats"].as_f64(),
        Some(now as f64),
        "{trusted}"
    );
}

/// `--certificate-authority FILE` (kubectl's name) trusts a private CA for `--target` (and `--prometheus`); without
/// it, the error says the certificate is not trusted and how to give the CA, and never blames RBAC.
// Two threads: the stand-in apiserver answers while the test waits for the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_authority_flag_trusts_a_private_ca_and_an_untrusted_certificate_says_so() {
    let pki = pki_for(&["127.0.0.1"]);
    let addr = https_apiserver(pki.server_config.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let url = format!("https://{addr}");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(args)
            .output()
            .unwrap()
    };
    let ca_arg = ca.to_str().unwrap();

    let untrusted = run(&["check", "--target", &url, "--output", "json"]);
    let text = String::from_utf8_lossy(&untrusted.stdout);
    assert!(
        text.contains("not trusted") && text.contains("--certificate-authority"),
        "{text}"
    );
    assert!(
        !text.contains("RBAC") && !text.contains("ClusterRole"),
        "{text}"
    );

    let trusted = run(&[
        "check",
        "--target",
        &url,
        "--certificate-authority",
        ca_arg,
        "--output",
        "json",
    ]);
    let text = String::from_utf8_lossy(&trusted.stdout);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    assert!(
        v["apiservers"][0]["levels"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{text}{}",
        String::from_utf8_lossy(&trusted.stderr)
    );

    // plan reads the objects over the same connection: the same words, and no RBAC rule to grant.
    let plan = run(&["plan", "--target", &url, "--set", "workload-low.shares=150"]);
    let err = String::from_utf8_lossy(&plan.stderr);
    assert!(err.contains("not trusted"), "{err}");
    assert!(!err.contains("needs"), "{err}");

    // The flag is the CA of the URLs given by flag: alone, it is refused with why.
    let alone = run(&["check", "--certificate-authority", ca_arg]);
    let err = String::from_utf8_lossy(&alone.stderr);
    assert_eq!(alone.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--certificate-authority") && err.contains("--target"),
        "{err}"
    );
}

/// An untrusted certificate is said by apf-monitor, once per endpoint with what to do; the TLS verifier's own ERROR
/// line per connection is kept out of the log, and shown when the log level names its crate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_said_by_apf_monitor_not_by_the_verifier() {
    let pki = pki_for(&["127.0.0.1"]);
    let addr = https_apiserver(pki.server_config.clone()).await;
    let url = format!("https://{addr}");
    let check = |extra: &'static [&'static str]| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
                .args(["check", "--target", &url])
                .args(extra)
                .output()
                .unwrap()
        })
    };
    let quiet = check(&[]).await.unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&quiet.stdout),
        String::from_utf8_lossy(&quiet.stderr),
    );
    assert!(
        out.contains("not trusted") && out.contains("--certificate-authority"),
        "{out}"
    );
    assert!(
        !err.contains("rustls_platform_verifier") && !err.contains("failed to verify"),
        "{err}"
    );
    let asked = check(&["--log-level", "warn,rustls_platform_verifier=debug"])
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&asked.stderr);
    assert!(
        err.contains("rustls_platform_verifier")
            && err.contains("failed to verify TLS certificate"),
        "{err}"
    );
}
