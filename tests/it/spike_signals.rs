//! Saturation between scrapes, measured as the issue asks: a simulated level (Kubernetes 1.25: the seat-utilization
//! histogram, no borrowing to move the limit) saturates once a minute, either for 0.7 s or for 15 s, and every scrape
//! lands in a quiet moment (the simulator steps 30 s at a time, under its lock, between scrapes; the bursts start at
//! 31 s of each minute). The gauges show headroom either way; the apiserver's time-integrated histogram shows the
//! bursts. A blip must not warn; 15 s of every minute must, through the histogram.
use crate::common;

use std::time::Duration;

use apf_monitor::alert::{RuleConfig, RuleName};
use apf_monitor::values::DurationValue;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

const VERSION: (u32, u32) = (25, 0);

/// A minute's loop: nothing, then until `burst` 10-seat, 200 ms LISTs at `load` times what workload-low can serve,
/// then nothing again. The level is full while the burst lasts; its backlog stays within the flow's queues (nothing
/// is rejected) and drains within the burst's length again at most.
fn scenario(burst: &str, load: f64) -> String {
    let idle = Scenario::load(&ScenarioSource::Idle).unwrap();
    let probe = Simulator::try_new(SimOptions::new(
        KubeVersion::new(VERSION.0, VERSION.1),
        idle,
    ))
    .unwrap();
    let limit = probe
        .truth()
        .iter()
        .find(|t| t.priority_level == "workload-low")
        .map(|t| f64::from(t.current_limit_seats))
        .unwrap();
    // One request holds 10 seats for 0.2 s: the level serves limit / 2 requests a second.
    let rps = load * limit / 2.0;
    format!(
        "duration: 60s\nflows:\n  - name: burst\n    flow_schema: service-accounts\n    \
         user: system:serviceaccount:batch:burst\n    verb: list\n    resource: pods\n    namespace: \"\"\n    \
         seats: 10\n    duration: 200ms\n    rate: [ {{at: 0s, rps: 0}}, {{at: 31s, rps: 0}}, {{at: 31s 1ms, rps: {rps}}}, \
         {{at: {burst}, rps: {rps}}}, {{at: {burst} 1ms, rps: 0}} ]\n"
    )
}

/// Runs the monitor against the simulated level for about seven simulated minutes; the alerts on workload-low seen
/// in `/api/v1/status` (any state), and the last status.
async fn run(burst: &str, load: f64) -> (Vec<serde_json::Value>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bursts.yaml");
    std::fs::write(&path, scenario(burst, load)).unwrap();
    let sim = Simulator::try_new(SimOptions::new(
        KubeVersion::new(VERSION.0, VERSION.1),
        Scenario::load(&ScenarioSource::File(path)).unwrap(),
    ))
    .unwrap();
    let sim_url = common::serve_sim(&sim).await;
    let mut config = common::fast_config(&sim_url);
    config.rules.insert(
        RuleName::APFHeadroomLow,
        RuleConfig {
            for_: Some(DurationValue(Duration::ZERO)),
            ..Default::default()
        },
    );
    let monitor = common::start_monitor(&config).await;
    let (mut seen, mut last) = (Vec::new(), serde_json::Value::Null);
    // 30 simulated seconds a step, about one step a scrape: the window (10 s) holds about seven minutes.
    for _ in 0..30 {
        let s = sim.clone();
        tokio::task::spawn_blocking(move || s.step(Duration::from_secs(30)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        let Some(body) = common::get_text(&format!("{monitor}/api/v1/status")).await else {
            continue;
        };
        last = serde_json::from_str(&body).unwrap();
        seen.extend(
            last["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| a["labels"]["priority_level"] == "workload-low")
                .cloned(),
        );
    }
    (seen, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_second_saturation_a_minute_warns_of_nothing() {
    // Twice what the level serves: full at once, for 0.7 s and the as long drain.
    let (seen, last) = run("31s 700ms", 2.0).await;
    let level = common::first_level(&last, "workload-low");
    // The burst is there, as what it is: the window's 99th percentile is past 80 % of the limit, where a rule on
    // it would have warned for a whole window.
    assert!(
        level["seat_utilization_p99"].as_f64().unwrap() > 0.8,
        "{level}"
    );
    assert!(level["headroom_ratio"].as_f64().unwrap() > 0.2, "{level}");
    assert!(seen.is_empty(), "a blip raised {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_seconds_of_every_minute_warn_through_the_histogram() {
    // Just over what the level serves: full for 15 s, nothing rejected (a critical would inhibit the warning).
    let (seen, last) = run("46s", 1.1).await;
    let fired = seen
        .iter()
        .find(|a| a["labels"]["alertname"] == "APFHeadroomLow" && a["state"] == "firing")
        .unwrap_or_else(|| {
            let states: Vec<String> = seen
                .iter()
                .map(|a| format!("{} {}", a["labels"]["alertname"], a["state"]))
                .collect();
            panic!("APFHeadroomLow never fired: {states:?}; last status: {last:#}")
        });
    let summary = fired["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("seat-utilization histogram") && summary.contains("of the last window"),
        "{summary}"
    );
    // Every scrape saw a calm level: the gauge alone would fire nothing.
    let level = common::first_level(&last, "workload-low");
    assert!(level["headroom_ratio"].as_f64().unwrap() > 0.2, "{level}");
    // The other spike-safe signals saw the bursts too, and /metrics exports them.
    assert!(
        level["no_accommodation_per_second"].as_f64().unwrap() > 0.0,
        "{level}"
    );
}
