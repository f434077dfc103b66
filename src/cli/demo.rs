//! `apf-monitor simulate` (a simulated cluster of kube-apiservers) and `apf-monitor demo` (the simulator and the
//! daemon in one process, alerts to the console): no cluster needed.
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::output::outln;
use super::{init_logging, shutdown_signal};
use crate::config::{Config, LogFormat};
use crate::daemon::Daemon;
use crate::values;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The Kubernetes version whose metrics, dumps and default objects are served (1.20 to 1.36).
    #[arg(long, default_value = "1.34")]
    pub kubernetes_version: String,
    /// Load scenario: idle, ramp, storm, or a YAML file (see config/scenarios/example.yaml). It is the load of one
    /// replica, as in `demo`: the cluster receives it once per replica, split unevenly (the first is the hot one).
    #[arg(long, default_value = "ramp")]
    pub scenario: String,
    /// Where the simulated apiserver listens. With --replicas above 1, replica i listens on the i-th address from
    /// 127.0.0.2 (or from this address when it is another 127.x.y.z), all on this port; port 0 gives each replica
    /// a free port of its own.
    #[arg(long, default_value = "127.0.0.1:8001")]
    pub listen: SocketAddr,
    /// Seed of the random arrivals: the same seed gives the same run (replica i uses seed + i). Default: the
    /// scenario's `seed`, else 1.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// --max-requests-inflight + --max-mutating-requests-inflight of each simulated apiserver.
    #[arg(long, default_value_t = 600)]
    pub server_concurrency: u32,
    /// Run the scenario's `duration` once in virtual time, as fast as the CPU goes (one replica, no listener, no
    /// kubeconfig), print what each flow and priority level got, and exit 0. The flags of a served cluster
    /// (--listen, --replicas, --tls, tokens, --kubeconfig-out, audit) are refused with it.
    #[arg(
        long,
        conflicts_with_all = [
            "listen",
            "replicas",
            "tls",
            "require_token",
            "token_file",
            "kubeconfig_out",
            "audit_log",
            "audit_webhook",
        ]
    )]
    pub run: bool,
    /// With --run: `table` (a row per flow, then per priority level), or `json`: {"duration_seconds", "seed",
    /// "kubernetes_version", "flows": [...], "levels": [...]}.
    #[arg(long, value_enum, default_value = "table", requires = "run")]
    pub output: RunOutput,
    /// How many kube-apiserver replicas: each its own simulator on its own address, the first the hottest (of n
    /// replicas the k-th receives (n - k) / (1 + ... + n) of the load: 50 / 33 / 17 % for 3).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=200))]
    pub replicas: u16,
    /// Serve HTTPS with a CA made at start (written beside the kubeconfig, and into it).
    #[arg(long)]
    pub tls: bool,
    /// Require a bearer token: a generated one, written beside the kubeconfig and into it.
    #[arg(long)]
    pub require_token: bool,
    /// Require the bearer token held in this file (implies --require-token).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Where to write a kubeconfig for the simulated cluster (kubectl --kubeconfig FILE ...).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "apf-monitor-sim.kubeconfig"
    )]
    pub kubeconfig_out: PathBuf,
    /// Write an audit event for every request, as kube-apiserver's --audit-log-path with --audit-log-format=json
    /// does (level Metadata, stage ResponseComplete), every replica into this file.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// With --audit-log: rotate past this many MiB, into NAME-2006-01-02T15-04-05.000.log (0: never).
    #[arg(long, value_name = "MB", default_value_t = 100, requires = "audit_log")]
    pub audit_log_maxsize: u64,
    /// With --audit-log: rotated files kept (0: every one).
    #[arg(long, value_name = "N", default_value_t = 10, requires = "audit_log")]
    pub audit_log_maxbackup: usize,
    /// With --audit-log: gzip the rotated files.
    #[arg(long, requires = "audit_log")]
    pub audit_log_compress: bool,
    /// POST the audit events in EventList batches to this URL, as kube-apiserver's audit webhook does, e.g.
    /// http://127.0.0.1:9864/api/v1/audit (apf-monitor serve).
    #[arg(long, value_name = "URL")]
    pub audit_webhook: Option<String>,
    /// With --audit-webhook: a bearer token to present, read from this file.
    #[arg(long, value_name = "FILE", requires = "audit_webhook")]
    pub audit_webhook_token_file: Option<PathBuf>,
    /// With --audit-webhook: the longest a batch waits before it is sent (kube-apiserver's default is 30s).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = values::parse_interval, requires = "audit_webhook")]
    pub audit_webhook_batch_max_wait: values::Interval,
}

/// What `simulate --run` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunOutput {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[arg(long, default_value = "1.34")]
    pub kubernetes_version: String,
    /// Load scenario: idle, ramp, storm, or a YAML file. It is the load of one replica, as in `simulate`: the
    /// cluster receives it once per replica, split unevenly (the first is the hot one).
    #[arg(long, default_value = "ramp")]
    pub scenario: String,
    /// Where apf-monitor serves /metrics and its status page (a free port is taken if this one is busy).
    #[arg(long, default_value = "127.0.0.1:9864")]
    pub listen: SocketAddr,
    /// Scrape interval of the demo.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = values::parse_interval)]
    pub interval: values::Interval,
    /// Seed of the random arrivals (replica i uses seed + i). Default: the scenario's `seed`, else 1.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// kube-apiserver replicas of the simulated cluster (on 127.0.0.2, 127.0.0.3, ...), the first one the hottest.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub replicas: u16,
    /// Stop after this long (e.g. 5m); default: until Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = values::parse_interval)]
    pub duration: Option<values::Interval>,
}

/// What a cluster of `replicas` receives: `--scenario` is the load of one replica, in `simulate` as in `demo`, so the
/// cluster receives it once per replica, split unevenly among them (the first gets more than its share: the hot
/// one; the last less).
fn cluster_load(scenario: &apf_sim::Scenario, replicas: usize) -> apf_sim::Scenario {
    scenario.clone().scaled(replicas as f64)
}

pub async fn simulate(args: SimulateArgs) -> Result<()> {
    if args.run {
        init_logging(LogFormat::Text, "warn")?;
        return super::virtual_run::run(&args).await;
    }
    init_logging(LogFormat::Text, "info")?;
    let (version, scenario) = version_and_scenario(&args.kubernetes_version, &args.scenario)?;
    let seed = seed(args.seed, &scenario);
    let replicas = usize::from(args.replicas);
    let first_address = first_replica_address(args.listen.ip(), replicas)?;
    // Held before the cluster starts: a second simulate with the same file is refused, not let overwrite it.
    let kubeconfig = absolute(&args.kubeconfig_out);
    let mut held = super::held::HeldKubeconfig::claim(&kubeconfig)?;
    let token = match (&args.token_file, args.require_token) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--token-file {}", path.display()))?;
            let token = text.trim().to_string();
            anyhow::ensure!(
                !token.is_empty(),
                "--token-file {}: the file is empty",
                path.display()
            );
            Some(token)
        }
        (None, true) => Some(apf_sim::generate_token()),
        (None, false) => None,
    };
    let audit = audit_options(&args)?;
    let cluster = apf_sim::Cluster::start(apf_sim::ClusterOptions {
        audit,
        seed,
        server_concurrency: args.server_concurrency,
        replicas,
        first_address,
        listen_port: args.listen.port(),
        tls: args.tls,
        token: token.clone(),
        ..apf_sim::ClusterOptions::new(version, cluster_load(&scenario, replicas))
    })
    .await
    .map_err(|e| match e {
        apf_sim::ClusterError::Bind { .. } => {
            anyhow::anyhow!("{e}: is another process using it? Use --listen")
        }
        e => e.into(),
    })?;

    // Files beside the kubeconfig: the token (unless the user gave one), the CA and a config to scrape with.
    cluster
        .kubeconfig(&kubeconfig)
        .context("cannot write the kubeconfig; use --kubeconfig-out")?;
    held.written();
    let token_file = match (&args.token_file, &token) {
        (Some(path), _) => Some(absolute(path)),
        (None, Some(t)) => {
            let path = kubeconfig.with_extension("token");
            apf_sim::write_private(&path, &format!("{t}\n"))?;
            Some(path)
        }
        (None, None) => None,
    };
    let ca_file = match cluster.ca_pem() {
        Some(pem) => {
            let path = kubeconfig.with_extension("ca.crt");
            std::fs::write(&path, pem)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Some(path)
        }
        None => None,
    };

    let told = tell_simulated(&args, &cluster, &kubeconfig, &token_file, &ca_file);
    // Until Ctrl-C, or until the reader of its lines has gone (`simulate | head -3`): it has nothing more to say.
    let told = match told {
        Ok(()) => tokio::select! {
            _ = shutdown_signal() => Ok(()),
            _ = super::output::closed() => Err(super::output::StdoutClosed.into()),
        },
        Err(e) => Err(e),
    };
    cluster.stop().await;
    told
}

/// What `simulate` prints: the replicas, the files beside the kubeconfig, and what to run against them.
fn tell_simulated(
    args: &SimulateArgs,
    cluster: &apf_sim::Cluster,
    kubeconfig: &std::path::Path,
    token_file: &Option<std::path::PathBuf>,
    ca_file: &Option<std::path::PathBuf>,
) -> Result<()> {
    let replicas = usize::from(args.replicas);
    let shares = apf_sim::load_shares(replicas);
    outln!(
        "simulated Kubernetes v{} cluster under the {:?} load scenario: {replicas} kube-apiserver replica{}",
        args.kubernetes_version,
        args.scenario,
        if replicas == 1 { "" } else { "s" }
    )?;
    for ((index, _), (url, share)) in cluster
        .replicas()
        .iter()
        .zip(cluster.replica_urls().iter().zip(&shares))
    {
        outln!(
            "  replica {index}  {url}   {:.0}% of the cluster's load ({:.2} times the scenario)",
            share * 100.0,
            share * replicas as f64
        )?;
    }
    let k = kubeconfig.display();
    outln!("kubeconfig: {k}")?;
    if let Some(t) = token_file {
        outln!("  bearer token (required): {}", t.display())?;
    }
    if let Some(c) = ca_file {
        outln!("  CA certificate: {}", c.display())?;
    }
    if let Some(log) = &args.audit_log {
        outln!("audit log: {}", absolute(log).display())?;
        outln!(
            "  apf-monitor audit --kubeconfig {k} --file {}*",
            absolute(log).display()
        )?;
    }
    if let Some(url) = &args.audit_webhook {
        outln!("audit events posted to: {url}")?;
    }
    outln!("  kubectl --kubeconfig {k} get flowschemas,prioritylevelconfigurations")?;
    outln!("  kubectl --kubeconfig {k} get endpointslices -n default")?;
    outln!("  kubectl --kubeconfig {k} version")?;
    // The replicas are discovered from the cluster's EndpointSlices, as in a real cluster.
    outln!("scrape every replica:")?;
    outln!("  apf-monitor serve --kubeconfig {k}")?;
    outln!("  apf-monitor check --kubeconfig {k}")
}

/// Where `simulate --audit-log` and `--audit-webhook` send the audit events.
fn audit_options(args: &SimulateArgs) -> Result<Option<apf_sim::AuditOptions>> {
    if args.audit_log.is_none() && args.audit_webhook.is_none() {
        return Ok(None);
    }
    let webhook = match &args.audit_webhook {
        Some(url) => {
            let parsed = reqwest::Url::parse(url)
                .with_context(|| format!("--audit-webhook {url}: not a URL"))?;
            anyhow::ensure!(
                matches!(parsed.scheme(), "http" | "https"),
                "--audit-webhook {url}: give an http:// or https:// URL"
            );
            let token = match &args.audit_webhook_token_file {
                Some(path) => Some(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("--audit-webhook-token-file {}", path.display()))?
                        .trim()
                        .to_string(),
                ),
                None => None,
            };
            Some(apf_sim::AuditWebhookOptions {
                token,
                batch_max_wait: args.audit_webhook_batch_max_wait.0,
                ..apf_sim::AuditWebhookOptions::new(url.clone())
            })
        }
        None => None,
    };
    Ok(Some(apf_sim::AuditOptions {
        log: args
            .audit_log
            .as_ref()
            .map(|path| apf_sim::AuditLogOptions {
                path: absolute(path),
                max_size_mb: args.audit_log_maxsize,
                max_backups: args.audit_log_maxbackup,
                compress: args.audit_log_compress,
            }),
        webhook,
    }))
}

/// Replica 0's address: `--listen`'s with one replica (as `simulate` always was); with more, consecutive loopback
/// addresses from 127.0.0.2 (127.0.0.1 stays free for the user's tools), or from `--listen`'s when it is another
/// 127.x.y.z.
fn first_replica_address(listen: std::net::IpAddr, replicas: usize) -> Result<std::net::IpAddr> {
    use std::net::{IpAddr, Ipv4Addr};
    if replicas == 1 {
        return Ok(listen);
    }
    match listen {
        IpAddr::V4(a) if a == Ipv4Addr::LOCALHOST => Ok(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
        IpAddr::V4(a) if a.is_loopback() => Ok(listen),
        _ => anyhow::bail!(
            "--replicas {replicas} needs loopback addresses of its own (127.0.0.2, 127.0.0.3, ...): --listen {listen} \
             is not one; give --listen 127.0.0.1:PORT (the default) or another 127.x.y.z"
        ),
    }
}

fn absolute(path: &std::path::Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The run's seed: `--seed` wins, else the scenario's `seed`, else 1.
pub(super) fn seed(flag: Option<u64>, scenario: &apf_sim::Scenario) -> u64 {
    flag.or(scenario.seed).unwrap_or(1)
}

/// `--kubernetes-version` and `--scenario`, read; errors name the flag.
pub(super) fn version_and_scenario(
    version: &str,
    scenario: &str,
) -> Result<(apf_sim::KubeVersion, apf_sim::Scenario)> {
    let version: apf_sim::KubeVersion = version
        .parse()
        .map_err(|e| anyhow::anyhow!("--kubernetes-version {version:?}: {e}"))?;
    let source: apf_sim::ScenarioSource = scenario
        .parse()
        .map_err(|e| anyhow::anyhow!("--scenario {scenario:?}: {e}"))?;
    let scenario = apf_sim::Scenario::load(&source)
        .map_err(|e| anyhow::anyhow!("--scenario {scenario:?}: {e}"))?;
    Ok((version, scenario))
}

pub async fn demo(args: DemoArgs) -> Result<()> {
    // Alerts go to the console receiver, whose lines are the point of the demo.
    init_logging(LogFormat::Text, "warn,apf_monitor::alerts=info")?;
    let (version, scenario) = version_and_scenario(&args.kubernetes_version, &args.scenario)?;
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot open a local port")?,
    };
    let listen = listener.local_addr()?;
    // Off loopback, writes need a token (web.auth): the replicas present one made for this run.
    let webhook_token = (!listen.ip().is_loopback()).then(apf_sim::generate_token);
    let tokens_file =
        std::env::temp_dir().join(format!("apf-monitor-demo-{}.tokens", std::process::id()));
    if let Some(t) = &webhook_token {
        apf_sim::write_private(&tokens_file, &format!("{t}\n"))?;
    }
    // A small cluster over TLS with a bearer token, found the way a real one is: from its EndpointSlices.
    let replicas = usize::from(args.replicas);
    let options = apf_sim::ClusterOptions {
        seed: seed(args.seed, &scenario),
        replicas,
        tls: true,
        token: Some(apf_sim::generate_token()),
        // Who got the 429s: the replicas post their audit events to the daemon, as kube-apiserver's audit webhook
        // would (the demo listens on loopback, where writes need no token).
        audit: Some(apf_sim::AuditOptions {
            webhook: Some(apf_sim::AuditWebhookOptions {
                token: webhook_token.clone(),
                ..apf_sim::AuditWebhookOptions::new(format!("http://{listen}/api/v1/audit"))
            }),
            log: None,
        }),
        ..apf_sim::ClusterOptions::new(version, cluster_load(&scenario, replicas))
    };
    let cluster = match apf_sim::Cluster::start(options.clone()).await {
        Ok(c) => c,
        // Not every system routes all of 127.0.0.0/8 (macOS has 127.0.0.1 only): one replica there.
        Err(apf_sim::ClusterError::Bind { .. }) if options.replicas > 1 => {
            outln!("(127.0.0.2 cannot be bound here: the simulated cluster has one replica, on 127.0.0.1)")?;
            apf_sim::Cluster::start(apf_sim::ClusterOptions {
                replicas: 1,
                first_address: std::net::Ipv4Addr::LOCALHOST.into(),
                scenario,
                ..options
            })
            .await?
        }
        Err(e) => return Err(e.into()),
    };
    let kubeconfig = std::env::temp_dir().join(format!(
        "apf-monitor-demo-{}.kubeconfig",
        std::process::id()
    ));
    cluster
        .kubeconfig(&kubeconfig)
        .context("cannot write the simulated cluster's kubeconfig")?;

    let mut config = Config::default();
    config.listen = listen;
    config.scrape.interval = args.interval;
    config.scrape.timeout = args.interval;
    config.analysis.window = values::Interval((args.interval.0 * 2).max(Duration::from_secs(60)));
    config.targets.kubernetes.kubeconfig = Some(kubeconfig.clone());
    // The built-in rules with their defaults, to the console; groups are sent sooner than Alertmanager's defaults so
    // a newcomer sees an alert fire and resolve within a few minutes.
    config.receivers = vec![crate::notify::ReceiverConfig::console("console")];
    config.route.group_wait = values::DurationValue(Duration::from_secs(5));
    config.route.group_interval = values::Interval(Duration::from_secs(30));
    config.alerting.leader_election.enabled = Some(false);
    if webhook_token.is_some() {
        config.web.auth.mode = Some(crate::export::AuthMode::Tokens);
        config.web.auth.tokens_file = Some(tokens_file.clone());
    }
    config
        .check()
        .map_err(|e| anyhow::anyhow!("the demo's config: {e}"))?;
    let loader: crate::daemon::Loader = Arc::new(move || Ok(config.clone()));
    let daemon = Daemon::start(loader, listener).await?;

    // What was said is cut short when the reader of its lines goes (`demo | head`); the demo stops as Ctrl-C
    // stops it, and then the program ends by SIGPIPE.
    let shown = match tell_demo(&args, &cluster, listen, &kubeconfig) {
        Ok(hot) => watch(&args, &daemon, &hot).await,
        Err(e) => Err(e),
    };
    let stopped = daemon.stop().await;
    cluster.stop().await;
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(&tokens_file);
    shown.and(stopped)
}

/// The demo's opening: the replicas, where to look, how to apply the fix; returns the hot replica's address.
fn tell_demo(
    args: &DemoArgs,
    cluster: &apf_sim::Cluster,
    listen: std::net::SocketAddr,
    kubeconfig: &std::path::Path,
) -> Result<String> {
    let replicas = cluster.replicas();
    outln!(
        "apf-monitor demo: a simulated Kubernetes v{} cluster of {} kube-apiserver replica{} under the {:?} load \
         scenario,\nfound from its EndpointSlices as in a real cluster, each scraped at its own address:",
        args.kubernetes_version,
        replicas.len(),
        if replicas.len() == 1 { "" } else { "s" },
        args.scenario
    )?;
    let shares = apf_sim::load_shares(replicas.len());
    for (i, ((_, addr), share)) in replicas.iter().zip(&shares).enumerate() {
        let hot = if i == 0 && replicas.len() > 1 {
            "  (the hot one)"
        } else {
            ""
        };
        outln!(
            "  replica {addr}   {:>3.0}% of the load{hot}",
            share * 100.0
        )?;
    }
    let hot = replicas
        .first()
        .map(|(_, a)| a.to_string())
        .unwrap_or_default();
    outln!("  apf-monitor metrics:  http://{listen}/metrics   (apf_priority_level_headroom_seats, ...)")?;
    outln!("  status page:          http://{listen}/")?;
    outln!("  status as JSON:       http://{listen}/api/v1/status")?;
    outln!(
        "  the cluster:          kubectl --kubeconfig {} get endpointslices -n default",
        kubeconfig.display()
    )?;
    // Written out with this binary's path: `cargo run` puts none on the PATH.
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "apf-monitor".into());
    outln!(
        "  apply the fix:        {exe} check --kubeconfig {k} --output manifests | kubectl --kubeconfig {k} apply -f -",
        k = kubeconfig.display()
    )?;
    outln!(
        "Every {}s, a line for each level that is not OK or has changed (every level of the hot replica, the tightest \
         level of each other one): limit, seats in use, headroom and queued at the last scrape, rejected/s over the \
         window, the status and the alert rules that give it, and the level's top flow; under a status that appears \
         or changes, what its first rule read. Ctrl-C stops.\n",
        args.interval.0.as_secs()
    )?;
    Ok(hot)
}

/// Every interval the demo's lines, until `--duration`, Ctrl-C, or the reader of the lines has gone.
async fn watch(args: &DemoArgs, daemon: &Daemon, hot: &str) -> Result<()> {
    let mut ticker = tokio::time::interval(args.interval.0);
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d.0);
    let started = std::time::Instant::now();
    let mut live = super::live::LiveView::default();
    let stop = shutdown_signal();
    let closed = super::output::closed();
    tokio::pin!(stop, closed);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = &mut stop => break,
            _ = &mut closed => return Err(super::output::StdoutClosed.into()),
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
        let report = daemon.status();
        for line in live.lines(&report, started.elapsed(), hot) {
            outln!("{line}")?;
        }
        outln!()?;
    }
    Ok(())
}
