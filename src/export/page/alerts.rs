//! The alerts at the top of the status page, worst first: those of one priority level that share one fix in one
//! group (the fix read once), each with its summary and the manifest to apply.
use std::fmt::Write;

use html_escape::{encode_double_quoted_attribute as attr, encode_text as text};

use crate::analyze::AlertReport;

/// Worst first: firing critical, firing warning, pending, then muted and resolved ones.
fn alert_rank(a: &AlertReport) -> (u8, u8) {
    let state = match a.state.as_str() {
        "firing" => 0,
        "pending" => 1,
        "silenced" | "inhibited" => 2,
        _ => 3,
    };
    let severity = match a.labels.get("severity").map(String::as_str) {
        Some("critical") => 0,
        Some("warning") => 1,
        _ => 2,
    };
    (state, severity)
}

fn annotation<'a>(a: &'a AlertReport, k: &str) -> Option<&'a str> {
    a.annotations
        .get(k)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

fn severity_of(a: &AlertReport) -> &'static str {
    match a.labels.get("severity").map(String::as_str) {
        Some("critical") => "critical",
        Some("warning") => "warning",
        _ => "info",
    }
}

/// Alerts of one priority level that share one fix: at an incident's worst, the same level's alerts on every
/// replica say the same thing, and the fix is read once.
pub(super) struct AlertGroup<'a> {
    pub(super) alerts: Vec<&'a AlertReport>,
}

pub(super) fn groups(alerts: &[AlertReport]) -> Vec<AlertGroup<'_>> {
    let mut sorted: Vec<&AlertReport> = alerts.iter().collect();
    sorted.sort_by_key(|a| alert_rank(a));
    let mut groups: Vec<(Option<&str>, Option<&str>, AlertGroup)> = Vec::new();
    for a in sorted {
        let key = (
            a.labels.get("priority_level").map(String::as_str),
            annotation(a, "remediation"),
        );
        match groups.iter_mut().find(|(l, r, _)| (*l, *r) == key) {
            Some((_, _, g)) => g.alerts.push(a),
            None => groups.push((key.0, key.1, AlertGroup { alerts: vec![a] })),
        }
    }
    // Alerts were sorted worst first, so each group's first alert is its worst, and groups come worst first.
    groups.into_iter().map(|(_, _, g)| g).collect()
}

pub(super) fn render_alerts(h: &mut String, alerts: &[AlertReport]) {
    if alerts.is_empty() {
        return;
    }
    h.push_str("<section class=\"alerts\" id=\"alerts\"><h2>Alerts</h2>");
    for g in groups(alerts) {
        let worst = g.alerts[0];
        let _ = write!(
            h,
            "<article class=\"alert {} {}\"><ul class=\"members\">",
            attr(&worst.state),
            severity_of(worst)
        );
        for a in &g.alerts {
            render_alert_line(h, a);
        }
        h.push_str("</ul>");
        if let Some(r) = annotation(worst, "remediation") {
            let _ = write!(h, "<p class=\"remediation\"><b>Fix:</b> {}</p>", text(r));
        }
        // The numbers and the manifest are there when wanted, folded so that many alerts still fit a screen.
        let mut details = String::new();
        for a in &g.alerts {
            if let Some(d) = annotation(a, "description") {
                let _ = write!(
                    details,
                    "<p><b>{}</b> {}: {}</p>",
                    text(a.labels.get("alertname").map(String::as_str).unwrap_or("")),
                    text(a.labels.get("apiserver").map(String::as_str).unwrap_or("")),
                    text(d)
                );
            }
        }
        let mut flows: Vec<&str> = g
            .alerts
            .iter()
            .filter_map(|a| annotation(a, "top_flows"))
            .collect();
        flows.dedup();
        for f in flows {
            let _ = write!(details, "<p>Flows: {}</p>", text(f));
        }
        let manifest = g
            .alerts
            .iter()
            .find_map(|a| annotation(a, "remediation_manifest"));
        if let Some(m) = manifest {
            let _ = write!(
                details,
                "<p>Manifest (<code>kubectl apply -f -</code>):</p><pre>{}</pre>",
                text(m)
            );
        }
        if !details.is_empty() {
            let _ = write!(
                h,
                "<details><summary>{}</summary>{details}</details>",
                if manifest.is_some() {
                    "numbers, flows and manifest"
                } else {
                    "numbers and flows"
                },
            );
        }
        h.push_str("</article>");
    }
    h.push_str("</section>");
}

/// One alert: state, name, severity, where, since when, and its summary.
fn render_alert_line(h: &mut String, a: &AlertReport) {
    let label = |k: &str| a.labels.get(k).map(String::as_str).unwrap_or("");
    let severity = severity_of(a);
    let _ = write!(
        h,
        "<li class=\"{}\"><span class=\"badge {}\">{}</span> <b>{}</b> <span class=\"badge {severity}\">{severity}</span> \
         <span class=\"muted\">{}{}{}</span>",
        attr(&a.state),
        if a.state == "firing" { severity } else { "" },
        text(&a.state),
        text(label("alertname")),
        text(label("apiserver")),
        match label("priority_level") {
            "" => String::new(),
            l => format!(" · {}", text(l)),
        },
        a.active_since
            .as_deref()
            .map(|s| format!(" · since {}", text(s)))
            .unwrap_or_default(),
    );
    // Only web links: a runbook URL from the config must not become a `javascript:` link.
    if let Some(u) = annotation(a, "runbook_url")
        .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
    {
        let _ = write!(h, " · <a href=\"{}\">runbook</a>", attr(u));
    }
    if let Some(s) = annotation(a, "summary") {
        let _ = write!(h, "<br><span class=\"summary\">{}</span>", text(s));
    }
    h.push_str("</li>");
}
