//! The command line: `serve`, `check`, `simulate`, `demo`.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::analyze::{Analysis, LevelStatus, Problem, StatusReport};
use crate::config::{self, Config, LogFormat, StaticTarget};
use crate::daemon::{self, Hub, LoopSettings};
use crate::export::{self, ExportState};
use crate::targets;

#[derive(Debug, Parser)]
#[command(
    name = "apf-monitor",
    version,
    about = "Watches Kubernetes API Priority and Fairness on every kube-apiserver replica and warns before clients get HTTP 429s."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The daemon: scrape every target, derive headroom, serve /metrics, /api/v1/status and a status page.
    Serve(ServeArgs),
    /// One scrape round (or a saved /metrics), a report, and a Nagios-style exit status: 0 OK, 1 WARNING,
    /// 2 CRITICAL, 3 UNKNOWN.
    Check(CheckArgs),
    /// A simulated kube-apiserver serving /metrics, the APF debug dumps and the flowcontrol objects of a chosen
    /// Kubernetes version under a load scenario.
    Simulate(SimulateArgs),
    /// `simulate` and `serve` in one process: watch headroom fall under load, no cluster needed.
    Demo(DemoArgs),
}

/// Flags shared by `serve` and `check`; they override the config file.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The config file (YAML); every key is documented in config/apf-monitor.example.yaml.
    #[arg(long, value_name = "FILE", env = "APF_MONITOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// A replica to scrape, e.g. https://10.0.0.5:6443 or http://127.0.0.1:8001 (kubectl proxy). Repeatable;
    /// replaces the config's targets.
    #[arg(long = "target", value_name = "URL", value_parser = config::parse_target_url)]
    pub targets: Vec<config::TargetUrl>,
    /// Scrape interval, e.g. 5s.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_interval)]
    pub interval: Option<config::Interval>,
    /// Log format.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level or tracing filter, e.g. info, debug, apf_monitor=debug.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    /// Where to serve /metrics, /healthz, /readyz, /api/v1/status and / (default 0.0.0.0:9864).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    /// Read a saved /metrics (or a `kubectl get --raw /metrics | grep flowcontrol` paste) instead of scraping;
    /// `-` reads standard input.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The Kubernetes version whose metrics, dumps and default objects are served (1.20 to 1.36).
    #[arg(long, default_value = "1.34")]
    pub kubernetes_version: String,
    /// Load scenario: idle, ramp, storm, or a YAML file (see config/scenarios/example.yaml).
    #[arg(long, default_value = "ramp")]
    pub scenario: String,
    /// Where the simulated apiserver listens (plain HTTP, like `kubectl proxy`).
    #[arg(long, default_value = "127.0.0.1:8001")]
    pub listen: SocketAddr,
    /// Seed of the random arrivals: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// --max-requests-inflight + --max-mutating-requests-inflight of the simulated apiserver.
    #[arg(long, default_value_t = 600)]
    pub server_concurrency: u32,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[arg(long, default_value = "1.34")]
    pub kubernetes_version: String,
    /// idle, ramp, storm, or a YAML file.
    #[arg(long, default_value = "ramp")]
    pub scenario: String,
    /// Where apf-monitor serves /metrics and its status page (a free port is taken if this one is busy).
    #[arg(long, default_value = "127.0.0.1:9864")]
    pub listen: SocketAddr,
    /// Scrape interval of the demo.
    #[arg(long, default_value = "5s", value_parser = config::parse_interval)]
    pub interval: config::Interval,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop after this long (e.g. 5m); default: until Ctrl-C.
    #[arg(long, value_parser = config::parse_interval)]
    pub duration: Option<config::Interval>,
}

/// Entry point of the binary: runs the command and maps errors to an exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await.map(|()| ExitCode::SUCCESS),
            Command::Check(args) => check(args).await,
            Command::Simulate(args) => simulate(args).await.map(|()| ExitCode::SUCCESS),
            Command::Demo(args) => demo(args).await.map(|()| ExitCode::SUCCESS),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            // `check` promises 3 (UNKNOWN) when it could not read its input.
            ExitCode::from(3)
        }
    }
}

fn init_logging(format: LogFormat, level: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(level).with_context(|| {
        format!("invalid log level {level:?}: use error, warn, info, debug or a filter")
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // Already set (tests, demo): keep the first one.
    let _ = result;
    Ok(())
}

/// The config file with the command line's overrides applied.
fn load_config(common: &TargetArgs) -> Result<Config> {
    let mut config = match &common.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if !common.targets.is_empty() {
        config.targets.static_targets = common
            .targets
            .iter()
            .cloned()
            .map(StaticTarget::from_url)
            .collect();
    }
    if let Some(i) = common.interval {
        config.scrape.interval = i;
        // A flag-set interval shorter than the configured timeout would let rounds overlap.
        if config.scrape.timeout.0 > i.0 {
            config.scrape.timeout = i;
        }
        if config.analysis.window.0 < i.0 * 2 {
            config.analysis.window = config::Interval(i.0 * 2);
        }
    }
    if let Some(f) = common.log_format {
        config.log.format = f;
    }
    if let Some(l) = &common.log_level {
        config.log.level = l.clone();
    }
    Ok(config)
}

fn analysis_of(config: &Config) -> Analysis {
    Analysis {
        window_seconds: config.analysis.window.0.as_secs_f64(),
        top_flows: config.analysis.top_flows,
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let mut config = load_config(&args.common)?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    init_logging(config.log.format, &config.log.level)?;
    if config.targets.static_targets.is_empty() {
        bail!(
            "no target to scrape: give --target URL (e.g. http://127.0.0.1:8001 behind `kubectl proxy`) or \
             targets.static in the config file"
        );
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another process using it? Use --listen",
                config.listen
            )
        })?;
    let leadership = crate::leader::Leadership::start(&config.alerting.leader_election).await?;
    let export = run_daemon_with(&config, listener, leadership)?;
    tracing::info!(listen = %config.listen, targets = config.targets.static_targets.len(), receivers = config.receivers.len(), "apf-monitor serving");
    drop(export);
    shutdown_signal().await;
    tracing::info!("shutting down");
    Ok(())
}

/// Starts the HTTP server, one scrape loop per target and the alerting stage (every replica notifies: for a
/// leader-elected notifier use [`run_daemon_with`]); returns the shared state.
pub fn run_daemon(config: &Config, listener: tokio::net::TcpListener) -> Result<Arc<ExportState>> {
    run_daemon_with(config, listener, crate::leader::Leadership::always())
}

pub fn run_daemon_with(
    config: &Config,
    listener: tokio::net::TcpListener,
    leadership: crate::leader::Leadership,
) -> Result<Arc<ExportState>> {
    let targets = targets::build_static(&config.targets.static_targets, &config.scrape)?;
    let export = Arc::new(ExportState::default());
    let stage = daemon::AlertStage::build(config, &export, leadership)?;
    let _ = export.alerting.set(stage.alerting.clone());
    tokio::spawn(daemon::alert_loop(stage, export.clone()));
    let hub = Arc::new(Hub::new(export.clone(), analysis_of(config)));
    let settings = LoopSettings::from_config(&config.scrape);
    for target in targets {
        tokio::spawn(daemon::replica_loop(target, settings.clone(), hub.clone()));
    }
    let app = export::router(export.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the HTTP server stopped");
        }
    });
    Ok(export)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

async fn check(args: CheckArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    init_logging(
        config.log.format,
        if args.common.log_level.is_some() {
            &config.log.level
        } else {
            "warn"
        },
    )?;
    let analysis = analysis_of(&config);
    let mut report = match &args.file {
        Some(path) => check_file(path, &analysis)?,
        None => check_targets(&config, &analysis).await?,
    };
    apply_rules(&mut report, &config)?;
    let code = exit_status(&report);
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        OutputFormat::Table => print!("{}", render_table(&report, code)),
    }
    Ok(ExitCode::from(code))
}

fn check_file(path: &std::path::Path, analysis: &Analysis) -> Result<StatusReport> {
    use std::io::Read;
    let (name, bytes) = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("cannot read standard input")?;
        ("stdin".to_string(), buf)
    } else {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        (
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            bytes,
        )
    };
    // A paste often keeps its shell prompts (`$ kubectl get --raw /metrics | grep ...`, or zsh's `% ...`): they
    // are not metrics lines.
    let kept: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !is_shell_prompt(l))
        .collect();
    let bytes = kept.join(&b'\n');
    let mut builder = crate::model::SnapshotBuilder::new();
    let stats =
        crate::parse::exposition::parse_all(&bytes, crate::model::is_wanted_sample, &mut builder);
    let snapshot = builder.finish();
    let duplicates = snapshot.duplicate_series;
    let mut report = crate::analyze::analyze_single(&name, snapshot, analysis);
    if stats.invalid_lines > 0 {
        report.errors.push(Problem::Unreadable {
            lines: stats.invalid_lines,
            first: stats.first_errors.first().map(|e| e.to_string()),
        });
    }
    if duplicates > 0 {
        report
            .errors
            .push(Problem::DuplicateSeries { series: duplicates });
    }
    Ok(StatusReport {
        apiservers: vec![report],
        alerts: Vec::new(),
    })
}

/// A shell prompt line of a paste: `$ cmd` (sh, bash) or `% cmd` (zsh, the macOS default), maybe indented.
fn is_shell_prompt(line: &[u8]) -> bool {
    let l = line.trim_ascii();
    l == b"$" || l == b"%" || l.starts_with(b"$ ") || l.starts_with(b"% ")
}

async fn check_targets(config: &Config, analysis: &Analysis) -> Result<StatusReport> {
    if config.targets.static_targets.is_empty() {
        bail!("no target to check: give --target URL, --file PATH, or targets.static in the config file");
    }
    let targets = targets::build_static(&config.targets.static_targets, &config.scrape)?;
    let settings = LoopSettings::from_config(&config.scrape);
    let plan = crate::scrape::ScrapePlan {
        endpoints: settings.endpoints.clone(),
        request_details: settings.request_details,
        max_body_bytes: settings.max_body_bytes,
        max_line_bytes: settings.max_line_bytes,
    };
    let rounds = futures_util::future::join_all(
        targets
            .iter()
            .map(|t| crate::scrape::scrape_replica(t, &plan)),
    )
    .await;
    let mut report = StatusReport::default();
    for (target, mut round) in targets.iter().zip(rounds) {
        let errors: Vec<Problem> = round
            .results
            .iter()
            .filter_map(|r| {
                r.outcome.as_ref().err().map(|e| Problem::Scrape {
                    endpoint: r.endpoint,
                    error: e.clone(),
                })
            })
            .collect();
        let mut a = match round.snapshot.take() {
            Some(mut snap) => {
                for plc in round.objects.iter().flatten() {
                    if let Some(level) = snap.levels.get_mut(&plc.name) {
                        level.config = Some(plc.clone());
                    }
                }
                crate::analyze::analyze_single(&target.name, snap, analysis)
            }
            None => crate::analyze::ApiserverReport {
                apiserver: target.name.clone(),
                ..Default::default()
            },
        };
        a.errors.extend(errors);
        report.apiservers.push(a);
    }
    Ok(report)
}

/// The daemon's rules, as configured, on this one round (no `for`, so what holds now fires now): the alerts of the
/// report, and each level's status from the worst alert on it.
fn apply_rules(report: &mut StatusReport, config: &Config) -> Result<()> {
    let rules = crate::alert::Rules::new(&config.rules, &config.alerting.runbook_base_url)?;
    let candidates = rules.evaluate(report, |_| false);
    crate::alert::rules::apply_statuses(report, &candidates);
    report.alerts = candidates
        .into_iter()
        .map(|c| crate::analyze::AlertReport {
            labels: c.labels,
            annotations: c.annotations,
            state: "firing".into(),
            active_since: None,
        })
        .collect();
    Ok(())
}

/// 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (no APF metric anywhere). A replica that could not be read is a
/// WARNING (the APFScrapeFailing rule), unless none could be read at all.
pub fn exit_status(report: &StatusReport) -> u8 {
    let with_levels: Vec<_> = report
        .apiservers
        .iter()
        .filter(|a| !a.levels.is_empty())
        .collect();
    if with_levels.is_empty() {
        return 3;
    }
    let worst = with_levels
        .iter()
        .flat_map(|a| &a.levels)
        .map(|l| l.status)
        .max()
        .unwrap_or(LevelStatus::Ok);
    let mut code = match worst {
        LevelStatus::Ok => 0,
        LevelStatus::Warning => 1,
        LevelStatus::Critical => 2,
    };
    if report.apiservers.iter().any(|a| a.levels.is_empty()) {
        code = code.max(1);
    }
    // Alerts without a level (APFScrapeFailing) count too.
    for a in &report.alerts {
        code = code.max(
            match crate::alert::rules::severity_status(a.labels.get("severity").map(String::as_str))
            {
                LevelStatus::Ok => 0,
                LevelStatus::Warning => 1,
                LevelStatus::Critical => 2,
            },
        );
    }
    code
}

fn fmt_num(v: Option<f64>) -> String {
    match v {
        Some(v) if (v.fract()).abs() < 1e-9 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    }
}

pub fn render_table(report: &StatusReport, code: u8) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for a in &report.apiservers {
        let _ = writeln!(
            out,
            "apiserver {}{}",
            a.apiserver,
            a.kubernetes_version
                .as_deref()
                .map(|v| format!(" ({v})"))
                .unwrap_or_default()
        );
        for e in &a.errors {
            let _ = writeln!(out, "  error: {e}");
        }
        if a.levels.is_empty() {
            let _ = writeln!(out, "  no APF metrics read");
            continue;
        }
        let _ = writeln!(
            out,
            "  {:<24} {:>7} {:>7} {:>7} {:>9} {:>7} {:>8} {:>11}  STATUS",
            "PRIORITY LEVEL",
            "NOMINAL",
            "LIMIT",
            "IN USE",
            "HEADROOM",
            "QUEUED",
            "FULLEST",
            "REJECTED/S"
        );
        for l in &a.levels {
            let rejected = l
                .rejected_per_second
                .as_ref()
                .map(|r| r.values().fold(0.0, |a, b| a + b));
            let _ = writeln!(
                out,
                "  {:<24} {:>7} {:>7} {:>7} {:>9} {:>7} {:>8} {:>11}  {}",
                l.priority_level,
                fmt_num(l.nominal_limit_seats),
                fmt_num(l.limit_seats),
                fmt_num(l.executing_seats),
                fmt_num(l.headroom_seats),
                fmt_num(l.inqueue_requests),
                fmt_num(l.fullest_queue_requests),
                fmt_num(rejected),
                if l.priority_level == crate::model::EXEMPT {
                    "exempt".to_string()
                } else {
                    format!("{:?}", l.status).to_lowercase()
                }
            );
            // One scrape has no rate, but its counters say what was rejected since the replica started.
            if l.rejected_per_second.is_none() && l.rejected_total.values().any(|v| *v > 0.0) {
                let on_record: Vec<String> = l
                    .rejected_total
                    .iter()
                    .filter(|(_, v)| **v > 0.0)
                    .map(|(reason, v)| format!("{reason} {}", fmt_num(Some(*v))))
                    .collect();
                let _ = writeln!(
                    out,
                    "      rejected since the replica started: {} (one scrape: no rate)",
                    on_record.join(", ")
                );
            }
            for f in l.top_flows.iter().take(3) {
                let _ = writeln!(
                    out,
                    "      flow {}/{}: {:.1} waiting, {:.1} seats{}",
                    f.flow_schema,
                    if f.flow.is_empty() { "-" } else { &f.flow },
                    f.waiting_requests,
                    f.executing_seats,
                    f.example_request
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                );
            }
        }
    }
    for alert in &report.alerts {
        let get = |k: &str| alert.labels.get(k).map(String::as_str).unwrap_or("");
        let _ = writeln!(
            out,
            "{} {} {}: {}",
            get("severity").to_uppercase(),
            get("alertname"),
            get("priority_level"),
            alert
                .annotations
                .get("summary")
                .map(String::as_str)
                .unwrap_or("")
        );
        if let Some(r) = alert.annotations.get("remediation") {
            let _ = writeln!(out, "  fix: {r}");
        }
    }
    let verdict = ["OK", "WARNING", "CRITICAL", "UNKNOWN"][usize::from(code.min(3))];
    let _ = writeln!(out, "{verdict}");
    out
}

async fn simulate(args: SimulateArgs) -> Result<()> {
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

async fn demo(args: DemoArgs) -> Result<()> {
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
    let mut config = Config {
        listen,
        ..Config::default()
    };
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
    let export = run_daemon(&config, listener)?;

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
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown_signal() => break,
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
        let report = export.report();
        for line in demo_lines(&report, started.elapsed()) {
            println!("{line}");
        }
        println!();
    }
    Ok(())
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
