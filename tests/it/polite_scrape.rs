//! A replica is asked one request at a time: a round's endpoints come one after another on one connection, so the
//! replica's APF gives apf-monitor one seat at a time, whatever the round holds.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use apf_monitor::config::Config;
use apf_monitor::values;
use axum::extract::State;
use axum::http::Uri;

use crate::common;

#[derive(Default)]
struct Seen {
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    requests: AtomicUsize,
}

/// Every endpoint a round reads, each answered after a pause long enough for concurrent requests to overlap.
async fn slow_replica() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let capture = Arc::new(common::capture("1.34"));
    let app = axum::Router::new()
        .fallback(move |State(seen): State<Arc<Seen>>, uri: Uri| {
            let capture = capture.clone();
            async move {
                let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
                seen.requests.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(40)).await;
                seen.in_flight.fetch_sub(1, Ordering::SeqCst);
                let path = uri.path();
                let dump = |name: &str| {
                    common::fixture_text(&format!("k8swebsite-2023-{name}.txt")).into_bytes()
                };
                match path.rsplit('/').next().unwrap_or("") {
                    "metrics" => capture.as_ref().clone(),
                    "dump_priority_levels" => dump("dump_priority_levels"),
                    "dump_queues" => dump("dump_queues"),
                    "dump_requests" => dump("dump_requests-includeRequestDetails"),
                    _ => b"{\"kind\":\"Status\",\"code\":404}".to_vec(),
                }
            }
        })
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_asked_one_request_at_a_time() {
    let (url, seen) = slow_replica().await;
    let mut config = Config::default();
    config.scrape.interval = values::Interval(Duration::from_millis(500));
    config.scrape.timeout = values::Interval(Duration::from_millis(500));
    config.targets.static_targets = vec![common::sim_target(&url)];
    let _monitor = common::start_monitor(&config).await;
    // Rounds of /metrics, three dumps and the two object lists (the first round asks for them all).
    let enough = common::eventually(Duration::from_secs(20), || async {
        (seen.requests.load(Ordering::SeqCst) >= 12).then_some(())
    })
    .await;
    assert!(
        enough.is_some(),
        "{} requests",
        seen.requests.load(Ordering::SeqCst)
    );
    assert_eq!(seen.most_in_flight.load(Ordering::SeqCst), 1);
}
