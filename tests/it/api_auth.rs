//! Who may write to apf-monitor's HTTP API, end to end: `web.auth.mode: kubernetes` asks the simulated cluster
//! (TokenReview, then SubjectAccessReview) through the same kubeconfig discovery uses; `tokens` reads a file that
//! rotates; and without a mode, a listener beyond loopback refuses writes.
use std::time::Duration;

use crate::common;
use apf_monitor::config::Config;
use apf_sim::{ClusterOptions, Grant, KubeVersion, Scenario, ScenarioSource, SimUser};

const SILENCE: &str = r#"{"matchers":[{"name":"alertname","value":"APFHeadroomLow","isRegex":false}],
    "startsAt":"2026-01-01T00:00:00Z","endsAt":"2099-01-01T00:00:00Z","createdBy":"test","comment":"maintenance"}"#;

/// The status and body of a request with an optional bearer token.
async fn call(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut request = client.request(method, url).body(body.to_string());
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A simulated apiserver to scrape: the daemon needs a target to start.
async fn idle_sim() -> String {
    common::paused_sim(34, Scenario::load(&ScenarioSource::Idle).unwrap(), 1)
        .await
        .1
}

fn user(token: &str, name: &str, groups: &[&str]) -> SimUser {
    SimUser {
        token: token.into(),
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_decides_who_silences_and_reloads() {
    let (_cluster, dir, kubeconfig) = common::sim_cluster(ClusterOptions {
        tls: true,
        token: Some(apf_sim::generate_token()),
        users: vec![
            user("oncall-token", "alice", &["oncall"]),
            user("viewer-token", "bob", &[]),
            user(
                "sender-token",
                "system:serviceaccount:apf-monitor:apf-monitor-audit-sender",
                &[],
            ),
        ],
        grants: vec![
            Grant {
                subject: "group:oncall".into(),
                verbs: vec!["post".into(), "delete".into()],
                non_resource_urls: vec!["/api/v1/silences".into(), "/api/v1/silences/*".into()],
            },
            Grant {
                subject: "bob".into(),
                verbs: vec!["get".into()],
                non_resource_urls: vec!["/metrics".into()],
            },
            // deploy/base/rbac-api.yaml's apf-monitor-audit-sender, bound as deploy/audit/sender.yaml binds it.
            Grant {
                subject: "system:serviceaccount:apf-monitor:apf-monitor-audit-sender".into(),
                verbs: vec!["post".into()],
                non_resource_urls: vec!["/api/v1/audit".into()],
            },
        ],
        ..ClusterOptions::new(
            KubeVersion::new(34, 0),
            Scenario::load(&ScenarioSource::Idle).unwrap(),
        )
    })
    .await;
    let mut config = Config::from_yaml("web: {auth: {mode: kubernetes}}\n").unwrap();
    config.targets.kubernetes.kubeconfig = Some(kubeconfig);
    let monitor = common::start_monitor(&config).await;
    let silences = format!("{monitor}/api/v1/silences");
    use reqwest::Method;

    // No token, an unknown one, a user without the grant: 401, 401, 403 with the reason and the RBAC to add.
    let (code, body) = call(Method::POST, &silences, None, SILENCE).await;
    assert_eq!(code, 401, "{body}");
    let (code, _) = call(Method::POST, &silences, Some("forged"), SILENCE).await;
    assert_eq!(code, 401);
    let (code, body) = call(Method::POST, &silences, Some("viewer-token"), SILENCE).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("user \\\"bob\\\" may not post /api/v1/silences"),
        "{body}"
    );
    assert!(body.contains("nonResourceURLs"), "{body}");
    let (code, _) = call(
        Method::POST,
        &format!("{monitor}/-/reload"),
        Some("oncall-token"),
        "",
    )
    .await;
    assert_eq!(code, 403, "alice may silence, not reload");

    // kube-apiserver's audit webhook: its sender may post batches, and nothing else; nobody else may post them.
    let audit = format!("{monitor}/api/v1/audit");
    let batch = r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}"#;
    let (code, _) = call(Method::POST, &audit, None, batch).await;
    assert_eq!(code, 401);
    let (code, _) = call(Method::POST, &audit, Some("oncall-token"), batch).await;
    assert_eq!(code, 403);
    let (code, body) = call(Method::POST, &audit, Some("sender-token"), batch).await;
    assert_eq!(code, 200, "{body}");
    let (code, _) = call(Method::POST, &silences, Some("sender-token"), SILENCE).await;
    assert_eq!(code, 403);

    // The on-call user silences and expires; reads stay open.
    let (code, body) = call(Method::POST, &silences, Some("oncall-token"), SILENCE).await;
    assert_eq!(code, 200, "{body}");
    let id: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = id["silenceID"].as_str().unwrap().to_string();
    let (code, _) = call(
        Method::DELETE,
        &format!("{silences}/{id}"),
        Some("viewer-token"),
        "",
    )
    .await;
    assert_eq!(code, 403);
    let (code, body) = call(
        Method::DELETE,
        &format!("{silences}/{id}"),
        Some("oncall-token"),
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, _) = call(Method::GET, &silences, None, "").await;
    assert_eq!(code, 200);
    let (code, _) = call(Method::GET, &format!("{monitor}/healthz"), None, "").await;
    assert_eq!(code, 200);
    // The administrator's token (system:masters) may reload.
    let admin = std::fs::read_to_string(dir.path().join("kubeconfig"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("token: ")
                .map(|t| t.trim_matches('"').to_string())
        })
        .unwrap();
    let (code, body) = call(
        Method::POST,
        &format!("{monitor}/-/reload"),
        Some(&admin),
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");

    // protect_reads: a restart with reads guarded too.
    let mut config = config.clone();
    config.web.auth.protect_reads = true;
    let guarded = common::start_monitor(&config).await;
    let (code, _) = call(Method::GET, &format!("{guarded}/metrics"), None, "").await;
    assert_eq!(code, 401);
    let (code, _) = call(
        Method::GET,
        &format!("{guarded}/metrics"),
        Some("viewer-token"),
        "",
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = call(
        Method::GET,
        &format!("{guarded}/api/v1/status"),
        Some("viewer-token"),
        "",
    )
    .await;
    assert_eq!(code, 403);
    let (code, _) = call(Method::GET, &format!("{guarded}/readyz"), None, "").await;
    assert_ne!(code, 401, "the kubelet's probe needs no token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_file_guards_writes_and_rotates_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "first-token\n").unwrap();
    let mut config = Config::from_yaml(&format!(
        "web: {{auth: {{mode: tokens, tokens_file: {}}}}}\n",
        tokens.display()
    ))
    .unwrap();
    config.targets.static_targets = vec![common::sim_target(&idle_sim().await)];
    let monitor = common::start_monitor(&config).await;
    let silences = format!("{monitor}/api/v1/silences");
    use reqwest::Method;
    let (code, _) = call(Method::POST, &silences, None, SILENCE).await;
    assert_eq!(code, 401);
    let (code, body) = call(Method::POST, &silences, Some("first-token"), SILENCE).await;
    assert_eq!(code, 200, "{body}");
    // Rotated in place, as a Secret volume is.
    let next = dir.path().join("tokens.new");
    std::fs::write(&next, "second-token\n").unwrap();
    std::fs::rename(&next, &tokens).unwrap();
    let (code, _) = call(Method::POST, &silences, Some("first-token"), SILENCE).await;
    assert_eq!(code, 401);
    let (code, _) = call(Method::POST, &silences, Some("second-token"), SILENCE).await;
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_mode_writes_need_a_loopback_only_listener() {
    // 127.0.0.1 is loopback: the demo and local runs keep working as they did.
    let mut config = Config::default();
    config.targets.static_targets = vec![common::sim_target(&idle_sim().await)];
    let monitor = common::start_monitor(&config).await;
    let (code, body) = call(
        reqwest::Method::POST,
        &format!("{monitor}/api/v1/silences"),
        None,
        SILENCE,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    // Every address: writes are refused, with the key that allows them.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let loader: apf_monitor::daemon::Loader = std::sync::Arc::new(move || Ok(config.clone()));
    let _daemon = apf_monitor::daemon::Daemon::start(loader, listener)
        .await
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let (code, body) = call(reqwest::Method::POST, &format!("{url}/-/reload"), None, "").await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("web.auth.mode"), "{body}");
    let (code, _) = call(reqwest::Method::GET, &format!("{url}/metrics"), None, "").await;
    assert_eq!(code, 200);
}

/// A CA, and a certificate it signed for 127.0.0.1 with its key, all PEM: (CA, certificate, key).
fn issue() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

async fn get_with_ca(url: &str, ca: &str) -> Result<u16, String> {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    client
        .get(url)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("{e:?}"))
}

/// HTTPS only, with files that cert-manager rotates in place: the next handshake serves the new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_speaks_https_and_takes_a_rotated_certificate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let (ca1, cert1, key1) = issue();
    std::fs::write(&cert_file, &cert1).unwrap();
    std::fs::write(&key_file, &key1).unwrap();
    let mut config = Config::from_yaml(&format!(
        "web: {{tls: {{cert_file: {}, key_file: {}}}}}\n",
        cert_file.display(),
        key_file.display()
    ))
    .unwrap();
    config.targets.static_targets = vec![common::sim_target(&idle_sim().await)];
    let monitor = common::start_monitor(&config).await;
    let https = monitor.url.replace("http://", "https://");
    assert_eq!(
        get_with_ca(&format!("{https}/healthz"), &ca1).await,
        Ok(200)
    );
    // Plain HTTP gets no answer.
    assert!(common::get_text(&format!("{monitor}/healthz"))
        .await
        .is_none());

    // Rotated: a new key and a certificate of another CA, each file replaced whole.
    let (ca2, cert2, key2) = issue();
    for (path, text) in [(&key_file, &key2), (&cert_file, &cert2)] {
        let next = path.with_extension("new");
        std::fs::write(&next, text).unwrap();
        std::fs::rename(&next, path).unwrap();
    }
    assert_eq!(
        get_with_ca(&format!("{https}/healthz"), &ca2).await,
        Ok(200)
    );
    assert!(get_with_ca(&format!("{https}/healthz"), &ca1)
        .await
        .is_err());

    // Files that do not load keep the last good certificate.
    std::fs::write(&cert_file, "not a certificate").unwrap();
    assert_eq!(
        get_with_ca(&format!("{https}/healthz"), &ca2).await,
        Ok(200)
    );
}

/// The server's limits: headers sent too slowly end the connection, a body too large is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_large_bodies_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = Config::default();
    config.targets.static_targets = vec![common::sim_target(&idle_sim().await)];
    let monitor = common::start_monitor(&config).await;
    let big = format!(
        "{{\"comment\": \"{}\"}}",
        "x".repeat(apf_monitor::export::MAX_BODY + 1)
    );
    let (code, _) = call(
        reqwest::Method::POST,
        &format!("{monitor}/api/v1/silences"),
        None,
        &big,
    )
    .await;
    assert_eq!(code, 413);

    let addr = monitor.url.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // The rest of the headers never come: the server closes the connection after its header read timeout.
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(
        apf_monitor::export::HEADER_READ_TIMEOUT + Duration::from_secs(10),
        slow.read_to_end(&mut buf),
    )
    .await;
    assert!(closed.is_ok(), "the connection stayed open");
}
