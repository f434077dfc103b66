//! Recurring saturation at the shipped defaults (5 s scrapes, a minute's window, a five-minute lookback, `group_wait`
//! 30s): a simulated workload-low (Kubernetes 1.25: the seat-utilization histogram, a fixed limit) full for 15 s of
//! every minute warns within three minutes, naming the pattern and who held the seats; a 0.7 s blip a minute never
//! warns; and once the bursts stop (the CronJob fixed) the alert resolves, saying why, and no new one starts.
//!
//! The daemon, the simulator and a webhook receiver run on paused tokio time: ten minutes pass in seconds, on one
//! clock.
use crate::common;

use std::time::Duration;

use apf_monitor::config::Config;
use apf_sim::{KubeVersion, Scenario, SimOptions, Simulator};
use serde_json::Value;

const BURST_USER: &str = "system:serviceaccount:batch:burst";

/// A batch job's 10-seat, 200 ms LISTs in workload-low at `load` times what the level serves, from `from` to `to`
/// seconds of each minute, for `minutes` minutes (then never again); a light steady client beside it.
fn scenario(from: f64, to: f64, load: f64, minutes: u32) -> Scenario {
    // One request holds 10 seats for 0.2 s: the level serves limit / 2 requests a second.
    let rps = load * common::sim_limit(25, "workload-low") / 2.0;
    let mut points = vec!["{at: 0s, rps: 0}".to_string()];
    for m in 0..minutes {
        let base = f64::from(m) * 60.0;
        points.push(format!("{{at: {}ms, rps: 0}}", (base + from) * 1000.0));
        points.push(format!(
            "{{at: {}ms, rps: {rps}}}",
            (base + from) * 1000.0 + 1.0
        ));
        points.push(format!("{{at: {}ms, rps: {rps}}}", (base + to) * 1000.0));
        points.push(format!("{{at: {}ms, rps: 0}}", (base + to) * 1000.0 + 1.0));
    }
    Scenario::from_yaml(&format!(
        "duration: 1h\nflows:\n  - {{name: burst, flow_schema: service-accounts, user: \"{BURST_USER}\", \
         verb: list, resource: pods, seats: 10, duration: 200ms, rate: [{}]}}\n  - {{name: steady, \
         flow_schema: service-accounts, user: \"system:serviceaccount:ci:steady\", verb: get, resource: configmaps, \
         namespace: ci, duration: 50ms, rate: [{{at: 0s, rps: 20}}]}}\n",
        points.join(", ")
    ))
    .unwrap()
}

/// Runs the daemon at its defaults against `scenario` for `seconds` of simulated time; every notification about
/// workload-low (simulated seconds, status, the alert), and the last status.
async fn run(scenario: Scenario, seconds: f64) -> (Vec<(f64, String, Value)>, Value) {
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(25, 0), scenario)).unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;
    let notified = common::Notified::default();
    let hook = common::sim_clocked_hook(&sim, notified.clone()).await;
    let config = Config::from_yaml(&format!(
        "targets:\n  static:\n    - {{url: \"{sim_url}\", name: sim}}\n\
         receivers:\n  - {{name: hook, webhook: {{url: \"{hook}\"}}}}\n"
    ))
    .unwrap();
    let monitor = common::start_monitor(&config).await;
    while sim.elapsed().as_secs_f64() < seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Asked again if need be: on paused time a request may meet its timeout when the clock jumps.
    let mut status = Value::Null;
    for _ in 0..10 {
        if let Some(v) = common::get_text(&format!("{monitor}/api/v1/status"))
            .await
            .and_then(|b| serde_json::from_str(&b).ok())
        {
            status = v;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let got = notified
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, a)| a["labels"]["priority_level"] == "workload-low")
        .map(|(t, a)| {
            (
                *t,
                a["status"].as_str().unwrap_or("").to_string(),
                a.clone(),
            )
        })
        .collect();
    (got, status)
}

fn named<'a>(got: &'a [(f64, String, Value)], alert: &str) -> Vec<&'a (f64, String, Value)> {
    got.iter()
        .filter(|(_, _, a)| a["labels"]["alertname"] == alert)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn fifteen_seconds_of_every_minute_warn_within_three_minutes_at_the_defaults() {
    // Just over what the level serves: full while the burst lasts, its backlog queued, nothing rejected.
    let (got, status) = run(scenario(31.0, 46.0, 1.1, 10), 200.0).await;
    let recurring = named(&got, "APFSaturationRecurring");
    let Some((at, _, alert)) = recurring.iter().find(|(_, s, _)| s == "firing") else {
        panic!("no APFSaturationRecurring within 200 s: {got:#?}\n{status:#}");
    };
    assert!(*at <= 180.0, "warned at {at} s");
    // The summary names the pattern: how many, how long, how much of the time, and who held the seats.
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("times in the last")
            && summary.contains("s each")
            && summary.contains("% of the time, by the apiserver's seat-utilization histogram")
            && summary.contains(&format!("service-accounts / {BURST_USER}")),
        "{summary}"
    );
    // Nothing was rejected, and no other rule spoke before it: the pattern is what it warned of.
    assert!(
        got.iter()
            .all(|(t, _, a)| *t >= *at || a["labels"]["alertname"] == "APFSaturationRecurring"),
        "{got:#?}"
    );
    // The status shows the pattern too.
    let level = common::first_level(&status, "workload-low");
    let s = &level["saturation"];
    assert!(s["episodes"].as_u64().unwrap_or(0) >= 3, "{level:#}");
    let longest = s["longest_seconds"].as_f64().unwrap_or(0.0);
    assert!((10.0..=20.0).contains(&longest), "{level:#}");
    assert!(s["by_histogram"] == true, "{level:#}");
}

#[tokio::test(start_paused = true)]
async fn a_sub_second_blip_a_minute_never_warns() {
    // Twice what the level serves, for 0.7 s a minute: full for it and its drain.
    let (got, status) = run(scenario(31.0, 31.7, 2.0, 10), 420.0).await;
    assert!(got.is_empty(), "a blip warned: {got:#?}");
    // It was seen, as what it is: a sliver of the time, in episodes of the blip and the drain of its backlog.
    let level = common::first_level(&status, "workload-low");
    let ratio = level["saturation"]["full_ratio"].as_f64().unwrap_or(1.0);
    let longest = level["saturation"]["longest_seconds"]
        .as_f64()
        .unwrap_or(99.0);
    assert!(ratio > 0.0 && ratio < 0.05 && longest < 2.0, "{level:#}");
}

#[tokio::test(start_paused = true)]
async fn once_the_bursts_stop_the_alert_resolves_and_no_new_one_starts() {
    // Four minutes of bursts, then the job is fixed: nothing more for six minutes.
    let (got, _) = run(scenario(31.0, 46.0, 1.1, 4), 600.0).await;
    let recurring = named(&got, "APFSaturationRecurring");
    let fired = recurring
        .iter()
        .find(|(_, s, _)| s == "firing")
        .unwrap_or_else(|| panic!("it never fired: {got:#?}"));
    let resolved = recurring
        .iter()
        .find(|(_, s, _)| s == "resolved")
        .unwrap_or_else(|| panic!("it never resolved: {got:#?}"));
    assert!(resolved.0 > fired.0);
    // The last burst ended at 226 s; the alert ends once the next is overdue (half again the quiet between two),
    // and the notice follows group_interval (5 minutes) of the group's last notification at most.
    assert!(resolved.0 > 226.0 + 45.0, "{resolved:?}");
    // After the fix no alert on the level starts: after the last burst only this alert is notified (its group
    // repeating it until it resolves), and nothing after it resolved.
    let late: Vec<String> = got
        .iter()
        .filter(|(t, status, a)| {
            status == "firing"
                && *t > 230.0
                && (a["labels"]["alertname"] != "APFSaturationRecurring" || *t > resolved.0)
        })
        .map(|(t, _, a)| format!("{t:.0} s {}", a["labels"]["alertname"]))
        .collect();
    assert!(late.is_empty(), "{late:?}");
}
