//! A config turned into what the stages run: targets with their HTTP clients, loop and analysis settings, rules,
//! route and receivers. Building it is the validation: whatever would fail when a stage starts fails here first,
//! naming the key and its line, so `serve --check-config`, start-up and a reload refuse a bad config alike, and a
//! refused reload leaves the running stages untouched.
use std::path::PathBuf;
use std::sync::Arc;

use crate::alert::{RouteConfig, RuleError, Rules};
use crate::analyze::Analysis;
use crate::config::Config;
use crate::daemon::leader::{lease_client, NoLeaseAccess};
use crate::notify::{self, Receiver, ReceiverConfig};
use crate::scrape::prometheus::PrometheusSource;
use crate::scrape::{Endpoint, ScrapeConfig};
use crate::targets::access::{self, AccessError};
use crate::targets::discovery::Replicas;
use crate::targets::{self, KubernetesConfig, PrometheusTarget, StaticTarget, Target, TargetError};

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}{1}")]
    Rules(RuleError, String),
    #[error("{0}")]
    Target(#[from] TargetError),
    #[error("targets.kubernetes: {0}")]
    Access(#[from] AccessError),
    #[error("receivers[{index}] ({name}): {message}{at}")]
    Receiver {
        index: usize,
        name: String,
        message: String,
        at: String,
    },
    #[error("{0}")]
    LeaderElection(#[from] NoLeaseAccess),
    #[error("alerting.state_file: cannot create the directory {dir}: {source}")]
    StateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// More than one part cannot be built: each is said, so that one run of `--check-config` finds them all.
    #[error("{}", crate::config::list_problems(&.0.iter().map(|e| crate::errors::chain_of(e)).collect::<Vec<_>>()))]
    Several(Vec<SetupError>),
}

impl SetupError {
    /// The problems found as one error: the one, or all of them.
    fn all(mut problems: Vec<SetupError>) -> SetupError {
        match problems.pop() {
            Some(one) if problems.is_empty() => one,
            Some(last) => {
                problems.push(last);
                SetupError::Several(problems)
            }
            None => SetupError::Several(problems),
        }
    }
}

/// Which endpoints the configuration asks for.
pub fn enabled_endpoints(scrape: &ScrapeConfig) -> Vec<Endpoint> {
    Endpoint::ALL
        .into_iter()
        .filter(|e| match e {
            Endpoint::Metrics => true,
            Endpoint::DumpPriorityLevels => scrape.debug_dumps && scrape.dump_priority_levels,
            Endpoint::DumpQueues => scrape.debug_dumps && scrape.dump_queues,
            Endpoint::DumpRequests => scrape.debug_dumps && scrape.dump_requests,
            Endpoint::PriorityLevelConfigurations => !scrape.objects_interval.0.is_zero(),
            // Not a replica's endpoint: a source of its own (`targets.prometheus`).
            Endpoint::Prometheus => false,
        })
        .collect()
}

/// Settings of one replica's loop.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopSettings {
    pub interval: std::time::Duration,
    pub max_backoff: std::time::Duration,
    pub objects_interval: std::time::Duration,
    pub request_details: bool,
    pub max_body_bytes: u64,
    pub max_line_bytes: usize,
    pub protobuf: bool,
    pub endpoints: Vec<Endpoint>,
}

impl LoopSettings {
    pub fn from_config(scrape: &ScrapeConfig) -> Self {
        Self {
            interval: scrape.interval.0,
            max_backoff: scrape.max_backoff.0,
            objects_interval: scrape.objects_interval.0,
            request_details: scrape.request_details,
            max_body_bytes: scrape.max_body_bytes.0,
            max_line_bytes: usize::try_from(scrape.max_line_bytes.0).unwrap_or(usize::MAX),
            protobuf: scrape.protobuf,
            endpoints: enabled_endpoints(scrape),
        }
    }
}

/// One replica to scrape: how it was configured (to tell what a reload changed) and its ready client.
#[derive(Debug, Clone)]
pub struct Replica {
    pub spec: ReplicaSpec,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSpec {
    pub origin: Origin,
    pub settings: LoopSettings,
}

/// Where a replica comes from: what a reload compares to tell whether its loop must restart.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    Static(StaticTarget),
    /// Discovered at `address`, reached with the access `via` describes.
    Discovered {
        address: String,
        via: KubernetesConfig,
    },
    /// The API server URL itself (discovery impossible): whichever replica answers.
    Service {
        url: String,
        via: KubernetesConfig,
    },
}

/// Where the target list comes from.
#[derive(Clone)]
pub enum TargetSource {
    /// The config's (or `--target`'s) replicas.
    Static(Vec<Replica>),
    /// Every replica of the `kubernetes` Service, as it changes.
    Discover(Box<DiscoverySetup>),
    /// Prometheus APIs holding the replicas' metrics (`targets.prometheus`, `--prometheus`).
    Prometheus(Vec<PrometheusSetup>),
}

/// What the supervisor runs a loop for: replicas to scrape, and Prometheus sources to query.
#[derive(Clone, Default)]
pub struct Targets {
    pub replicas: Vec<Replica>,
    pub prometheus: Vec<PrometheusSetup>,
}

/// One Prometheus source's loop: its client, and the settings a reload compares.
#[derive(Debug, Clone)]
pub struct PrometheusSetup {
    pub config: PrometheusTarget,
    pub source: PrometheusSource,
    pub interval: std::time::Duration,
    /// `analysis.window`: how far back a new replica's baseline is read.
    pub window_seconds: f64,
    /// The source's `timeout`, else `scrape.timeout`: for a whole round, its baseline included.
    pub timeout: std::time::Duration,
}

impl PrometheusSetup {
    /// The loop restarts when what it was built from changed.
    pub fn same_as(&self, other: &PrometheusSetup) -> bool {
        self.config == other.config
            && self.interval == other.interval
            && self.window_seconds == other.window_seconds
            && self.timeout == other.timeout
    }
}

impl TargetSource {
    /// What to tell a person: the static count, or where the replicas come from.
    pub fn describe(&self) -> String {
        match self {
            TargetSource::Static(r) => format!("{} static target(s)", r.len()),
            TargetSource::Prometheus(p) => format!(
                "every replica in {}",
                p.iter()
                    .map(|p| match &p.source.shard {
                        Some(shard) => format!(
                            "{} ({})",
                            p.source.url,
                            shard.describe(&p.source.cluster_label)
                        ),
                        None => p.source.url.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            TargetSource::Discover(d) => format!(
                "every replica of the Service {} through {}",
                d.config.service, d.access.cluster_url
            ),
        }
    }
}

/// Discovery of the replicas with the kube crate's apiserver access.
#[derive(Clone)]
pub struct DiscoverySetup {
    pub access: kube::Config,
    pub config: KubernetesConfig,
    pub settings: LoopSettings,
    /// Each request's timeout (`scrape.timeout`).
    pub timeout: std::time::Duration,
}

impl DiscoverySetup {
    /// The targets of a replica set: one per address, dialled with the access' credentials and verified for
    /// `tls_server_name`; or the API server URL itself when the replicas cannot be told apart.
    pub fn replicas(&self, replicas: &Replicas) -> Vec<Replica> {
        let spec = |origin| ReplicaSpec {
            origin,
            settings: self.settings.clone(),
        };
        let built = match replicas {
            Replicas::Discovered(addresses) => addresses
                .iter()
                .map(|address| {
                    access::replica(
                        &self.access,
                        address,
                        &self.config.tls_server_name,
                        self.timeout,
                    )
                    .map(|target| Replica {
                        spec: spec(Origin::Discovered {
                            address: address.clone(),
                            via: self.config.clone(),
                        }),
                        target,
                    })
                })
                .collect::<Vec<_>>(),
            Replicas::Mixed { reason } => {
                tracing::warn!(
                    "{reason}: scraping the API server URL itself, so the numbers of different replicas are mixed"
                );
                vec![
                    access::through_service(&self.access, self.timeout).map(|target| Replica {
                        spec: spec(Origin::Service {
                            url: self.access.cluster_url.to_string(),
                            via: self.config.clone(),
                        }),
                        target,
                    }),
                ]
            }
        };
        built
            .into_iter()
            .filter_map(|r| {
                r.inspect_err(|e| tracing::warn!(error = %e, "replica not scraped"))
                    .ok()
            })
            .collect()
    }

    /// Another discovery is needed when what it was built from changed.
    pub fn same_as(&self, other: &DiscoverySetup) -> bool {
        self.config == other.config
            && self.settings == other.settings
            && self.timeout == other.timeout
    }
}

/// One receiver, built.
#[derive(Clone)]
pub struct ReceiverSetup {
    pub config: ReceiverConfig,
    pub receiver: Arc<dyn Receiver>,
}

/// What the alerting stage runs.
#[derive(Clone)]
pub struct AlertSetup {
    pub rules: Rules,
    pub route: RouteConfig,
    /// How people reach this apf-monitor: links in notifications.
    pub external_url: String,
    pub receivers: Vec<ReceiverSetup>,
    /// No receiver was configured: the alerts go to a console receiver rather than nowhere.
    pub console_by_default: bool,
    pub state_file: Option<PathBuf>,
    /// After a start, nothing is resolved for want of a condition for this long (`analysis.window`): a process
    /// that has not watched a whole window cannot tell a condition gone from one it cannot evaluate yet.
    pub warm_up: std::time::Duration,
}

/// The receiver alerts go to when the config names none.
pub const DEFAULT_RECEIVER: &str = "console";

impl AlertSetup {
    /// Where the alerts go, for the start-up log and `--check-config`: `console (no receiver configured)`, or each
    /// receiver with its kind.
    pub fn describe_receivers(&self) -> String {
        if self.console_by_default {
            return format!("{DEFAULT_RECEIVER} (no receiver configured)");
        }
        self.receivers
            .iter()
            .map(|r| format!("{} ({})", r.config.name, r.config.kind()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Said at start-up and at each reload while no receiver is configured.
pub const NO_RECEIVER_HINT: &str = "no receiver is configured: alerts are logged here, by the console receiver; \
     to send them to Slack, email, a webhook or Alertmanager, add one under `receivers:` in the config \
     (config/apf-monitor.example.yaml shows each kind)";

/// Everything the daemon's stages run, built from one config.
#[derive(Clone)]
pub struct Setup {
    pub config: Config,
    pub targets: TargetSource,
    pub analysis: Analysis,
    pub alerting: AlertSetup,
}

impl Setup {
    /// Builds every part; every part that cannot be built is in the error. Nothing is started or written.
    pub async fn build(config: Config) -> Result<Setup, SetupError> {
        let rules = build_rules(&config);
        let targets = build_targets(&config).await;
        // The Lease is reached as discovery is: refused here, not first when the daemon starts.
        let lease = lease_client(&config.alerting.leader_election, &config.targets.kubernetes)
            .await
            .map_err(SetupError::from);
        // With no receiver configured, alerts are logged rather than sent nowhere.
        let console_by_default = config.receivers.is_empty();
        let configured = if console_by_default {
            vec![ReceiverConfig::console(DEFAULT_RECEIVER)]
        } else {
            config.receivers.clone()
        };
        let mut receivers = Vec::new();
        let mut refused = Vec::new();
        for (index, r) in configured.iter().enumerate() {
            match notify::build(r) {
                Ok(receiver) => receivers.push(ReceiverSetup {
                    config: r.clone(),
                    receiver,
                }),
                Err(message) => refused.push(SetupError::Receiver {
                    index,
                    name: r.name.clone(),
                    at: receiver_line(&config, index, r, &message),
                    message,
                }),
            }
        }
        // Every part is tried: one run says every problem, not the first one only.
        let (rules, targets) = match (rules, targets, lease) {
            (Ok(rules), Ok(targets), Ok(_)) if refused.is_empty() => (rules, targets),
            (rules, targets, lease) => {
                // Discovery's access refused is the Lease's refused too: said once.
                let same_access = matches!(targets, Err(SetupError::Access(_)));
                let lease = lease.err().filter(|_| !same_access);
                let first = [rules.err(), targets.err(), lease];
                return Err(SetupError::all(
                    first.into_iter().flatten().chain(refused).collect(),
                ));
            }
        };
        let alerting = AlertSetup {
            rules,
            route: config.route.clone(),
            external_url: external_url(&config),
            receivers,
            console_by_default,
            state_file: config.alerting.state_file.clone(),
            warm_up: config.analysis.window.0,
        };
        Ok(Setup {
            analysis: analysis_of(&config),
            targets,
            alerting,
            config,
        })
    }

    /// Creates the directory of the state file if it is missing: what starting the alerting stage needs written.
    pub fn prepare(&self) -> Result<(), SetupError> {
        if let Some(path) = &self.alerting.state_file {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| SetupError::StateDir {
                    dir: dir.to_path_buf(),
                    source,
                })?;
            }
        }
        Ok(())
    }
}

/// ` at line N` of the key a receiver's error is about: its messages name the key first (`url: ...`,
/// `smarthost "x": ...`, after `receiver "NAME": KIND: `), looked for in that receiver's block; else the block of
/// its kind, else its name.
fn receiver_line(config: &Config, index: usize, r: &ReceiverConfig, message: &str) -> String {
    let kind = r.kind();
    let detail = message
        .strip_prefix(&format!("receiver {:?}: ", r.name))
        .unwrap_or(message);
    let detail = detail.strip_prefix(&format!("{kind}: ")).unwrap_or(detail);
    let key: String = detail
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
        .collect();
    let item = format!("receivers[{index}]");
    [
        format!("{item}.{kind}.{key}"),
        format!("{item}.{kind}"),
        format!("{item}.name"),
    ]
    .iter()
    .filter(|path| !path.ends_with('.'))
    .map(|path| config.at_line(path))
    .find(|at| !at.is_empty())
    .unwrap_or_default()
}

/// The rules as configured; an error names the key and its line.
pub fn build_rules(config: &Config) -> Result<Rules, SetupError> {
    Rules::new(&config.rules, &config.alerting.runbook_base_url).map_err(|e| {
        let at = config.at_line(&e.key);
        SetupError::Rules(e, at)
    })
}

/// The Prometheus sources when there are some; the static targets when there are some; else discovery through the apiserver access `targets.kubernetes`
/// describes (a kubeconfig, or the pod's service account).
pub async fn build_targets(config: &Config) -> Result<TargetSource, SetupError> {
    if !config.targets.prometheus.is_empty() {
        let timeout = config.scrape.timeout.0;
        return Ok(TargetSource::Prometheus(
            config
                .targets
                .prometheus
                .iter()
                .map(|p| {
                    let mut source = PrometheusSource::build(p, timeout)?;
                    // The webhook is on by default, used or not: only files say audit events will come.
                    source.flow_schema_costs |= !config.audit.files.is_empty();
                    Ok(PrometheusSetup {
                        timeout: source.timeout,
                        source,
                        config: p.clone(),
                        interval: config.scrape.interval.0,
                        window_seconds: config.analysis.window.0.as_secs_f64(),
                    })
                })
                .collect::<Result<_, TargetError>>()?,
        ));
    }
    if !config.targets.static_targets.is_empty() {
        return Ok(TargetSource::Static(build_replicas(config)?));
    }
    let k = &config.targets.kubernetes;
    Ok(TargetSource::Discover(Box::new(DiscoverySetup {
        access: access::access(k).await?,
        config: k.clone(),
        settings: LoopSettings::from_config(&config.scrape),
        timeout: config.scrape.timeout.0,
    })))
}

/// The static targets with their clients and loop settings.
pub fn build_replicas(config: &Config) -> Result<Vec<Replica>, SetupError> {
    let settings = LoopSettings::from_config(&config.scrape);
    Ok(
        targets::build_static(&config.targets.static_targets, config.scrape.timeout.0)?
            .into_iter()
            .zip(&config.targets.static_targets)
            .map(|(target, spec)| Replica {
                spec: ReplicaSpec {
                    origin: Origin::Static(spec.clone()),
                    settings: settings.clone(),
                },
                target,
            })
            .collect(),
    )
}

pub fn analysis_of(config: &Config) -> Analysis {
    Analysis {
        window_seconds: config.analysis.window.0.as_secs_f64(),
        top_flows: config.analysis.top_flows,
        lookback_seconds: config.analysis.lookback.0.as_secs_f64(),
        predictions: config.analysis.predictions,
    }
}

/// `alerting.external_url`, else the listen address; 0.0.0.0 is where we listen, not an address a reader of a
/// notification can open.
fn external_url(config: &Config) -> String {
    config.alerting.external_url.clone().unwrap_or_else(|| {
        if config.listen.ip().is_unspecified() {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
            format!("http://{host}:{}", config.listen.port())
        } else {
            // SocketAddr's own form brackets an IPv6 address, as a URL needs.
            format!("http://{}", config.listen)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(yaml: &str) -> Result<Setup, String> {
        let config = Config::from_yaml(yaml)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(Setup::build(config)).map_err(|e| e.to_string())
    }

    #[test]
    fn a_rule_setting_is_refused_with_its_key_and_line() {
        let err = build("targets:\n  static:\n    - url: http://127.0.0.1:8001\nrules:\n  APFHeadroomLow: {threshold: 0.2, clear_threshold: 0.1}\n")
            .err()
            .unwrap_or_default();
        assert!(
            err.starts_with("rules.APFHeadroomLow.clear_threshold: 0.1 must be >= threshold 0.2")
                && err.ends_with("at line 5"),
            "{err}"
        );
    }

    #[test]
    fn targets_and_receivers_are_built() {
        let err = build("targets:\n  static:\n    - url: https://10.0.0.5:6443\n      ca_file: /nonexistent/ca.pem\n")
            .err()
            .unwrap_or_default();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let err = build(
            "targets:\n  static:\n    - url: http://127.0.0.1:8001\nreceivers:\n  - name: s\n    slack: {webhook_url_file: /nonexistent/slack-url}\n",
        )
        .err()
        .unwrap_or_default();
        assert!(
            err.starts_with("receivers[0] (s): ") && err.contains("/nonexistent/slack-url"),
            "{err}"
        );
        let ok =
            build("targets:\n  static:\n    - url: http://127.0.0.1:8001\n      name: local\n")
                .unwrap_or_else(|e| panic!("{e}"));
        let TargetSource::Static(replicas) = &ok.targets else {
            panic!("static targets expected");
        };
        assert_eq!(replicas[0].target.name, "local");
        assert!(replicas[0]
            .spec
            .settings
            .endpoints
            .contains(&Endpoint::DumpRequests));
    }
}
