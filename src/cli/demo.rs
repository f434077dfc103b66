//! `apf-monitor simulate` (a simulated kube-apiserver) and `apf-monitor demo` (the simulator and the daemon in one
//! process, alerts to the console): no cluster needed.
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::check::fmt_num;
use super::{init_logging, shutdown_signal, DemoArgs, SimulateArgs};
use crate::analyze::StatusReport;
use crate::config::{self, Config, LogFormat, StaticTarget};
use crate::daemon::Daemon;

pub async fn simulate(args: SimulateArgs) -> Result<()> {
    init_logging(LogFormat::Text, "info")?;
    let sim = build_simulator(
        &args.kubernetes_version,
        &args.scenario,
        args.seed,
        args.server_concurrency,
    )?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another process using it? Use --listen",
                args.listen
            )
        })?;
    let addr = listener.local_addr()?;
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    println!(
        "simulated kube-apiserver v{} ({}) on http://{addr}",
        args.kubernetes_version, args.scenario
    );
    println!("  scrape it:  apf-monitor serve --target http://{addr}   or   apf-monitor check --target http://{addr}");
    tokio::select! {
        r = crate::sim::serve(listener, sim) => r.context("the simulated apiserver stopped")?,
        _ = shutdown_signal() => {}
    }
    Ok(())
}

fn build_simulator(
    version: &str,
    scenario: &str,
    seed: u64,
    server_concurrency: u32,
) -> Result<crate::sim::Simulator> {
    let version: crate::sim::KubeVersion = version
        .parse()
        .map_err(|e| anyhow::anyhow!("--kubernetes-version {version:?}: {e}"))?;
    let source: crate::sim::ScenarioSource = scenario
        .parse()
        .map_err(|e| anyhow::anyhow!("--scenario {scenario:?}: {e}"))?;
    let scenario = crate::sim::Scenario::load(&source)
        .map_err(|e| anyhow::anyhow!("--scenario {scenario:?}: {e}"))?;
    Ok(crate::sim::Simulator::new(crate::sim::SimOptions {
        version,
        scenario,
        seed,
        server_concurrency,
    }))
}

pub async fn demo(args: DemoArgs) -> Result<()> {
    // Alerts go to the console receiver, whose lines are the point of the demo.
    init_logging(LogFormat::Text, "warn,apf_monitor::alerts=info")?;
    let sim = build_simulator(&args.kubernetes_version, &args.scenario, args.seed, 600)?;
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot open a local port")?;
    let sim_addr = sim_listener.local_addr()?;
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    tokio::spawn(crate::sim::serve(sim_listener, sim));

    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot open a local port")?,
    };
    let listen = listener.local_addr()?;
    let mut config = Config::default();
    config.listen = listen;
    config.scrape.interval = args.interval;
    config.scrape.timeout = args.interval;
    config.analysis.window = config::Interval((args.interval.0 * 2).max(Duration::from_secs(60)));
    let url =
        config::parse_target_url(&format!("http://{sim_addr}")).map_err(anyhow::Error::msg)?;
    config.targets.static_targets = vec![StaticTarget {
        name: Some("sim-apiserver".into()),
        ..StaticTarget::from_url(url)
    }];
    // The built-in rules with their defaults, to the console; groups are sent sooner than Alertmanager's defaults so
    // a newcomer sees an alert fire and resolve within a few minutes.
    config.receivers = vec![config::ReceiverConfig {
        name: "console".into(),
        slack: None,
        email: None,
        webhook: None,
        alertmanager: None,
        console: Some(config::ConsoleConfig {}),
        delivery: Default::default(),
    }];
    config.route.group_wait = config::DurationValue(Duration::from_secs(5));
    config.route.group_interval = config::Interval(Duration::from_secs(30));
    config
        .check()
        .map_err(|e| anyhow::anyhow!("the demo's config: {e}"))?;
    let loader: crate::daemon::Loader = Arc::new(move || Ok(config.clone()));
    let daemon = Daemon::start(loader, listener).await?;

    println!(
        "apf-monitor demo: a simulated kube-apiserver v{} under the {:?} load scenario",
        args.kubernetes_version, args.scenario
    );
    println!("  simulated apiserver:  http://{sim_addr}/metrics");
    println!("  apf-monitor metrics:  http://{listen}/metrics   (apf_priority_level_headroom_seats, ...)");
    println!("  status page:          http://{listen}/");
    println!("  status as JSON:       http://{listen}/api/v1/status");
    println!("Every {}s, one line per priority level: limit, seats in use, headroom, queued, rejected/s. Ctrl-C stops.\n", args.interval.0.as_secs());

    let mut ticker = tokio::time::interval(args.interval.0);
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d.0);
    let started = std::time::Instant::now();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = &mut stop => break,
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
        let report = daemon.status();
        for line in demo_lines(&report, started.elapsed()) {
            println!("{line}");
        }
        println!();
    }
    daemon.stop().await
}

/// The demo's live summary: one line per non-exempt level of each replica.
pub fn demo_lines(report: &StatusReport, elapsed: Duration) -> Vec<String> {
    let mut lines = Vec::new();
    for a in &report.apiservers {
        for e in &a.errors {
            lines.push(format!("[{:>4}s] {}: {e}", elapsed.as_secs(), a.apiserver));
        }
        for l in a
            .levels
            .iter()
            .filter(|l| l.priority_level != crate::model::EXEMPT)
        {
            let rejected = l
                .rejected_per_second
                .as_ref()
                .map(|r| r.values().fold(0.0, |a, b| a + b));
            let top = l
                .top_flows
                .first()
                .map(|f| format!("  top flow {}/{}", f.flow_schema, f.flow))
                .unwrap_or_default();
            lines.push(format!(
                "[{:>4}s] {:<16} limit {:>4} in use {:>4} headroom {:>5} ({:>4}) queued {:>4} rejected/s {:>6}  {:<8}{}",
                elapsed.as_secs(),
                l.priority_level,
                fmt_num(l.limit_seats),
                fmt_num(l.executing_seats),
                fmt_num(l.headroom_seats),
                l.headroom_ratio.map(|r| format!("{:.0}%", r * 100.0)).unwrap_or_else(|| "-".into()),
                fmt_num(l.inqueue_requests),
                fmt_num(rejected),
                format!("{:?}", l.status).to_uppercase(),
                top
            ));
        }
    }
    lines
}
