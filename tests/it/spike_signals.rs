//! Saturation between scrapes: a simulated level saturates in bursts of under a second, and every scrape lands in a
//! quiet moment (the simulator steps 5 s at a time, under its lock, between scrapes). The gauges show headroom; the
//! apiserver's own time-integrated signals (seat-utilization histogram, demand high watermark, dispatches without a
//! seat) show the bursts, and APFHeadroomLow fires through the histogram.
use crate::common;

use std::time::Duration;

use apf_monitor::alert::{RuleConfig, RuleName};
use apf_monitor::values::DurationValue;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

/// A 5 s loop: nothing, then 200 ms of 10-seat LISTs at 300/s (600 seats wanted at once: more than the level gets),
/// drained within a second.
const BURSTS: &str = "duration: 5s\nflows:\n  - name: burst\n    flow_schema: service-accounts\n    \
    user: system:serviceaccount:batch:burst\n    verb: list\n    resource: pods\n    namespace: \"\"\n    seats: 10\n    \
    duration: 200ms\n    rate: [ {at: 0s, rps: 0}, {at: 1990ms, rps: 0}, {at: 2s, rps: 300}, {at: 2200ms, rps: 300}, \
    {at: 2210ms, rps: 0} ]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_saturating_between_scrapes_raises_headroom_low_through_the_histogram() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bursts.yaml");
    std::fs::write(&scenario, BURSTS).unwrap();
    let sim = Simulator::try_new(SimOptions::new(
        KubeVersion::new(34, 0),
        Scenario::load(&ScenarioSource::File(scenario)).unwrap(),
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

    let mut last = serde_json::Value::Null;
    for _ in 0..90 {
        // Five simulated seconds in one step: the scrapes between steps see the end of a loop, when the burst has
        // drained.
        let s = sim.clone();
        tokio::task::spawn_blocking(move || s.step(Duration::from_secs(5)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        let Some(body) = common::get_text(&format!("{monitor}/api/v1/status")).await else {
            continue;
        };
        last = serde_json::from_str(&body).unwrap();
        let fired = last["alerts"].as_array().into_iter().flatten().find(|a| {
            a["labels"]["alertname"] == "APFHeadroomLow"
                && a["labels"]["priority_level"] == "workload-low"
                && a["state"] == "firing"
        });
        if let Some(alert) = fired {
            let summary = alert["annotations"]["summary"].as_str().unwrap();
            assert!(summary.contains("seat-utilization histogram"), "{summary}");
            let level = last["apiservers"][0]["levels"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["priority_level"] == "workload-low")
                .unwrap();
            // Every scrape saw a calm level: the gauge alone would fire nothing.
            assert!(level["headroom_ratio"].as_f64().unwrap() > 0.2, "{level}");
            assert!(
                level["seat_utilization_p99"].as_f64().unwrap() >= 0.8,
                "{level}"
            );
            // The other spike-safe signals saw the bursts too, and /metrics exports them.
            assert!(
                level["demand_seats_max"].as_f64().unwrap()
                    > level["limit_seats"].as_f64().unwrap(),
                "{level}"
            );
            assert!(
                level["no_accommodation_per_second"].as_f64().unwrap() > 0.0,
                "{level}"
            );
            let metrics = common::get_text(&format!("{monitor}/metrics"))
                .await
                .unwrap();
            for name in [
                "apf_priority_level_seat_utilization_p99",
                "apf_priority_level_demand_seats_max",
                "apf_priority_level_no_accommodation_per_second",
            ] {
                assert!(
                    common::sample_value(&metrics, name, &[("priority_level", "workload-low")])
                        .is_some(),
                    "{name} not served"
                );
            }
            return;
        }
    }
    panic!("APFHeadroomLow never fired; last status: {last:#}");
}
