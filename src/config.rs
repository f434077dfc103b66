//! The configuration file (YAML). Every key is documented in `config/apf-monitor.example.yaml`.
//!
//! Unknown keys and bad values are errors that name the key's path and line: values are checked while they are
//! deserialized, so serde_yaml attaches the location to the error.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The whole file. Command-line flags override it (see `cli.rs`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    #[serde(default)]
    pub scrape: ScrapeConfig,
    #[serde(default)]
    pub analysis: AnalysisConfig,
    #[serde(default)]
    pub targets: TargetsConfig,
    #[serde(default)]
    pub log: LogConfig,
    /// Built-in alert rules, tuned by name (`APFHeadroomLow: {threshold: 0.15}`).
    #[serde(default)]
    pub rules: BTreeMap<RuleName, RuleConfig>,
    /// Where notifications go.
    #[serde(default)]
    pub receivers: Vec<ReceiverConfig>,
    /// Which receivers get which alerts, grouped how, how often.
    #[serde(default)]
    pub route: RouteConfig,
    /// Alert state, silences, the link back, and high availability.
    #[serde(default)]
    pub alerting: AlertingConfig,
    /// At SIGTERM, queued notifications (retries included) are delivered for at most this long before the exit:
    /// inside Kubernetes' default 30 s grace period.
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout: Interval,
    /// The YAML the config was read from, to say on which line a key is.
    #[serde(skip)]
    text: Option<std::sync::Arc<str>>,
}

fn default_shutdown_timeout() -> Interval {
    Interval(Duration::from_secs(20))
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            scrape: ScrapeConfig::default(),
            analysis: AnalysisConfig::default(),
            targets: TargetsConfig::default(),
            log: LogConfig::default(),
            rules: BTreeMap::new(),
            receivers: Vec::new(),
            route: RouteConfig::default(),
            alerting: AlertingConfig::default(),
            shutdown_timeout: default_shutdown_timeout(),
            text: None,
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 9864))
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScrapeConfig {
    /// One scrape of every endpoint of every target per interval.
    pub interval: Interval,
    /// Default per-request timeout; a target may set its own.
    pub timeout: Interval,
    /// Read the three `/debug/api_priority_and_fairness/` dumps (queues, flows).
    pub debug_dumps: bool,
    /// Ask `dump_requests` for user names, verbs and paths (`?includeRequestDetails=1`).
    pub request_details: bool,
    /// Turn each dump off separately (`debug_dumps: false` turns them all off).
    pub dump_priority_levels: bool,
    pub dump_queues: bool,
    pub dump_requests: bool,
    /// List PriorityLevelConfigurations (queue settings) this often; 0s turns it off.
    pub objects_interval: DurationValue,
    /// A hard cap on one response body: a bigger one is cut off and counted as `too_large`.
    pub max_body_bytes: ByteCount,
    /// The longest line of `/metrics` the parser will hold for a wanted family; longer lines are counted and skipped.
    pub max_line_bytes: ByteCount,
    /// Longest back-off after consecutive errors of one endpoint.
    pub max_backoff: Interval,
}

impl Default for ScrapeConfig {
    fn default() -> Self {
        Self {
            interval: Interval(Duration::from_secs(5)),
            timeout: Interval(Duration::from_secs(4)),
            debug_dumps: true,
            request_details: true,
            dump_priority_levels: true,
            dump_queues: true,
            dump_requests: true,
            objects_interval: DurationValue(Duration::from_secs(60)),
            max_body_bytes: ByteCount(256 * 1024 * 1024),
            max_line_bytes: ByteCount(1024 * 1024),
            max_backoff: Interval(Duration::from_secs(300)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnalysisConfig {
    /// Rates, percentiles, trends and flow means cover this sliding window.
    pub window: Interval,
    /// Flows exported per priority level and replica (`apf_flow_*`).
    pub top_flows: usize,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            window: Interval(Duration::from_secs(60)),
            top_flows: 10,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetsConfig {
    /// Replicas given by URL. When this list is empty, every replica is discovered through `kubernetes`.
    #[serde(default, rename = "static")]
    pub static_targets: Vec<StaticTarget>,
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
    /// Prometheus-compatible APIs (Prometheus, Thanos, Mimir, a provider's managed Prometheus) holding the
    /// replicas' `/metrics`: read instead of the replicas. Exclusive with `static`.
    #[serde(default)]
    pub prometheus: Vec<PrometheusTarget>,
}

/// A Prometheus HTTP API that stores the apiservers' metrics, read with instant queries each round.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusTarget {
    /// The API's base URL: `http://prometheus:9090`, a Thanos querier, `https://mimir/prometheus`.
    pub url: TargetUrl,
    /// The name of this source in apf-monitor's own metrics and errors; default: the URL's `host:port`.
    pub name: Option<String>,
    /// The apiservers' series.
    #[serde(default = "default_prometheus_selector")]
    pub selector: String,
    /// The label naming a series' cluster; a series without it belongs to no cluster.
    #[serde(default = "default_cluster_label")]
    pub cluster_label: String,
    /// The label naming a series' replica.
    #[serde(default = "default_apiserver_label")]
    pub apiserver_label: String,
    /// A file holding a bearer token; re-read whenever it changes.
    pub bearer_token_file: Option<PathBuf>,
    /// PEM bundle of the CA that signed the API's certificate (default: the public web roots).
    pub ca_file: Option<PathBuf>,
    /// Extra request headers, e.g. `X-Scope-OrgID` for Mimir or Cortex tenants. Not for secrets: use
    /// `bearer_token_file`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Overrides `scrape.timeout` for this source's queries.
    pub timeout: Option<Interval>,
    /// A replica whose newest sample is older than this is left out: a store answers a series for its whole
    /// lookback (5 minutes by default) after the last sample where no staleness marker ended it. Above the store's
    /// scrape interval plus its ingestion delay; 0 turns the check off.
    #[serde(default = "default_max_sample_age")]
    pub max_sample_age: DurationValue,
}

fn default_max_sample_age() -> DurationValue {
    DurationValue(Duration::from_secs(180))
}

pub const DEFAULT_PROMETHEUS_SELECTOR: &str = r#"{job=~"apiserver|kube-apiserver"}"#;

fn default_prometheus_selector() -> String {
    DEFAULT_PROMETHEUS_SELECTOR.into()
}
fn default_cluster_label() -> String {
    "cluster".into()
}
fn default_apiserver_label() -> String {
    "instance".into()
}

impl PrometheusTarget {
    /// `name`, else the URL's `host:port` (and path, for an API below the root).
    pub fn display_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let url = &self.url.0;
            let host = url.host_str().unwrap_or("unknown");
            let port = url
                .port_or_known_default()
                .map(|p| format!(":{p}"))
                .unwrap_or_default();
            format!("{host}{port}{}", url.path().trim_end_matches('/'))
        })
    }

    pub fn from_url(url: TargetUrl) -> Self {
        Self {
            url,
            name: None,
            selector: default_prometheus_selector(),
            cluster_label: default_cluster_label(),
            apiserver_label: default_apiserver_label(),
            bearer_token_file: None,
            ca_file: None,
            headers: BTreeMap::new(),
            timeout: None,
            max_sample_age: default_max_sample_age(),
        }
    }
}

/// Apiserver access (the `kube` crate): for discovering every replica when there is no static target, and for
/// the leader-election Lease.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// A kubeconfig file; unset: `$KUBECONFIG`, then `~/.kube/config`, then the pod's service account.
    pub kubeconfig: Option<PathBuf>,
    /// A context of the kubeconfig; unset: its current context.
    pub context: Option<String>,
    /// The Service whose endpoints are the apiserver replicas, as `namespace/name`.
    pub service: String,
    /// The name each replica's certificate is verified against: replicas are dialled by IP, and their
    /// certificates name the Service.
    pub tls_server_name: String,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            service: "default/kubernetes".into(),
            tls_server_name: "kubernetes.default.svc".into(),
        }
    }
}

impl KubernetesConfig {
    /// (namespace, name) of `service`.
    pub fn service_ref(&self) -> (&str, &str) {
        self.service
            .split_once('/')
            .unwrap_or(("default", self.service.as_str()))
    }
}

/// One kube-apiserver replica (or `kubectl proxy`) scraped directly.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticTarget {
    /// `https://10.0.0.5:6443` or `http://127.0.0.1:8001`.
    pub url: TargetUrl,
    /// The `apiserver` label; default: the URL's `host:port`.
    pub name: Option<String>,
    /// A file holding the bearer token; re-read whenever it changes (projected tokens rotate).
    pub bearer_token_file: Option<PathBuf>,
    /// PEM bundle of the CA that signed the apiserver's certificate (default: the public web roots).
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
    /// The name to verify the certificate against when the URL holds an IP address.
    pub tls_server_name: Option<String>,
    /// Turns certificate verification off. Never in production: warned about at start-up.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// Overrides `scrape.timeout` for this target.
    pub timeout: Option<Interval>,
}

impl StaticTarget {
    pub fn from_url(url: TargetUrl) -> Self {
        Self {
            url,
            name: None,
            bearer_token_file: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            tls_server_name: None,
            insecure_skip_verify: false,
            timeout: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A tracing filter: `info`, `debug`, `apf_monitor=debug,info`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// The built-in alerts (README, Alerts); a key of `rules:` must be one of them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize,
)]
pub enum RuleName {
    APFHeadroomLow,
    APFHeadroomExhausted,
    APFQueueNearFull,
    APFExhaustionPredicted,
    APFRequestsRejected,
    APFScrapeFailing,
}

impl RuleName {
    pub const ALL: [RuleName; 6] = [
        RuleName::APFHeadroomLow,
        RuleName::APFHeadroomExhausted,
        RuleName::APFQueueNearFull,
        RuleName::APFExhaustionPredicted,
        RuleName::APFRequestsRejected,
        RuleName::APFScrapeFailing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RuleName::APFHeadroomLow => "APFHeadroomLow",
            RuleName::APFHeadroomExhausted => "APFHeadroomExhausted",
            RuleName::APFQueueNearFull => "APFQueueNearFull",
            RuleName::APFExhaustionPredicted => "APFExhaustionPredicted",
            RuleName::APFRequestsRejected => "APFRequestsRejected",
            RuleName::APFScrapeFailing => "APFScrapeFailing",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// Tuning of one built-in rule; every field is optional and defaults to the rule's own (`alert::RuleSpec`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Turn the rule off.
    #[serde(default)]
    pub disabled: bool,
    /// The fire threshold, in the rule's unit (`alert::RuleSpec` says which side fires): a headroom ratio
    /// (HeadroomLow), requests waiting (HeadroomExhausted), a share of queueLengthLimit (QueueNearFull), seconds
    /// (ExhaustionPredicted), rejections/s (RequestsRejected); APFScrapeFailing has none.
    pub threshold: Option<f64>,
    /// The condition ends only past this value (hysteresis): a value hovering at the threshold does not flap.
    pub clear_threshold: Option<f64>,
    /// How long the condition must hold before the alert fires.
    #[serde(rename = "for")]
    pub for_: Option<DurationValue>,
    /// How long the alert keeps firing after the condition clears.
    pub keep_firing_for: Option<DurationValue>,
    pub severity: Option<Severity>,
    /// Extra labels added to the alert (e.g. `team: platform`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Overrides the runbook link of the annotations.
    pub runbook_url: Option<String>,
}

/// One receiver: a name and exactly one kind.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverConfig {
    pub name: String,
    pub slack: Option<SlackConfig>,
    pub email: Option<EmailConfig>,
    pub webhook: Option<WebhookConfig>,
    pub alertmanager: Option<AlertmanagerConfig>,
    pub console: Option<ConsoleConfig>,
    /// Delivery tuning shared by every kind.
    #[serde(default)]
    pub delivery: DeliveryConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    /// One attempt's timeout.
    pub timeout: Interval,
    /// Retries (429, 5xx, connection errors) stop after this long; the notification then counts as `failed`.
    pub max_retry_duration: DurationValue,
    /// Notifications waiting for this receiver; when full, new ones are `dropped` (counted), never blocking others.
    pub queue_capacity: usize,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            timeout: Interval(Duration::from_secs(10)),
            max_retry_duration: DurationValue(Duration::from_secs(300)),
            queue_capacity: 100,
        }
    }
}

/// A Slack incoming webhook.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// The webhook URL inline (quick start); prefer `webhook_url_file`.
    pub webhook_url: Option<String>,
    /// A file holding the webhook URL (a mounted Secret); read at each send.
    pub webhook_url_file: Option<PathBuf>,
    /// Overrides the webhook's channel (legacy webhooks only).
    pub channel: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmailTls {
    /// Port 587: STARTTLS required, plaintext refused.
    Starttls,
    /// Port 465: implicit TLS.
    Tls,
    /// Plain SMTP: a local relay only; must be chosen explicitly.
    None,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    /// `host:port` of the SMTP server.
    pub smarthost: String,
    pub tls: EmailTls,
    pub from: String,
    pub to: Vec<String>,
    pub username: Option<String>,
    /// Inline password (quick start); prefer `password_file`.
    pub password: Option<String>,
    pub password_file: Option<PathBuf>,
    /// A PEM CA bundle for the SMTP server's certificate (default: the public web roots).
    pub ca_file: Option<PathBuf>,
}

/// Alertmanager's webhook payload (version 4) POSTed to a URL.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: Option<String>,
    pub url_file: Option<PathBuf>,
    /// Sent as `Authorization: Bearer ...` when set.
    pub bearer_token_file: Option<PathBuf>,
    /// At most this many alerts per message; the rest are counted in `truncatedAlerts`. 0: no limit.
    #[serde(default)]
    pub max_alerts: usize,
}

/// Alertmanager API v2: every replica listed gets every alert (they de-duplicate among themselves).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerConfig {
    pub urls: Vec<TargetUrl>,
    /// Firing alerts are re-sent this often (Alertmanager resolves an alert it has not heard of for resolve_timeout).
    #[serde(default = "default_am_resend")]
    pub resend_interval: Interval,
}

fn default_am_resend() -> Interval {
    Interval(Duration::from_secs(60))
}

/// A log line per notification (standard error, in the configured log format).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    /// Receivers (by name) that get the notifications; default: every receiver configured.
    pub receivers: Vec<String>,
    pub group_by: Vec<String>,
    pub group_wait: DurationValue,
    pub group_interval: Interval,
    pub repeat_interval: Interval,
    pub send_resolved: bool,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            receivers: Vec::new(),
            // `cluster` is absent unless a Prometheus source labels one: then each cluster is notified apart.
            group_by: vec![
                "alertname".into(),
                "cluster".into(),
                "priority_level".into(),
            ],
            group_wait: DurationValue(Duration::from_secs(30)),
            group_interval: Interval(Duration::from_secs(300)),
            repeat_interval: Interval(Duration::from_secs(4 * 3600)),
            send_resolved: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertingConfig {
    /// Where alert state and silences are kept across restarts (written atomically). Unset: in memory only.
    pub state_file: Option<PathBuf>,
    /// The link in notifications (`externalURL`, `generatorURL`): how people reach this apf-monitor.
    pub external_url: Option<String>,
    /// Where your team reads `docs/runbooks.md` (this repository's runbooks); `runbook_url` annotations link to its
    /// sections (`...#apfheadroomlow`). Empty: no `runbook_url` annotation.
    pub runbook_base_url: String,
    pub leader_election: LeaderElectionConfig,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        Self {
            state_file: None,
            external_url: None,
            runbook_base_url:
                "https://github.com/apf-monitor/apf-monitor/blob/main/docs/runbooks.md".into(),
            leader_election: LeaderElectionConfig::default(),
        }
    }
}

/// With two replicas of apf-monitor, one (holding a Kubernetes Lease) sends Slack, email and webhook
/// notifications; Alertmanager receivers are sent from every replica.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderElectionConfig {
    /// Unset: on when running in a cluster (a service-account token is mounted); `true`/`false` force it.
    pub enabled: Option<bool>,
    pub lease_name: String,
    /// Default: the pod's namespace.
    pub namespace: Option<String>,
    pub lease_duration: Interval,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: None,
            lease_name: "apf-monitor-notifier".into(),
            namespace: None,
            lease_duration: Interval(Duration::from_secs(15)),
        }
    }
}

/// A duration such as `5s`, `1m`, `1m30s`; may be zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationValue(pub Duration);

/// A duration that must be positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval(pub Duration);

/// A byte count: `268435456`, or with a unit: `256MiB`, `64KiB`, `1GiB`, `10MB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteCount(pub u64);

/// An `http` or `https` URL with a host, no query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl(pub reqwest::Url);

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}); write it like 5s, 1m or 1m30s"))
}

pub fn parse_interval(text: &str) -> Result<Interval, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("duration {text:?} must be greater than zero"));
    }
    Ok(Interval(d))
}

pub fn parse_target_url(text: &str) -> Result<TargetUrl, String> {
    let url = reqwest::Url::parse(text.trim()).map_err(|e| format!("invalid URL {text:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("URL {text:?} must start with http:// or https://"));
    }
    if url.host_str().is_none() {
        return Err(format!("URL {text:?} has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("URL {text:?} must not have a query or fragment"));
    }
    Ok(TargetUrl(url))
}

pub fn parse_byte_count(text: &str) -> Result<ByteCount, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid byte count {text:?}; write it like 268435456 or 256MiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in byte count {text:?}; use B, KiB, MiB, GiB, KB, MB or GB"
            ))
        }
    };
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("byte count {text:?} is too large"))?;
    if bytes == 0 {
        return Err(format!("byte count {text:?} must be greater than zero"));
    }
    Ok(ByteCount(bytes))
}

/// Numbers or strings, so that `max_body_bytes: 268435456` and `max_body_bytes: 256MiB` both work.
#[derive(Deserialize)]
#[serde(untagged)]
enum StrOrNum {
    Num(u64),
    Str(String),
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(DurationValue)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_interval(&s).map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for ByteCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match StrOrNum::deserialize(d)? {
            StrOrNum::Num(0) => Err(serde::de::Error::custom(
                "byte count must be greater than zero",
            )),
            StrOrNum::Num(n) => Ok(ByteCount(n)),
            StrOrNum::Str(s) => parse_byte_count(&s).map_err(serde::de::Error::custom),
        }
    }
}

impl<'de> Deserialize<'de> for TargetUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_target_url(&s).map_err(serde::de::Error::custom)
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses and validates; the error names the key's path and, where the YAML parser knows it, the line.
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        // An empty file is a valid, all-defaults config.
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut config: Config =
            serde_yaml::from_str(text).map_err(|e| complete_key_path(&e, text))?;
        config.validate(text)?;
        config.text = Some(text.into());
        Ok(config)
    }

    /// ` at line N` for a key given by its dotted path (`rules.APFHeadroomLow.threshold`), when the config came
    /// from YAML that holds it; empty otherwise.
    pub fn at_line(&self, key_path: &str) -> String {
        at_line_in(self.text.as_deref().unwrap_or(""), key_path)
    }

    /// The checks that span several keys again, on a config changed after it was read (command-line flags).
    pub fn check(&self) -> Result<(), String> {
        self.validate(self.text.as_deref().unwrap_or(""))
    }

    /// Checks that span several keys, after deserialization: the line is found by the last key's name.
    fn validate(&self, text: &str) -> Result<(), String> {
        let at = |key: &str| at_line_in(text, key);
        if self.scrape.timeout.0 > self.scrape.interval.0 {
            return Err(format!(
                "scrape.timeout ({}) must not exceed scrape.interval ({}){}",
                humantime::format_duration(self.scrape.timeout.0),
                humantime::format_duration(self.scrape.interval.0),
                at("scrape.timeout")
            ));
        }
        if self.analysis.window.0 < self.scrape.interval.0 * 2 {
            return Err(format!(
                "analysis.window ({}) must cover at least two scrape intervals ({}){}",
                humantime::format_duration(self.analysis.window.0),
                humantime::format_duration(self.scrape.interval.0),
                at("analysis.window")
            ));
        }
        for (i, t) in self.targets.static_targets.iter().enumerate() {
            if t.client_cert_file.is_some() != t.client_key_file.is_some() {
                return Err(format!(
                    "targets.static[{i}]: client_cert_file and client_key_file go together{}",
                    at(if t.client_cert_file.is_some() {
                        "client_cert_file"
                    } else {
                        "client_key_file"
                    })
                ));
            }
            if t.url.0.scheme() == "http"
                && (t.ca_file.is_some() || t.insecure_skip_verify || t.client_cert_file.is_some())
            {
                return Err(format!(
                    "targets.static[{i}]: TLS settings given for an http:// URL{}",
                    at("targets.url")
                ));
            }
            if let Some(timeout) = t.timeout {
                if timeout.0 > self.scrape.interval.0 {
                    return Err(format!(
                        "targets.static[{i}].timeout ({}) must not exceed scrape.interval ({}){}",
                        humantime::format_duration(timeout.0),
                        humantime::format_duration(self.scrape.interval.0),
                        at("targets.timeout")
                    ));
                }
            }
            if let Some(name) = &t.name {
                if name.trim().is_empty() {
                    return Err(format!(
                        "targets.static[{i}].name must not be empty{}",
                        at("targets.name")
                    ));
                }
            }
        }
        if !self.targets.prometheus.is_empty() && !self.targets.static_targets.is_empty() {
            return Err(format!(
                "targets.static and targets.prometheus are two ways to read the same numbers: give one{}",
                at("targets.prometheus")
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in self.targets.prometheus.iter().enumerate() {
            let key = |k: &str| format!("targets.prometheus[{i}].{k}");
            if !p.selector.trim().starts_with('{') || !p.selector.trim().ends_with('}') {
                return Err(format!(
                    "{} {:?}: write label matchers in braces, e.g. {}{}",
                    key("selector"),
                    p.selector,
                    DEFAULT_PROMETHEUS_SELECTOR,
                    at("targets.prometheus.selector")
                ));
            }
            for (k, label) in [
                ("cluster_label", &p.cluster_label),
                ("apiserver_label", &p.apiserver_label),
            ] {
                let valid = label.chars().enumerate().all(|(j, c)| {
                    c == '_' || c.is_ascii_alphabetic() || (j > 0 && c.is_ascii_digit())
                });
                if label.is_empty() || !valid {
                    return Err(format!(
                        "{} {label:?} is not a Prometheus label name{}",
                        key(k),
                        at(&format!("targets.prometheus.{k}"))
                    ));
                }
            }
            if let Some(h) = p
                .headers
                .keys()
                .find(|h| h.eq_ignore_ascii_case("authorization"))
            {
                return Err(format!(
                    "{}: {h} would put a secret in the config; give bearer_token_file instead{}",
                    key("headers"),
                    at("targets.prometheus.headers")
                ));
            }
            if let Some((h, _)) = p.headers.iter().find(|(h, v)| {
                reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err()
                    || reqwest::header::HeaderValue::from_str(v).is_err()
            }) {
                return Err(format!(
                    "{}: {h:?} is not a valid HTTP header (name or value){}",
                    key("headers"),
                    at("targets.prometheus.headers")
                ));
            }
            if p.url.0.scheme() == "http" && p.ca_file.is_some() {
                return Err(format!(
                    "{}: ca_file given for an http:// URL{}",
                    key("url"),
                    at("targets.prometheus.url")
                ));
            }
            if let Some(timeout) = p.timeout {
                if timeout.0 > self.scrape.interval.0 {
                    return Err(format!(
                        "{} ({}) must not exceed scrape.interval ({}){}",
                        key("timeout"),
                        humantime::format_duration(timeout.0),
                        humantime::format_duration(self.scrape.interval.0),
                        at("targets.prometheus.timeout")
                    ));
                }
            }
            let name = p.display_name();
            if name.trim().is_empty() {
                return Err(format!(
                    "{} must not be empty{}",
                    key("name"),
                    at("targets.prometheus.name")
                ));
            }
            if !names.insert(name.clone()) {
                return Err(format!(
                    "two Prometheus sources are both named {name:?}: give each a distinct `name`{}",
                    at("targets.prometheus.name")
                ));
            }
        }
        let k = &self.targets.kubernetes;
        let service_ok = k
            .service
            .split_once('/')
            .is_some_and(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'));
        if !service_ok {
            return Err(format!(
                "targets.kubernetes.service {:?}: write it as namespace/name, e.g. default/kubernetes{}",
                k.service,
                at("targets.kubernetes.service")
            ));
        }
        if k.tls_server_name.trim().is_empty() {
            return Err(format!(
                "targets.kubernetes.tls_server_name must not be empty{}",
                at("targets.kubernetes.tls_server_name")
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, r) in self.receivers.iter().enumerate() {
            let kinds = [
                r.slack.is_some(),
                r.email.is_some(),
                r.webhook.is_some(),
                r.alertmanager.is_some(),
                r.console.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return Err(format!(
                    "receivers[{i}] ({}): give exactly one of slack, email, webhook, alertmanager, console{}",
                    r.name,
                    at("receivers.name")
                ));
            }
            if r.name.trim().is_empty() || !names.insert(r.name.as_str()) {
                return Err(format!(
                    "receivers[{i}].name {:?} is empty or used twice{}",
                    r.name,
                    at("receivers.name")
                ));
            }
            if let Some(s) = &r.slack {
                if s.webhook_url.is_some() == s.webhook_url_file.is_some() {
                    return Err(format!(
                        "receivers[{i}].slack: give webhook_url or webhook_url_file (one){}",
                        at("receivers.slack")
                    ));
                }
            }
            if let Some(w) = &r.webhook {
                if w.url.is_some() == w.url_file.is_some() {
                    return Err(format!(
                        "receivers[{i}].webhook: give url or url_file (one){}",
                        at("receivers.webhook")
                    ));
                }
            }
            if let Some(e) = &r.email {
                if e.to.is_empty() {
                    return Err(format!(
                        "receivers[{i}].email.to: at least one address{}",
                        at("receivers.to")
                    ));
                }
                if e.password.is_some() && e.password_file.is_some() {
                    return Err(format!(
                        "receivers[{i}].email: password or password_file, not both{}",
                        at("receivers.password")
                    ));
                }
                if (e.password.is_some() || e.password_file.is_some()) && e.username.is_none() {
                    return Err(format!(
                        "receivers[{i}].email: a password needs a username{}",
                        at("receivers.username")
                    ));
                }
                if !e.smarthost.contains(':') {
                    return Err(format!(
                        "receivers[{i}].email.smarthost {:?}: write it as host:port{}",
                        e.smarthost,
                        at("receivers.smarthost")
                    ));
                }
            }
            if let Some(a) = &r.alertmanager {
                if a.urls.is_empty() {
                    return Err(format!(
                        "receivers[{i}].alertmanager.urls: at least one URL{}",
                        at("receivers.urls")
                    ));
                }
            }
        }
        for name in &self.route.receivers {
            if !names.contains(name.as_str()) {
                return Err(format!(
                    "route.receivers: no receiver is named {name:?}{}",
                    at("route.receivers")
                ));
            }
        }
        if self.log.level.trim().is_empty() {
            return Err(format!("log.level must not be empty{}", at("log.level")));
        }
        Ok(())
    }
}

/// serde_yaml names the mapping that holds a bad value (`scrape: ...`) and points at the key: add the key itself
/// (`scrape.interval: ...`) so the message names the exact setting.
fn complete_key_path(err: &serde_yaml::Error, text: &str) -> String {
    let msg = err.to_string();
    let Some(loc) = err.location() else {
        return msg;
    };
    let Some(line) = text.lines().nth(loc.line().saturating_sub(1)) else {
        return msg;
    };
    let rest = line.get(loc.column().saturating_sub(1)..).unwrap_or("");
    let key: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let is_key = !key.is_empty() && rest[key.len()..].trim_start().starts_with(':');
    match msg.split_once(": ") {
        Some((path, detail))
            if is_key && !path.contains(' ') && path.rsplit('.').next() != Some(key.as_str()) =>
        {
            format!("{path}.{key}: {detail}")
        }
        None if is_key => format!("{key}: {msg}"),
        _ => msg,
    }
}

/// The 1-based line of a key given by its dotted path (`route.receivers`): each segment is looked for after the
/// line of the one before, so `route.receivers` is not mistaken for the top-level `receivers`.
/// ` at line N` for a dotted key path (`receivers[0].name` is looked up as `receivers.name`); empty when the text
/// does not hold it.
fn at_line_in(text: &str, key_path: &str) -> String {
    let key = key_path
        .split('.')
        .map(|k| k.split('[').next().unwrap_or(k))
        .collect::<Vec<_>>()
        .join(".");
    match line_of(text, &key) {
        Some(line) => format!(" at line {line}"),
        None => String::new(),
    }
}

fn line_of(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0;
    let mut found = None;
    for key in path.split('.') {
        let i = (from..lines.len()).find(|&i| {
            let line = lines[i];
            let l = line
                .trim_start()
                .trim_start_matches("- ")
                .trim_start_matches('{')
                .trim_start();
            (l.starts_with(key) && l[key.len()..].trim_start().starts_with(':'))
                || line.contains(&format!(" {key}:"))
                || line.contains(&format!("{{{key}:"))
        })?;
        found = Some(i + 1);
        from = i;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_is_valid_and_complete() {
        let text = include_str!("../config/apf-monitor.example.yaml");
        let c = Config::from_yaml(text).expect("example config parses");
        assert_eq!(c.scrape.interval.0, Duration::from_secs(5));
        assert_eq!(c.scrape.max_body_bytes.0, 256 * 1024 * 1024);
        assert_eq!(c.targets.static_targets.len(), 2);
        assert_eq!(c.receivers.len(), 5);
        assert_eq!(
            c.rules[&RuleName::APFHeadroomLow].clear_threshold,
            Some(0.25)
        );
        assert_eq!(c.route.group_wait.0, Duration::from_secs(30));
        assert_eq!(c.alerting.leader_election.enabled, None);
        assert_eq!(c.shutdown_timeout.0, Duration::from_secs(20));
    }

    #[test]
    fn prometheus_sources_as_documented_and_checked() {
        // The example's commented `targets.prometheus` block, uncommented, is a valid config.
        let text = include_str!("../config/apf-monitor.example.yaml");
        let block: Vec<String> = text
            .lines()
            .skip_while(|l| l.trim() != "# prometheus:")
            .take_while(|l| l.trim_start().starts_with('#'))
            .map(|l| l.replacen("# ", "", 1))
            .collect();
        assert!(block.len() > 5, "{block:?}");
        let yaml = format!("targets:\n{}\n", block.join("\n"));
        let c = Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let p = &c.targets.prometheus[0];
        assert_eq!(p.display_name(), "fleet");
        assert_eq!(p.selector, DEFAULT_PROMETHEUS_SELECTOR);
        assert_eq!(p.headers["X-Scope-OrgID"], "platform");
        assert_eq!(p.max_sample_age.0, Duration::from_secs(180));
        let url_only =
            Config::from_yaml("targets:\n  prometheus:\n    - url: https://thanos.example.com/\n")
                .unwrap();
        assert_eq!(
            url_only.targets.prometheus[0].display_name(),
            "thanos.example.com:443"
        );
        assert_eq!(url_only.targets.prometheus[0].apiserver_label, "instance");

        for (yaml, says) in [
            (
                "targets:\n  static: [{url: http://a:1}]\n  prometheus: [{url: http://p:9090}]\n",
                "give one",
            ),
            (
                "targets:\n  prometheus: [{url: http://p:9090, selector: 'job=\"x\"'}]\n",
                "in braces",
            ),
            (
                "targets:\n  prometheus: [{url: http://p:9090, cluster_label: 'my-cluster'}]\n",
                "not a Prometheus label name",
            ),
            (
                "targets:\n  prometheus: [{url: http://p:9090, headers: {Authorization: 'Bearer x'}}]\n",
                "bearer_token_file",
            ),
            (
                "targets:\n  prometheus: [{url: http://p:9090}, {url: http://p:9090/}]\n",
                "both named",
            ),
            (
                "targets:\n  prometheus: [{url: http://p:9090, timeout: 10s}]\n",
                "must not exceed scrape.interval",
            ),
        ] {
            let err = Config::from_yaml(yaml).unwrap_err();
            assert!(err.contains(says), "{yaml}: {err}");
        }
    }

    #[test]
    fn receivers_and_route_are_checked() {
        let err = Config::from_yaml(
            "receivers:\n  - name: a\n    console: {}\n    webhook: {url: http://x}\n",
        )
        .unwrap_err();
        assert!(err.contains("exactly one of"), "{err}");
        let err = Config::from_yaml(
            "receivers:\n  - name: a\n    console: {}\n  - name: a\n    console: {}\n",
        )
        .unwrap_err();
        assert!(err.contains("used twice"), "{err}");
        let err = Config::from_yaml(
            "receivers:\n  - name: a\n    console: {}\nroute:\n  receivers: [b]\n",
        )
        .unwrap_err();
        assert!(
            err.contains("route.receivers") && err.contains("\"b\"") && err.contains("line 5"),
            "{err}"
        );
        let err = Config::from_yaml("receivers:\n  - name: m\n    email: {smarthost: smtp, tls: starttls, from: a@b, to: [c@d]}\n").unwrap_err();
        assert!(err.contains("host:port"), "{err}");
        let err = Config::from_yaml("receivers:\n  - name: m\n    email: {smarthost: 'smtp:25', tls: plain, from: a@b, to: [c@d]}\n").unwrap_err();
        assert!(err.contains("tls") && err.contains("line 3"), "{err}");
        let err = Config::from_yaml("rules:\n  APFHeadroomLoww: {for: 1m}\n").unwrap_err();
        assert!(
            err.contains("APFHeadroomLoww") && err.contains("line 2"),
            "{err}"
        );
        let err = Config::from_yaml("receivers:\n  - name: s\n    slack: {}\n").unwrap_err();
        assert!(err.contains("webhook_url"), "{err}");
    }

    #[test]
    fn empty_file_means_defaults() {
        let c = Config::from_yaml("").unwrap();
        assert_eq!(c.listen, default_listen());
        assert_eq!(c.analysis.window.0, Duration::from_secs(60));
    }

    #[test]
    fn unknown_key_names_path_and_line() {
        let err = Config::from_yaml("scrape:\n  interval: 5s\n  intervall: 10s\n").unwrap_err();
        assert!(err.contains("intervall"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("scrape"), "{err}");
    }

    #[test]
    fn bad_values_name_path_and_line() {
        let err = Config::from_yaml("scrape:\n  interval: 0s\n").unwrap_err();
        assert!(
            err.contains("scrape.interval") && err.contains("line 2"),
            "{err}"
        );
        let err = Config::from_yaml("targets:\n  static:\n    - url: ftp://x\n").unwrap_err();
        assert!(
            err.contains("targets.static[0].url") && err.contains("line 3"),
            "{err}"
        );
        let err = Config::from_yaml("scrape:\n  max_body_bytes: 12 parsecs\n").unwrap_err();
        assert!(
            err.contains("max_body_bytes") && err.contains("line 2"),
            "{err}"
        );
        let err = Config::from_yaml("listen: nowhere\n").unwrap_err();
        assert!(err.contains("listen") && err.contains("line 1"), "{err}");
        let err = Config::from_yaml("log:\n  format: xml\n").unwrap_err();
        assert!(err.contains("log.format"), "{err}");
    }

    #[test]
    fn cross_key_checks_name_the_key() {
        let err = Config::from_yaml("scrape:\n  interval: 5s\n  timeout: 10s\n").unwrap_err();
        assert!(
            err.contains("scrape.timeout") && err.contains("line 3"),
            "{err}"
        );
        let err = Config::from_yaml(
            "targets:\n  static:\n    - url: https://10.0.0.5:6443\n      client_cert_file: /c\n",
        )
        .unwrap_err();
        assert!(
            err.contains("client_key_file") && err.contains("line 4"),
            "{err}"
        );
        let err = Config::from_yaml("analysis:\n  window: 5s\n").unwrap_err();
        assert!(err.contains("analysis.window"), "{err}");
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_byte_count("256MiB").unwrap().0, 256 << 20);
        assert_eq!(parse_byte_count("1000").unwrap().0, 1000);
        assert!(parse_byte_count("0").is_err());
        assert!(parse_byte_count("-1").is_err());
        assert!(parse_byte_count("99999999999999999999GiB").is_err());
        let c = Config::from_yaml("scrape:\n  max_body_bytes: 64KiB\n").unwrap();
        assert_eq!(c.scrape.max_body_bytes.0, 65536);
    }
}
