//! `serve` against a stand-in apiserver (axum on 127.0.0.1:0) that misbehaves in every way we know: each failure
//! is counted under its reason and the daemon keeps serving.
use crate::common;

use apf_monitor::values;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{get_text, sample_value};
use apf_monitor::config::Config;
use apf_monitor::targets::StaticTarget;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Capture,
    Garbage,
    InvalidUtf8,
    HugeLine,
    Error500,
    Hang,
    Throttled,
}

#[derive(Clone)]
struct Fake {
    mode: Arc<Mutex<Mode>>,
    capture: Arc<Vec<u8>>,
}

async fn metrics(State(f): State<Fake>) -> Response {
    let mode = *f.mode.lock().unwrap();
    match mode {
        Mode::Capture => (StatusCode::OK, f.capture.as_ref().clone()).into_response(),
        Mode::Garbage => {
            (StatusCode::OK, "<html><body>Login required</body></html>\n").into_response()
        }
        Mode::InvalidUtf8 => {
            let mut body =
                b"apiserver_flowcontrol_current_limit_seats{priority_level=\"bad\xff\xfe\"} 3\n"
                    .to_vec();
            body.extend_from_slice(&f.capture);
            (StatusCode::OK, body).into_response()
        }
        Mode::HugeLine => {
            let mut body = b"apiserver_flowcontrol_current_limit_seats{priority_level=\"".to_vec();
            body.extend(std::iter::repeat_n(b'a', 20 * 1024 * 1024));
            body.extend_from_slice(b"\"} 1\n");
            body.extend_from_slice(&f.capture);
            (StatusCode::OK, body).into_response()
        }
        Mode::Error500 => (StatusCode::INTERNAL_SERVER_ERROR, "etcd is sad").into_response(),
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            (StatusCode::OK, "").into_response()
        }
        Mode::Throttled => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "Too many requests, please try again later.",
        )
            .into_response(),
    }
}

async fn start_fake(capture: Vec<u8>) -> (String, Fake) {
    let fake = Fake {
        mode: Arc::new(Mutex::new(Mode::Capture)),
        capture: Arc::new(capture),
    };
    let app = Router::new()
        .route("/metrics", get(metrics))
        // This replica's RBAC does not allow the dumps.
        .route("/debug/api_priority_and_fairness/{dump}", get(|| async { (StatusCode::FORBIDDEN, "forbidden: User \"system:serviceaccount:apf:apf-monitor\" cannot get path \"/debug/api_priority_and_fairness/dump_queues\"") }))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), fake)
}

async fn start_monitor(target: &str, tweak: impl FnOnce(&mut Config)) -> common::Monitor {
    let mut config = Config::default();
    config.scrape.interval = values::Interval(Duration::from_millis(300));
    config.scrape.timeout = values::Interval(Duration::from_millis(300));
    config.scrape.max_backoff = values::Interval(Duration::from_millis(600));
    config.analysis.window = values::Interval(Duration::from_secs(10));
    config.targets.static_targets = vec![StaticTarget {
        name: Some("fake".into()),
        ..StaticTarget::from_url(values::parse_target_url(target).unwrap())
    }];
    tweak(&mut config);
    common::start_monitor(&config).await
}

fn errors(body: &str, endpoint: &str, reason: &str) -> f64 {
    sample_value(
        body,
        "apf_monitor_scrape_errors_total",
        &[
            ("apiserver", "fake"),
            ("endpoint", endpoint),
            ("reason", reason),
        ],
    )
    .unwrap_or(-1.0)
}

/// Waits until the exported metrics satisfy `ok`, returning the body; panics with the last body otherwise.
async fn wait_for(
    monitor: &impl std::fmt::Display,
    what: &str,
    ok: impl Fn(&str) -> bool,
) -> String {
    let url = format!("{monitor}/metrics");
    // Generous: polled, so a fast machine does not wait; a loaded one gets the time it needs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        if let Some(body) = get_text(&url).await {
            if ok(&body) {
                return body;
            }
            last = body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}; last /metrics:\n{last}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_bad_input_is_counted_and_the_daemon_keeps_serving() {
    let (target, fake) = start_fake(common::capture("1.35")).await;
    let monitor = start_monitor(&target, |_| {}).await;
    let limit = |b: &str| {
        sample_value(
            b,
            "apf_priority_level_limit_seats",
            &[("apiserver", "fake"), ("priority_level", "workload-low")],
        )
    };

    // A good scrape first: the capture's enforced limit (56) and headroom (55) are exported.
    let body = wait_for(&monitor, "the capture's values", |b| limit(b) == Some(56.0)).await;
    assert_eq!(
        sample_value(
            &body,
            "apf_priority_level_headroom_seats",
            &[("priority_level", "workload-low")]
        ),
        Some(55.0)
    );
    // Error counters exist at 0 from the start, for every endpoint and reason.
    assert!(errors(&body, "metrics", "timeout") >= 0.0, "{body}");
    // The dumps answer 403: metrics-only, said once, with a self-metric.
    let body = wait_for(&monitor, "dumps marked unavailable", |b| {
        sample_value(
            b,
            "apf_monitor_endpoint_available",
            &[("endpoint", "dump_queues")],
        ) == Some(0.0)
    })
    .await;
    assert!(errors(&body, "dump_queues", "http_4xx") >= 1.0);
    let status = get_text(&format!("{monitor}/api/v1/status")).await.unwrap();
    assert!(
        status.contains("/debug/api_priority_and_fairness/*"),
        "the 403 names the missing RBAC rule: {status}"
    );

    for (mode, endpoint_reason) in [
        (Mode::Garbage, "parse"),
        (Mode::Error500, "http_5xx"),
        (Mode::Hang, "timeout"),
        (Mode::Throttled, "throttled"),
    ] {
        *fake.mode.lock().unwrap() = mode;
        wait_for(
            &monitor,
            &format!("{mode:?} counted as {endpoint_reason}"),
            |b| errors(b, "metrics", endpoint_reason) >= 1.0,
        )
        .await;
        // Still serving its own endpoints.
        assert_eq!(
            get_text(&format!("{monitor}/healthz")).await.as_deref(),
            Some("ok\n")
        );
        *fake.mode.lock().unwrap() = Mode::Capture;
        wait_for(&monitor, "recovery", |b| {
            sample_value(
                b,
                "apf_monitor_scrape_duration_seconds",
                &[("endpoint", "metrics")],
            )
            .is_some()
                && limit(b) == Some(56.0)
        })
        .await;
    }

    // Lines that cannot be read are counted, and the rest of the body still counts.
    parse_errors_are_counted(&monitor, &fake, Mode::InvalidUtf8).await;
}

/// A 20 MB line is counted as a parse error and the rest of the body still counts. Its own test, with a scrape
/// timeout a loaded machine can read 20 MB in (the test above needs 300 ms to see time-outs quickly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_line_is_counted_and_the_rest_still_counts() {
    let (target, fake) = start_fake(common::capture("1.35")).await;
    let monitor = start_monitor(&target, |c| {
        c.scrape.interval = values::Interval(Duration::from_secs(5));
        c.scrape.timeout = values::Interval(Duration::from_secs(5));
    })
    .await;
    parse_errors_are_counted(&monitor, &fake, Mode::HugeLine).await;
}

async fn parse_errors_are_counted(monitor: &common::Monitor, fake: &Fake, mode: Mode) {
    let limit = |b: &str| {
        sample_value(
            b,
            "apf_priority_level_limit_seats",
            &[("apiserver", "fake"), ("priority_level", "workload-low")],
        )
    };
    let parse_errors = |b: &str| {
        sample_value(
            b,
            "apf_monitor_parse_errors_total",
            &[("endpoint", "metrics")],
        )
        .unwrap_or(0.0)
    };
    let before = wait_for(monitor, "a good scrape", |b| limit(b) == Some(56.0)).await;
    let n = parse_errors(&before);
    *fake.mode.lock().unwrap() = mode;
    let body = wait_for(monitor, &format!("{mode:?} counted"), |b| {
        parse_errors(b) > n
    })
    .await;
    assert_eq!(
        limit(&body),
        Some(56.0),
        "{mode:?}: the good lines still count"
    );
    *fake.mode.lock().unwrap() = Mode::Capture;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_cap_is_cut_off_and_counted() {
    let (target, _fake) = start_fake(common::capture("1.35")).await;
    let monitor = start_monitor(&target, |c| {
        c.scrape.max_body_bytes = values::ByteCount(64 * 1024)
    })
    .await;
    let body = wait_for(&monitor, "too_large", |b| {
        errors(b, "metrics", "too_large") >= 1.0
    })
    .await;
    assert!(
        sample_value(&body, "apf_priority_level_limit_seats", &[]).is_none(),
        "no values from a cut-off body"
    );
    let ready = reqwest::get(format!("{monitor}/readyz")).await.unwrap();
    assert_eq!(
        ready.status(),
        503,
        "not ready while no target was scraped successfully"
    );
}

/// A raw TCP server that promises more body than it sends, then hangs up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_body_is_counted() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\napiserver_flowcontrol_current_limit_seats{priority_level=\"a\"} 1\n")
                    .await;
            });
        }
    });
    let monitor = start_monitor(&format!("http://{addr}"), |c| c.scrape.debug_dumps = false).await;
    wait_for(&monitor, "a truncated body counted", |b| {
        errors(b, "metrics", "body") >= 1.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_target_is_counted_as_connect() {
    // Bind and drop: nothing listens on this port now.
    let port = {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let monitor = start_monitor(&format!("http://127.0.0.1:{port}"), |_| {}).await;
    wait_for(&monitor, "connect errors", |b| {
        errors(b, "metrics", "connect") >= 1.0
    })
    .await;
    assert_eq!(
        get_text(&format!("{monitor}/healthz")).await.as_deref(),
        Some("ok\n")
    );
}

/// The stand-in accepts only the token currently in the file: a rotation must be picked up without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_file_is_reread_when_it_rotates() {
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "token-one\n").unwrap();
    let accepted = Arc::new(Mutex::new("token-one".to_string()));
    let capture = Arc::new(common::capture("1.35"));
    let app = Router::new().route(
        "/metrics",
        get({
            let accepted = accepted.clone();
            move |headers: axum::http::HeaderMap| {
                let accepted = accepted.clone();
                let capture = capture.clone();
                async move {
                    let want = format!("Bearer {}", accepted.lock().unwrap());
                    if headers
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        == Some(want.as_str())
                    {
                        (StatusCode::OK, capture.as_ref().clone()).into_response()
                    } else {
                        (StatusCode::UNAUTHORIZED, "Unauthorized").into_response()
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let path = token_path.clone();
    let monitor = start_monitor(&format!("http://{addr}"), move |c| {
        c.scrape.debug_dumps = false;
        c.targets.static_targets[0].bearer_token_file = Some(path);
    })
    .await;
    let ok_count = |b: &str| {
        sample_value(
            b,
            "apf_monitor_last_scrape_success_timestamp_seconds",
            &[("endpoint", "metrics")],
        )
    };
    let first = wait_for(&monitor, "a scrape with the first token", |b| {
        ok_count(b).is_some()
    })
    .await;
    assert_eq!(errors(&first, "metrics", "http_4xx"), 0.0);
    // Rotate: the server now wants the new token, and the file holds it.
    *accepted.lock().unwrap() = "token-two-rotated".into();
    std::fs::write(&token_path, "token-two-rotated\n").unwrap();
    // Any success stamped after this instant was made with the new token: the server takes no other.
    let rotated_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let body = wait_for(&monitor, "a scrape with the rotated token", |b| {
        ok_count(b).is_some_and(|t| t > rotated_at)
    })
    .await;
    assert!(
        errors(&body, "metrics", "http_4xx") <= 1.0,
        "at most the one scrape racing the rotation fails"
    );
}

/// A target URL with a path (an apiserver behind a proxy that routes by path, as Rancher's does) is scraped under
/// that path, with our user agent and the bearer token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_url_with_a_path_is_scraped_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "the-token\n").unwrap();
    let seen = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let capture = Arc::new(common::capture("1.35"));
    let app = Router::new().route(
        "/k8s/clusters/c-1/metrics",
        get({
            let seen = seen.clone();
            move |headers: axum::http::HeaderMap| {
                let seen = seen.clone();
                let capture = capture.clone();
                async move {
                    let text = |name| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string()
                    };
                    seen.lock()
                        .unwrap()
                        .push((text(header::USER_AGENT), text(header::AUTHORIZATION)));
                    (StatusCode::OK, capture.as_ref().clone()).into_response()
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let monitor = start_monitor(&format!("http://{addr}/k8s/clusters/c-1/"), move |c| {
        c.scrape.debug_dumps = false;
        c.targets.static_targets[0].bearer_token_file = Some(token_path);
    })
    .await;
    wait_for(&monitor, "a scrape under the path", |b| {
        sample_value(
            b,
            "apf_monitor_last_scrape_success_timestamp_seconds",
            &[("endpoint", "metrics")],
        )
        .is_some()
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let (agent, authorization) = &seen[0];
    assert!(agent.starts_with("apf-monitor/"), "{agent}");
    assert_eq!(authorization, "Bearer the-token");
}
