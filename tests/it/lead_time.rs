//! The measure that matters: under the `ramp` scenario, how many seconds before the first APF rejection the first
//! apf-monitor warning reaches a receiver, against the kubernetes-mixin rule `KubeAPITerminatedRequests` evaluated by
//! a real Prometheus over the same apiserver (it can only fire after rejections).
//!
//! Runs in real time for several minutes, so it is not part of `cargo test`:
//!     cargo test --release --test it lead_time -- --ignored --nocapture
use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::external;
use apf_monitor::config::Config;
use apf_monitor::notify::{ReceiverConfig, WebhookConfig};
use apf_monitor::targets::StaticTarget;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
use axum::routing::post;

/// kubernetes-mixin's rule, as shipped (job label adapted to this Prometheus).
const MIXIN_RULE: &str = r#"groups:
  - name: kube-apiserver-availability
    rules:
      - alert: KubeAPITerminatedRequests
        expr: sum(rate(apiserver_request_terminations_total{job="apiserver"}[10m])) / ( sum(rate(apiserver_request_total{job="apiserver"}[10m])) + sum(rate(apiserver_request_terminations_total{job="apiserver"}[10m])) ) > 0.20
        for: 5m
        labels:
          severity: warning
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real time, several minutes: run by hand for the lead-time figure"]
async fn lead_time_against_kube_api_terminated_requests() {
    let minutes: u64 = std::env::var("LEAD_TIME_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(10);
    let start = Instant::now();
    let scenario = Scenario::load(&ScenarioSource::Ramp).unwrap();
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(34, 0), scenario)).unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim_addr = sim_listener.local_addr().unwrap();
    tokio::spawn(apf_sim::serve(sim_listener, sim.clone()));

    // A webhook consumer recording when each alert first arrives.
    let arrivals: Arc<Mutex<Vec<(f64, String)>>> = Arc::default();
    let rec = arrivals.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: String| {
            let rec = rec.clone();
            async move {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                for a in v["alerts"].as_array().into_iter().flatten() {
                    if a["status"] == "firing" {
                        let name = format!(
                            "{} {}",
                            a["labels"]["alertname"].as_str().unwrap_or(""),
                            a["labels"]["severity"].as_str().unwrap_or("")
                        );
                        rec.lock()
                            .unwrap()
                            .push((start.elapsed().as_secs_f64(), name));
                    }
                }
                "ok"
            }
        }),
    );
    let hook_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_addr = hook_listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(hook_listener, app).await.unwrap() });

    // apf-monitor with its defaults (5 s scrapes, group_wait 30 s), one webhook receiver.
    let mut config = Config::default();
    config.targets.static_targets = vec![StaticTarget {
        name: Some("sim".into()),
        ..StaticTarget::from_url(
            apf_monitor::values::parse_target_url(&format!("http://{sim_addr}")).unwrap(),
        )
    }];
    config.receivers = vec![ReceiverConfig {
        name: "hook".into(),
        slack: None,
        email: None,
        webhook: Some(WebhookConfig {
            url: Some(format!("http://{hook_addr}/hook")),
            url_file: None,
            bearer_token_file: None,
            max_alerts: 0,
        }),
        alertmanager: None,
        console: None,
        delivery: Default::default(),
    }];
    let _monitor = common::start_monitor(&config).await;

    let prom = external::prometheus(&[("apiserver", sim_addr.to_string())], MIXIN_RULE).await;

    let mut first_rejection: Option<f64> = None;
    let mut mixin_pending: Option<f64> = None;
    let mut mixin_firing: Option<f64> = None;
    let mut max_ratio: f64 = 0.0;
    let ratio_query = r#"sum(rate(apiserver_request_terminations_total{job="apiserver"}[10m])) / ( sum(rate(apiserver_request_total{job="apiserver"}[10m])) + sum(rate(apiserver_request_terminations_total{job="apiserver"}[10m])) )"#;
    while start.elapsed() < Duration::from_secs(minutes * 60) && mixin_firing.is_none() {
        let now = start.elapsed().as_secs_f64();
        if first_rejection.is_none()
            && sim
                .truth()
                .iter()
                .any(|t| t.rejected_total.values().sum::<u64>() > 0)
        {
            first_rejection = Some(now);
        }
        let r = external::prom_query(&prom, ratio_query).await;
        if let Some(v) = r
            .first()
            .and_then(|x| x["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok())
        {
            if v.is_finite() {
                max_ratio = max_ratio.max(v);
            }
        }
        let alerts =
            external::prom_query(&prom, r#"ALERTS{alertname="KubeAPITerminatedRequests"}"#).await;
        for a in alerts {
            match a["metric"]["alertstate"].as_str() {
                Some("pending") if mixin_pending.is_none() => mixin_pending = Some(now),
                Some("firing") if mixin_firing.is_none() => mixin_firing = Some(now),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let arrivals = arrivals.lock().unwrap().clone();
    let mut all_alerts = String::new();
    for a in &arrivals {
        all_alerts.push_str(&format!("\n      {:>6.1} s  {}", a.0, a.1));
    }
    let first_warning = arrivals.first().cloned();
    println!("LEAD TIME (seconds since start, ramp scenario, Kubernetes 1.34 simulated, apf-monitor defaults)");
    println!("  first APF rejection:                    {first_rejection:?}");
    println!("  first apf-monitor alert at a receiver:  {first_warning:?}");
    println!("  apf-monitor alerts on workload-low received:{all_alerts}");
    println!("  KubeAPITerminatedRequests pending:      {mixin_pending:?}");
    println!("  KubeAPITerminatedRequests firing:       {mixin_firing:?} (run for {minutes} min)");
    println!("  max terminated ratio seen by the mixin: {max_ratio:.4} (fires above 0.20 for 5m)");
    if let (Some(r), Some((w, name))) = (first_rejection, &first_warning) {
        println!(
            "  lead time: {:.0} s before the first rejection ({name})",
            r - w
        );
    }
    let (Some(rejection), Some((warning, _))) = (first_rejection, first_warning) else {
        panic!("the ramp produced no rejection or no alert within {minutes} minutes");
    };
    assert!(
        warning < rejection,
        "apf-monitor warned after the first rejection"
    );
}
