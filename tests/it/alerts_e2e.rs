//! Alerts end to end with real parts: the simulated apiserver goes from idle to rejections and back; apf-monitor
//! notifies a real Alertmanager (which must list the alert while it fires and see it resolved), a real SMTP server
//! (aiosmtpd), a Slack stand-in (payload shape asserted) and a webhook consumer that fails its first attempts.
use crate::common;

use apf_monitor::values;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{external, get_text, sample_value};
use apf_monitor::config::Config;
use apf_monitor::notify::{
    AlertmanagerConfig, ConsoleConfig, EmailConfig, EmailTls, ReceiverConfig, SlackConfig,
    WebhookConfig,
};
use apf_sim::{KubeVersion, Scenario, SimOptions, Simulator};
use axum::http::StatusCode;
use axum::routing::post;

/// Idle, then a LIST storm in workload-low from 5 s to 40 s, then idle again.
const SCENARIO: &str = r#"
duration: 3600s
flows:
  - {name: kubelet, flow_schema: system-nodes, user: "system:node:node-1", groups: [system:nodes], verb: get, resource: pods, duration: 20ms, rate: [{at: 0s, rps: 5}]}
  - {name: agents, flow_schema: service-accounts, user: "system:serviceaccount:monitoring:agent", verb: list, resource: pods, seats: 10, duration: 3s, rate: [{at: 0s, rps: 1}, {at: 5s, rps: 1}, {at: 6s, rps: 100}, {at: 40s, rps: 100}, {at: 41s, rps: 0}]}
"#;

type Bodies = Arc<Mutex<Vec<serde_json::Value>>>;

/// A stand-in that records JSON bodies; it fails the first `fail_first` requests with 503.
async fn recorder(
    path: &'static str,
    fail_first: usize,
    reply: &'static str,
) -> (String, Bodies, Arc<Mutex<usize>>) {
    let bodies: Bodies = Arc::default();
    let attempts = Arc::new(Mutex::new(0usize));
    let (b, a) = (bodies.clone(), attempts.clone());
    let app = axum::Router::new().route(
        path,
        post(move |body: String| {
            let (b, a) = (b.clone(), a.clone());
            async move {
                let n = {
                    let mut a = a.lock().unwrap();
                    *a += 1;
                    *a
                };
                if n <= fail_first {
                    return (StatusCode::SERVICE_UNAVAILABLE, "try later");
                }
                b.lock()
                    .unwrap()
                    .push(serde_json::from_str(&body).unwrap_or(serde_json::Value::Null));
                (StatusCode::OK, reply)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}{path}"), bodies, attempts)
}

async fn am_alerts(am: &external::Process) -> Vec<serde_json::Value> {
    let Some(text) = get_text(&format!("{}/api/v2/alerts", am.url)).await else {
        return vec![];
    };
    serde_json::from_str::<Vec<serde_json::Value>>(&text).unwrap_or_default()
}

async fn until<T>(what: &str, secs: u64, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {secs}s waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_reach_alertmanager_smtp_slack_and_a_flaky_webhook_then_resolve() {
    let am = external::alertmanager().await;
    let (smtp, smtp_port) = external::smtp_server().await;
    let (slack_url, slack_bodies, _) = recorder("/slack", 0, "ok").await;
    let (hook_url, hook_bodies, hook_attempts) = recorder("/hook", 2, "ok").await;

    let sim = Simulator::try_new(SimOptions::new(
        KubeVersion::new(34, 0),
        Scenario::from_yaml(SCENARIO).unwrap(),
    ))
    .unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;

    let dir = tempfile::tempdir().unwrap();
    let slack_file = dir.path().join("slack-url");
    std::fs::write(&slack_file, &slack_url).unwrap();
    let yaml = format!(
        r#"
scrape: {{interval: 1s, timeout: 1s}}
analysis: {{window: 10s}}
rules:
  APFHeadroomLow: {{for: 2s}}
  APFHeadroomExhausted: {{for: 2s}}
  APFQueueNearFull: {{for: 2s}}
  APFExhaustionPredicted: {{disabled: true}}
route: {{group_wait: 1s, group_interval: 2s, repeat_interval: 1h}}
alerting: {{state_file: {state}}}
"#,
        state = dir.path().join("alerts.json").display()
    );
    let mut config = Config::from_yaml(&yaml).unwrap();
    config.targets.static_targets = vec![common::sim_target(&sim_url)];
    let mut retry_fast = common::receiver("x").delivery;
    retry_fast.timeout = values::Interval(Duration::from_secs(2));
    config.receivers = vec![
        ReceiverConfig {
            slack: Some(SlackConfig {
                webhook_url: None,
                webhook_url_file: Some(slack_file),
                channel: None,
            }),
            ..common::receiver("slack")
        },
        ReceiverConfig {
            email: Some(EmailConfig {
                smarthost: format!("127.0.0.1:{smtp_port}"),
                tls: EmailTls::None,
                from: "apf-monitor@example.com".into(),
                to: vec!["sre@example.com".into()],
                username: None,
                password: None,
                password_file: None,
                ca_file: None,
            }),
            ..common::receiver("mail")
        },
        ReceiverConfig {
            webhook: Some(WebhookConfig {
                url: Some(hook_url),
                url_file: None,
                bearer_token_file: None,
                max_alerts: 0,
            }),
            delivery: retry_fast,
            ..common::receiver("hook")
        },
        ReceiverConfig {
            alertmanager: Some(AlertmanagerConfig {
                urls: vec![values::parse_target_url(&am.url).unwrap()],
                resend_interval: values::Interval(Duration::from_secs(2)),
            }),
            ..common::receiver("am")
        },
        ReceiverConfig {
            console: Some(ConsoleConfig {}),
            ..common::receiver("console")
        },
    ];
    let monitor = common::start_monitor(&config).await;

    // Alertmanager lists an APF alert for workload-low while the storm lasts.
    let fired = until("Alertmanager to list an APF alert", 60, async || {
        am_alerts(&am).await.into_iter().find(|a| {
            a["labels"]["priority_level"] == "workload-low"
                && a["labels"]["alertname"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("APF"))
        })
    })
    .await;
    assert_eq!(fired["status"]["state"], "active", "{fired}");
    assert!(
        fired["annotations"]["remediation"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{fired}"
    );

    // Exported while it fires (the storm lasts until 41 s).
    until("apf_alert_firing exported", 30, async || {
        let metrics = get_text(&format!("{monitor}/metrics")).await?;
        sample_value(
            &metrics,
            "apf_alert_firing",
            &[("priority_level", "workload-low")],
        )
    })
    .await;

    // Slack: Block Kit with a text fallback.
    let slack = until("a Slack message", 30, async || {
        slack_bodies.lock().unwrap().first().cloned()
    })
    .await;
    let text = slack["text"].as_str().unwrap_or("");
    assert!(text.contains("FIRING") && text.contains("APF"), "{slack}");
    assert!(
        serde_json::to_string(&slack).unwrap().contains("blocks"),
        "{slack}"
    );

    // The webhook consumer failed twice, then got the Alertmanager v4 payload.
    let hook = until("the webhook payload", 60, async || {
        hook_bodies.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(hook["version"], "4", "{hook}");
    assert_eq!(hook["status"], "firing");
    assert!(*hook_attempts.lock().unwrap() >= 3);
    until("the webhook's retries counted", 10, async || {
        let metrics = get_text(&format!("{monitor}/metrics")).await?;
        (sample_value(
            &metrics,
            "apf_monitor_notifications_total",
            &[("receiver", "hook"), ("outcome", "retried")],
        )? >= 2.0)
            .then_some(())
    })
    .await;

    // Email through a real SMTP server: subject like Alertmanager's, text and HTML parts.
    let mail = until("an email", 30, async || {
        external::maildir_messages(&smtp).into_iter().next()
    })
    .await;
    assert!(mail.contains("Subject: [FIRING"), "{mail}");
    assert!(
        mail.contains("text/plain") && mail.contains("text/html"),
        "{mail}"
    );

    // The storm ends at 41 s: the alerts resolve, Alertmanager stops listing them, and the resolved notices arrive.
    until("Alertmanager to see the alerts resolved", 120, async || {
        let active = am_alerts(&am)
            .await
            .into_iter()
            .filter(|a| {
                a["labels"]["priority_level"] == "workload-low" && a["status"]["state"] == "active"
            })
            .count();
        (active == 0).then_some(())
    })
    .await;
    until("a resolved Slack message", 60, async || {
        slack_bodies
            .lock()
            .unwrap()
            .iter()
            .any(|b| b["text"].as_str().is_some_and(|t| t.contains("RESOLVED")))
            .then_some(())
    })
    .await;
    until("a resolved webhook payload", 60, async || {
        hook_bodies
            .lock()
            .unwrap()
            .iter()
            .any(|b| b["status"] == "resolved")
            .then_some(())
    })
    .await;
    // The state file was written atomically and holds the alerts.
    let state = std::fs::read_to_string(dir.path().join("alerts.json")).unwrap();
    assert!(state.contains("APF"), "{state}");
}
