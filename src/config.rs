//! The configuration file (YAML): its top-level shape, loading, the validation entry and errors that name the key
//! and its line. Every key is documented in `config/apf-monitor.example.yaml`; each section's types live with the
//! stage they configure (`scrape::ScrapeConfig`, `targets::TargetsConfig`, `alert::RouteConfig`,
//! `notify::ReceiverConfig`, ...), and the value types they are written in in `values`.
//!
//! Unknown keys and bad values are errors that name the key's path and line: values are checked while they are
//! deserialized, so the YAML parser (serde-saphyr) attaches the location to the error, and the key's dotted path is
//! read from the text at that location.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::alert::{AlertingConfig, RouteConfig, RuleConfig, RuleName};
use crate::analyze::AnalysisConfig;
use crate::export::WebConfig;
use crate::notify::{validate_receivers, ReceiverConfig};
use crate::scrape::ScrapeConfig;
use crate::targets::TargetsConfig;
use crate::values::Interval;

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

/// The whole file. Command-line flags override it (see `cli/mod.rs`).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where `/metrics`, `/healthz`, `/readyz`, `/api/v1/status` and the status page are served (`--listen`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// How often and how the replicas are read.
    #[serde(default)]
    pub scrape: ScrapeConfig,
    /// The sliding window the rates, trends and flow means cover, and how many flows are exported.
    #[serde(default)]
    pub analysis: AnalysisConfig,
    /// Which replicas: static targets, discovery through the Kubernetes API, or a Prometheus holding them.
    #[serde(default)]
    pub targets: TargetsConfig,
    /// The daemon's own log.
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
    /// Who may use the HTTP API.
    #[serde(default)]
    pub web: WebConfig,
    /// kube-apiserver's audit events: who got the 429s.
    #[serde(default)]
    pub audit: crate::audit::AuditConfig,
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
            web: WebConfig::default(),
            audit: crate::audit::AuditConfig::default(),
            text: None,
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 9864))
}

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` for people, `json` for a log pipeline.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
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
            serde_saphyr::from_str(text).map_err(|e| with_key_path(&e, text))?;
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

    /// Checks that span several keys, after deserialization, section by section: the line is found by the last
    /// key's name. Each section checks its own keys; what spans sections (timeouts against `scrape.interval`, the
    /// route's receivers) is handed to it.
    ///
    /// Every section is checked: the error lists each section's problem, not the first only.
    fn validate(&self, text: &str) -> Result<(), String> {
        let at = |key: &str| at_line_in(text, key);
        let interval = self.scrape.interval.0;
        let mut problems = Vec::new();
        let mut keep = |checked: Result<(), String>| {
            if let Err(e) = checked {
                problems.push(e);
            }
        };
        keep(self.scrape.validate(&at));
        keep(self.analysis.validate(interval, &at));
        keep(self.targets.validate(interval, &at));
        // The route names receivers: checked against them once they are good.
        match validate_receivers(&self.receivers, &at) {
            Ok(receivers) => keep(self.route.validate(&receivers, &at)),
            Err(e) => keep(Err(e)),
        }
        keep(self.web.auth.validate(&at));
        keep(self.audit.validate(&at));
        if self.log.level.trim().is_empty() {
            keep(Err(format!(
                "log.level must not be empty{}",
                at("log.level")
            )));
        }
        match problems.len() {
            0 => Ok(()),
            1 => Err(problems.remove(0)),
            _ => Err(list_problems(&problems)),
        }
    }
}

/// The parser says what is wrong and where (line, column); the message names the setting as the docs do, by its
/// dotted path (`targets.static[0].url: ... at line 3 column 12`), read from the text at that place.
fn with_key_path(err: &serde_saphyr::Error, text: &str) -> String {
    let plain = err.without_snippet();
    let msg = plain.to_string();
    let Some(loc) = plain.location() else {
        return msg;
    };
    let (line, column) = (loc.line() as usize, loc.column() as usize);
    // The parser ends its message with the place; it is said once, below, after the path.
    let detail = match msg.rfind(" at line ") {
        Some(i) => &msg[..i],
        None => msg.as_str(),
    };
    match key_path_at(text, line, column) {
        Some(path) => format!("{path}: {detail} at line {line} column {column}"),
        None => format!("{detail} at line {line} column {column}"),
    }
}

/// The keys of a line before byte `end`, with the flow-mapping depth each sits at: `a: {b: {c: 1` gives a, b, c.
fn keys_in(line: &str, end: usize) -> Vec<(usize, String)> {
    let bytes = line.as_bytes();
    let end = end.min(bytes.len());
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < end {
        let c = bytes[i];
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(c),
            (None, b'#') if i == 0 || bytes[i - 1] == b' ' => break,
            (None, b'{' | b'[') => depth += 1,
            (None, b'}' | b']') => depth = depth.saturating_sub(1),
            (None, _) if c.is_ascii_alphanumeric() || c == b'_' => {
                let start = i;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'-')
                {
                    i += 1;
                }
                let word = &line[start..i];
                let after = line[i..].trim_start();
                let starts_value =
                    start == 0 || matches!(bytes[start - 1], b' ' | b'{' | b',' | b'-');
                // A key is followed by `: ` or a `:` that ends the line (`ftp://x` is a value).
                let is_key = after
                    .strip_prefix(':')
                    .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']));
                if starts_value && is_key {
                    out.retain(|(d, _)| *d < depth);
                    out.push((depth, word.to_string()));
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// A block line's leading spaces, the indentation of its content (after `- ` for a sequence item) and whether it is
/// an item.
fn block_indent(line: &str) -> (usize, usize, bool) {
    let lead = line.len() - line.trim_start().len();
    let rest = &line[lead..];
    match rest.strip_prefix("- ") {
        Some(after) => (
            lead,
            lead + 2 + (after.len() - after.trim_start().len()),
            true,
        ),
        None => (lead, lead, false),
    }
}

/// Where the walk up the block structure is: among the keys of a mapping whose keys sit at `indent`, or in item
/// `count` of a sequence whose dashes sit at `dash`.
enum Level {
    Map { indent: usize },
    Item { dash: usize, count: usize },
}

/// The dotted path of the key that holds line `line` (1-based), column `column`: the keys on that line up to the
/// column (flow mappings nest), then the keys of the enclosing block lines, with the index of each sequence item:
/// `targets.static[0].url`.
fn key_path_at(text: &str, line: usize, column: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let here = *lines.get(line.checked_sub(1)?)?;
    let start = here
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(here.len(), |(i, _)| i);
    // To the end of the word at the column: the key itself when the column is on one.
    let end = here[start..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .map_or(here.len(), |n| start + n);
    let mut segments: Vec<String> = keys_in(here, end).into_iter().map(|(_, k)| k).collect();
    if segments.is_empty() {
        return None;
    }
    let (lead, content, item) = block_indent(here);
    let mut level = if item {
        Level::Item {
            dash: lead,
            count: 0,
        }
    } else {
        Level::Map { indent: content }
    };
    for l in lines[..line - 1].iter().rev() {
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        let (lead, content, item) = block_indent(l);
        match &mut level {
            Level::Item { dash, count } => {
                if lead > *dash {
                    continue;
                }
                if item && lead == *dash {
                    *count += 1;
                    continue;
                }
                segments.insert(0, format!("[{count}]"));
            }
            Level::Map { indent } => {
                if content >= *indent {
                    if item && content == *indent {
                        // A key of the same item's mapping: the item starts on this line.
                        level = Level::Item {
                            dash: lead,
                            count: 0,
                        };
                    }
                    continue;
                }
            }
        }
        // A line less indented: the key that holds what is below it.
        let Some((_, key)) = keys_in(l, l.len()).pop() else {
            break;
        };
        segments.insert(0, key);
        level = if item {
            Level::Item {
                dash: lead,
                count: 0,
            }
        } else {
            Level::Map { indent: lead }
        };
        if lead == 0 && !item {
            break;
        }
    }
    Some(segments.join(".").replace(".[", "["))
}

/// Several problems as one error: how many, then one per line.
pub fn list_problems(problems: &[String]) -> String {
    let mut text = format!("{} problems:", problems.len());
    for p in problems {
        text.push_str("\n  - ");
        text.push_str(&p.replace('\n', "\n    "));
    }
    text
}

/// ` at line N` for a dotted key path; empty when the text does not hold it. A path with an item's index
/// (`receivers[1].webhook.url`) is that item's key; without one, or where the index cannot be followed (flow
/// sequences), the first key on that path, whatever the item (`receivers.name`).
fn at_line_in(text: &str, key_path: &str) -> String {
    let key = key_path
        .split('.')
        .map(|k| k.split('[').next().unwrap_or(k))
        .collect::<Vec<_>>()
        .join(".");
    let exact = key_path
        .contains('[')
        .then(|| line_of_exact(text, key_path))
        .flatten();
    match exact.or_else(|| line_of(text, &key)) {
        Some(line) => format!(" at line {line}"),
        None => String::new(),
    }
}

/// The 1-based line of the key at exactly `path`, item indexes included: the first key named as its last segment
/// whose own path ([`key_path_at`]) is `path`.
fn line_of_exact(text: &str, path: &str) -> Option<usize> {
    let last = path.rsplit('.').next()?;
    if last.contains('[') {
        return None;
    }
    text.lines().enumerate().find_map(|(i, line)| {
        line.match_indices(last)
            .filter(|(at, _)| {
                line[at + last.len()..].trim_start().starts_with(':')
                    && !line[..*at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
            .any(|(at, _)| {
                let column = line[..at].chars().count() + 1;
                key_path_at(text, i + 1, column).as_deref() == Some(path)
            })
            .then_some(i + 1)
    })
}

/// The 1-based line of a key given by its dotted path (`route.receivers`): each segment is looked for after the
/// line of the one before, so `route.receivers` is not mistaken for the top-level `receivers`.
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
    use crate::alert::RuleName;
    use crate::targets::DEFAULT_PROMETHEUS_SELECTOR;

    #[test]
    fn example_config_is_valid_and_complete() {
        let text = include_str!("../config/apf-monitor.example.yaml");
        let c = Config::from_yaml(text).expect("example config parses");
        assert_eq!(c.scrape.interval.0, Duration::from_secs(5));
        assert_eq!(c.scrape.max_body_bytes.0, 256 * 1024 * 1024);
        // As it is, the simulated cluster of the simulator's (docs/guides/simulator.md), discovered through the kubeconfig it writes, and
        // the console.
        assert!(c.targets.static_targets.is_empty());
        assert_eq!(
            c.targets.kubernetes.kubeconfig.as_deref(),
            Some(std::path::Path::new("apf-monitor-sim.kubeconfig"))
        );
        assert_eq!(c.receivers.len(), 1);
        assert!(c.receivers[0].console.is_some());
        assert!(c.route.receivers.is_empty());
        assert_eq!(
            c.rules[&RuleName::APFHeadroomLow].clear_threshold,
            Some(0.25)
        );
        assert_eq!(c.route.group_wait.0, Duration::from_secs(30));
        assert_eq!(c.alerting.leader_election.enabled, None);
        assert_eq!(c.shutdown_timeout.0, Duration::from_secs(20));
    }

    /// `text` with the commented-out block that starts at the line `marker` (trimmed) uncommented: that line and the
    /// commented lines under it (indented deeper after their `# `) lose one `# `; a comment inside the block
    /// (`#   # ...`) stays a comment.
    fn uncomment(text: &str, marker: &str) -> String {
        let mut out = String::new();
        let mut inside = false;
        let mut found = false;
        for l in text.lines() {
            let body = l.trim_start();
            let rest = body.strip_prefix("# ");
            if body == marker {
                inside = true;
                found = true;
            } else if inside && !rest.is_some_and(|r| r.starts_with(' ')) {
                inside = false;
            }
            match rest.filter(|_| inside) {
                Some(rest) => {
                    let indent = &l[..l.len() - body.len()];
                    out.push_str(&format!("{indent}{rest}\n"));
                }
                None => out.push_str(&format!("{l}\n")),
            }
        }
        assert!(found, "no line {marker:?} in the example");
        out
    }

    /// What the example comments out (files a pod mounts, static targets, receivers that need a server), uncommented,
    /// is valid config too, and says what it documents.
    #[test]
    fn the_examples_commented_blocks_are_valid_when_uncommented() {
        let mut text = include_str!("../config/apf-monitor.example.yaml").to_string();
        for marker in [
            "# static:",
            "# - name: oncall-slack",
            "# - name: oncall-mail",
            "# - name: hook",
            "# - name: am",
            "# receivers: [console, oncall-mail, hook, am]   # default: every receiver",
            "# state_file: /var/lib/apf-monitor/alerts.json",
            "# external_url: http://apf-monitor.monitoring.svc:9864",
            "# runbook_base_url: https://git.example.com/platform/apf-monitor/blob/main/docs/runbooks.md",
            "# tls:",
        ] {
            text = uncomment(&text, marker);
        }
        let c = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let t = &c.targets.static_targets;
        assert_eq!(t.len(), 2, "{text}");
        assert_eq!(t[0].name.as_deref(), Some("local"));
        assert!(t[1].bearer_token_file.is_some() && t[1].ca_file.is_some());
        assert!(t[1].client_cert_file.is_some() && t[1].client_key_file.is_some());
        let kinds: Vec<&str> = c.receivers.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            kinds,
            ["console", "oncall-slack", "oncall-mail", "hook", "am"]
        );
        assert!(c.receivers[1].slack.is_some());
        let mail = c.receivers[2].email.as_ref().unwrap();
        assert!(mail.password_file.is_some());
        assert_eq!(c.receivers[2].delivery.queue_capacity, 100);
        assert!(c.receivers[3].webhook.is_some() && c.receivers[4].alertmanager.is_some());
        assert_eq!(c.route.receivers.len(), 4);
        assert!(c.alerting.state_file.is_some());
        assert!(c.alerting.external_url.is_some());
        assert!(c.alerting.runbook_base_url.contains("git.example.com"));
        assert!(c.web.tls.is_some());
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
        // Recurring saturation is counted over several windows.
        let err = Config::from_yaml("analysis:\n  window: 2m\n  lookback: 1m\n").unwrap_err();
        assert!(
            err.contains("analysis.lookback (1m) must be at least analysis.window (2m)")
                && err.contains("line 3"),
            "{err}"
        );
        let c = Config::from_yaml("analysis:\n  lookback: 10m\n").unwrap();
        assert_eq!(c.analysis.lookback.0, Duration::from_secs(600));
    }

    #[test]
    fn a_key_is_named_by_its_path_wherever_it_is() {
        let text = "targets:\n  static:\n    - url: https://a\n    - url: https://b\n      ca_file: /x\n\
                    receivers:\n  - name: m\n    email: {smarthost: 'smtp:25', tls: plain}\nrules:\n  A: {for: 1m}\n";
        let at = |line, column| key_path_at(text, line, column).unwrap();
        assert_eq!(at(3, 7), "targets.static[0].url");
        assert_eq!(at(4, 12), "targets.static[1].url");
        assert_eq!(at(5, 16), "targets.static[1].ca_file");
        assert_eq!(at(8, 36), "receivers[0].email.tls");
        assert_eq!(at(8, 17), "receivers[0].email.smarthost");
        assert_eq!(at(10, 11), "rules.A.for");
        assert_eq!(at(1, 1), "targets");
        // The message: the path, what is wrong, where.
        let err = Config::from_yaml("scrape:\n  interval: 0s\n").unwrap_err();
        assert_eq!(
            err,
            "scrape.interval: duration \"0s\" must be greater than zero at line 2 column 13"
        );
    }

    #[test]
    fn an_item_key_is_found_on_its_own_line() {
        let text = "receivers:\n  - name: a\n    webhook:\n      url: http://a\n  - name: b\n    webhook: {url: b}\n\
                    route:\n  receiver: a\n";
        assert_eq!(at_line_in(text, "receivers[1].webhook.url"), " at line 6");
        assert_eq!(at_line_in(text, "receivers[0].webhook.url"), " at line 4");
        assert_eq!(at_line_in(text, "receivers[1].name"), " at line 5");
        // No index, or none to follow: the first key on the path.
        assert_eq!(at_line_in(text, "receivers.webhook.url"), " at line 4");
        assert_eq!(at_line_in(text, "receivers[2].name"), " at line 2");
        assert_eq!(at_line_in(text, "receivers[0].slack.webhook_url"), "");
    }

    #[test]
    fn every_section_s_problem_is_listed_at_once() {
        let err = Config::from_yaml(
            "receivers:\n  - {name: a, console: {}}\nroute:\n  receivers: [nobody]\nlog:\n  level: ''\n",
        )
        .unwrap_err();
        assert!(err.starts_with("2 problems:\n  - "), "{err}");
        assert!(
            err.contains("nobody") && err.contains("\n  - log.level must not be empty at line 6"),
            "{err}"
        );
        // One problem is said as it is.
        let err = Config::from_yaml("log:\n  level: ''\n").unwrap_err();
        assert_eq!(err, "log.level must not be empty at line 2");
    }

    #[test]
    fn byte_counts_with_units() {
        let c = Config::from_yaml("scrape:\n  max_body_bytes: 64KiB\n").unwrap();
        assert_eq!(c.scrape.max_body_bytes.0, 65536);
    }
}
