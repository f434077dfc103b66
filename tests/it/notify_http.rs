//! Slack, webhook and Alertmanager receivers and their delivery, against stand-in servers on 127.0.0.1.
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apf_monitor::alert::{fingerprint, Alert, LabelSet, Notification};
use apf_monitor::notify::{
    self, AlertmanagerConfig, Delivery, DeliveryConfig, NotifyError, NotifyMetrics, Outcome,
    Receiver, SlackConfig, WebhookConfig,
};
use apf_monitor::values::{parse_target_url, DurationValue, Interval};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::common;

// ---- stand-in server ----

#[derive(Clone)]
struct Answer {
    status: u16,
    retry_after: Option<&'static str>,
    body: &'static str,
    hang: bool,
    /// Milliseconds before answering: a slow receiver.
    delay_ms: u64,
}

fn answer(status: u16, body: &'static str) -> Answer {
    Answer {
        status,
        retry_after: None,
        body,
        hang: false,
        delay_ms: 0,
    }
}

#[derive(Clone)]
struct Request {
    at: Instant,
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Request {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

struct Inner {
    script: VecDeque<Answer>,
    default: Answer,
    received: Vec<Request>,
}

#[derive(Clone)]
struct StandIn {
    url: String,
    inner: Arc<Mutex<Inner>>,
}

impl StandIn {
    /// Answers `script` in order, then `default` forever.
    async fn start(script: Vec<Answer>, default: Answer) -> StandIn {
        let inner = Arc::new(Mutex::new(Inner {
            script: script.into(),
            default,
            received: Vec::new(),
        }));
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        StandIn { url, inner }
    }

    fn received(&self) -> Vec<Request> {
        self.inner.lock().unwrap().received.clone()
    }
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let a = {
        let mut i = inner.lock().unwrap();
        i.received.push(Request {
            at: Instant::now(),
            path: uri.path().to_string(),
            headers,
            body: body.to_vec(),
        });
        let next = i.script.pop_front();
        next.unwrap_or_else(|| i.default.clone())
    };
    if a.hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    tokio::time::sleep(Duration::from_millis(a.delay_ms)).await;
    let mut resp = (StatusCode::from_u16(a.status).unwrap(), a.body).into_response();
    if let Some(r) = a.retry_after {
        resp.headers_mut().insert("retry-after", r.parse().unwrap());
    }
    resp
}

/// A loopback URL where nothing listens: connection refused.
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

// ---- alerts ----

fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn alert(i: usize, severity: &str, resolved: bool) -> Alert {
    let annotations = BTreeMap::from([
        (
            "summary".to_string(),
            format!("headroom <20% & falling on apiserver-{i}"),
        ),
        (
            "description".to_string(),
            "headroom 3 of 40 seats (7.5%), 12 waiting in queues".to_string(),
        ),
        (
            "top_flows".to_string(),
            "system:serviceaccount:ci:runner holds 30 seats".to_string(),
        ),
        (
            "remediation".to_string(),
            "isolate the dominant flow in its own FlowSchema".to_string(),
        ),
        (
            "remediation_manifest".to_string(),
            "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\n".repeat(80),
        ),
        (
            "runbook_url".to_string(),
            "https://example.com/runbooks#APFHeadroomLow".to_string(),
        ),
    ]);
    Alert {
        labels: labels(&[
            ("alertname", "APFHeadroomLow"),
            ("severity", severity),
            ("apiserver", &format!("10.0.0.{i}:6443")),
            ("priority_level", "workload-low"),
        ]),
        annotations,
        starts_at: t(1_700_000_000),
        ends_at: resolved.then(|| t(1_700_000_300)),
        generator_url: "http://apf-monitor:8080/".to_string(),
    }
}

fn notification(alerts: Vec<Alert>) -> Notification {
    Notification {
        receiver: "r".into(),
        group_key: "{}:{alertname=\"APFHeadroomLow\", priority_level=\"workload-low\"}".into(),
        group_labels: labels(&[
            ("alertname", "APFHeadroomLow"),
            ("priority_level", "workload-low"),
        ]),
        common_labels: labels(&[
            ("alertname", "APFHeadroomLow"),
            ("priority_level", "workload-low"),
        ]),
        common_annotations: BTreeMap::new(),
        alerts,
        external_url: "http://apf-monitor:8080".into(),
    }
}

fn delivery(timeout_ms: u64, max_retry_ms: u64, capacity: usize) -> DeliveryConfig {
    DeliveryConfig {
        timeout: Interval(Duration::from_millis(timeout_ms)),
        max_retry_duration: DurationValue(Duration::from_millis(max_retry_ms)),
        queue_capacity: capacity,
    }
}

fn slack_receiver(url: &str) -> Arc<dyn Receiver> {
    let mut cfg = common::receiver("slack");
    cfg.slack = Some(SlackConfig {
        webhook_url: Some(url.to_string()),
        webhook_url_file: None,
        channel: None,
    });
    notify::build(&cfg).unwrap()
}

fn outcome(label: &str) -> Outcome {
    Outcome::ALL
        .into_iter()
        .find(|o| o.label() == label)
        .unwrap_or_else(|| panic!("no outcome {label}"))
}

fn count(m: &NotifyMetrics, receiver: &str, outcome_label: &'static str) -> u64 {
    m.count(receiver, outcome(outcome_label))
}

/// `apf_monitor_notifications_total` as `/metrics` shows it.
fn exposition(m: &NotifyMetrics) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    m.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

async fn wait_for(m: &NotifyMetrics, receiver: &str, outcome: &'static str, n: u64, secs: u64) {
    let got = common::eventually(Duration::from_secs(secs), || async {
        (count(m, receiver, outcome) >= n).then_some(())
    })
    .await;
    assert!(
        got.is_some(),
        "{receiver}: {outcome} did not reach {n}:\n{}",
        exposition(m)
    );
}

// ---- Slack ----

#[tokio::test]
async fn slack_payload_within_limits_and_retries_after_503() {
    let slack = StandIn::start(
        vec![answer(503, "unavailable"), answer(503, "unavailable")],
        answer(200, "ok"),
    )
    .await;
    // The URL is read from a file (a mounted Secret) at each send.
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("slack-url");
    std::fs::write(
        &url_file,
        format!("{}/services/T000/B000/SECRETTOKEN\n", slack.url),
    )
    .unwrap();
    let mut cfg = common::receiver("oncall-slack");
    cfg.slack = Some(SlackConfig {
        webhook_url: None,
        webhook_url_file: Some(url_file),
        channel: None,
    });
    let receiver = notify::build(&cfg).unwrap();
    let metrics = NotifyMetrics::default();
    let d = Delivery::spawn(receiver, &delivery(5_000, 30_000, 10), metrics.clone());
    let mut alerts: Vec<Alert> = (0..59).map(|i| alert(i, "warning", false)).collect();
    alerts.insert(0, alert(99, "critical", false));
    d.enqueue(notification(alerts));

    wait_for(&metrics, "oncall-slack", "sent", 1, 20).await;
    assert_eq!(count(&metrics, "oncall-slack", "retried"), 2);
    assert_eq!(count(&metrics, "oncall-slack", "failed"), 0);
    let received = slack.received();
    assert_eq!(received.len(), 3);
    assert_eq!(received[0].path, "/services/T000/B000/SECRETTOKEN");
    assert_eq!(received[0].headers["content-type"], "application/json");

    let p = received[2].json();
    assert_eq!(p["text"], "[FIRING:60] APFHeadroomLow workload-low");
    let att = &p["attachments"][0];
    assert_eq!(att["color"], "danger");
    let blocks = att["blocks"].as_array().unwrap();
    assert!(blocks.len() <= 50, "{} blocks", blocks.len());
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(
        blocks[0]["text"]["text"],
        "[FIRING:60] APFHeadroomLow workload-low"
    );
    let sections: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "section")
        .map(|b| b["text"]["text"].as_str().unwrap())
        .collect();
    for s in &sections {
        assert!(s.chars().count() <= 3000, "{} chars", s.chars().count());
    }
    // The first alert: escaped summary, numbers, flows, remediation; its manifest in a truncated code block.
    assert!(
        sections[0].contains("headroom &lt;20% &amp; falling on apiserver-99"),
        "{}",
        sections[0]
    );
    assert!(!sections.iter().any(|s| s.contains("<20%")));
    assert!(sections[0].contains("headroom 3 of 40 seats (7.5%), 12 waiting in queues"));
    assert!(sections[0].contains("system:serviceaccount:ci:runner holds 30 seats"));
    assert!(sections[0].contains("isolate the dominant flow"));
    assert!(sections[1].starts_with("```\napiVersion: flowcontrol.apiserver.k8s.io/v1"));
    assert!(sections[1].ends_with("…\n```"), "{}", sections[1]);
    let text_of = |b: &Value| b["elements"][0]["text"].as_str().unwrap_or("").to_string();
    assert!(text_of(&blocks[3]).contains("<https://example.com/runbooks#APFHeadroomLow|Runbook>"));
    // Not all 60 fit: the last block says how many are missing and links back.
    let last = text_of(blocks.last().unwrap());
    assert!(last.contains("more alerts not shown"), "{last}");
    assert!(
        last.contains("<http://apf-monitor:8080|apf-monitor>"),
        "{last}"
    );
}

#[tokio::test]
async fn slack_resolved_is_green() {
    let slack = StandIn::start(vec![], answer(200, "ok")).await;
    let r = slack_receiver(&format!("{}/services/x", slack.url));
    r.send(&notification(vec![alert(1, "critical", true)]))
        .await
        .unwrap();
    let p = slack.received()[0].json();
    assert_eq!(p["text"], "[RESOLVED] APFHeadroomLow workload-low");
    assert_eq!(p["attachments"][0]["color"], "good");
}

#[tokio::test]
async fn slack_429_retry_after_is_honoured() {
    let mut throttled = answer(429, "rate_limited");
    throttled.retry_after = Some("1");
    let slack = StandIn::start(vec![throttled], answer(200, "ok")).await;
    let metrics = NotifyMetrics::default();
    let d = Delivery::spawn(
        slack_receiver(&format!("{}/services/x", slack.url)),
        &delivery(5_000, 30_000, 10),
        metrics.clone(),
    );
    d.enqueue(notification(vec![alert(1, "warning", false)]));
    wait_for(&metrics, "slack", "sent", 1, 10).await;
    let r = slack.received();
    assert_eq!(r.len(), 2);
    let gap = r[1].at - r[0].at;
    assert!(gap >= Duration::from_millis(900), "retried after {gap:?}");
    assert_eq!(count(&metrics, "slack", "retried"), 1);
}

#[tokio::test]
async fn slack_404_is_not_retried_and_the_url_stays_secret() {
    let slack = StandIn::start(vec![], answer(404, "channel_not_found")).await;
    let url = format!("{}/services/T000/B000/SECRETTOKEN", slack.url);
    let receiver = slack_receiver(&url);

    match receiver
        .send(&notification(vec![alert(1, "warning", false)]))
        .await
    {
        Err(NotifyError::Permanent(m)) => {
            assert!(m.contains("channel_not_found"), "{m}");
            assert!(m.contains(&slack.url), "{m}");
            assert!(!m.contains("SECRETTOKEN"), "{m}");
        }
        other => panic!("{other:?}"),
    }

    let metrics = NotifyMetrics::default();
    let d = Delivery::spawn(receiver, &delivery(5_000, 30_000, 10), metrics.clone());
    d.enqueue(notification(vec![alert(1, "warning", false)]));
    wait_for(&metrics, "slack", "failed", 1, 5).await;
    assert_eq!(
        slack.received().len(),
        2,
        "one direct send, one delivery attempt"
    );
    assert_eq!(count(&metrics, "slack", "retried"), 0);
    assert_eq!(count(&metrics, "slack", "sent"), 0);
}

#[tokio::test]
async fn connection_errors_do_not_leak_the_url() {
    let url = format!("{}/services/T000/B000/SECRETTOKEN", dead_url());
    match slack_receiver(&url)
        .send(&notification(vec![alert(1, "warning", false)]))
        .await
    {
        Err(NotifyError::Retryable { message, .. }) => {
            assert!(!message.contains("SECRETTOKEN"), "{message}");
            assert!(message.contains("http://127.0.0.1:"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

// ---- webhook ----

#[tokio::test]
async fn webhook_sends_alertmanager_v4_payload_truncated() {
    let hook = StandIn::start(vec![], answer(200, "")).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let mut cfg = common::receiver("hook");
    cfg.webhook = Some(WebhookConfig {
        url: Some(format!("{}/apf", hook.url)),
        url_file: None,
        bearer_token_file: Some(token),
        max_alerts: 2,
    });
    let receiver = notify::build(&cfg).unwrap();
    let mut firing = alert(1, "critical", false);
    firing.starts_at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
    let alerts = vec![
        firing,
        alert(2, "critical", false),
        alert(3, "critical", true),
    ];
    let mut n = notification(alerts.clone());
    n.receiver = "hook".into();
    n.common_annotations.insert(
        "runbook_url".into(),
        "https://example.com/runbooks#APFHeadroomLow".into(),
    );
    receiver.send(&n).await.unwrap();

    let r = hook.received();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].path, "/apf");
    assert_eq!(r[0].headers["authorization"], "Bearer s3cret");
    let fp = |a: &Alert| format!("{:016x}", fingerprint(&a.labels));
    let expected = json!({
        "version": "4",
        "groupKey": "{}:{alertname=\"APFHeadroomLow\", priority_level=\"workload-low\"}",
        "truncatedAlerts": 1,
        "status": "firing",
        "receiver": "hook",
        "groupLabels": {"alertname": "APFHeadroomLow", "priority_level": "workload-low"},
        "commonLabels": {"alertname": "APFHeadroomLow", "priority_level": "workload-low"},
        "commonAnnotations": {"runbook_url": "https://example.com/runbooks#APFHeadroomLow"},
        "externalURL": "http://apf-monitor:8080",
        "alerts": [
            {
                "status": "firing",
                "labels": alerts[0].labels,
                "annotations": alerts[0].annotations,
                "startsAt": "2023-11-14T22:13:20.123Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://apf-monitor:8080/",
                "fingerprint": fp(&alerts[0]),
            },
            {
                "status": "firing",
                "labels": alerts[1].labels,
                "annotations": alerts[1].annotations,
                "startsAt": "2023-11-14T22:13:20Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://apf-monitor:8080/",
                "fingerprint": fp(&alerts[1]),
            },
        ],
    });
    assert_eq!(r[0].json(), expected);
    let f = fp(&alerts[0]);
    assert!(
        f.len() == 16
            && f.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );

    // Resolved alerts carry their end time; no limit sends all.
    let mut cfg2 = cfg.clone();
    if let Some(w) = cfg2.webhook.as_mut() {
        w.max_alerts = 0;
    }
    let all = notify::build(&cfg2).unwrap();
    all.send(&notification(vec![alert(3, "critical", true)]))
        .await
        .unwrap();
    let p = hook.received()[1].json();
    assert_eq!(p["status"], "resolved");
    assert_eq!(p["truncatedAlerts"], 0);
    assert_eq!(p["alerts"][0]["status"], "resolved");
    assert_eq!(p["alerts"][0]["endsAt"], "2023-11-14T22:18:20Z");
}

#[tokio::test]
async fn webhook_5xx_is_retryable_4xx_permanent() {
    let mut busy = answer(503, "");
    busy.retry_after = Some("7");
    let hook = StandIn::start(vec![busy], answer(400, "bad payload")).await;
    let mut cfg = common::receiver("hook");
    cfg.webhook = Some(WebhookConfig {
        url: Some(hook.url.clone()),
        url_file: None,
        bearer_token_file: None,
        max_alerts: 0,
    });
    let r = notify::build(&cfg).unwrap();
    let n = notification(vec![alert(1, "warning", false)]);
    match r.send(&n).await {
        Err(NotifyError::Retryable { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(r.send(&n).await, Err(NotifyError::Permanent(m)) if m.contains("bad payload"))
    );
}

// ---- Alertmanager ----

fn am_receiver(urls: &[String]) -> Arc<dyn Receiver> {
    let mut cfg = common::receiver("am");
    cfg.alertmanager = Some(AlertmanagerConfig {
        urls: urls.iter().map(|u| parse_target_url(u).unwrap()).collect(),
        resend_interval: Interval(Duration::from_secs(60)),
    });
    notify::build(&cfg).unwrap()
}

#[tokio::test]
async fn alertmanager_every_replica_gets_the_alerts() {
    let a = StandIn::start(vec![], answer(200, "")).await;
    let b = StandIn::start(vec![], answer(200, "")).await;
    let n = notification(vec![
        alert(1, "critical", false),
        alert(2, "critical", true),
    ]);
    am_receiver(&[a.url.clone(), b.url.clone()])
        .send(&n)
        .await
        .unwrap();
    let (ra, rb) = (a.received(), b.received());
    assert_eq!((ra.len(), rb.len()), (1, 1));
    assert_eq!(ra[0].path, "/api/v2/alerts");
    assert_eq!(rb[0].path, "/api/v2/alerts");
    assert_eq!(ra[0].body, rb[0].body);
    let body = ra[0].json();
    let arr = body.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["labels"]["alertname"], "APFHeadroomLow");
    assert_eq!(arr[0]["startsAt"], "2023-11-14T22:13:20Z");
    assert!(arr[0].get("endsAt").is_none(), "firing: no endsAt");
    assert_eq!(arr[1]["endsAt"], "2023-11-14T22:18:20Z");
    assert_eq!(arr[1]["generatorURL"], "http://apf-monitor:8080/");
    assert_eq!(
        arr[0]["annotations"]["remediation"],
        "isolate the dominant flow in its own FlowSchema"
    );
}

#[tokio::test]
async fn alertmanager_one_replica_down_still_succeeds() {
    let a = StandIn::start(vec![], answer(200, "")).await;
    let dead = dead_url();
    let n = notification(vec![alert(1, "critical", false)]);
    am_receiver(&[dead.clone(), a.url.clone()])
        .send(&n)
        .await
        .unwrap();
    assert_eq!(a.received().len(), 1);

    let dead2 = dead_url();
    match am_receiver(&[dead.clone(), dead2.clone()]).send(&n).await {
        Err(NotifyError::Retryable { message, .. }) => {
            assert!(message.contains(&dead), "{message}");
            assert!(message.contains(&dead2), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

// ---- delivery isolation ----

#[tokio::test]
async fn a_dead_receiver_never_delays_another() {
    let mut hang = answer(200, "ok");
    hang.hang = true;
    let stuck = StandIn::start(vec![], hang).await;
    let healthy = StandIn::start(vec![], answer(200, "ok")).await;
    let metrics = NotifyMetrics::default();

    let mut dead_cfg = common::receiver("dead");
    dead_cfg.slack = Some(SlackConfig {
        webhook_url: Some(format!("{}/hang", stuck.url)),
        webhook_url_file: None,
        channel: None,
    });
    dead_cfg.delivery = delivery(300, 4_000, 1);
    let dead = Delivery::spawn(
        notify::build(&dead_cfg).unwrap(),
        &dead_cfg.delivery,
        metrics.clone(),
    );
    let ok = Delivery::spawn(
        slack_receiver(&format!("{}/ok", healthy.url)),
        &delivery(300, 4_000, 1),
        metrics.clone(),
    );

    let start = Instant::now();
    dead.enqueue(notification(vec![alert(1, "critical", false)]));
    // Wait until the dead receiver's worker is inside its first (hanging) attempt.
    common::eventually(Duration::from_secs(5), || async {
        (!stuck.received().is_empty()).then_some(())
    })
    .await
    .expect("the stuck receiver got its first attempt");
    ok.enqueue(notification(vec![alert(2, "warning", false)]));
    wait_for(&metrics, "slack", "sent", 1, 5).await;
    let healthy_at = healthy.received()[0].at - start;
    assert!(
        healthy_at < Duration::from_secs(1),
        "healthy receiver took {healthy_at:?}"
    );
    assert_eq!(
        count(&metrics, "dead", "failed"),
        0,
        "the dead one is still retrying"
    );

    // Its queue holds one: with one notification in flight and one waiting, further ones are dropped.
    dead.enqueue(notification(vec![alert(3, "critical", false)]));
    dead.enqueue(notification(vec![alert(4, "critical", false)]));
    dead.enqueue(notification(vec![alert(5, "critical", false)]));
    assert_eq!(count(&metrics, "dead", "dropped"), 2);
    assert_eq!(count(&metrics, "slack", "dropped"), 0);

    // Timeouts are retried until max_retry_duration, then the notification fails.
    wait_for(&metrics, "dead", "failed", 1, 10).await;
    assert!(count(&metrics, "dead", "retried") >= 1);
    assert!(start.elapsed() <= Duration::from_secs(8));
    // Every outcome is registered from the start.
    let text = exposition(&metrics);
    for o in ["sent", "retried", "failed", "dropped"] {
        assert!(
            text.contains(&format!(
                "apf_monitor_notifications_total{{receiver=\"slack\",outcome=\"{o}\"}}"
            )),
            "{text}"
        );
    }
}

#[tokio::test]
async fn build_rejects_bad_config_without_echoing_secrets() {
    let mut cfg = common::receiver("s");
    cfg.slack = Some(SlackConfig {
        webhook_url: Some("hooks.slack.com/services/SECRETTOKEN".into()),
        webhook_url_file: None,
        channel: None,
    });
    let e = notify::build(&cfg).err().unwrap();
    assert!(e.contains("receiver \"s\""), "{e}");
    assert!(!e.contains("SECRETTOKEN"), "{e}");

    let cfg = common::receiver("none");
    assert!(notify::build(&cfg).err().unwrap().contains("exactly one"));
}

#[tokio::test]
async fn a_rotated_webhook_url_file_is_picked_up_at_the_next_send() {
    let old = StandIn::start(vec![], answer(200, "ok")).await;
    let new = StandIn::start(vec![], answer(200, "ok")).await;
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("slack-url");
    std::fs::write(&url_file, format!("{}/services/old", old.url)).unwrap();
    let mut cfg = common::receiver("slack");
    cfg.slack = Some(SlackConfig {
        webhook_url: None,
        webhook_url_file: Some(url_file.clone()),
        channel: Some("#apf".into()),
    });
    let r = notify::build(&cfg).unwrap();
    let n = notification(vec![alert(1, "warning", false)]);
    r.send(&n).await.unwrap();
    std::fs::write(&url_file, format!("{}/services/new\n", new.url)).unwrap();
    r.send(&n).await.unwrap();
    assert_eq!(old.received().len(), 1);
    let got = new.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/services/new");
    assert_eq!(got[0].json()["channel"], "#apf");

    // A file that no longer holds a URL: permanent, and its content is not echoed.
    std::fs::write(&url_file, "SECRETTOKEN").unwrap();
    match r.send(&n).await {
        Err(NotifyError::Permanent(m)) => assert!(!m.contains("SECRETTOKEN"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn drain_stops_at_the_deadline_and_hands_back_what_was_not_delivered() {
    let mut hang = answer(200, "ok");
    hang.hang = true;
    let stuck = StandIn::start(vec![], hang).await;
    let metrics = NotifyMetrics::default();
    let d = Delivery::spawn(
        slack_receiver(&format!("{}/x", stuck.url)),
        &delivery(30_000, 60_000, 5),
        metrics.clone(),
    );
    d.enqueue(notification(vec![alert(1, "warning", false)]));
    d.enqueue(notification(vec![alert(2, "warning", false)]));
    common::eventually(Duration::from_secs(5), || async {
        (!stuck.received().is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(d.queued(), 1);
    assert_eq!(d.name(), "slack");
    let start = Instant::now();
    let undelivered = d.drain(start + Duration::from_millis(300)).await;
    assert!(start.elapsed() < Duration::from_secs(2));
    // The one stuck in flight and the one queued: both handed back, both counted as dropped.
    let ids: Vec<&str> = undelivered
        .iter()
        .map(|n| n.alerts[0].labels["priority_level"].as_str())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(count(&metrics, "slack", "dropped"), 2);
    assert_eq!(count(&metrics, "slack", "sent"), 0);
}

#[tokio::test]
async fn drain_delivers_the_queue_of_a_slow_receiver_with_retries() {
    // Every request takes 300 ms; the first answers 503 and is retried. All three arrive before the deadline.
    let mut slow = answer(200, "ok");
    slow.delay_ms = 300;
    let mut busy = answer(503, "busy");
    busy.delay_ms = 300;
    let receiver = StandIn::start(vec![busy], slow).await;
    let metrics = NotifyMetrics::default();
    let d = Delivery::spawn(
        slack_receiver(&format!("{}/x", receiver.url)),
        &delivery(5_000, 60_000, 10),
        metrics.clone(),
    );
    for i in 1..=3 {
        d.enqueue(notification(vec![alert(i, "warning", false)]));
    }
    let undelivered = d.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(undelivered.is_empty());
    assert_eq!(count(&metrics, "slack", "sent"), 3);
    assert_eq!(count(&metrics, "slack", "retried"), 1);
    assert_eq!(receiver.received().len(), 4);
}

#[tokio::test]
async fn console_never_fails() {
    let mut cfg = common::receiver("log");
    cfg.console = Some(Default::default());
    let r = notify::build(&cfg).unwrap();
    assert_eq!(r.name(), "log");
    r.send(&notification(vec![
        alert(1, "critical", false),
        alert(2, "critical", true),
    ]))
    .await
    .unwrap();
}
