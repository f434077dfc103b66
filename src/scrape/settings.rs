//! The `scrape:` section of the config file: how often and how each replica's endpoints are read.
use std::time::Duration;

use serde::Deserialize;

use crate::values::{ByteCount, DurationValue, Interval};

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
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
    /// The flowcontrol objects are listed, then watched; where the watch is refused (RBAC without `watch`) or fails,
    /// they are listed again this often instead. 0s turns reading them off.
    pub objects_interval: DurationValue,
    /// A hard cap on one response body: a bigger one is cut off and counted as `too_large`.
    pub max_body_bytes: ByteCount,
    /// The longest line of `/metrics` (in the protobuf format, the longest metric) the parser will hold for a wanted
    /// family; longer ones are counted and skipped.
    pub max_line_bytes: ByteCount,
    /// Ask `/metrics` for Prometheus' protobuf format first, as Prometheus does for native histograms: the families
    /// not read are skipped by their length, and a histogram's labels come once, not on every bucket's line (the
    /// 1.34 capture: 17 % of the text). A server that answers in text is read as before.
    pub protobuf: bool,
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
            protobuf: true,
            max_backoff: Interval(Duration::from_secs(300)),
        }
    }
}

impl ScrapeConfig {
    /// Checks that span keys of the section; `at` says on which line of the file a key is.
    pub fn validate(&self, at: &dyn Fn(&str) -> String) -> Result<(), String> {
        if self.timeout.0 > self.interval.0 {
            return Err(format!(
                "scrape.timeout ({}) must not exceed scrape.interval ({}){}",
                humantime::format_duration(self.timeout.0),
                humantime::format_duration(self.interval.0),
                at("scrape.timeout")
            ));
        }
        Ok(())
    }
}
