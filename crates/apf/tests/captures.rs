//! The model on every real capture (Kubernetes 1.18 to 1.35): the right limit, seats in use and levels for each
//! metric generation. Expected values were read from the captures with grep, not from our code.
//!
//! It is the domain crate's own test: it needs no runtime and no server, only the project's copies of the captures
//! (`tests/fixtures/` at the top of the workspace, sources in `SOURCES.md` there).
use std::io::Read;

use apf::model::{is_wanted_sample, MetricGeneration, ReplicaSnapshot, SnapshotBuilder};
use apf::parse::exposition::parse_all;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn capture(version: &str) -> Vec<u8> {
    let path = format!("{FIXTURES}/metrics-v{version}.txt.gz");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    out
}

fn fixture_text(name: &str) -> String {
    let path = format!("{FIXTURES}/{name}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn snapshot(version: &str) -> ReplicaSnapshot {
    let body = capture(version);
    let mut b = SnapshotBuilder::new();
    let stats = parse_all(&body, is_wanted_sample, &mut b);
    assert_eq!(
        stats.invalid_lines, 0,
        "{version}: {:?}",
        stats.first_errors
    );
    b.finish()
}

const LEVELS_1_20: &[&str] = &[
    "catch-all",
    "exempt",
    "global-default",
    "leader-election",
    "system",
    "workload-high",
    "workload-low",
];
const LEVELS_1_22: &[&str] = &[
    "catch-all",
    "exempt",
    "global-default",
    "leader-election",
    "node-high",
    "system",
    "workload-high",
    "workload-low",
];

/// (version, generation, git version, workload-low limit, workload-low executing, workload-high limit, levels)
#[allow(clippy::type_complexity)]
const CASES: &[(&str, MetricGeneration, &str, f64, f64, f64, &[&str])] = &[
    (
        "1.20",
        MetricGeneration::ConcurrencyLimit,
        "v1.20.15",
        293.0,
        1.0,
        118.0,
        LEVELS_1_20,
    ),
    (
        "1.21",
        MetricGeneration::ConcurrencyLimit,
        "v1.21.14",
        293.0,
        1.0,
        118.0,
        LEVELS_1_20,
    ),
    (
        "1.23",
        MetricGeneration::ConcurrencyInUse,
        "v1.23.17",
        245.0,
        1.0,
        98.0,
        LEVELS_1_22,
    ),
    (
        "1.24",
        MetricGeneration::ConcurrencyInUse,
        "v1.24.17",
        245.0,
        1.0,
        98.0,
        LEVELS_1_22,
    ),
    (
        "1.25",
        MetricGeneration::ConcurrencyInUse,
        "v1.25.13",
        245.0,
        1.0,
        98.0,
        LEVELS_1_22,
    ),
    (
        "1.26",
        MetricGeneration::Borrowing,
        "v1.26.8",
        56.0,
        1.0,
        114.0,
        LEVELS_1_22,
    ),
    (
        "1.28",
        MetricGeneration::Borrowing,
        "v1.28.3",
        55.0,
        1.0,
        111.0,
        LEVELS_1_22,
    ),
    (
        "1.29",
        MetricGeneration::Borrowing,
        "v1.29.5",
        54.0,
        1.0,
        111.0,
        LEVELS_1_22,
    ),
    (
        "1.30",
        MetricGeneration::Borrowing,
        "v1.30.0",
        54.0,
        1.0,
        111.0,
        LEVELS_1_22,
    ),
    (
        "1.31",
        MetricGeneration::Borrowing,
        "v1.31.0",
        56.0,
        1.0,
        114.0,
        LEVELS_1_22,
    ),
    (
        "1.32",
        MetricGeneration::Borrowing,
        "v1.32.0",
        56.0,
        1.0,
        114.0,
        LEVELS_1_22,
    ),
    (
        "1.34",
        MetricGeneration::Borrowing,
        "v1.34.0",
        56.0,
        1.0,
        114.0,
        LEVELS_1_22,
    ),
    (
        "1.35",
        MetricGeneration::Borrowing,
        "v1.35.0",
        56.0,
        1.0,
        114.0,
        LEVELS_1_22,
    ),
];

#[test]
fn every_capture_gives_the_enforced_limit_seats_and_levels() {
    for &(version, generation, git, limit, executing, high_limit, levels) in CASES {
        let s = snapshot(version);
        assert_eq!(s.generation, Some(generation), "{version}");
        let got_git = s.kubernetes_version.as_deref().unwrap_or("");
        assert_eq!(got_git, git, "{version}");
        let names: Vec<&str> = s.levels.keys().map(String::as_str).collect();
        assert_eq!(names, levels, "{version}");
        let low = &s.levels["workload-low"];
        assert_eq!(low.limit_seats, Some(limit), "{version} limit");
        assert_eq!(low.executing_seats, Some(executing), "{version} executing");
        assert_eq!(
            low.headroom_seats(),
            Some(limit - executing),
            "{version} headroom"
        );
        assert_eq!(
            s.levels["workload-high"].limit_seats,
            Some(high_limit),
            "{version}"
        );
        // Nothing queued in these idle clusters, and no rejection series yet.
        assert_eq!(low.inqueue_requests, Some(0.0), "{version}");
        assert!(low.rejected_total.is_empty(), "{version}");
    }
}

#[test]
fn borrowing_generations_tell_nominal_from_enforced() {
    // 1.26+: the enforced limit is current_limit_seats (idle seats are lent), not the nominal one.
    for version in [
        "1.26", "1.28", "1.29", "1.30", "1.31", "1.32", "1.34", "1.35",
    ] {
        let s = snapshot(version);
        let low = &s.levels["workload-low"];
        assert_eq!(low.nominal_limit_seats, Some(245.0), "{version}");
        assert_eq!(low.lower_limit_seats, Some(24.0), "{version}");
        assert_eq!(low.upper_limit_seats, Some(845.0), "{version}");
        assert_ne!(low.limit_seats, low.nominal_limit_seats, "{version}");
    }
    // Before borrowing, the one limit is both.
    let s = snapshot("1.25");
    assert_eq!(s.levels["workload-low"].nominal_limit_seats, Some(245.0));
    assert_eq!(s.levels["workload-low"].upper_limit_seats, None);
}

#[test]
fn exempt_has_seats_in_use_and_no_capacity_before_1_26() {
    let s = snapshot("1.20");
    assert_eq!(s.levels["exempt"].limit_seats, None);
    // 1.28+ exports a current_limit_seats for exempt: a borrowing artefact the analysis ignores.
    let s = snapshot("1.35");
    assert_eq!(s.levels["exempt"].nominal_limit_seats, Some(0.0));
    assert_eq!(s.levels["exempt"].executing_seats, Some(0.0));
}

#[test]
fn captures_without_apf_say_so() {
    // 1.18 and 1.19 ran with APF off by default: no level metric at all.
    for version in ["1.18", "1.19"] {
        let s = snapshot(version);
        assert!(!s.has_apf(), "{version}");
        assert!(s.levels.is_empty(), "{version}");
    }
}

#[test]
fn camel_case_labels_of_1_18_are_read() {
    let body = b"apiserver_flowcontrol_request_concurrency_limit{priorityLevel=\"workload-low\"} 20\n\
        apiserver_flowcontrol_current_executing_requests{flowSchema=\"service-accounts\",priorityLevel=\"workload-low\"} 4\n\
        apiserver_flowcontrol_current_inqueue_requests{flowSchema=\"service-accounts\",priorityLevel=\"workload-low\"} 2\n\
        apiserver_flowcontrol_rejected_requests_total{flowSchema=\"service-accounts\",priorityLevel=\"workload-low\",reason=\"queue-full\"} 7\n";
    let mut b = SnapshotBuilder::new();
    parse_all(body, is_wanted_sample, &mut b);
    let s = b.finish();
    assert_eq!(s.generation, Some(MetricGeneration::CamelCase));
    let low = &s.levels["workload-low"];
    assert_eq!(low.limit_seats, Some(20.0));
    assert_eq!(low.executing_seats, Some(4.0));
    assert_eq!(low.inqueue_requests, Some(2.0));
    assert_eq!(low.rejected_total.get("queue-full"), Some(&7.0));
    assert_eq!(
        s.flow_schema_rejected_total.get(&(
            "workload-low".into(),
            "service-accounts".into(),
            "queue-full".into()
        )),
        Some(&7.0)
    );
}

#[test]
fn eks_pastes_are_read() {
    let text = fixture_text("snippet-eks-1.32-nominal_limit_seats.txt");
    let mut b = SnapshotBuilder::new();
    let stats = parse_all(text.as_bytes(), is_wanted_sample, &mut b);
    // The `$ kubectl ...` prompt line is counted, not silently dropped.
    assert_eq!(stats.invalid_lines, 1);
    let s = b.finish();
    assert_eq!(s.levels["workload-low"].nominal_limit_seats, Some(245.0));
    assert_eq!(s.levels["catch-all"].nominal_limit_seats, Some(13.0));
    // The paste says nothing of the enforced limit or of seats in use: no headroom is made up.
    assert_eq!(s.levels["workload-low"].headroom_seats(), None);
}

/// `/metrics?name[]=...` asks for the families the model reads by the names client_golang registers them under: on
/// every capture, each wanted sample belongs to a family asked for (the family of a `# TYPE` line before it).
#[test]
fn the_families_asked_for_by_name_hold_every_wanted_sample() {
    let families = apf::model::wanted_families();
    let path = apf::endpoints::metrics_path(&families);
    assert!(
        path.starts_with("/metrics?name[]=apiserver_flowcontrol_"),
        "{path}"
    );
    let mut asked = std::collections::BTreeSet::new();
    for version in [
        "1.18", "1.19", "1.20", "1.21", "1.23", "1.24", "1.25", "1.26", "1.28", "1.29", "1.30",
        "1.31", "1.32", "1.34", "1.35",
    ] {
        let body = capture(version);
        let text = String::from_utf8_lossy(&body);
        let mut family = "";
        let mut wanted_lines = 0;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap_or("");
                continue;
            }
            let name = line.split(['{', ' ']).next().unwrap_or("");
            if line.starts_with('#') || !is_wanted_sample(name) {
                continue;
            }
            wanted_lines += 1;
            assert!(
                families.iter().any(|f| f == family),
                "{version}: {name} is in family {family}, not asked for"
            );
            asked.insert(family.to_string());
        }
        // 1.18 serves none of what the model reads (APF's metrics came with 1.19's).
        assert_eq!(wanted_lines > 0, version != "1.18", "{version}");
    }
    // And every family asked for is one a capture serves, but two counters no capture's quiet cluster had incremented
    // (a counter vector gets a series at its first increment, and the registry leaves out a family without one).
    // Their names are those k8s.io/apiserver registers (`pkg/util/flowcontrol/metrics/metrics.go`:
    // `Name: "rejected_requests_total"`, `Name: "request_dispatch_no_accommodation_total"`).
    let unseen: Vec<&str> = families
        .iter()
        .filter(|f| !asked.contains(*f))
        .map(String::as_str)
        .collect();
    assert_eq!(
        unseen,
        [
            "apiserver_flowcontrol_rejected_requests_total",
            "apiserver_flowcontrol_request_dispatch_no_accommodation_total"
        ]
    );
}
