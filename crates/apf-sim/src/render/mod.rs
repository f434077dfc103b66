//! `/metrics` and the debug dumps, in the layout of the simulated version (k8s.io/apiserver
//! `pkg/util/flowcontrol/metrics/metrics.go`, `apf_controller_debug.go`).
//!
//! Here: what a [`Simulator`] serves; `apf_metrics.rs` and `apiserver_metrics.rs` the families of `/metrics`,
//! `exposition.rs` their text format, `dumps.rs` the three dumps, `go.rs` Go's spelling of numbers and times.
mod apf_metrics;
mod apiserver_metrics;
mod dumps;
mod exposition;
mod go;
pub mod protobuf;

pub(crate) use go::{git_commit, go_version};

use crate::simulator::Simulator;

impl Simulator {
    /// The `/metrics` text of the simulated version.
    pub fn render_metrics(&self) -> String {
        self.lock().render_metrics()
    }
    /// `/debug/api_priority_and_fairness/dump_priority_levels`.
    pub fn render_dump_priority_levels(&self) -> String {
        self.lock().render_dump_priority_levels()
    }
    /// `/debug/api_priority_and_fairness/dump_queues`.
    pub fn render_dump_queues(&self) -> String {
        self.lock().render_dump_queues()
    }
    /// `/debug/api_priority_and_fairness/dump_requests`, with `?includeRequestDetails=1` when `include_details`.
    pub fn render_dump_requests(&self, include_details: bool) -> String {
        self.lock().render_dump_requests(include_details)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::scenario::ScenarioSource;
    use crate::simulator::tests::sim;
    use crate::tabwriter::{row, tabwrite};

    fn metrics(minor: u32, src: ScenarioSource, secs: u64) -> String {
        let s = sim(minor, src, 1);
        s.step(Duration::from_secs(secs));
        s.render_metrics()
    }

    fn has_family(text: &str, name: &str) -> bool {
        text.contains(&format!("# TYPE apiserver_flowcontrol_{name} "))
    }

    fn help(text: &str, name: &str) -> String {
        let prefix = format!("# HELP apiserver_flowcontrol_{name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_default()
            .to_string()
    }

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn metric_families_per_version() {
        let m31 = metrics(31, ScenarioSource::Idle, 20);
        assert!(!m31.contains("apiserver_flowcontrol_request_concurrency_limit"));
        assert!(help(&m31, "request_concurrency_in_use")
            .starts_with("[ALPHA] (Deprecated since 1.31.0) "));
        let m30 = metrics(30, ScenarioSource::Idle, 20);
        assert!(help(&m30, "request_concurrency_limit")
            .starts_with("[ALPHA] (Deprecated since 1.30.0) Nominal"));
        let m32 = metrics(32, ScenarioSource::Idle, 20);
        assert!(!m32.contains("request_concurrency_in_use"));
        assert!(has_family(&m32, "current_executing_seats"));

        let m25 = metrics(25, ScenarioSource::Idle, 20);
        assert!(!m25.contains("nominal_limit_seats") && !m25.contains("current_limit_seats"));
        assert_eq!(
            sample(
                &m25,
                "apiserver_flowcontrol_request_concurrency_limit{priority_level=\"workload-low\"}"
            ),
            Some(245.0)
        );
        assert!(!m25.contains("request_concurrency_limit{priority_level=\"exempt\"}"));
        assert!(
            has_family(&m25, "request_concurrency_in_use")
                && !has_family(&m25, "current_executing_seats")
        );
        let exempt_families = |text: &str| {
            let mut v: Vec<String> = text
                .lines()
                .filter(|l| l.contains("priority_level=\"exempt\"") && !l.contains("_bucket"))
                .map(|l| l.split('{').next().unwrap_or_default().to_string())
                .collect();
            v.dedup();
            v
        };
        assert_eq!(
            exempt_families(&m25),
            vec![
                "apiserver_flowcontrol_dispatched_requests_total",
                "apiserver_flowcontrol_request_execution_seconds_sum",
                "apiserver_flowcontrol_request_execution_seconds_count",
            ]
        );

        let m35 = metrics(35, ScenarioSource::Idle, 20);
        assert_eq!(
            sample(
                &m35,
                "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"exempt\"}"
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(
                &m35,
                "apiserver_flowcontrol_upper_limit_seats{priority_level=\"exempt\"}"
            ),
            Some(600.0)
        );
        assert_eq!(
            sample(
                &m35,
                "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"workload-low\"}"
            ),
            Some(245.0)
        );
        assert_eq!(
            sample(
                &m35,
                "apiserver_flowcontrol_lower_limit_seats{priority_level=\"workload-low\"}"
            ),
            Some(24.0)
        );
        assert!(m35.contains("kubernetes_build_info{") && m35.contains("git_version=\"v1.35.0\""));

        let m29 = metrics(29, ScenarioSource::Idle, 20);
        assert_eq!(
            sample(
                &m29,
                "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"catch-all\"}"
            ),
            Some(13.0)
        );
        assert_eq!(
            sample(
                &m29,
                "apiserver_flowcontrol_request_concurrency_limit{priority_level=\"workload-low\"}"
            ),
            Some(245.0)
        );
        assert!(has_family(&m29, "current_inqueue_seats"));
        assert!(!has_family(
            &metrics(28, ScenarioSource::Idle, 1),
            "current_inqueue_seats"
        ));

        let m21 = metrics(21, ScenarioSource::Idle, 20);
        assert!(!m21.contains("node-high"));
        assert!(!has_family(&m21, "request_concurrency_in_use"));
        assert!(help(&m21, "current_executing_requests").ends_with("Fairness system"));
        let m20 = metrics(20, ScenarioSource::Idle, 1);
        assert_eq!(
            sample(
                &m20,
                "apiserver_flowcontrol_request_concurrency_limit{priority_level=\"workload-low\"}"
            ),
            Some(293.0)
        );
        assert!(m20.contains("# HELP apiserver_current_inflight_requests [ALPHA]"));
        assert!(m29.contains("# HELP apiserver_current_inflight_requests [STABLE]"));
    }

    #[test]
    fn stability_and_buckets() {
        let m27 = metrics(27, ScenarioSource::Idle, 20);
        assert!(help(&m27, "dispatched_requests_total").starts_with("[ALPHA] "));
        assert!(help(&m27, "nominal_limit_seats").starts_with("[ALPHA] "));
        let wait15 = |m: &str| {
            m.lines().any(|l| {
                l.starts_with("apiserver_flowcontrol_request_wait_duration_seconds_bucket")
                    && l.contains("le=\"15\"")
            })
        };
        assert!(!wait15(&m27));
        let m28 = metrics(28, ScenarioSource::Idle, 20);
        assert!(help(&m28, "dispatched_requests_total").starts_with("[BETA] "));
        assert!(help(&m28, "nominal_limit_seats").starts_with("[BETA] "));
        assert!(help(&m28, "current_limit_seats").starts_with("[ALPHA] "));
        assert!(wait15(&m28));
    }

    #[test]
    fn execution_and_estimate_histograms() {
        let m23 = metrics(23, ScenarioSource::Idle, 20);
        assert!(m23.contains("request_execution_seconds_count{flow_schema=\"system-nodes\",priority_level=\"system\"}"));
        assert!(!has_family(&m23, "work_estimated_seats"));
        assert!(has_family(&m23, "current_r"));
        assert!(!has_family(
            &metrics(21, ScenarioSource::Idle, 1),
            "current_r"
        ));
        let m24 = metrics(24, ScenarioSource::Idle, 20);
        assert!(m24.contains(
            "request_execution_seconds_count{flow_schema=\"system-nodes\",priority_level=\"system\",type=\"regular\"}"
        ));
        assert!(m24.contains("work_estimated_seats_bucket{flow_schema=\"service-accounts\",priority_level=\"workload-low\",le=\"10\"}"));
        let m34 = metrics(34, ScenarioSource::Idle, 20);
        assert!(m34.contains("work_estimated_seats_bucket{flow_schema=\"service-accounts\",priority_level=\"workload-low\",le=\"100\"}"));
        assert!(m34.contains("request_queue_length_after_enqueue_bucket{flow_schema=\"system-nodes\",priority_level=\"system\",le=\"10\"}"));
    }

    #[test]
    fn idle_priority_levels_dump_matches_fixture_layout() {
        // At start every counter is 0; the 2023 docs fixture differs only in DispatchedRequests and IsIdle.
        let fixture = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/k8swebsite-2023-dump_priority_levels.txt"
        ))
        .unwrap_or_else(|e| panic!("fixture: {e}"));
        let mut expected = String::new();
        for (i, line) in fixture.lines().enumerate() {
            let mut cells: Vec<String> = line.split(',').map(|c| c.trim().to_string()).collect();
            if i > 0 {
                cells[2] = "true".into();
                cells[6] = "0".into();
            }
            expected += &row(&cells);
            expected.push('\n');
        }
        let s = sim(28, ScenarioSource::Idle, 1);
        assert_eq!(s.render_dump_priority_levels(), tabwrite(&expected));
    }

    #[test]
    fn rejections_appear_only_after_one() {
        let idle = metrics(33, ScenarioSource::Idle, 30);
        assert!(!idle.contains("rejected_requests_total"));
        let storm = metrics(33, ScenarioSource::Storm, 30);
        // 10-seat LISTs stall the level with a few seats free (no narrower head jumps a wider one), so the queues
        // never count as full: the requests wait out their 15 s.
        assert!(storm.contains(
            "apiserver_flowcontrol_rejected_requests_total{flow_schema=\"service-accounts\",priority_level=\"workload-low\",reason=\"time-out\"}"
        ));
        assert!(storm.contains("apiserver_request_terminations_total{code=\"429\""));
        assert!(storm.contains("apiserver_request_total{code=\"429\""));
        let old = metrics(23, ScenarioSource::Storm, 30);
        assert!(old.contains("apiserver_request_terminations_total{code=\"429\""));
        assert!(!old.contains("apiserver_request_total{code=\"429\""));
    }

    #[test]
    fn metrics_are_valid_exposition() {
        let text = metrics(29, ScenarioSource::Storm, 30);
        let lines: Vec<std::io::Result<String>> = text.lines().map(|l| Ok(l.to_string())).collect();
        let scrape = prometheus_parse::Scrape::parse(lines.into_iter()).unwrap();
        assert!(scrape.samples.len() > 50);
        let mut seen = std::collections::BTreeSet::new();
        let mut last_family = String::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(name > last_family, "families sorted: {name}");
                assert!(seen.insert(name.clone()), "family {name} once");
                last_family = name;
            } else if !l.starts_with('#') {
                assert!(l.starts_with(&last_family), "{l} under {last_family}");
            }
        }
        let big = text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_duration_seconds_bucket"))
            .count();
        assert!(big >= 200);
    }

    fn columns(dump: &str) -> Vec<usize> {
        dump.lines().map(|l| l.split(',').count()).collect()
    }

    #[test]
    fn dump_priority_levels_layouts() {
        let s = sim(26, ScenarioSource::Idle, 1);
        s.step(Duration::from_secs(5));
        let d = s.render_dump_priority_levels();
        assert!(columns(&d).iter().all(|&n| n == 6));
        assert!(d.contains(
            "exempt,            <none>,       <none>, <none>,      <none>,          <none>\n"
        ));
        let s = sim(27, ScenarioSource::Idle, 1);
        let d = s.render_dump_priority_levels();
        assert!(columns(&d).iter().all(|&n| n == 10));
        assert!(d.lines().nth(1).unwrap().starts_with("catch-all,"));
        assert!(d.contains("<none>"));
        let s = sim(29, ScenarioSource::Storm, 1);
        s.step(Duration::from_secs(30));
        let d = s.render_dump_priority_levels();
        assert!(!d.contains("<none>"));
        let names: Vec<&str> = d
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        // Time-outs land in CancelledRequests from 1.29, and among the rejected.
        let wl = d.lines().find(|l| l.starts_with("workload-low,")).unwrap();
        let cells: Vec<&str> = wl.split(',').map(str::trim).collect();
        assert_eq!(cells[8], "0");
        assert_ne!(cells[9], "0");
        assert!(cells[7].parse::<u64>().unwrap() >= cells[9].parse::<u64>().unwrap());
    }

    #[test]
    fn dump_queues_layouts() {
        let s = sim(22, ScenarioSource::Idle, 1);
        s.step(Duration::from_secs(5));
        let d = s.render_dump_queues();
        assert!(d.starts_with(
            "PriorityLevelName, Index,  PendingRequests, ExecutingRequests, VirtualStart\n"
        ));
        assert!(columns(&d).iter().all(|&n| n == 5));
        assert!(
            d.contains("exempt,            <none>, <none>,          <none>,            <none>\n")
        );
        assert!(d.contains("workload-low,      127,"));
        let s = sim(25, ScenarioSource::Idle, 1);
        s.step(Duration::from_secs(5));
        let d = s.render_dump_queues();
        assert!(columns(&d).iter().all(|&n| n == 9));
        assert!(d
            .lines()
            .any(|l| l.starts_with("exempt,") && l.contains("<none>")));
        assert!(d.contains("0.00000000ss"));
        let s = sim(28, ScenarioSource::Idle, 1);
        let d = s.render_dump_queues();
        assert!(!d.contains("exempt,") && !d.contains("catch-all,"));
        assert_eq!(
            d.lines()
                .filter(|l| l.starts_with("leader-election,"))
                .count(),
            16
        );
    }

    #[test]
    fn dump_requests_layouts() {
        let s = sim(22, ScenarioSource::Storm, 1);
        s.step(Duration::from_secs(20));
        let d = s.render_dump_requests(false);
        assert!(d.starts_with("PriorityLevelName, FlowSchemaName,"));
        assert!(d.lines().next().unwrap().contains("FlowDistingsher"));
        assert!(columns(&d).iter().all(|&n| n == 6));
        let d = s.render_dump_requests(true);
        assert!(columns(&d).iter().all(|&n| n == 14));

        let s = sim(25, ScenarioSource::Storm, 1);
        s.step(Duration::from_secs(20));
        let d = s.render_dump_requests(false);
        assert!(columns(&d).iter().all(|&n| n == 9));
        assert!(!d.contains(",  -1,"), "no executing rows before 1.28");
        assert!(d.lines().skip(1).all(|l| !l.contains(" -1,")));

        let s = sim(29, ScenarioSource::Storm, 1);
        s.step(Duration::from_secs(20));
        let d = s.render_dump_requests(false);
        assert!(columns(&d).iter().all(|&n| n == 10));
        assert!(d.contains("0001-01-01T00:00:00Z"));
        // Executing requests are listed with RequestIndexInQueue -1 and a real StartTime.
        let exec = d.lines().find(|l| {
            l.starts_with("workload-low,") && l.split(',').nth(3).unwrap().trim() == "-1"
        });
        assert!(exec.is_some_and(|l| l.trim_end().ends_with('Z') && !l.contains("0001-01-01")));
        let d = s.render_dump_requests(true);
        assert!(columns(&d).iter().all(|&n| n == 18));
        assert!(d.contains("system:serviceaccount:monitoring:agent, list,"));
        assert!(d.contains("/api/v1/pods"));
        // Exempt executing rows have queue -1 and an empty distinguisher.
        let s = sim(29, ScenarioSource::Idle, 1);
        for _ in 0..2000 {
            s.step(Duration::from_millis(10));
            let d = s.render_dump_requests(false);
            if let Some(l) = d.lines().find(|l| l.starts_with("exempt,")) {
                let cells: Vec<&str> = l.split(',').map(str::trim).collect();
                assert_eq!(&cells[1..5], &["exempt", "-1", "-1", ""]);
                return;
            }
        }
        panic!("no exempt request seen executing");
    }
}
