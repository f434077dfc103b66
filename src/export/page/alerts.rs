//! The alerts of the status page, under the levels, worst first: those of one priority level that share one fix in
//! one group (the fix read once), each alert's line with its summary, and the long texts (fix, numbers, flows,
//! manifest) folded. Laid out by `templates/status/alerts.html`.
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

/// A group as the page shows it: each alert's line, then folded, the fix read once, the numbers, the flows and the
/// manifest.
pub(super) struct Group<'a> {
    /// The worst alert's state and severity: the card's mark.
    pub(super) state: &'a str,
    pub(super) severity: &'static str,
    pub(super) alerts: Vec<Line<'a>>,
    pub(super) remediation: Option<&'a str>,
    pub(super) descriptions: Vec<Description<'a>>,
    pub(super) flows: Vec<&'a str>,
    pub(super) manifest: Option<&'a str>,
    /// What the fold holds, in words ("fix, numbers and manifest"); empty: nothing to fold.
    pub(super) folded: String,
}

/// One alert: state, name, severity, where, since when, its runbook and its summary.
pub(super) struct Line<'a> {
    pub(super) state: &'a str,
    /// Coloured only while firing.
    pub(super) state_class: &'static str,
    pub(super) name: &'a str,
    pub(super) severity: &'static str,
    pub(super) replica: &'a str,
    pub(super) priority_level: Option<&'a str>,
    pub(super) since: Option<&'a str>,
    pub(super) runbook: Option<&'a str>,
    pub(super) summary: Option<&'a str>,
}

/// An alert's numbers in words (its `description`).
pub(super) struct Description<'a> {
    pub(super) name: &'a str,
    pub(super) replica: &'a str,
    pub(super) text: &'a str,
}

fn label<'a>(a: &'a AlertReport, k: &str) -> &'a str {
    a.labels.get(k).map(String::as_str).unwrap_or("")
}

pub(super) fn alerts(alerts: &[AlertReport]) -> Vec<Group<'_>> {
    groups(alerts)
        .into_iter()
        .map(|g| {
            let worst = g.alerts[0];
            let mut flows: Vec<&str> = g
                .alerts
                .iter()
                .filter_map(|a| annotation(a, "top_flows"))
                .collect();
            flows.dedup();
            let mut group = Group {
                state: &worst.state,
                severity: severity_of(worst),
                remediation: annotation(worst, "remediation"),
                descriptions: g
                    .alerts
                    .iter()
                    .filter_map(|a| {
                        Some(Description {
                            name: label(a, "alertname"),
                            replica: label(a, "apiserver"),
                            text: annotation(a, "description")?,
                        })
                    })
                    .collect(),
                flows,
                manifest: g
                    .alerts
                    .iter()
                    .find_map(|a| annotation(a, "remediation_manifest")),
                alerts: g.alerts.iter().map(|a| line(a)).collect(),
                folded: String::new(),
            };
            group.folded = folded(&group);
            group
        })
        .collect()
}

fn folded(g: &Group) -> String {
    let parts: Vec<&str> = [
        ("fix", g.remediation.is_some()),
        ("numbers", !g.descriptions.is_empty()),
        ("flows", !g.flows.is_empty()),
        ("manifest", g.manifest.is_some()),
    ]
    .into_iter()
    .filter_map(|(what, held)| held.then_some(what))
    .collect();
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

fn line(a: &AlertReport) -> Line<'_> {
    let severity = severity_of(a);
    Line {
        state: &a.state,
        state_class: if a.state == "firing" { severity } else { "" },
        name: label(a, "alertname"),
        severity,
        replica: label(a, "apiserver"),
        priority_level: Some(label(a, "priority_level")).filter(|l| !l.is_empty()),
        since: a.active_since.as_deref(),
        // Only web links: a runbook URL from the config must not become a `javascript:` link.
        runbook: annotation(a, "runbook_url")
            .filter(|u| u.starts_with("https://") || u.starts_with("http://")),
        summary: annotation(a, "summary"),
    }
}
