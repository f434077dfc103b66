//! The `targets:` section of the config file: which replicas are read, and how: given by URL, discovered through
//! the Kubernetes API, or read through a Prometheus that stores their metrics.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::values::{DurationValue, Interval, TargetUrl};

#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
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
    /// Also read what each flow schema's requests cost (`request_execution_seconds`, `work_estimated_seats`, and
    /// dispatches per flow schema), which rate advice needs for users that audit events name (a Prometheus holds no
    /// flows). A round then reads about a third more (100 clusters: 136 -> 187 ms); on with `audit.files`.
    #[serde(default)]
    pub rate_advice: bool,
    /// Read only some of the clusters, for a fleet larger than one process should hold: each shard its own
    /// Deployment (with its own Lease), every cluster read by exactly one shard.
    pub shard: Option<ShardConfig>,
}

/// Which clusters of a source this process reads: by a stable hash of the cluster's name (`index` of `total`), or
/// by a regex on it (`clusters`).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// This shard, from 0 to `total` - 1: the clusters whose name's FNV-1a 64-bit hash, modulo `total`, is `index`
    /// (series without a cluster hash as the empty name).
    pub index: Option<u64>,
    /// How many shards share the source.
    pub total: Option<u64>,
    /// Instead of a hash: the clusters whose name matches this regex (RE2, anchored at both ends, as in PromQL).
    pub clusters: Option<String>,
}

impl ShardConfig {
    /// Either `index` and `total` (`index` < `total`), or `clusters` alone; the error says which key is wrong.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        match (self.index, self.total, &self.clusters) {
            (_, Some(0), None) => Err(("total", "total must be at least 1".into())),
            (Some(index), Some(total), None) if index < total => Ok(()),
            (Some(index), Some(total), None) => Err((
                "index",
                format!(
                    "index {index} must be below total {total} (shards 0 to {})",
                    total.saturating_sub(1)
                ),
            )),
            (None, None, Some(re)) => regex::Regex::new(re)
                .map(|_| ())
                .map_err(|e| ("clusters", format!("clusters {re:?} is not a regex: {e}"))),
            (_, _, Some(_)) => Err((
                "clusters",
                "give either clusters (a regex) or index and total (a hash), not both".into(),
            )),
            (None, _, None) => Err(("index", "index and total go together".into())),
            (Some(_), None, None) => Err(("total", "index and total go together".into())),
        }
    }
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
            rate_advice: false,
            shard: None,
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
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StaticTarget {
    /// `https://10.0.0.5:6443` or `http://127.0.0.1:8001`.
    pub url: TargetUrl,
    /// The `apiserver` label; default: the URL's `host:port`.
    pub name: Option<String>,
    /// A file holding the bearer token; re-read whenever it changes (projected tokens rotate).
    pub bearer_token_file: Option<PathBuf>,
    /// PEM bundle of the CA that signed the apiserver's certificate, re-read about once a minute as it rotates
    /// (default: the system's trust store, as kubectl).
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub client_cert_file: Option<PathBuf>,
    /// The key of `client_cert_file` (PEM); the two go together.
    pub client_key_file: Option<PathBuf>,
    /// The name to verify the certificate against (and send as SNI) when the URL's host is not it, such as an IP
    /// address.
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

impl TargetsConfig {
    /// Checks that span keys of the section, and timeouts against `scrape.interval`; `at` says on which line of the
    /// file a key is.
    pub fn validate(
        &self,
        scrape_interval: Duration,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(), String> {
        for (i, t) in self.static_targets.iter().enumerate() {
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
                if timeout.0 > scrape_interval {
                    return Err(format!(
                        "targets.static[{i}].timeout ({}) must not exceed scrape.interval ({}){}",
                        humantime::format_duration(timeout.0),
                        humantime::format_duration(scrape_interval),
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
        if !self.prometheus.is_empty() && !self.static_targets.is_empty() {
            return Err(format!(
                "targets.static and targets.prometheus are two ways to read the same numbers: give one{}",
                at("targets.prometheus")
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in self.prometheus.iter().enumerate() {
            let key = |k: &str| format!("targets.prometheus[{i}].{k}");
            if let Some(shard) = &p.shard {
                if let Err((k, why)) = shard.check() {
                    return Err(format!(
                        "{}: {why}{}",
                        key(&format!("shard.{k}")),
                        at(&format!("targets.prometheus.shard.{k}"))
                    ));
                }
            }
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
                if timeout.0 > scrape_interval {
                    return Err(format!(
                        "{} ({}) must not exceed scrape.interval ({}){}",
                        key("timeout"),
                        humantime::format_duration(timeout.0),
                        humantime::format_duration(scrape_interval),
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
        let k = &self.kubernetes;
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// A shard is a hash (`index` below `total`) or a regex, and the loader says which key is wrong.
    #[test]
    fn a_shard_is_a_hash_or_a_regex() {
        let load = |shard: &str| {
            crate::config::Config::from_yaml(&format!(
                "targets:\n  prometheus:\n    - url: http://prometheus:9090\n      shard: {shard}\n"
            ))
        };
        assert!(load("{index: 2, total: 3}").is_ok());
        assert!(load("{clusters: \"eu-.*\"}").is_ok());
        for (shard, says) in [
            (
                "{index: 3, total: 3}",
                "shard.index: index 3 must be below total 3",
            ),
            ("{index: 0}", "shard.total: index and total go together"),
            (
                "{index: 0, total: 0}",
                "shard.total: total must be at least 1",
            ),
            ("{total: 2}", "shard.index: index and total go together"),
            (
                "{index: 0, total: 2, clusters: a}",
                "shard.clusters: give either",
            ),
            (
                "{clusters: \"eu-(\"}",
                "shard.clusters: clusters \"eu-(\" is not a regex",
            ),
        ] {
            let e = load(shard).unwrap_err();
            assert!(e.contains(says), "{shard}: {e}");
        }
    }
}
