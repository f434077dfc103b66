//! From `/metrics` samples to a [`ReplicaSnapshot`], whatever the metric generation (k8s.io/apiserver
//! `pkg/util/flowcontrol/metrics/metrics.go`, release by release).
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use super::families::Family;
use super::{FlowSchemaTotals, Histogram, MetricGeneration, ReplicaSnapshot};
use crate::parse::exposition::{same, Sample, SampleSink};

/// Per-level values of one family, summed over flow schemas, by the level's place in the builder's `levels`: a
/// level's name is copied once per replica, not once per family (a fleet's round builds thousands of replicas).
#[derive(Default)]
struct PerLevel(Vec<Option<f64>>);

impl PerLevel {
    fn add(&mut self, level: usize, value: f64) {
        if self.0.len() <= level {
            self.0.resize(level + 1, None);
        }
        *self.0[level].get_or_insert(0.0) += value;
    }

    fn get(&self, level: usize) -> Option<f64> {
        self.0.get(level).copied().flatten()
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

/// Objects or bytes by resource.
type ByResource = BTreeMap<String, f64>;

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
    /// Each level seen, by its place in the per-level values.
    levels: Vec<String>,
    /// The place of the last sample's level: a replica's series come level by level, a histogram's buckets together.
    last_level: usize,
    rejected: BTreeMap<(String, String, String), f64>,
    /// By priority level, then flow schema.
    schemas: BTreeMap<String, BTreeMap<String, FlowSchemaTotals>>,
    /// By the level's place.
    wait: Vec<Option<Histogram>>,
    seat_utilization: Vec<Option<Histogram>>,
    demand_high_watermark: PerLevel,
    demand_average: PerLevel,
    demand_smoothed: PerLevel,
    no_accommodation: PerLevel,
    storage_objects: ByResource,
    resource_objects: ByResource,
    resource_size: ByResource,
    /// What each series (name and label set) last added, so that a series served twice counts once; keyed by the
    /// series' own SipHash, which needs no second hashing.
    series: nohash_hasher::IntMap<u64, f64>,
    /// The order of a sample's labels by name, reused from sample to sample.
    label_order: Vec<usize>,
    /// Set where every series comes once ([`Self::of_unique_series`]): `series` is not kept.
    unique_series: bool,
    /// Samples of a wanted family that lacked the labels it must have.
    pub unlabelled_samples: u64,
    /// Series that appeared more than once (a paste holding the same line twice): the last value is kept.
    pub duplicate_series: u64,
}

impl SnapshotBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn level<'s>(&mut self, s: &'s Sample<'_>) -> Option<&'s str> {
        if let Some(pl) = s.label("priority_level") {
            return Some(pl);
        }
        // 1.18-1.19 spelled the labels in camelCase (k8s.io/apiserver `pkg/util/flowcontrol/metrics/metrics.go` before 1.20).
        let pl = s.label("priorityLevel")?;
        self.camel_case = true;
        Some(pl)
    }

    /// The place of level `pl`, made the first time. A replica has a dozen levels at most: a scan that compares
    /// lengths first finds one faster than a tree of names would.
    fn level_place(&mut self, pl: &str) -> usize {
        if self
            .levels
            .get(self.last_level)
            .is_some_and(|l| same(l, pl))
        {
            return self.last_level;
        }
        let i = match self.levels.iter().position(|l| same(l, pl)) {
            Some(i) => i,
            None => {
                self.levels.push(pl.to_string());
                self.levels.len() - 1
            }
        };
        self.last_level = i;
        i
    }

    /// What this sample adds to its sums: its value, or for a series seen before the change from what that one
    /// added (the last one wins, as a later line would overwrite an earlier one in any store). Values that are not
    /// finite add nothing: NaN would poison every sum downstream, and a replica never serves it for these families.
    fn contribution(&mut self, s: &Sample<'_>) -> f64 {
        let value = if s.value.is_finite() { s.value } else { 0.0 };
        if self.unique_series {
            return value;
        }
        // The same labels in another order are the same series: hashed in the order of their names (and values, for
        // a name given twice), without a vector of them per sample.
        self.label_order.clear();
        self.label_order.extend(0..s.labels.len());
        self.label_order.sort_unstable_by_key(|&i| {
            let l = &s.labels[i];
            (l.name, l.value.as_ref())
        });
        let mut h = std::collections::hash_map::DefaultHasher::new();
        s.name.hash(&mut h);
        h.write_usize(s.labels.len());
        for &i in &self.label_order {
            let l = &s.labels[i];
            (l.name, l.value.as_ref()).hash(&mut h);
        }
        match self.series.insert(h.finish(), value) {
            Some(earlier) => {
                self.duplicate_series += 1;
                value - earlier
            }
            None => value,
        }
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
        } else if !self.concurrency_limit.is_empty() || !self.levels.is_empty() {
            MetricGeneration::ConcurrencyLimit
        } else {
            MetricGeneration::None
        }
    }

    pub fn finish(mut self) -> ReplicaSnapshot {
        let objects = if self.resource_objects.is_empty() {
            std::mem::take(&mut self.storage_objects)
        } else {
            std::mem::take(&mut self.resource_objects)
        };
        let mut snap = ReplicaSnapshot {
            resource_objects: std::sync::Arc::new(objects),
            resource_size_bytes: std::sync::Arc::new(std::mem::take(&mut self.resource_size)),
            generation: Some(self.generation()),
            kubernetes_version: self.git_version.clone(),
            duplicate_series: self.duplicate_series,
            ..Default::default()
        };
        // A family served for some levels but not this one means 0 for this one (gauge vectors only get a series
        // once observed); a family not served at all means unknown.
        let pick = |primary: &PerLevel, fallbacks: &[&PerLevel], level: usize| -> Option<f64> {
            std::iter::once(primary)
                .chain(fallbacks.iter().copied())
                .find(|family| !family.is_empty())
                .map(|family| family.get(level).unwrap_or(0.0))
        };
        let get = |family: &PerLevel, level: usize| family.get(level);
        // The names move into the snapshot, not copied: a fleet's round finishes thousands of replicas.
        for (i, name) in std::mem::take(&mut self.levels).into_iter().enumerate() {
            let level = snap.levels.entry(name).or_default();
            level.limit_seats =
                get(&self.current_limit, i).or_else(|| get(&self.concurrency_limit, i));
            level.nominal_limit_seats =
                get(&self.nominal_limit, i).or_else(|| get(&self.concurrency_limit, i));
            level.lower_limit_seats = get(&self.lower_limit, i);
            level.upper_limit_seats = get(&self.upper_limit, i);
            level.executing_seats = pick(
                &self.executing_seats,
                &[&self.concurrency_in_use, &self.executing_requests],
                i,
            );
            level.executing_requests = pick(&self.executing_requests, &[], i);
            level.inqueue_requests = pick(&self.inqueue_requests, &[], i);
            level.inqueue_seats = pick(&self.inqueue_seats, &[], i);
            level.dispatched_total = pick(&self.dispatched, &[], i);
            let utilization = self.seat_utilization.get_mut(i).and_then(Option::take);
            level.wait_seconds = self.wait.get_mut(i).and_then(Option::take);
            level.demand_seats_high_watermark = get(&self.demand_high_watermark, i);
            level.demand_seats_average = get(&self.demand_average, i);
            level.demand_seats_smoothed = get(&self.demand_smoothed, i);
            // The counter gets a series at its first increment: 0 where another level has one, or where the
            // version serves the utilization histogram (1.25+, the counter is 1.24+).
            level.no_accommodation_total = pick(&self.no_accommodation, &[], i)
                .or_else(|| utilization.is_some().then_some(0.0));
            level.seat_utilization = utilization;
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
        snap.flow_schemas = self
            .schemas
            .into_iter()
            .flat_map(|(pl, schemas)| {
                schemas
                    .into_iter()
                    .map(move |(fs, t)| ((pl.clone(), fs), t))
            })
            .collect();
        snap
    }

    /// The totals of the sample's level and flow schema; `None` (counted as unlabelled) without a flow schema.
    fn schema_totals(&mut self, pl: &str, s: &Sample<'_>) -> Option<&mut FlowSchemaTotals> {
        let Some(fs) = Self::flow_schema(s) else {
            self.unlabelled_samples += 1;
            return None;
        };
        entry(entry(&mut self.schemas, pl)?, fs)
    }
}

impl SampleSink for SnapshotBuilder {
    fn sample(&mut self, s: &Sample<'_>) {
        if let Some(family) = Family::of(s.name) {
            self.sample_of(family, s);
        }
    }
}

impl SnapshotBuilder {
    /// A builder for series known to be unique (a Prometheus answer holds one series per label set, and a round
    /// asks one query per family): no series is kept to find it again.
    pub fn of_unique_series() -> Self {
        Self {
            unique_series: true,
            ..Self::default()
        }
    }

    /// One sample of `family` (the family its name says).
    pub fn sample_of(&mut self, family: Family, s: &Sample<'_>) {
        let objects = match family {
            Family::StorageObjects => Some(&mut self.storage_objects),
            Family::ResourceObjects => Some(&mut self.resource_objects),
            Family::ResourceSize => Some(&mut self.resource_size),
            _ => None,
        };
        if let Some(map) = objects {
            // `deployments.apps` (storage_objects) or resource + group: the dumps name the bare resource.
            // -1 is the apiserver's "could not count": unknown, not a size.
            if let Some(resource) = s.label("resource") {
                let bare = resource.split('.').next().unwrap_or(resource);
                if s.value >= 0.0 {
                    add(map, bare, s.value);
                }
            }
            return;
        }
        if family == Family::BuildInfo {
            self.git_version = s
                .label("git_version")
                .or_else(|| s.label("gitVersion"))
                .map(str::to_string);
            return;
        }
        let Some(pl) = self.level(s) else {
            self.unlabelled_samples += 1;
            return;
        };
        let place = self.level_place(pl);
        let value = self.contribution(s);
        let family_map = match family {
            Family::CurrentLimit => &mut self.current_limit,
            Family::NominalLimit => &mut self.nominal_limit,
            Family::LowerLimit => &mut self.lower_limit,
            Family::UpperLimit => &mut self.upper_limit,
            Family::ConcurrencyLimit => &mut self.concurrency_limit,
            Family::ExecutingSeats => &mut self.executing_seats,
            Family::ConcurrencyInUse => &mut self.concurrency_in_use,
            Family::ExecutingRequests => &mut self.executing_requests,
            Family::InqueueRequests => &mut self.inqueue_requests,
            Family::InqueueSeats => &mut self.inqueue_seats,
            Family::Dispatched => {
                // Per flow schema where the series says (a Prometheus may have summed it away: per level only).
                if Self::flow_schema(s).is_some() {
                    if let Some(t) = self.schema_totals(pl, s) {
                        *t.dispatched_total.get_or_insert(0.0) += value;
                    }
                }
                &mut self.dispatched
            }
            Family::ExecutionSecondsSum
            | Family::ExecutionSecondsCount
            | Family::EstimatedSeatsSum
            | Family::EstimatedSeatsCount => {
                // A WATCH's execution is its initialization (k8s.io/apiserver `pkg/server/filters/priority-and-fairness.go`):
                // not what a request of the flow holds its seats for.
                if s.label("type").is_some_and(|t| t == "watch") {
                    return;
                }
                let Some(t) = self.schema_totals(pl, s) else {
                    return;
                };
                let pair = match family {
                    Family::EstimatedSeatsSum | Family::EstimatedSeatsCount => {
                        t.estimated_seats.get_or_insert((0.0, 0.0))
                    }
                    _ => t.execution_seconds.get_or_insert((0.0, 0.0)),
                };
                match family {
                    Family::ExecutionSecondsSum | Family::EstimatedSeatsSum => pair.0 += value,
                    _ => pair.1 += value,
                }
                return;
            }
            Family::Rejected => {
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
            Family::DemandHighWatermark => &mut self.demand_high_watermark,
            Family::DemandAverage => &mut self.demand_average,
            Family::DemandSmoothed => &mut self.demand_smoothed,
            Family::NoAccommodation => &mut self.no_accommodation,
            Family::WaitBucket
            | Family::WaitSum
            | Family::WaitCount
            | Family::SeatUtilizationBucket
            | Family::SeatUtilizationSum
            | Family::SeatUtilizationCount => {
                let histograms = match family {
                    Family::WaitBucket | Family::WaitSum | Family::WaitCount => &mut self.wait,
                    _ => &mut self.seat_utilization,
                };
                if histograms.len() <= place {
                    histograms.resize_with(place + 1, || None);
                }
                let hist = histograms[place].get_or_insert_with(Histogram::default);
                match family {
                    Family::WaitBucket | Family::SeatUtilizationBucket => {
                        match s.label("le").and_then(parse_le) {
                            Some(le) => hist.add_bucket(le, value),
                            None => self.unlabelled_samples += 1,
                        }
                    }
                    Family::WaitSum | Family::SeatUtilizationSum => hist.sum += value,
                    _ => hist.count += value,
                }
                return;
            }
            Family::BuildInfo
            | Family::StorageObjects
            | Family::ResourceObjects
            | Family::ResourceSize => return,
        };
        family_map.add(place, value);
    }
}

/// `value` added to the resource's sum; its name is copied only the first time.
fn add(map: &mut ByResource, level: &str, value: f64) {
    match map.get_mut(level) {
        Some(sum) => *sum += value,
        None => {
            map.insert(level.to_string(), value);
        }
    }
}

/// The level's entry, its name copied only when it is new; `None` never happens (the entry is made first).
fn entry<'m, V: Default>(map: &'m mut BTreeMap<String, V>, level: &str) -> Option<&'m mut V> {
    if !map.contains_key(level) {
        map.insert(level.to_string(), V::default());
    }
    map.get_mut(level)
}

fn parse_le(le: &str) -> Option<f64> {
    match le {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        other => other.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::families::is_wanted_sample;
    use crate::parse::exposition::parse_all;

    fn snapshot(text: &str) -> (ReplicaSnapshot, u64) {
        let mut b = SnapshotBuilder::new();
        parse_all(text.as_bytes(), is_wanted_sample, &mut b);
        let snap = b.finish();
        let duplicates = snap.duplicate_series;
        (snap, duplicates)
    }

    #[test]
    fn a_series_served_twice_is_one_series_and_the_last_value_wins() {
        let (snap, duplicates) = snapshot(
            "apiserver_flowcontrol_request_concurrency_limit{priority_level=\"workload-low\"} 245\n\
             apiserver_flowcontrol_request_concurrency_in_use{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 140\n\
             apiserver_flowcontrol_request_concurrency_in_use{flow_schema=\"other\",priority_level=\"workload-low\"} 5\n\
             apiserver_flowcontrol_request_concurrency_limit{priority_level=\"workload-low\"} 245\n\
             apiserver_flowcontrol_request_concurrency_in_use{priority_level=\"workload-low\",flow_schema=\"service-accounts\"} 145\n",
        );
        let l = &snap.levels["workload-low"];
        assert_eq!(l.limit_seats, Some(245.0));
        // 145 (the later line of service-accounts, labels in another order) + 5: flow schemas still sum.
        assert_eq!(l.executing_seats, Some(150.0));
        assert_eq!(duplicates, 2);
    }

    #[test]
    fn duplicated_counters_and_buckets_are_not_doubled() {
        let line = "apiserver_flowcontrol_rejected_requests_total{flow_schema=\"service-accounts\",priority_level=\"workload-low\",reason=\"time-out\"} 100\n";
        let bucket = "apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute=\"true\",flow_schema=\"a\",le=\"1\",priority_level=\"workload-low\"} 7\n";
        let (snap, duplicates) = snapshot(&[line, bucket, line, bucket].concat());
        let l = &snap.levels["workload-low"];
        assert_eq!(l.rejected_total.get("time-out"), Some(&100.0));
        assert_eq!(
            l.wait_seconds.as_ref().map(|h| h.buckets.clone()),
            Some(vec![(1.0, 7.0)])
        );
        assert_eq!(duplicates, 2);
    }

    #[test]
    fn a_flow_schema_totals_its_dispatches_and_what_its_requests_cost_but_not_watches() {
        let (snap, _) = snapshot(
            "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"sa\",priority_level=\"low\"} 40\n\
             apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"other\",priority_level=\"low\"} 2\n\
             apiserver_flowcontrol_request_execution_seconds_sum{flow_schema=\"sa\",priority_level=\"low\",type=\"regular\"} 8\n\
             apiserver_flowcontrol_request_execution_seconds_count{flow_schema=\"sa\",priority_level=\"low\",type=\"regular\"} 40\n\
             apiserver_flowcontrol_request_execution_seconds_sum{flow_schema=\"sa\",priority_level=\"low\",type=\"watch\"} 900\n\
             apiserver_flowcontrol_request_execution_seconds_count{flow_schema=\"sa\",priority_level=\"low\",type=\"watch\"} 3\n\
             apiserver_flowcontrol_work_estimated_seats_sum{flow_schema=\"sa\",priority_level=\"low\"} 120\n\
             apiserver_flowcontrol_work_estimated_seats_count{flow_schema=\"sa\",priority_level=\"low\"} 40\n",
        );
        let sa = &snap.flow_schemas[&("low".to_string(), "sa".to_string())];
        assert_eq!(sa.dispatched_total, Some(40.0));
        assert_eq!(sa.execution_seconds, Some((8.0, 40.0)), "WATCHes left out");
        assert_eq!(sa.estimated_seats, Some((120.0, 40.0)));
        let other = &snap.flow_schemas[&("low".to_string(), "other".to_string())];
        assert_eq!(
            (other.execution_seconds, other.estimated_seats),
            (None, None)
        );
        assert_eq!(snap.levels["low"].dispatched_total, Some(42.0));
        // Dispatches summed per level (a Prometheus asked without costs): no flow schema, and nothing unlabelled.
        let mut b = SnapshotBuilder::new();
        parse_all(
            b"apiserver_flowcontrol_dispatched_requests_total{priority_level=\"low\"} 7\n",
            is_wanted_sample,
            &mut b,
        );
        assert_eq!(b.unlabelled_samples, 0);
        let snap = b.finish();
        assert_eq!(snap.levels["low"].dispatched_total, Some(7.0));
        assert!(snap.flow_schemas.is_empty());
        // 1.18-1.23 have no `type`: every request counts.
        let (snap, _) = snapshot(
            "apiserver_flowcontrol_request_execution_seconds_sum{flowSchema=\"sa\",priorityLevel=\"low\"} 3\n\
             apiserver_flowcontrol_request_execution_seconds_count{flowSchema=\"sa\",priorityLevel=\"low\"} 6\n",
        );
        let sa = &snap.flow_schemas[&("low".to_string(), "sa".to_string())];
        assert_eq!(sa.execution_seconds, Some((3.0, 6.0)));
    }

    #[test]
    fn objects_and_sizes_of_resources_are_what_a_list_reads() {
        let (snap, _) = snapshot(
            "apiserver_storage_objects{resource=\"pods\"} 22\n\
             apiserver_storage_objects{resource=\"deployments.apps\"} 3\n\
             apiserver_resource_size_estimate_bytes{group=\"\",resource=\"pods\"} 98186\n\
             apiserver_resource_size_estimate_bytes{group=\"\",resource=\"events\"} -1\n",
        );
        assert_eq!(snap.resource_objects.get("pods"), Some(&22.0));
        assert_eq!(snap.resource_objects.get("deployments"), Some(&3.0));
        assert_eq!(snap.resource_size_bytes.get("pods"), Some(&98186.0));
        // -1 is the apiserver's "could not count".
        assert_eq!(snap.resource_size_bytes.get("events"), None);
        // apiserver_resource_objects (1.34+) wins over the deprecated storage_objects.
        let (snap, _) = snapshot(
            "apiserver_storage_objects{resource=\"pods\"} 22\n\
             apiserver_resource_objects{group=\"\",resource=\"pods\"} 23\n",
        );
        assert_eq!(snap.resource_objects.get("pods"), Some(&23.0));
    }
}
