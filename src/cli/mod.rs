//! The command line: argument parsing and the exit status here, one file per subcommand (`serve`, `check` with
//! `review.rs` for `--review`, `simulate` and `demo` in `demo.rs` with `held.rs` for simulate's kubeconfig,
//! `virtual_run.rs` for `simulate --run` and `live.rs` for the demo's live lines, `plan`, `match` in `matching.rs`,
//! `audit`), `output.rs` for what they print, `table.rs` for the terminal table and `objects.rs` for the flowcontrol
//! objects `plan`, `match` and the review read; `conveniences.rs` for completions, man pages and the config's JSON
//! Schema, `reference.rs` for the book's generated reference pages; the work itself is the library's.
mod advise;
mod audit;
mod check;
pub mod conveniences;
mod demo;
mod held;
mod live;
mod matching;
mod objects;
mod output;
mod plan;
mod plan_load;
pub mod reference;
mod report;
mod review;
mod serve;
mod table;
mod virtual_run;
mod window;

pub use check::exit_status;
pub use demo::{DemoArgs, RunOutput, SimulateArgs};

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{Config, LogFormat};
use crate::targets::StaticTarget;
use crate::values;

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
    /// What-if on the APF configuration: every priority level's limits before and after --set LEVEL.FIELD=N, on
    /// the cluster's PriorityLevelConfigurations or on files; with --load, the 429s and waits under the load the
    /// replicas carry.
    Plan(plan::PlanArgs),
    /// Which FlowSchema, priority level and flow a request gets, with kube-apiserver's own matching, on the
    /// cluster's objects or on files.
    // Written out: clap's own line lists the flags given as if they were required (`--file` among them).
    #[command(
        override_usage = "apf-monitor match --user NAME [--group NAME]... (--verb VERB --resource RESOURCE \
                          [--namespace NAME] | --non-resource-url PATH) [-f FILE]... [OPTIONS]"
    )]
    Match(matching::MatchArgs),
    /// Who got the 429s: kube-apiserver's audit log (plain, gzipped, rotated) classified with kube-apiserver's own
    /// matching, per user and per flow, worst first.
    Audit(audit::AuditArgs),
    /// How fast may this client go: one recommendation per client (the flags to set when it sends more than a
    /// replica sustains for it, else the ceiling it stays within), then per replica (a flow; with audit events, a
    /// user) the seats its flow can count on, what its requests cost, the rate that sustains and what it sends there.
    Advise(advise::AdviseArgs),
    /// Look back: APF incidents in a Prometheus's history, replica by replica (first and last 429, flow schemas,
    /// queues, waits), and when apf-monitor's rules would have warned, replayed on the same history.
    Report(report::ReportArgs),
    /// Shell completions: `apf-monitor completions bash > /etc/bash_completion.d/apf-monitor`.
    Completions(conveniences::CompletionsArgs),
    /// The man page (`apf-monitor man | man -l -`), or every page with --dir.
    Man(conveniences::ManArgs),
    /// The config file: `apf-monitor config schema` prints its JSON Schema.
    Config {
        #[command(subcommand)]
        command: conveniences::ConfigCommand,
    },
}

/// Flags of every command that reads a cluster: the config file, the replicas or the apiserver access, the logs.
/// They override the config file.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The config file (YAML); every key is documented in config/apf-monitor.example.yaml.
    #[arg(long, value_name = "FILE", env = "APF_MONITOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// A replica to scrape, e.g. https://10.0.0.5:6443 or http://127.0.0.1:8001 (kubectl proxy). Repeatable;
    /// replaces the config's targets.
    #[arg(long = "target", value_name = "URL", value_parser = values::parse_target_url)]
    pub targets: Vec<values::TargetUrl>,
    /// With no target: the kubeconfig whose apiserver access discovers every replica (default: $KUBECONFIG, then
    /// ~/.kube/config, then the pod's service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// A PEM bundle of the CA that signed the certificates of the --target (and --prometheus) URLs (kubectl's
    /// flag); default: the system's trust store for --target, the public web roots for --prometheus. A kubeconfig
    /// carries its own CA.
    #[arg(long, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level or tracing filter, e.g. info, debug, apf_monitor=debug.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
}

/// Flags of the commands that watch the replicas round after round (`serve`, `check`): where their numbers come
/// from and how often.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// Read the replicas' metrics from this Prometheus (or Thanos, Mimir, a provider's managed Prometheus)
    /// instead of scraping them: every replica of every cluster it holds. Repeatable; replaces the config's
    /// targets.
    #[arg(
        long = "prometheus",
        value_name = "URL",
        value_parser = values::parse_target_url,
        conflicts_with = "targets"
    )]
    pub prometheus: Vec<values::TargetUrl>,
    /// With --prometheus: the apiservers' series.
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = crate::targets::DEFAULT_PROMETHEUS_SELECTOR,
        requires = "prometheus"
    )]
    pub selector: String,
    /// With --prometheus: the label naming a series' cluster (a series without it belongs to no cluster).
    #[arg(
        long,
        value_name = "LABEL",
        default_value = "cluster",
        requires = "prometheus"
    )]
    pub cluster_label: String,
    /// With --prometheus: the label naming a series' replica.
    #[arg(
        long,
        value_name = "LABEL",
        default_value = "instance",
        requires = "prometheus"
    )]
    pub apiserver_label: String,
    /// Scrape interval, e.g. 5s.
    #[arg(long, value_name = "DURATION", value_parser = values::parse_interval)]
    pub interval: Option<values::Interval>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Where to serve /metrics, /healthz, /readyz, /api/v1/status and / (default 0.0.0.0:9864).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Check the config (file and flags) as `serve` and a reload would, print what it runs, and exit: 0 when it
    /// is valid, 1 with the error otherwise. Nothing is started or contacted.
    #[arg(long)]
    pub check_config: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    /// The manifests the firing alerts propose, for `kubectl apply -f -`.
    Manifests,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Read a saved /metrics (or a `kubectl get --raw /metrics | grep flowcontrol` paste) instead of scraping;
    /// `-` reads standard input.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// `table`, `json` (the shape of /api/v1/status), or `manifests`: the FlowSchemas and priority levels the
    /// firing alerts (with --review: the findings) propose, as one YAML stream for `kubectl apply -f -`.
    #[arg(long, value_enum, default_value = "table")]
    pub output: OutputFormat,
    /// Review the APF configuration instead: FlowSchemas and PriorityLevelConfigurations that are dangling,
    /// unreachable, shadowed, exempt grants, queue settings that leave a flow less than one request, and cluster
    /// operators landing in shared levels (from the replica's dump_requests).
    #[arg(long, conflicts_with = "file")]
    pub review: bool,
    /// With --review: the objects from a file (`kubectl get flowschemas,prioritylevelconfigurations -o yaml`, the
    /// API's JSON, or manifests) instead of the cluster. Repeatable; `-` reads standard input.
    #[arg(long = "objects", value_name = "FILE", requires = "review")]
    pub objects: Vec<PathBuf>,
    /// With --review and files: the seats of one replica (--max-requests-inflight +
    /// --max-mutating-requests-inflight); against a cluster it is inferred from the limits the replica serves.
    #[arg(long, value_name = "N", requires = "review", value_parser = clap::value_parser!(u32).range(1..))]
    pub server_concurrency: Option<u32>,
}

/// The command line as parsed, and as the completions, man pages and the book's reference describe it: the derived
/// definitions, with every flag that takes a duration or a time (value name DURATION or TIME) taking a value that
/// starts with '-'. Without that, clap reads `--window -5s` as an unknown flag `-5` ("unexpected argument '-5'
/// found"); with it, the value reaches its parser, which refuses a negative duration by name, or reads `-6h` as
/// six hours before now.
pub fn command() -> clap::Command {
    fn hyphen_values(command: clap::Command) -> clap::Command {
        let timed: Vec<clap::Id> = command
            .get_arguments()
            .filter(|a| {
                a.get_value_names()
                    .is_some_and(|names| names.iter().any(|n| *n == "DURATION" || *n == "TIME"))
            })
            .map(|a| a.get_id().clone())
            .collect();
        let command = timed.into_iter().fold(command, |c, id| {
            c.mut_arg(id, |a| a.allow_hyphen_values(true))
        });
        let names: Vec<String> = command
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        names
            .into_iter()
            .fold(command, |c, name| c.mut_subcommand(name, hyphen_values))
    }
    hyphen_values(<Cli as clap::CommandFactory>::command())
}

/// Entry point of the binary: runs the command and maps errors to an exit status.
pub fn main() -> ExitCode {
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&command().get_matches())
        .unwrap_or_else(|e| e.format(&mut command()).exit());
    let result = match cli.command {
        // What needs no runtime: the conveniences that print what the CLI itself defines.
        Command::Completions(args) => conveniences::completions(args),
        Command::Man(args) => conveniences::man(args),
        Command::Config { command } => conveniences::config(command),
        command => return run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if output::is_stdout_closed(&e) => output::end_by_sigpipe(),
        Err(e) => {
            output::errln!("error: {}", crate::errors::chain(&e));
            ExitCode::from(1)
        }
    }
}

/// The commands that run on the async runtime.
fn run(command: Command) -> ExitCode {
    let runtime = match crate::daemon::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            output::errln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let (result, failure) = runtime.block_on(async {
        match command {
            Command::Serve(args) => (serve::serve(args).await, 1),
            // `check` promises 3 (UNKNOWN) when it could not read its input or its config.
            Command::Check(args) => (check::check(args).await, 3),
            Command::Simulate(args) => (demo::simulate(args).await.map(|()| ExitCode::SUCCESS), 1),
            Command::Demo(args) => (demo::demo(args).await.map(|()| ExitCode::SUCCESS), 1),
            Command::Plan(args) => (plan::plan(args).await.map(|()| ExitCode::SUCCESS), 1),
            Command::Match(args) => (matching::run(args).await.map(|()| ExitCode::SUCCESS), 1),
            Command::Audit(args) => (audit::run(args).await.map(|()| ExitCode::SUCCESS), 1),
            Command::Report(args) => (report::run(args).await.map(|()| ExitCode::SUCCESS), 1),
            Command::Advise(args) => (advise::advise(args).await, 1),
            Command::Completions(_) | Command::Man(_) | Command::Config { .. } => {
                (Ok(ExitCode::SUCCESS), 1)
            }
        }
    });
    match result {
        Ok(code) => code,
        // The reader has gone (`| head`): nothing to say, and nowhere to say it.
        Err(e) if output::is_stdout_closed(&e) => output::end_by_sigpipe(),
        Err(e) => {
            output::errln!("error: {}", crate::errors::chain(&e));
            ExitCode::from(failure)
        }
    }
}

/// Dependencies that log at ERROR what apf-monitor already says once per streak, with what to do: kube's client
/// (every failed request) and rustls-platform-verifier (every certificate it refuses, once per connection). Each is
/// (what a filter names to ask for it, the target kept out otherwise).
const DEPENDENCY_NOISE: [(&str, &str); 2] = [
    ("kube", "kube_client::client::builder"),
    ("rustls_platform_verifier", "rustls_platform_verifier"),
];

/// The tracing filter for `level`: the dependencies' noise kept out, unless the filter names the crate
/// (`info,rustls_platform_verifier=debug`) or asks for debug or trace everywhere.
fn log_filter(level: &str) -> String {
    let verbose = level
        .split(',')
        .any(|d| matches!(d.trim().to_ascii_lowercase().as_str(), "debug" | "trace"));
    let mut filter = level.to_string();
    for (named, target) in DEPENDENCY_NOISE {
        if !verbose && !level.contains(named) {
            filter.push_str(&format!(",{target}=off"));
        }
    }
    filter
}

/// A one-shot command's logs: warnings only, unless --log-level asks for more (the config's level is the daemon's).
fn init_command_logging(config: &Config, common: &TargetArgs) -> Result<()> {
    init_logging(
        config.log.format,
        if common.log_level.is_some() {
            &config.log.level
        } else {
            "warn"
        },
    )
}

fn init_logging(format: LogFormat, level: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(level)).with_context(|| {
        format!("invalid log level {level:?}: use error, warn, info, debug or a filter")
    })?;
    // Colour codes belong on a terminal only: in a file, a pipe or a log collector they are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(table::colour_on(std::io::stderr().is_terminal()))
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr closed: `2>&1 | head`) is lost; saying so on that same stderr
        // would panic.
        .log_internal_errors(false);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // Already set (tests, demo): keep the first one.
    let _ = result;
    for warning in std::mem::take(&mut *pending_warnings()) {
        tracing::warn!("{warning}");
    }
    Ok(())
}

/// Warnings of reading the config and the flags, said before the log is set up (the config says how to log).
fn pending_warnings() -> std::sync::MutexGuard<'static, Vec<String>> {
    static PENDING: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A warning now when the log is set up (a reload), else as soon as it is.
fn warn_when_logging(warning: String) {
    if tracing::dispatcher::has_been_set() {
        tracing::warn!("{warning}");
    } else {
        pending_warnings().push(warning);
    }
}

/// The config file with the command line's overrides applied, checked again as a whole: a flag can make a valid
/// file invalid, and is refused the same way.
fn load_config(
    common: &TargetArgs,
    source: Option<&SourceArgs>,
    listen: Option<SocketAddr>,
) -> Result<Config> {
    let mut config = match &common.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if !common.targets.is_empty() {
        config.targets.prometheus.clear();
        config.targets.static_targets = common
            .targets
            .iter()
            .cloned()
            .map(StaticTarget::from_url)
            .collect();
    }
    if let Some(source) = source.filter(|s| !s.prometheus.is_empty()) {
        config.targets.static_targets.clear();
        config.targets.prometheus = source
            .prometheus
            .iter()
            .cloned()
            .map(|url| crate::targets::PrometheusTarget {
                selector: source.selector.clone(),
                cluster_label: source.cluster_label.clone(),
                apiserver_label: source.apiserver_label.clone(),
                ..crate::targets::PrometheusTarget::from_url(url)
            })
            .collect();
    }
    if let Some(ca) = &common.certificate_authority {
        let by_flag =
            !common.targets.is_empty() || source.is_some_and(|s| !s.prometheus.is_empty());
        if !by_flag {
            anyhow::bail!(
                "--certificate-authority {}: it is the CA of the --target (or --prometheus) URLs; give them too \
                 (a kubeconfig carries its own CA, and the config's targets their ca_file)",
                ca.display()
            );
        }
        for t in &mut config.targets.static_targets {
            t.ca_file = Some(ca.clone());
        }
        for p in &mut config.targets.prometheus {
            p.ca_file = Some(ca.clone());
        }
    }
    if let Some(path) = &common.kubeconfig {
        config.targets.kubernetes.kubeconfig = Some(path.clone());
    }
    if let Some(context) = &common.context {
        config.targets.kubernetes.context = Some(context.clone());
    }
    if let Some(i) = source.and_then(|s| s.interval) {
        config.scrape.interval = i;
        // A flag-set interval shorter than the configured timeout would let rounds overlap.
        if config.scrape.timeout.0 > i.0 {
            warn_when_logging(format!(
                "--interval {} is shorter than scrape.timeout {}: the timeout is {} too",
                humantime::format_duration(i.0),
                humantime::format_duration(config.scrape.timeout.0),
                humantime::format_duration(i.0)
            ));
            config.scrape.timeout = i;
        }
        if config.analysis.window.0 < i.0 * 2 {
            config.analysis.window = values::Interval(i.0 * 2);
        }
    }
    if let Some(f) = common.log_format {
        config.log.format = f;
    }
    if let Some(l) = &common.log_level {
        config.log.level = l.clone();
    }
    if let Some(listen) = listen {
        config.listen = listen;
    }
    config
        .check()
        .map_err(|e| anyhow::anyhow!("the config with the command line's flags: {e}"))?;
    Ok(config)
}

/// The static targets, or every replica discovery finds now (listed once).
async fn replicas(config: &crate::config::Config) -> Result<Vec<crate::daemon::Replica>> {
    match crate::daemon::build_targets(config).await? {
        crate::daemon::TargetSource::Static(replicas) => Ok(replicas),
        crate::daemon::TargetSource::Prometheus(_) => {
            anyhow::bail!(
                "the config reads a Prometheus (targets.prometheus), not the replicas themselves"
            )
        }
        crate::daemon::TargetSource::Discover(setup) => {
            let (namespace, service) = setup.config.service_ref();
            let discovery = crate::targets::discovery::Discovery::new(
                crate::targets::access::client(&setup.access)?,
                namespace,
                service,
            );
            let found = discovery
                .once()
                .await
                .with_context(|| format!("cannot list the replicas of {}", setup.config.service))?;
            Ok(setup.replicas(&found))
        }
    }
}

/// SIGTERM or SIGINT (Ctrl-C).
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

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn the_dependencies_noise_is_kept_out_unless_asked_for() {
        assert_eq!(
            log_filter("warn"),
            "warn,kube_client::client::builder=off,rustls_platform_verifier=off"
        );
        assert_eq!(
            log_filter("info,rustls_platform_verifier=debug"),
            "info,rustls_platform_verifier=debug,kube_client::client::builder=off"
        );
        assert_eq!(
            log_filter("kube_client=info"),
            "kube_client=info,rustls_platform_verifier=off"
        );
        // debug or trace everywhere shows everything.
        assert_eq!(log_filter("debug"), "debug");
        assert_eq!(
            log_filter("apf_monitor=info, TRACE"),
            "apf_monitor=info, TRACE"
        );
        // debug for apf-monitor alone is not debug everywhere.
        assert_eq!(
            log_filter("apf_monitor=debug"),
            "apf_monitor=debug,kube_client::client::builder=off,rustls_platform_verifier=off"
        );
    }
}
