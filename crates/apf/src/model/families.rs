//! The families the model reads, by name: what a scrape keeps, what a Prometheus is asked for, and which family a
//! sample's name is (k8s.io/apiserver `pkg/util/flowcontrol/metrics/metrics.go`, release by release).

const PREFIX: &str = "apiserver_flowcontrol_";

/// The APF families the model reads, by their name after the prefix; the parser skips every other line before
/// touching its labels.
const WANTED: &[(&str, Family)] = &[
    ("current_limit_seats", Family::CurrentLimit),
    ("nominal_limit_seats", Family::NominalLimit),
    ("lower_limit_seats", Family::LowerLimit),
    ("upper_limit_seats", Family::UpperLimit),
    ("request_concurrency_limit", Family::ConcurrencyLimit),
    ("current_executing_seats", Family::ExecutingSeats),
    ("request_concurrency_in_use", Family::ConcurrencyInUse),
    ("current_executing_requests", Family::ExecutingRequests),
    ("current_inqueue_requests", Family::InqueueRequests),
    ("current_inqueue_seats", Family::InqueueSeats),
    ("rejected_requests_total", Family::Rejected),
    ("dispatched_requests_total", Family::Dispatched),
    ("request_wait_duration_seconds_bucket", Family::WaitBucket),
    ("request_wait_duration_seconds_sum", Family::WaitSum),
    ("request_wait_duration_seconds_count", Family::WaitCount),
    // Integrated between scrapes by the apiserver itself: what a scrape's instant misses (1.24+/1.25+/1.26+).
    (
        "priority_level_seat_utilization_bucket",
        Family::SeatUtilizationBucket,
    ),
    (
        "priority_level_seat_utilization_sum",
        Family::SeatUtilizationSum,
    ),
    (
        "priority_level_seat_utilization_count",
        Family::SeatUtilizationCount,
    ),
    ("demand_seats_high_watermark", Family::DemandHighWatermark),
    ("demand_seats_average", Family::DemandAverage),
    ("demand_seats_smoothed", Family::DemandSmoothed),
    (
        "request_dispatch_no_accommodation_total",
        Family::NoAccommodation,
    ),
    // What a request of a flow schema costs: its time and its seats (rate advice). Means only: no buckets.
    ("request_execution_seconds_sum", Family::ExecutionSecondsSum),
    (
        "request_execution_seconds_count",
        Family::ExecutionSecondsCount,
    ),
    ("work_estimated_seats_sum", Family::EstimatedSeatsSum),
    ("work_estimated_seats_count", Family::EstimatedSeatsCount),
];

/// What a LIST of a resource reads: objects stored, and their size (the work estimator's inputs).
const STORAGE_OBJECTS: &str = "apiserver_storage_objects";
const RESOURCE_OBJECTS: &str = "apiserver_resource_objects";
const RESOURCE_SIZE: &str = "apiserver_resource_size_estimate_bytes";

/// Every series name the model reads, with the labels it reads of it (both spellings: 1.18-1.19 wrote them in
/// camelCase): a Prometheus can sum away every other label before answering, which the model would sum anyway.
/// Without `flow_schema_costs`, the families that tell what a flow schema's requests cost (rate advice) are left
/// out and dispatches are read per level: they make a fleet's round about a third longer, and advice read through a
/// Prometheus, which has no dumps, needs audit events to name anyone.
pub fn wanted_series(flow_schema_costs: bool) -> Vec<(String, &'static [&'static str])> {
    const LEVEL: &[&str] = &["priority_level", "priorityLevel"];
    const LEVEL_SCHEMA_REASON: &[&str] = &[
        "priority_level",
        "priorityLevel",
        "flow_schema",
        "flowSchema",
        "reason",
    ];
    const LEVEL_BUCKET: &[&str] = &["priority_level", "priorityLevel", "le"];
    const LEVEL_SCHEMA: &[&str] = &[
        "priority_level",
        "priorityLevel",
        "flow_schema",
        "flowSchema",
    ];
    const LEVEL_SCHEMA_TYPE: &[&str] = &[
        "priority_level",
        "priorityLevel",
        "flow_schema",
        "flowSchema",
        "type",
    ];
    let apf = WANTED
        .iter()
        .map(|(f, _)| f)
        .filter(move |f| flow_schema_costs || !is_cost_family(f))
        .map(move |f| {
            let labels = match *f {
                "rejected_requests_total" => LEVEL_SCHEMA_REASON,
                "dispatched_requests_total" if !flow_schema_costs => LEVEL,
                "dispatched_requests_total"
                | "work_estimated_seats_sum"
                | "work_estimated_seats_count" => LEVEL_SCHEMA,
                f if f.starts_with("request_execution_seconds_") => LEVEL_SCHEMA_TYPE,
                f if f.ends_with("_bucket") => LEVEL_BUCKET,
                _ => LEVEL,
            };
            (format!("{PREFIX}{f}"), labels)
        });
    let other: [(&str, &'static [&'static str]); 4] = [
        ("kubernetes_build_info", &["git_version", "gitVersion"]),
        (STORAGE_OBJECTS, &["resource"]),
        (RESOURCE_OBJECTS, &["group", "resource"]),
        (RESOURCE_SIZE, &["group", "resource"]),
    ];
    apf.chain(other.into_iter().map(|(n, l)| (n.to_string(), l)))
        .collect()
}

/// What a flow schema's requests cost: read for rate advice.
fn is_cost_family(family: &str) -> bool {
    family.starts_with("request_execution_seconds_") || family.starts_with("work_estimated_seats_")
}

/// The families whose samples the model reads, by the name client_golang registers them under (a histogram's without
/// `_bucket`, `_sum`, `_count`; a counter's with its `_total`): what `/metrics?name[]=...` asks for, which a
/// client_golang 1.24+ handler (kube-apiserver since Kubernetes vendors it) answers with these families alone.
pub fn wanted_families() -> Vec<String> {
    let mut families: Vec<String> = wanted_series(true)
        .into_iter()
        .map(|(name, _)| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .map_or(name.clone(), str::to_string)
        })
        .collect();
    families.sort();
    families.dedup();
    families
}

/// The limit families: every generation serves one of them (`request_concurrency_limit` before 1.26,
/// `nominal_limit_seats` and `current_limit_seats` since), one series per level, refreshed at every scrape. The
/// newest sample among them says how fresh a replica's numbers in a Prometheus are.
pub fn limit_families() -> Vec<String> {
    [
        "current_limit_seats",
        "nominal_limit_seats",
        "request_concurrency_limit",
    ]
    .iter()
    .map(|f| format!("{PREFIX}{f}"))
    .collect()
}

/// Whether the series counts a resource's objects (what a LIST reads): kube-apiserver counts them once per
/// `--etcd-count-metric-poll-period` (a minute by default), not at each scrape.
pub fn is_object_count(name: &str) -> bool {
    matches!(
        Family::of(name),
        Some(Family::StorageObjects | Family::ResourceObjects | Family::ResourceSize)
    )
}

/// The sample-name filter handed to the exposition parser.
pub fn is_wanted_sample(name: &str) -> bool {
    Family::of(name).is_some()
}

/// A family the model reads: named once per answer (a Prometheus answers one family per query) or per sample of a
/// scrape, and then not matched again by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    CurrentLimit,
    NominalLimit,
    LowerLimit,
    UpperLimit,
    ConcurrencyLimit,
    ExecutingSeats,
    ConcurrencyInUse,
    ExecutingRequests,
    InqueueRequests,
    InqueueSeats,
    Rejected,
    Dispatched,
    WaitBucket,
    WaitSum,
    WaitCount,
    SeatUtilizationBucket,
    SeatUtilizationSum,
    SeatUtilizationCount,
    DemandHighWatermark,
    DemandAverage,
    DemandSmoothed,
    NoAccommodation,
    ExecutionSecondsSum,
    ExecutionSecondsCount,
    EstimatedSeatsSum,
    EstimatedSeatsCount,
    BuildInfo,
    StorageObjects,
    ResourceObjects,
    ResourceSize,
}

impl Family {
    /// The family of a sample's name; `None` for one the model does not read.
    pub fn of(name: &str) -> Option<Family> {
        let Some(family) = name.strip_prefix(PREFIX) else {
            return match name {
                STORAGE_OBJECTS => Some(Family::StorageObjects),
                RESOURCE_OBJECTS => Some(Family::ResourceObjects),
                RESOURCE_SIZE => Some(Family::ResourceSize),
                "kubernetes_build_info" => Some(Family::BuildInfo),
                _ => None,
            };
        };
        WANTED
            .iter()
            .find(|(name, _)| *name == family)
            .map(|(_, f)| *f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prometheus_is_asked_what_requests_cost_only_when_advice_can_name_someone() {
        let names = |costs: bool| -> Vec<(String, Vec<&str>)> {
            wanted_series(costs)
                .into_iter()
                .map(|(n, l)| (n, l.to_vec()))
                .collect()
        };
        let find = |costs: bool, name: &str| {
            names(costs)
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, l)| l)
        };
        let execution = "apiserver_flowcontrol_request_execution_seconds_sum";
        assert!(find(true, execution).is_some_and(|l| l.contains(&"type")));
        assert_eq!(find(false, execution), None);
        assert_eq!(
            find(false, "apiserver_flowcontrol_work_estimated_seats_count"),
            None
        );
        let dispatched = "apiserver_flowcontrol_dispatched_requests_total";
        assert!(find(true, dispatched).is_some_and(|l| l.contains(&"flow_schema")));
        assert!(find(false, dispatched).is_some_and(|l| !l.contains(&"flow_schema")));
        // A scrape names every family it reads, costs included.
        assert!(wanted_families()
            .iter()
            .any(|f| f.ends_with("work_estimated_seats")));
    }
}
