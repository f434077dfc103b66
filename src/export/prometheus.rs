//! The Prometheus text exposition of the derived metrics and the self-metrics (the public contract of product.md).
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::analyze::StatusReport;
use crate::model::EXEMPT;

/// apf-monitor's own health, per replica and endpoint.
#[derive(Debug, Clone, Default)]
pub struct SelfMetrics {
    /// (apiserver, endpoint) -> seconds the last scrape took.
    pub scrape_duration_seconds: BTreeMap<(String, String), f64>,
    /// (apiserver, endpoint, reason) -> errors; every reason exists at 0 from start-up.
    pub scrape_errors_total: BTreeMap<(String, String, String), u64>,
    /// (apiserver, endpoint) -> Unix time of the last success.
    pub last_success_timestamp_seconds: BTreeMap<(String, String), f64>,
    /// (apiserver, endpoint) -> lines or rows that could not be read.
    pub parse_errors_total: BTreeMap<(String, String), u64>,
    /// (apiserver, endpoint) -> 1 while the endpoint is read, 0 while it answers 403/404 (metrics-only).
    pub endpoint_available: BTreeMap<(String, String), u8>,
    /// apiserver -> gitVersion.
    pub kubernetes_version: BTreeMap<String, String>,
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample; labels are (name, value) pairs, values escaped as the format requires.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            for c in v.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{value}");
    }
    out.push('\n');
}

/// A gauge family over every level of every replica; `value` picks the number (absent -> no series).
fn level_gauge(
    out: &mut String,
    report: &StatusReport,
    name: &str,
    help: &str,
    include_exempt: bool,
    value: impl Fn(&crate::analyze::LevelReport) -> Option<f64>,
) {
    header(out, name, "gauge", help);
    for a in &report.apiservers {
        for l in &a.levels {
            if l.priority_level == EXEMPT && !include_exempt {
                continue;
            }
            if let Some(v) = value(l) {
                sample(
                    out,
                    name,
                    &[
                        ("apiserver", &a.apiserver),
                        ("priority_level", &l.priority_level),
                    ],
                    v,
                );
            }
        }
    }
}

pub fn render(
    report: &StatusReport,
    self_metrics: &SelfMetrics,
    notifications: &BTreeMap<(String, &'static str), u64>,
) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let o = &mut out;
    level_gauge(o, report, "apf_priority_level_limit_seats", "The enforced concurrency limit in seats (current_limit_seats on 1.26+, else request_concurrency_limit).", false, |l| l.limit_seats);
    level_gauge(o, report, "apf_priority_level_nominal_limit_seats", "The nominal concurrency limit in seats (nominal_limit_seats, else request_concurrency_limit).", false, |l| l.nominal_limit_seats);
    level_gauge(
        o,
        report,
        "apf_priority_level_upper_limit_seats",
        "The most seats the level can borrow up to (1.26+).",
        false,
        |l| l.upper_limit_seats,
    );
    level_gauge(
        o,
        report,
        "apf_priority_level_executing_seats",
        "Seats in use by executing requests, summed over flow schemas.",
        true,
        |l| l.executing_seats,
    );
    level_gauge(
        o,
        report,
        "apf_priority_level_headroom_seats",
        "Enforced limit minus seats in use: seats left before requests queue.",
        false,
        |l| l.headroom_seats,
    );
    level_gauge(
        o,
        report,
        "apf_priority_level_headroom_ratio",
        "Headroom divided by the enforced limit.",
        false,
        |l| l.headroom_ratio,
    );
    level_gauge(
        o,
        report,
        "apf_priority_level_inqueue_requests",
        "Requests waiting in the level's queues, summed over flow schemas.",
        false,
        |l| l.inqueue_requests,
    );
    level_gauge(
        o,
        report,
        "apf_priority_level_queue_capacity_requests",
        "queues x queueLengthLimit from the PriorityLevelConfiguration.",
        false,
        |l| l.queue_capacity_requests,
    );
    level_gauge(o, report, "apf_priority_level_fullest_queue_requests", "The most requests waiting in any one queue (dump_queues); at queueLengthLimit the next get queue-full.", false, |l| l.fullest_queue_requests);
    level_gauge(
        o,
        report,
        "apf_priority_level_wait_p99_seconds",
        "99th percentile of the queue wait over the analysis window.",
        false,
        |l| l.wait_p99_seconds,
    );
    level_gauge(o, report, "apf_priority_level_seconds_to_exhaustion", "Headroom divided by its fall per second over the window; absent when headroom is not falling.", false, |l| l.seconds_to_exhaustion);

    let name = "apf_priority_level_rejected_per_second";
    header(
        o,
        name,
        "gauge",
        "APF rejections (HTTP 429) per second over the analysis window, by reason.",
    );
    for a in &report.apiservers {
        for l in a.levels.iter().filter(|l| l.priority_level != EXEMPT) {
            for (reason, v) in l.rejected_per_second.iter().flatten() {
                sample(
                    o,
                    name,
                    &[
                        ("apiserver", &a.apiserver),
                        ("priority_level", &l.priority_level),
                        ("reason", reason),
                    ],
                    *v,
                );
            }
        }
    }
    let name = "apf_flow_schema_rejected_per_second";
    header(
        o,
        name,
        "gauge",
        "APF rejections per second over the analysis window, by flow schema and reason.",
    );
    for a in &report.apiservers {
        for (pl, fs, reason, v) in &a.flow_schema_rejected_per_second {
            sample(
                o,
                name,
                &[
                    ("apiserver", &a.apiserver),
                    ("priority_level", pl),
                    ("flow_schema", fs),
                    ("reason", reason),
                ],
                *v,
            );
        }
    }
    for (name, help, waiting) in [
        ("apf_flow_waiting_requests", "Mean requests of the flow waiting in queues over the window (dump_requests); top flows only.", true),
        ("apf_flow_executing_seats", "Mean seats held by the flow's executing requests over the window (dump_requests, 1.28+); top flows only.", false),
    ] {
        header(o, name, "gauge", help);
        for a in &report.apiservers {
            for l in &a.levels {
                for flow in &l.top_flows {
                    let labels = [("apiserver", a.apiserver.as_str()), ("priority_level", &l.priority_level), ("flow_schema", &flow.flow_schema), ("flow", &flow.flow)];
                    sample(o, name, &labels, if waiting { flow.waiting_requests } else { flow.executing_seats });
                }
            }
        }
    }

    let name = "apf_alert_firing";
    header(
        o,
        name,
        "gauge",
        "1 per firing alert of apf-monitor's built-in rules.",
    );
    for a in report.alerts.iter().filter(|a| a.state == "firing") {
        let get = |k: &str| a.labels.get(k).map(String::as_str).unwrap_or("");
        let labels = [
            ("alertname", get("alertname")),
            ("severity", get("severity")),
            ("apiserver", get("apiserver")),
            ("priority_level", get("priority_level")),
            ("reason", get("reason")),
        ];
        let labels: Vec<(&str, &str)> = labels
            .into_iter()
            .filter(|(k, v)| *k != "reason" || !v.is_empty())
            .collect();
        sample(o, name, &labels, 1.0);
    }
    let name = "apf_monitor_notifications_total";
    header(
        o,
        name,
        "counter",
        "Notifications by receiver and outcome (sent, retried, failed, dropped).",
    );
    for ((receiver, outcome), v) in notifications {
        sample(
            o,
            name,
            &[("receiver", receiver), ("outcome", outcome)],
            *v as f64,
        );
    }
    header(
        o,
        "apf_monitor_build_info",
        "gauge",
        "apf-monitor's version.",
    );
    sample(
        o,
        "apf_monitor_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    header(
        o,
        "apf_monitor_apiserver_info",
        "gauge",
        "The Kubernetes version each replica reports.",
    );
    for (apiserver, version) in &self_metrics.kubernetes_version {
        sample(
            o,
            "apf_monitor_apiserver_info",
            &[("apiserver", apiserver), ("kubernetes_version", version)],
            1.0,
        );
    }
    let pairs = |o: &mut String,
                 name: &str,
                 kind: &str,
                 help: &str,
                 m: &BTreeMap<(String, String), f64>| {
        header(o, name, kind, help);
        for ((apiserver, endpoint), v) in m {
            sample(
                o,
                name,
                &[("apiserver", apiserver), ("endpoint", endpoint)],
                *v,
            );
        }
    };
    pairs(
        o,
        "apf_monitor_scrape_duration_seconds",
        "gauge",
        "How long the last scrape of the endpoint took: fetch, parse and derive.",
        &self_metrics.scrape_duration_seconds,
    );
    pairs(
        o,
        "apf_monitor_last_scrape_success_timestamp_seconds",
        "gauge",
        "Unix time of the endpoint's last successful scrape.",
        &self_metrics.last_success_timestamp_seconds,
    );
    let as_f64 = |m: &BTreeMap<(String, String), u64>| {
        m.iter().map(|(k, v)| (k.clone(), *v as f64)).collect()
    };
    pairs(o, "apf_monitor_parse_errors_total", "counter", "Lines of /metrics or rows of a dump that could not be read (counted, not dropped silently).", &as_f64(&self_metrics.parse_errors_total));
    let available = self_metrics
        .endpoint_available
        .iter()
        .map(|(k, v)| (k.clone(), f64::from(*v)))
        .collect();
    pairs(o, "apf_monitor_endpoint_available", "gauge", "1 while the endpoint is read; 0 while it answers 403/404 (RBAC or an old version): the replica is then read metrics-only.", &available);
    let name = "apf_monitor_scrape_errors_total";
    header(
        o,
        name,
        "counter",
        "Failed scrapes by replica, endpoint and reason.",
    );
    for ((apiserver, endpoint, reason), v) in &self_metrics.scrape_errors_total {
        sample(
            o,
            name,
            &[
                ("apiserver", apiserver),
                ("endpoint", endpoint),
                ("reason", reason),
            ],
            *v as f64,
        );
    }
    out
}
