//! From `/metrics` samples to a [`ReplicaSnapshot`], whatever the metric generation (apf.md §1).
use std::collections::BTreeMap;

use super::{Histogram, MetricGeneration, ReplicaSnapshot};
use crate::parse::exposition::{Sample, SampleSink};

const PREFIX: &str = "apiserver_flowcontrol_";

/// The APF families the model reads; the parser skips every other line before touching its labels.
const WANTED: &[&str] = &[
    "current_limit_seats",
    "nominal_limit_seats",
    "lower_limit_seats",
    "upper_limit_seats",
    "request_concurrency_limit",
    "current_executing_seats",
    "request_concurrency_in_use",
    "current_executing_requests",
    "current_inqueue_requests",
    "current_inqueue_seats",
    "rejected_requests_total",
    "dispatched_requests_total",
    "request_wait_duration_seconds_bucket",
    "request_wait_duration_seconds_sum",
    "request_wait_duration_seconds_count",
];

/// The sample-name filter handed to the exposition parser.
pub fn is_wanted_sample(name: &str) -> bool {
    match name.strip_prefix(PREFIX) {
        Some(family) => WANTED.contains(&family),
        None => name == "kubernetes_build_info",
    }
}

/// Per-level values of one family, summed over flow schemas.
type PerLevel = BTreeMap<String, f64>;

/// Collects samples as the parser streams them, then resolves which generation's metric wins ([`Self::finish`]).
#[derive(Default)]
pub struct SnapshotBuilder {
    camel_case: bool,
    git_version: Option<String>,
    current_limit: PerLevel,
    nominal_limit: PerLevel,
    lower_limit: PerLevel,
    upper_limit: PerLevel,
    concurrency_limit: PerLevel,
    executing_seats: PerLevel,
    concurrency_in_use: PerLevel,
    executing_requests: PerLevel,
    inqueue_requests: PerLevel,
    inqueue_seats: PerLevel,
    dispatched: PerLevel,
    seen_levels: std::collections::BTreeSet<String>,
    rejected: BTreeMap<(String, String, String), f64>,
    wait: BTreeMap<String, Histogram>,
    /// Samples of a wanted family that lacked the labels it must have.
    pub unlabelled_samples: u64,
}

impl SnapshotBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn level<'s>(&mut self, s: &'s Sample<'_>) -> Option<&'s str> {
        if let Some(pl) = s.label("priority_level") {
            return Some(pl);
        }
        // 1.18-1.19 spelled the labels in camelCase (apf.md §1).
        let pl = s.label("priorityLevel")?;
        self.camel_case = true;
        Some(pl)
    }

    fn flow_schema<'s>(s: &'s Sample<'_>) -> Option<&'s str> {
        s.label("flow_schema").or_else(|| s.label("flowSchema"))
    }

    /// The generation of metric names this replica serves.
    fn generation(&self) -> MetricGeneration {
        if !self.current_limit.is_empty() {
            MetricGeneration::Borrowing
        } else if !self.concurrency_in_use.is_empty() {
            MetricGeneration::ConcurrencyInUse
        } else if self.camel_case {
            MetricGeneration::CamelCase
        } else if !self.concurrency_limit.is_empty() || !self.seen_levels.is_empty() {
            MetricGeneration::ConcurrencyLimit
        } else {
            MetricGeneration::None
        }
    }

    pub fn finish(self) -> ReplicaSnapshot {
        let mut snap = ReplicaSnapshot {
            generation: Some(self.generation()),
            kubernetes_version: self.git_version.clone(),
            ..Default::default()
        };
        // A family served for some levels but not this one means 0 for this one (gauge vectors only get a series
        // once observed); a family not served at all means unknown.
        let pick = |primary: &PerLevel, fallbacks: &[&PerLevel], level: &str| -> Option<f64> {
            std::iter::once(primary)
                .chain(fallbacks.iter().copied())
                .find(|family| !family.is_empty())
                .map(|family| family.get(level).copied().unwrap_or(0.0))
        };
        let get = |family: &PerLevel, level: &str| family.get(level).copied();
        for name in &self.seen_levels {
            let level = snap.level_mut(name);
            level.limit_seats =
                get(&self.current_limit, name).or_else(|| get(&self.concurrency_limit, name));
            level.nominal_limit_seats =
                get(&self.nominal_limit, name).or_else(|| get(&self.concurrency_limit, name));
            level.lower_limit_seats = get(&self.lower_limit, name);
            level.upper_limit_seats = get(&self.upper_limit, name);
            level.executing_seats = pick(
                &self.executing_seats,
                &[&self.concurrency_in_use, &self.executing_requests],
                name,
            );
            level.executing_requests = pick(&self.executing_requests, &[], name);
            level.inqueue_requests = pick(&self.inqueue_requests, &[], name);
            level.inqueue_seats = pick(&self.inqueue_seats, &[], name);
            level.dispatched_total = pick(&self.dispatched, &[], name);
            level.wait_seconds = self.wait.get(name).cloned();
        }
        for ((pl, fs, reason), value) in self.rejected {
            *snap
                .level_mut(&pl)
                .rejected_total
                .entry(reason.clone())
                .or_insert(0.0) += value;
            snap.flow_schema_rejected_total
                .insert((pl, fs, reason), value);
        }
        snap
    }
}

impl SampleSink for SnapshotBuilder {
    fn sample(&mut self, s: &Sample<'_>) {
        let Some(family) = s.name.strip_prefix(PREFIX) else {
            if s.name == "kubernetes_build_info" {
                self.git_version = s
                    .label("git_version")
                    .or_else(|| s.label("gitVersion"))
                    .map(str::to_string);
            }
            return;
        };
        let Some(pl) = self.level(s) else {
            self.unlabelled_samples += 1;
            return;
        };
        if !self.seen_levels.contains(pl) {
            self.seen_levels.insert(pl.to_string());
        }
        let value = s.value;
        let family_map = match family {
            "current_limit_seats" => &mut self.current_limit,
            "nominal_limit_seats" => &mut self.nominal_limit,
            "lower_limit_seats" => &mut self.lower_limit,
            "upper_limit_seats" => &mut self.upper_limit,
            "request_concurrency_limit" => &mut self.concurrency_limit,
            "current_executing_seats" => &mut self.executing_seats,
            "request_concurrency_in_use" => &mut self.concurrency_in_use,
            "current_executing_requests" => &mut self.executing_requests,
            "current_inqueue_requests" => &mut self.inqueue_requests,
            "current_inqueue_seats" => &mut self.inqueue_seats,
            "dispatched_requests_total" => &mut self.dispatched,
            "rejected_requests_total" => {
                let (Some(fs), Some(reason)) = (Self::flow_schema(s), s.label("reason")) else {
                    self.unlabelled_samples += 1;
                    return;
                };
                *self
                    .rejected
                    .entry((pl.to_string(), fs.to_string(), reason.to_string()))
                    .or_insert(0.0) += value;
                return;
            }
            wait if wait.starts_with("request_wait_duration_seconds_") => {
                let hist = self.wait.entry(pl.to_string()).or_default();
                match &wait["request_wait_duration_seconds_".len()..] {
                    "bucket" => match s.label("le").and_then(parse_le) {
                        Some(le) => hist.add_bucket(le, value),
                        None => self.unlabelled_samples += 1,
                    },
                    "sum" => hist.sum += value,
                    _ => hist.count += value,
                }
                return;
            }
            _ => return,
        };
        // NaN would poison every sum downstream; a replica never serves it for these gauges.
        if value.is_finite() {
            *family_map.entry(pl.to_string()).or_insert(0.0) += value;
        }
    }
}

fn parse_le(le: &str) -> Option<f64> {
    match le {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        other => other.parse().ok(),
    }
}
