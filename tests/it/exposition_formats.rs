//! `/metrics` in both of Prometheus' formats: a scrape asks for protobuf first (`scrape.protobuf`), reads whatever
//! the server answers with, and makes the same snapshot of it either way.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apf_monitor::scrape::{scrape_replica, Endpoint, ReplicaScrape, ScrapePlan};
use apf_monitor::targets::build_static;
use apf_sim::{Scenario, ScenarioSource};
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;

use crate::common;

fn plan(protobuf: bool) -> ScrapePlan {
    ScrapePlan {
        endpoints: vec![Endpoint::Metrics],
        request_details: false,
        max_body_bytes: 256 << 20,
        max_line_bytes: 1 << 20,
        flows_per_schema: None,
        protobuf,
    }
}

async fn scrape(url: &str, protobuf: bool) -> ReplicaScrape {
    let target = build_static(&[common::sim_target(url)], Duration::from_secs(10))
        .unwrap()
        .remove(0);
    scrape_replica(&target, &plan(protobuf)).await
}

#[tokio::test]
async fn the_simulated_apiserver_answers_in_protobuf_and_says_the_same_as_in_text() {
    for minor in [20, 23, 26, 34, 36] {
        let storm = Scenario::load(&ScenarioSource::Storm).unwrap();
        let (_sim, url) = common::paused_sim(minor, storm, 30).await;
        let protobuf = scrape(&url, true).await;
        let text = scrape(&url, false).await;
        let (p, t) = (
            protobuf.metrics_stats.clone().unwrap(),
            text.metrics_stats.clone().unwrap(),
        );
        // Families read or skipped (protobuf), against lines (text).
        assert!(
            p.families > 0 && p.skipped_families > 0 && p.lines == 0,
            "1.{minor}: {p:?}"
        );
        assert!(t.lines > 0 && t.families == 0, "1.{minor}: {t:?}");
        assert_eq!((p.invalid_lines, t.invalid_lines), (0, 0), "1.{minor}");
        let snapshot = protobuf.snapshot.unwrap();
        assert!(
            snapshot.levels.len() >= 6,
            "1.{minor}: {:?}",
            snapshot.levels.keys()
        );
        assert_eq!(Some(snapshot), text.snapshot, "1.{minor}");
    }
}

/// A `/metrics` that answers the same body whatever is asked, and records the `Accept` header and query it got.
async fn fixed_server(
    content_type: &'static str,
    body: Vec<u8>,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let accepts = Arc::new(Mutex::new(Vec::new()));
    let seen = accepts.clone();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |uri: axum::http::Uri, headers: HeaderMap| {
            let seen = seen.clone();
            let body = body.clone();
            async move {
                let accept = headers
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                seen.lock()
                    .unwrap()
                    .push(format!("{} ?{}", accept, uri.query().unwrap_or("")));
                ([(header::CONTENT_TYPE, content_type)], body).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), accepts)
}

#[tokio::test]
async fn a_server_that_answers_in_text_is_read_as_text() {
    let capture = common::capture("1.34");
    let (url, accepts) =
        fixed_server("text/plain; version=0.0.4; charset=utf-8", capture.clone()).await;
    let round = scrape(&url, true).await;
    let stats = round.metrics_stats.unwrap();
    assert!(stats.lines > 0 && stats.families == 0, "{stats:?}");
    assert_eq!(stats.invalid_lines, 0);
    assert!(round.snapshot.unwrap().levels.contains_key("workload-low"));
    // Asked as Prometheus asks for native histograms: protobuf first, then text.
    let asked = accepts.lock().unwrap()[0].clone();
    assert!(
        asked.starts_with("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=")
            && asked.contains("text/plain;version=0.0.4"),
        "{asked}"
    );
    // By name, the families the model reads (a client_golang 1.24+ handler serves those alone).
    let query = asked.split_once(" ?").map(|(_, q)| q).unwrap_or("");
    for family in [
        "apiserver_flowcontrol_current_limit_seats",
        "apiserver_flowcontrol_request_wait_duration_seconds",
        "apiserver_flowcontrol_rejected_requests_total",
        "kubernetes_build_info",
    ] {
        assert!(
            query.split('&').any(|p| p == format!("name[]={family}")),
            "{family}: {query}"
        );
    }
    // `scrape.protobuf: false` never asks for it.
    scrape(&url, false).await;
    let asked = accepts.lock().unwrap()[1].clone();
    assert!(
        !asked.split(" ?").next().unwrap().contains("protobuf"),
        "{asked}"
    );
    // A capture's protobuf body, served as a 1.34 apiserver would: the same snapshot as its text.
    let body = apf_sim::protobuf::from_text(&capture, Some(apf_sim::protobuf::CREATED));
    let (url, _) = fixed_server(apf_sim::protobuf::CONTENT_TYPE, body).await;
    let from_protobuf = scrape(&url, true).await;
    let from_text = scrape(&fixed_server("text/plain", capture).await.0, true).await;
    assert!(from_protobuf.metrics_stats.unwrap().families > 0);
    assert_eq!(from_protobuf.snapshot, from_text.snapshot);
}

#[tokio::test]
async fn a_big_body_makes_the_same_snapshot_in_either_format() {
    // Past the first MiB a protobuf body's parse goes to a task of its own, a text body's stays in place: families
    // not read first, so that the ones read come after the hand-over, in the last batches.
    let capture = common::capture("1.34");
    let mut body = b"# HELP padding_info Not read.\n# TYPE padding_info gauge\n".to_vec();
    for i in 0..150_000 {
        body.extend_from_slice(format!("padding_info{{series=\"{i}\"}} 1\n").as_bytes());
    }
    body.extend_from_slice(&capture);
    let protobuf = apf_sim::protobuf::from_text(&body, Some(apf_sim::protobuf::CREATED));
    assert!(protobuf.len() > 2 << 20, "{}", protobuf.len());
    let from_protobuf = scrape(
        &fixed_server(apf_sim::protobuf::CONTENT_TYPE, protobuf)
            .await
            .0,
        true,
    )
    .await;
    let from_text = scrape(&fixed_server("text/plain", body).await.0, true).await;
    let alone = scrape(&fixed_server("text/plain", capture).await.0, true).await;
    assert!(alone
        .snapshot
        .as_ref()
        .unwrap()
        .levels
        .contains_key("workload-low"));
    assert_eq!(from_protobuf.snapshot, alone.snapshot);
    assert_eq!(from_text.snapshot, alone.snapshot);
    let stats = from_protobuf.metrics_stats.unwrap();
    assert_eq!(stats.invalid_lines, 0, "{stats:?}");
    assert!(stats.skipped_families > 0, "{stats:?}");
}

#[tokio::test]
async fn a_body_that_says_protobuf_and_is_not_is_an_error_that_says_so() {
    let page = b"<html><body>502 Bad Gateway</body></html>\n".repeat(20);
    let (url, _) = fixed_server(apf_sim::protobuf::CONTENT_TYPE, page).await;
    let round = scrape(&url, true).await;
    let metrics = round
        .results
        .iter()
        .find(|r| r.endpoint == Endpoint::Metrics)
        .unwrap();
    let err = metrics.outcome.clone().unwrap_err().to_string();
    assert!(
        err.contains("not a Prometheus /metrics body") && err.contains("unreadable families"),
        "{err}"
    );
    assert!(round.snapshot.is_none());
}
