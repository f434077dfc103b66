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
