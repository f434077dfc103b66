//! How long before the first 429 the first warning reaches a receiver, on the ramp that starts outages: a replica's
//! workload-low (Kubernetes 1.25, a fixed limit of 245 seats) steady with 60 seats free, then an agent's requests
//! rising 3 seats a second: no seat free 20 s later, its queues full about 12 s after that, and `queue-full` 429s.
//! The agent's requests arrive evenly spaced (a client held to a steady pace), so its seats in use follow the ramp
//! without a Poisson flow's scatter.
//!
//! The daemon, the simulated apiserver and a webhook receiver run on paused tokio time: minutes pass in seconds, and
//! the simulator's clock, the scrapes and the notifications share one clock. Each run is measured warm (the daemon
//! watched the steady level for 65 s, a full window and more, before the ramp) and cold (started as the ramp
//! starts). The table in docs/reference/alerts.md ("How far ahead") is what this prints:
//!
//!     cargo test --test it warning_lead -- --ignored --nocapture
use crate::common;

use std::time::Duration;

use apf_monitor::config::Config;
use apf_sim::{KubeVersion, Scenario, SimOptions, Simulator};

/// When the ramp starts, in the simulator's seconds, on a warm run.
const WARM_RAMP: u64 = 65;

/// One request holds one seat for 720 ms: a rise of 3 seats a second is 3 / 0.72 more requests a second each second.
const DURATION: f64 = 0.72;

/// The ramp, starting at `ramp` seconds: 60 seats free before it, `rise` more in use each second from it, on and on.
fn scenario(ramp: u64, rise: f64) -> Scenario {
    // workload-low's limit on 1.25: 100 of 245 shares of 600 seats.
    let limit = common::sim_limit(25, "workload-low");
    let steady = (limit - 60.0) / DURATION;
    // Twice the time the rise takes to fill the level: it goes on past the limit, into the queues.
    let end = 2.0 * 60.0 / rise;
    let rising = steady + end * rise / DURATION;
    Scenario::from_yaml(&format!(
        "duration: 1h\nflows:\n  - {{name: agents, flow_schema: service-accounts, \
         user: \"system:serviceaccount:monitoring:agent\", verb: list, resource: pods, duration: 720ms, \
         arrivals: even, rate: [{{at: 0s, rps: {steady}}}, {{at: {ramp}s, rps: {steady}}}, \
         {{at: {}s, rps: {rising}}}]}}\n",
        ramp as f64 + end
    ))
    .unwrap()
}

/// What one run saw, in the simulator's seconds.
#[derive(Debug)]
struct Lead {
    ramp: f64,
    first_429: Option<f64>,
    /// Each alert about workload-low the receiver got, when it first got it, in that order.
    notified: Vec<(f64, String)>,
}

impl Lead {
    /// The first notification, and how long before the first 429 it came.
    fn first(&self) -> Option<(&str, f64)> {
        let (at, name) = self.notified.first()?;
        Some((name.as_str(), self.first_429? - at))
    }

    /// How long before the first 429 `alert` came.
    fn of(&self, alert: &str) -> Option<f64> {
        let (at, _) = self.notified.iter().find(|(_, n)| n == alert)?;
        Some(self.first_429? - at)
    }
}

/// Runs the ramp (`rise` seats a second) against the daemon with `settings` (YAML merged into a config that watches
/// the replica and notifies a webhook); `warm`: started a full window before the ramp, else as it starts.
async fn run(settings: &str, rise: f64, warm: bool) -> Lead {
    let ramp = if warm { WARM_RAMP } else { 5 };
    let sim = Simulator::try_new(SimOptions::new(
        KubeVersion::new(25, 0),
        scenario(ramp, rise),
    ))
    .unwrap();
    if !warm {
        // Steady already; the daemon starts with the ramp.
        sim.step(Duration::from_secs(ramp));
    }
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;

    let notified = common::Notified::default();
    let hook = common::sim_clocked_hook(&sim, notified.clone()).await;
    let config = Config::from_yaml(&format!(
        "{settings}\ntargets:\n  static:\n    - {{url: \"{sim_url}\", name: sim}}\n\
         receivers:\n  - {{name: hook, webhook: {{url: \"{hook}\"}}}}\n"
    ))
    .unwrap();
    let _monitor = common::start_monitor(&config).await;

    let mut first_429 = None;
    // Past the first 429 by long enough for the defaults' `for` and `group_wait` to show.
    let until = ramp as f64 + 3.0 * 60.0 / rise + 90.0;
    while sim.elapsed().as_secs_f64() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let rejected = sim.truth().iter().any(|l| {
            l.priority_level == "workload-low" && l.rejected_total.values().sum::<u64>() > 0
        });
        if rejected && first_429.is_none() {
            first_429 = Some(sim.elapsed().as_secs_f64());
        }
    }
    // The first notification of each alert about workload-low that fired.
    let mut firsts: Vec<(f64, String)> = Vec::new();
    for (at, a) in notified.lock().unwrap().iter() {
        let name = a["labels"]["alertname"].as_str().unwrap_or("").to_string();
        let firing = a["status"] == "firing" && a["labels"]["priority_level"] == "workload-low";
        if firing && !firsts.iter().any(|(_, n)| *n == name) {
            firsts.push((*at, name));
        }
    }
    Lead {
        ramp: ramp as f64,
        first_429,
        notified: firsts,
    }
}

/// `for: 0s` on every built-in rule.
fn for_zero() -> String {
    let mut s = String::from("rules:\n");
    for rule in apf_monitor::alert::RuleName::ALL {
        s.push_str(&format!("  {}: {{for: 0s}}\n", rule.as_str()));
    }
    s
}

/// One row of the table: the settings, warm or cold, and the leads (negative: after the first 429).
fn line(name: &str, rise: f64, warm: bool, lead: &Lead) -> String {
    let seconds = |s: Option<f64>| s.map_or("none".to_string(), |s| format!("{s:.1} s"));
    format!(
        "| {rise} seats/s | {name} | {} | {} | {} ({}) | {} |",
        if warm { "warm" } else { "cold" },
        seconds(lead.first_429.map(|t| t - lead.ramp)),
        seconds(lead.first().map(|(_, s)| s)),
        lead.first().map_or("none", |(n, _)| n),
        seconds(lead.of("APFExhaustionPredicted")),
    )
}

/// 1 s scrapes, `for: 0s` on every rule, `group_wait: 0s`.
fn quick() -> String {
    format!(
        "scrape: {{interval: 1s, timeout: 1s}}\nroute: {{group_wait: 0s}}\n{}",
        for_zero()
    )
}

#[tokio::test(start_paused = true)]
async fn the_prediction_leads_the_first_429_of_a_fast_ramp_by_25_seconds() {
    for warm in [true, false] {
        let lead = run(&quick(), 3.0, warm).await;
        // The ramp is the one described: about 32 s from its start to the first 429.
        let to_429 = lead.first_429.map(|t| t - lead.ramp);
        assert!(
            to_429.is_some_and(|s| (29.0..=36.0).contains(&s)),
            "{lead:?}"
        );
        // The prediction reached the receiver at least 25 s before the first 429, and nothing came sooner.
        let predicted = lead.of("APFExhaustionPredicted");
        assert!(
            predicted.is_some_and(|s| s >= 25.0),
            "warm {warm}: {lead:?}"
        );
        assert_eq!(lead.first().map(|(_, s)| s), predicted, "{lead:?}");
    }
}

/// The table of docs/reference/alerts.md: the fast ramp and one six times slower, with the shipped defaults and
/// with `for: 0s`.
#[tokio::test(start_paused = true)]
#[ignore = "a table for the book, 12 runs: cargo test --test it warning_lead -- --ignored --nocapture"]
async fn lead_table() {
    let mut table = Vec::new();
    for rise in [3.0, 0.5] {
        for (name, settings) in [
            ("defaults (5 s scrapes, `group_wait` 30s)", String::new()),
            (
                "5 s scrapes, `for: 0s`, `group_wait: 0s`",
                format!("route: {{group_wait: 0s}}\n{}", for_zero()),
            ),
            ("1 s scrapes, `for: 0s`, `group_wait: 0s`", quick()),
        ] {
            for warm in [true, false] {
                table.push(line(name, rise, warm, &run(&settings, rise, warm).await));
            }
        }
    }
    println!(
        "| ramp | settings | daemon | first 429 after the ramp's start | first notification before it | \
         APFExhaustionPredicted before it |"
    );
    println!("|---|---|---|---|---|---|");
    for l in &table {
        println!("{l}");
    }
}
