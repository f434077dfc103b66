//! A real Prometheus (Debian package `prometheus`) scrapes apf-monitor's `/metrics` while apf-monitor scrapes the
//! simulated apiserver: the exposition is valid for Prometheus and the series are queryable.
use crate::common;

use apf_monitor::values;
use std::time::Duration;

use crate::common::external;
use apf_monitor::config::Config;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_derived_metrics() {
    let scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(34, 0), scenario)).unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;

    let mut config = Config::default();
    config.scrape.interval = values::Interval(Duration::from_secs(1));
    config.scrape.timeout = values::Interval(Duration::from_secs(1));
    config.analysis.window = values::Interval(Duration::from_secs(10));
    config.targets.static_targets = vec![common::sim_target(&sim_url)];
    let monitor = common::start_monitor(&config).await;
    let monitor_addr = monitor.url.trim_start_matches("http://").to_string();

    let prom = external::prometheus(&[("apf-monitor", monitor_addr)], "groups: []\n").await;
    let mut last = Vec::new();
    for _ in 0..200 {
        last = external::prom_query(
            &prom,
            r#"apf_priority_level_headroom_seats{job="apf-monitor",priority_level="workload-low"}"#,
        )
        .await;
        if !last.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        last.len(),
        1,
        "Prometheus has no headroom series; its log:\n{}",
        prom.log()
    );
    let up = external::prom_query(&prom, r#"up{job="apf-monitor"}"#).await;
    assert_eq!(up[0]["value"][1], "1", "{up:?}");
    // Every family apf-monitor serves (OpenMetrics: counters as `_total`, info metrics as `_info`) is ingested under
    // the name docs/reference/metrics.md documents. Some families exist only at moments (seconds_to_exhaustion while seats in use
    // rise): each poll compares a fresh /metrics with every name Prometheus has ingested so far, until none is
    // missing or the deadline passes.
    let served_names = |body: &str| -> std::collections::BTreeSet<String> {
        body.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.split(['{', ' ']).next().map(str::to_string))
            .collect()
    };
    let body = common::get_text(&format!("{monitor}/metrics"))
        .await
        .unwrap();
    let served = served_names(&body);
    assert!(served.contains("apf_monitor_build_info"), "{served:?}");
    assert!(
        served.contains("apf_monitor_scrape_errors_total"),
        "{served:?}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let missing = loop {
        let served = served_names(
            &common::get_text(&format!("{monitor}/metrics"))
                .await
                .unwrap_or_default(),
        );
        let names =
            external::prom_query(&prom, r#"group by (__name__) ({job="apf-monitor"})"#).await;
        let ingested: std::collections::BTreeSet<String> = names
            .iter()
            .filter_map(|s| s["metric"]["__name__"].as_str().map(str::to_string))
            .collect();
        let missing: Vec<String> = if served.is_empty() {
            vec!["(/metrics did not answer)".into()]
        } else {
            served.difference(&ingested).cloned().collect()
        };
        if missing.is_empty() || tokio::time::Instant::now() >= deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        missing.is_empty(),
        "families served but not in Prometheus: {missing:?}; its log:\n{}",
        prom.log()
    );
    let errors = external::prom_query(
        &prom,
        r#"apf_monitor_scrape_errors_total{endpoint="metrics",reason="connect"}"#,
    )
    .await;
    assert_eq!(
        errors.len(),
        1,
        "error counters exist at 0 from start-up: {errors:?}"
    );
}
