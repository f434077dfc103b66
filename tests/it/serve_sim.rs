//! `serve` against the simulated apiserver of several versions under load: what apf-monitor exports equals what the
//! simulator served (the simulator is paused between steps, so both sides see the same instant).
use crate::common;

use apf_monitor::values;
use std::time::Duration;

use crate::common::{get_text, sample_value};
use apf_monitor::config::Config;
use apf_monitor::targets::StaticTarget;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

async fn start_sim(minor: u32) -> (Simulator, String) {
    let scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
    let sim = Simulator::try_new(SimOptions {
        seed: 3,
        ..SimOptions::new(KubeVersion::new(minor, 0), scenario)
    })
    .unwrap();
    for _ in 0..300 {
        sim.step(Duration::from_millis(100));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(apf_sim::serve(listener, sim.clone()));
    (sim, format!("http://{addr}"))
}

async fn start_monitor(target: &str) -> (common::Monitor, String) {
    let mut config = Config::default();
    config.scrape.interval = values::Interval(Duration::from_millis(250));
    config.scrape.timeout = values::Interval(Duration::from_millis(250));
    config.scrape.objects_interval = values::DurationValue(Duration::from_secs(1));
    config.analysis.window = values::Interval(Duration::from_secs(5));
    config.targets.static_targets = vec![StaticTarget {
        name: Some("sim".into()),
        ..StaticTarget::from_url(values::parse_target_url(target).unwrap())
    }];
    let monitor = common::start_monitor(&config).await;
    let metrics = format!("{monitor}/metrics");
    (monitor, metrics)
}

fn level_value(body: &str, metric: &str, level: &str) -> Option<f64> {
    sample_value(
        body,
        metric,
        &[("apiserver", "sim"), ("priority_level", level)],
    )
}

/// Every exported level value equals the simulator's truth at this (paused) instant.
fn matches_truth(body: &str, sim: &Simulator) -> Result<(), String> {
    for t in sim.truth().iter().filter(|t| !t.exempt) {
        let l = t.priority_level.as_str();
        let want = [
            (
                "apf_priority_level_limit_seats",
                Some(f64::from(t.current_limit_seats)),
            ),
            (
                "apf_priority_level_nominal_limit_seats",
                Some(f64::from(t.nominal_limit_seats)),
            ),
            (
                "apf_priority_level_executing_seats",
                Some(f64::from(t.executing_seats)),
            ),
            (
                "apf_priority_level_headroom_seats",
                Some(f64::from(t.current_limit_seats) - f64::from(t.executing_seats)),
            ),
            (
                "apf_priority_level_inqueue_requests",
                Some(f64::from(t.inqueue_requests)),
            ),
            (
                "apf_priority_level_queue_capacity_requests",
                (t.queues > 0).then(|| f64::from(t.queues * t.queue_length_limit)),
            ),
            (
                "apf_priority_level_fullest_queue_requests",
                (t.queues > 0).then(|| f64::from(t.fullest_queue_requests)),
            ),
        ];
        for (metric, expected) in want {
            let got = level_value(body, metric, l);
            if got != expected {
                return Err(format!("{metric}{{priority_level={l}}}: exported {got:?}, simulator served {expected:?}"));
            }
        }
    }
    Ok(())
}

async fn exported_equals_served(minor: u32) {
    let (sim, target) = start_sim(minor).await;
    let (_monitor, metrics) = start_monitor(&target).await;
    let mut last = String::from("no scrape");
    let mut body = String::new();
    for _ in 0..150 {
        if let Some(b) = get_text(&metrics).await {
            match matches_truth(&b, &sim) {
                Ok(()) => {
                    body = b;
                    break;
                }
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!body.is_empty(), "1.{minor}: {last}");
    // The exempt level: seats in use only.
    assert!(
        level_value(&body, "apf_priority_level_limit_seats", "exempt").is_none(),
        "1.{minor}"
    );
    // Each replica's Kubernetes version, as it reports it.
    assert_eq!(
        sample_value(
            &body,
            "apf_monitor_apiserver_info",
            &[
                ("apiserver", "sim"),
                ("kubernetes_version", &format!("v1.{minor}.0"))
            ]
        ),
        Some(1.0),
        "1.{minor}"
    );
    // The storm's agents are named as the top flow of workload-low.
    assert!(
        body.lines()
            .any(|l| l.starts_with("apf_flow_waiting_requests{")
                && l.contains("flow_schema=\"service-accounts\"")),
        "1.{minor}: no top flow exported"
    );

    // Advance the storm: rejections keep coming, so the rate over the window becomes positive.
    let rejected_before: u64 = sim
        .truth()
        .iter()
        .flat_map(|t| t.rejected_total.values())
        .sum();
    for _ in 0..20 {
        sim.step(Duration::from_millis(100));
    }
    let rejected_after: u64 = sim
        .truth()
        .iter()
        .flat_map(|t| t.rejected_total.values())
        .sum();
    assert!(
        rejected_after > rejected_before,
        "1.{minor}: the storm should keep rejecting"
    );
    let mut rate = None;
    for _ in 0..100 {
        if let Some(b) = get_text(&metrics).await {
            rate = b
                .lines()
                .filter(|l| l.starts_with("apf_priority_level_rejected_per_second{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .find(|v| *v > 0.0);
            if rate.is_some() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        rate.is_some(),
        "1.{minor}: no positive rejection rate exported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_matches_the_simulator_on_1_21() {
    exported_equals_served(21).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_matches_the_simulator_on_1_27() {
    exported_equals_served(27).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_matches_the_simulator_on_1_33() {
    exported_equals_served(33).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_matches_the_simulator_on_1_36() {
    exported_equals_served(36).await;
}
