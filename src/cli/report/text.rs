//! The report for a terminal (a table, worst first, then each incident) and for a postmortem (Markdown).
use std::fmt::Write;

use super::shape::{AlertReplay, IncidentReport, Report};
use crate::cli::table::{columns, seconds};

/// `2026-11-24T10:00:16Z` as `2026-11-24 10:00:16`.
pub(super) fn clock(t: &str) -> String {
    t.trim_end_matches('Z').replacen('T', " ", 1)
}

fn maybe_clock(t: &Option<String>) -> String {
    t.as_deref().map_or("-".into(), clock)
}

/// Seconds as `4m 30s`.
fn span(seconds: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(seconds.abs().round() as u64))
        .to_string()
}

/// How far ahead of the first 429 an alert fired: `4m 30s before`, `1m after`, `at the first 429`.
fn ahead(lead_seconds: f64) -> String {
    match lead_seconds {
        s if s.abs() < 0.5 => "at the first 429".into(),
        s if s > 0.0 => format!("{} before", span(s)),
        s => format!("{} after", span(s)),
    }
}

/// An alert's lead in a sentence: `fired 4m 30s before the first 429`.
pub(super) fn lead(a: &AlertReplay) -> String {
    match a.lead_seconds {
        None => "never fired".into(),
        Some(s) if s.abs() < 0.5 => "fired at the first 429".into(),
        Some(s) => format!("fired {} the first 429", ahead(s)),
    }
}

/// The replayed alerts as people read them: each that fired, with its lead; those that only went pending, one line
/// per alert name.
pub(super) fn alert_lines(i: &IncidentReport) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    let mut only_pending: Vec<(&str, usize, &str)> = Vec::new();
    for a in &i.alerts {
        let name = match &a.reason {
            Some(r) => format!("{} {r}", a.alertname),
            None => a.alertname.clone(),
        };
        let severity = a.severity.as_deref().unwrap_or("-");
        if a.fired.is_some() {
            lines.push((
                format!("{name} ({severity})"),
                format!("pending {}, {}", clock(&a.pending_at), lead(a)),
            ));
        } else {
            match only_pending.iter_mut().find(|p| p.0 == a.alertname) {
                Some(p) => p.1 += 1,
                None => only_pending.push((&a.alertname, 1, &a.pending_at)),
            }
        }
    }
    for (name, times, first) in only_pending {
        let times = if times == 1 {
            "once".to_string()
        } else {
            format!("{times} times")
        };
        lines.push((
            name.to_string(),
            format!(
                "pending {times} from {} without firing (its `for` not reached)",
                clock(first)
            ),
        ));
    }
    lines
}

/// The replica as people name it: `cluster/apiserver`, or the apiserver alone.
pub(super) fn replica(i: &IncidentReport) -> String {
    match &i.cluster {
        Some(c) => format!("{c}/{}", i.apiserver),
        None => i.apiserver.clone(),
    }
}

pub(super) fn count(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The first alert to fire, with its lead: the answer to "would apf-monitor have warned us in time".
fn first_warning(i: &IncidentReport) -> (String, String) {
    i.alerts
        .iter()
        .filter(|a| a.fired.is_some())
        .min_by(|a, b| {
            a.fired
                .unwrap_or(f64::MAX)
                .total_cmp(&b.fired.unwrap_or(f64::MAX))
        })
        .map_or(("none".into(), "-".into()), |a| {
            let lead = ahead(a.lead_seconds.unwrap_or_default());
            (a.alertname.clone(), lead)
        })
}

fn waiting(i: &IncidentReport) -> String {
    match (i.max_waiting_requests, i.queue_capacity_requests) {
        (Some(w), Some(c)) => format!("{} of {} queue places", count(w), count(c)),
        (Some(w), None) => count(w),
        _ => "-".into(),
    }
}

fn schemas(i: &IncidentReport) -> String {
    i.flow_schemas
        .iter()
        .map(|s| {
            let reasons = s
                .reasons
                .iter()
                .map(|(r, n)| format!("{r} {}", count(*n)))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{} {} ({reasons})", s.flow_schema, count(s.rejected))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn heading(r: &Report) -> String {
    let what = match r.incidents.len() {
        0 => "No incident".to_string(),
        1 => "1 incident".to_string(),
        n => format!("{n} incidents"),
    };
    format!(
        "{what} from {} to {} (step {}, {} replicas, {})",
        clock(&r.from),
        clock(&r.to),
        r.step,
        r.replicas,
        r.sources.join(", ")
    )
}

pub(super) fn table(r: &Report) -> String {
    let mut out = heading(r);
    out.push('\n');
    if r.incidents.is_empty() {
        out.push_str(
            "No non-exempt priority level of any replica rejected a request in this window.\n",
        );
        return out;
    }
    out.push('\n');
    let mut rows = vec![[
        "REPLICA",
        "PRIORITY LEVEL",
        "FIRST 429",
        "REJECTED",
        "PEAK/S",
        "FIRST ALERT",
        "LEAD",
    ]
    .map(String::from)
    .to_vec()];
    for i in &r.incidents {
        let (alert, lead) = first_warning(i);
        rows.push(vec![
            replica(i),
            i.priority_level.clone(),
            maybe_clock(&i.first_rejection),
            count(i.rejected_total),
            format!("{:.1}", i.peak_rejected_per_second),
            alert,
            lead,
        ]);
    }
    out.push_str(&columns(&rows));
    for (n, i) in r.incidents.iter().enumerate() {
        let _ = writeln!(
            out,
            "\n#{} {} {}: {} rejected, peak {:.1}/s",
            n + 1,
            replica(i),
            i.priority_level,
            count(i.rejected_total),
            i.peak_rejected_per_second
        );
        let lines = vec![
            vec![
                "  first 429".into(),
                maybe_clock(&i.first_rejection),
                "last 429".into(),
                maybe_clock(&i.last_rejection),
                "recovered".into(),
                i.recovered_at
                    .as_deref()
                    .map_or("not by the window's end".into(), clock),
            ],
            vec![
                "  headroom low".into(),
                maybe_clock(&i.headroom_low_since),
                "most waiting".into(),
                waiting(i),
                "longest p99 wait".into(),
                seconds(i.longest_wait_p99_seconds),
            ],
        ];
        out.push_str(&columns(&lines));
        if !i.flow_schemas.is_empty() {
            let _ = writeln!(out, "  flow schemas: {}", schemas(i));
        }
        for (name, what) in alert_lines(i) {
            let _ = writeln!(out, "  {name}: {what}");
        }
        if i.alerts.is_empty() {
            let _ = writeln!(out, "  no alert of apf-monitor's rules would have fired");
        }
        if let Some(r) = &i.remediation {
            let _ = writeln!(out, "  remediation: {r}");
        }
    }
    out
}

/// Pipes and line breaks would end a Markdown table's cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

pub(super) fn markdown(r: &Report) -> String {
    let mut out = format!("## API Priority and Fairness: {}\n\n", heading(r));
    if r.incidents.is_empty() {
        out.push_str(
            "No non-exempt priority level of any replica rejected a request in this window.\n",
        );
        return out;
    }
    out.push_str(
        "| Replica | Priority level | First 429 | Rejected | Peak/s | First alert | Lead |\n",
    );
    out.push_str("|---|---|---|---:|---:|---|---|\n");
    for i in &r.incidents {
        let (alert, lead) = first_warning(i);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} | {} | {} |",
            cell(&replica(i)),
            cell(&i.priority_level),
            maybe_clock(&i.first_rejection),
            count(i.rejected_total),
            i.peak_rejected_per_second,
            cell(&alert),
            lead
        );
    }
    for (n, i) in r.incidents.iter().enumerate() {
        let _ = writeln!(
            out,
            "\n### {}. `{}` on `{}`\n",
            n + 1,
            i.priority_level,
            replica(i)
        );
        let _ = writeln!(
            out,
            "- **429s**: {} from {} to {}, peak {:.1}/s; recovered {}",
            count(i.rejected_total),
            maybe_clock(&i.first_rejection),
            maybe_clock(&i.last_rejection),
            i.peak_rejected_per_second,
            i.recovered_at
                .as_deref()
                .map_or("not by the window's end".into(), clock)
        );
        let _ = writeln!(
            out,
            "- **Headroom low since**: {}; most waiting: {}; longest p99 wait: {}",
            maybe_clock(&i.headroom_low_since),
            waiting(i),
            seconds(i.longest_wait_p99_seconds)
        );
        if !i.flow_schemas.is_empty() {
            let _ = writeln!(out, "- **Flow schemas rejected**: {}", cell(&schemas(i)));
        }
        if i.alerts.is_empty() {
            out.push_str("- **apf-monitor's rules**: none would have fired\n");
        } else {
            out.push_str("- **apf-monitor's rules, replayed**:\n");
            for (name, what) in alert_lines(i) {
                let _ = writeln!(out, "  - `{name}`: {}", cell(&what));
            }
        }
        if let Some(r) = &i.remediation {
            let _ = writeln!(out, "- **Remediation**: {}", cell(r));
        }
    }
    out
}
