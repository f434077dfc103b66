//! The status page: per replica and level, headroom, queues and top flows, readable without Grafana.
use std::fmt::Write;

// Every value lands in element text (the attributes are fixed strings), so text escaping is the one needed.
use html_escape::encode_text;

use crate::analyze::{LevelStatus, StatusReport};

fn num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.fract() == 0.0 => format!("{v}"),
        Some(v) => format!("{v:.2}"),
        None => "–".into(),
    }
}

pub fn render(report: &StatusReport) -> String {
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">\
         <title>apf-monitor</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
         td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child{text-align:left}\
         .warning{background:#fff3cd}.critical{background:#f8d7da}.err{color:#a00}</style></head><body>\
         <h1>apf-monitor</h1><p><a href=\"/metrics\">/metrics</a> · <a href=\"/api/v1/status\">/api/v1/status</a></p>",
    );
    if !report.alerts.is_empty() {
        h.push_str("<h2>Alerts</h2><table><tr><th>state</th><th>alert</th><th>replica</th><th>priority level</th><th>summary</th><th>remediation</th></tr>");
        for a in &report.alerts {
            let get = |k: &str| encode_text(a.labels.get(k).map(String::as_str).unwrap_or(""));
            let ann = |k: &str| encode_text(a.annotations.get(k).map(String::as_str).unwrap_or(""));
            let class = match a.labels.get("severity").map(String::as_str) {
                Some("critical") if a.state == "firing" => "critical",
                _ if a.state == "firing" => "warning",
                _ => "",
            };
            let _ = write!(
                h,
                "<tr class=\"{class}\"><td>{}</td><td>{} ({})</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td><td style=\"text-align:left\">{}</td></tr>",
                encode_text(&a.state),
                get("alertname"),
                get("severity"),
                get("apiserver"),
                get("priority_level"),
                ann("summary"),
                ann("remediation")
            );
        }
        h.push_str("</table>");
    }
    if report.apiservers.is_empty() {
        h.push_str("<p>No replica scraped yet.</p>");
    }
    for a in &report.apiservers {
        let _ = write!(
            h,
            "<h2>{} <small>{}</small></h2>",
            encode_text(&a.apiserver),
            encode_text(a.kubernetes_version.as_deref().unwrap_or(""))
        );
        for e in &a.errors {
            let _ = write!(h, "<p class=\"err\">{}</p>", encode_text(&e.to_string()));
        }
        h.push_str(
            "<table><tr><th>priority level</th><th>limit</th><th>in use</th><th>headroom</th><th>queued</th>\
             <th>fullest queue</th><th>rejected/s</th><th>to exhaustion</th><th>status</th><th>top flows</th></tr>",
        );
        for l in &a.levels {
            let class = match l.status {
                LevelStatus::Ok => "",
                LevelStatus::Warning => "warning",
                LevelStatus::Critical => "critical",
            };
            let rejected: f64 = l
                .rejected_per_second
                .iter()
                .flatten()
                .fold(0.0, |a, (_, v)| a + v);
            let flows: Vec<String> = l
                .top_flows
                .iter()
                .take(3)
                .map(|f| {
                    format!(
                        "{}/{} ({:.1} waiting, {:.1} seats)",
                        encode_text(&f.flow_schema),
                        encode_text(&f.flow),
                        f.waiting_requests,
                        f.executing_seats
                    )
                })
                .collect();
            let _ = write!(
                h,
                "<tr class=\"{class}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:?}</td><td style=\"text-align:left\">{}</td></tr>",
                encode_text(&l.priority_level),
                num(l.limit_seats),
                num(l.executing_seats),
                num(l.headroom_seats),
                num(l.inqueue_requests),
                num(l.fullest_queue_requests),
                if l.rejected_per_second.is_some() { format!("{rejected:.2}") } else { "–".into() },
                l.seconds_to_exhaustion.map(|s| format!("{s:.0}s")).unwrap_or_else(|| "–".into()),
                l.status,
                flows.join("<br>")
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::{AlertReport, ApiserverReport, LevelReport};

    #[test]
    fn values_are_escaped() {
        let report = StatusReport {
            alerts: vec![AlertReport {
                labels: [("alertname".to_string(), "<script>x</script>".to_string())].into(),
                annotations: [("summary".to_string(), "a & b".to_string())].into(),
                state: "firing".into(),
                ..Default::default()
            }],
            apiservers: vec![ApiserverReport {
                apiserver: "10.0.0.5:6443".into(),
                errors: vec![crate::analyze::Problem::Scrape {
                    endpoint: crate::scrape::Endpoint::Metrics,
                    error: crate::scrape::ScrapeError::Http {
                        status: 500,
                        detail: "<html>".into(),
                    },
                }],
                levels: vec![LevelReport {
                    priority_level: "level<1>".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let h = render(&report);
        assert!(h.contains("&lt;script&gt;x&lt;/script&gt;"), "{h}");
        assert!(!h.contains("<script>"));
        assert!(h.contains("a &amp; b"));
        assert!(h.contains("metrics: HTTP 500: &lt;html&gt;"), "{h}");
        assert!(h.contains("level&lt;1&gt;"));
    }
}
