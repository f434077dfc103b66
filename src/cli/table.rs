//! `check --output table`: the status page's view in a terminal. Bars and colour when standard output is a
//! terminal (colour off with `NO_COLOR`, as no-color.org asks); plain text for pipes, files and CI logs.
use std::fmt::Write;
use std::io::IsTerminal;

use crate::analyze::round::shown;
use crate::analyze::{LevelReport, LevelStatus, StatusReport};
use apf::model::EXEMPT;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    /// A bar of seats in use per level.
    pub bars: bool,
    /// ANSI colours for statuses and severities.
    pub colour: bool,
}

/// Whether output to a stream may be coloured: only a terminal, and never when `NO_COLOR` is set to anything but the
/// empty string (no-color.org). The table and the logs both ask this.
pub fn colour_on(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

impl Style {
    /// Bars on a terminal; colours too unless `NO_COLOR` says otherwise ([`colour_on`]).
    pub fn for_stdout() -> Self {
        let tty = std::io::stdout().is_terminal();
        Self {
            bars: tty,
            colour: colour_on(tty),
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    /// Green, yellow, red; bold red for critical.
    fn status(&self, status: LevelStatus, s: &str) -> String {
        match status {
            LevelStatus::Ok => self.paint("32", s),
            LevelStatus::Warning => self.paint("33", s),
            LevelStatus::Critical => self.paint("1;31", s),
        }
    }
}

pub(super) fn num(v: Option<f64>) -> String {
    v.map(shown).unwrap_or_else(|| "-".into())
}

/// Bar cells: seats in use against the larger of the enforced and the nominal limit.
const BAR_WIDTH: usize = 20;

/// `█` seats in use, `░` free seats under the enforced limit, `·` seats lent away (nominal above the limit), `│` the
/// nominal limit.
fn bar(l: &LevelReport) -> String {
    let (Some(limit), Some(used)) = (l.limit_seats, l.executing_seats) else {
        return " ".repeat(BAR_WIDTH);
    };
    let scale = limit.max(l.nominal_limit_seats.unwrap_or(0.0)).max(used);
    if scale <= 0.0 {
        return " ".repeat(BAR_WIDTH);
    }
    let cells = |v: f64| ((v / scale * BAR_WIDTH as f64).round() as usize).min(BAR_WIDTH);
    let (used, limit) = (cells(used), cells(limit));
    let nominal = l.nominal_limit_seats.map(cells);
    (0..BAR_WIDTH)
        .map(|i| {
            if i < used {
                '█'
            } else if nominal.is_some_and(|n| n > 0 && i + 1 == n) {
                '│'
            } else if i < limit {
                '░'
            } else {
                '·'
            }
        })
        .collect()
}

fn status_word(l: &LevelReport) -> String {
    if l.priority_level == EXEMPT {
        "exempt".to_string()
    } else {
        format!("{:?}", l.status).to_lowercase()
    }
}

pub fn render(report: &StatusReport, code: u8, style: Style) -> String {
    let mut out = String::new();
    for a in &report.apiservers {
        let _ = writeln!(
            out,
            "{}{}{}",
            style.paint("1", &format!("apiserver {}", a.apiserver)),
            a.kubernetes_version
                .as_deref()
                .map(|v| format!(" ({v})"))
                .unwrap_or_default(),
            a.cluster
                .as_deref()
                .map(|c| format!(" in cluster {c}"))
                .unwrap_or_default()
        );
        for e in &a.errors {
            let _ = writeln!(out, "  {} {e}", style.paint("31", "error:"));
        }
        if a.levels.is_empty() {
            let _ = writeln!(out, "  no APF metrics read");
            continue;
        }
        if let Some(note) = a.absent_without_dumps() {
            let _ = writeln!(out, "  {} {note}", style.paint("2", "note:"));
        }
        let _ = writeln!(
            out,
            "  {:<24} {:>7} {:>7} {:>7} {:>9} {:>7} {:>8} {:>11}  {}STATUS",
            "PRIORITY LEVEL",
            "NOMINAL",
            "LIMIT",
            "IN USE",
            "HEADROOM",
            "QUEUED",
            "FULLEST",
            "REJECTED/S",
            if style.bars {
                format!("{:<w$}  ", "SEATS IN USE", w = BAR_WIDTH)
            } else {
                String::new()
            },
        );
        for l in &a.levels {
            let rejected = l
                .rejected_per_second
                .as_ref()
                .map(|r| r.values().sum::<f64>());
            let word = status_word(l);
            let _ = writeln!(
                out,
                "  {:<24} {:>7} {:>7} {:>7} {:>9} {:>7} {:>8} {:>11}  {}{}",
                l.priority_level,
                num(l.nominal_limit_seats),
                num(l.limit_seats),
                num(l.executing_seats),
                num(l.headroom_seats),
                num(l.inqueue_requests),
                num(l.fullest_queue_requests),
                num(rejected),
                if style.bars {
                    let b = bar(l);
                    format!(
                        "{}  ",
                        if l.priority_level == EXEMPT {
                            b
                        } else {
                            style.status(l.status, &b)
                        }
                    )
                } else {
                    String::new()
                },
                if l.priority_level == EXEMPT {
                    word
                } else {
                    style.status(l.status, &word)
                }
            );
            // One scrape has no rate, but its counters say what was rejected since the replica started.
            if l.rejected_per_second.is_none() && l.rejected_total.values().any(|v| *v > 0.0) {
                let on_record: Vec<String> = l
                    .rejected_total
                    .iter()
                    .filter(|(_, v)| **v > 0.0)
                    .map(|(reason, v)| format!("{reason} {}", shown(*v)))
                    .collect();
                let _ = writeln!(
                    out,
                    "      rejected since the replica started: {} (one scrape: no rate)",
                    on_record.join(", ")
                );
            }
            for f in l.top_flows.iter().take(3) {
                let _ = writeln!(
                    out,
                    "      flow {}/{}: {} waiting, {} seats{}{}",
                    f.flow_schema,
                    if f.flow.is_empty() { "-" } else { &f.flow },
                    shown(f.waiting_requests),
                    shown(f.executing_seats),
                    if f.users.is_empty() {
                        String::new()
                    } else {
                        format!(", users {}", f.users.join(", "))
                    },
                    f.example_request
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                );
            }
        }
    }
    if report.apiservers.iter().any(|a| !a.levels.is_empty()) {
        // The columns are one instant; a status may come from pressure between scrapes, which its alert names.
        let _ = writeln!(
            out,
            "  {}",
            style.paint(
                "2",
                "seats as the last scrape saw them; STATUS as the alert rules give it (each alert below says which \
                 measure it read)"
            )
        );
    }
    for a in &report.audit {
        let _ = writeln!(
            out,
            "Who got 429s{} (audit events, last {}): {} requests, {} answered 429",
            a.cluster
                .as_deref()
                .map(|c| format!(" in cluster {c}"))
                .unwrap_or_default(),
            a.window_seconds
                .map(|s| format!("{s:.0}s"))
                .unwrap_or_default(),
            a.requests,
            a.rejected
        );
        for l in &a.levels {
            for u in l.rejected_users() {
                let _ = writeln!(
                    out,
                    "  {} {}: {}/s answered 429 of {}/s ({}{})",
                    l.priority_level,
                    u.user,
                    shown(u.rejected_per_second),
                    shown(u.requests_per_second),
                    u.flow_schema,
                    u.user_agent
                        .as_deref()
                        .map(|ua| format!(", {ua}"))
                        .unwrap_or_default()
                );
            }
        }
    }
    let above: Vec<&crate::analyze::ClientAdvice> =
        report.clients.iter().filter(|c| c.above_share()).collect();
    if !above.is_empty() {
        let _ = writeln!(
            out,
            "Clients above their share (apf-monitor advise says more):"
        );
        for c in above {
            let _ = writeln!(
                out,
                "  {} on {} {}: {}/s, its share sustains {}/s; set {}",
                c.name(),
                c.apiserver,
                c.priority_level,
                shown(c.observed_requests_per_second.unwrap_or(0.0)),
                shown(c.sustainable_requests_per_second.unwrap_or(0.0)),
                c.flag
            );
        }
    }
    for alert in &report.alerts {
        let get = |k: &str| alert.labels.get(k).map(String::as_str).unwrap_or("");
        let severity = crate::alert::rules::severity_status(Some(get("severity")));
        // A replica-wide alert (APFScrapeFailing) has no level: no empty word before the colon.
        let head: Vec<String> = [
            style.status(severity, &get("severity").to_uppercase()),
            get("alertname").to_string(),
            get("priority_level").to_string(),
        ]
        .into_iter()
        .filter(|w| !w.is_empty())
        .collect();
        let _ = writeln!(
            out,
            "{}: {}",
            head.join(" "),
            alert
                .annotations
                .get("summary")
                .map(String::as_str)
                .unwrap_or("")
        );
        if let Some(r) = alert.annotations.get("remediation") {
            let _ = writeln!(out, "  fix: {r}");
        }
    }
    let verdict = ["OK", "WARNING", "CRITICAL", "UNKNOWN"][usize::from(code.min(3))];
    let verdict = match code {
        0 => style.status(LevelStatus::Ok, verdict),
        1 => style.status(LevelStatus::Warning, verdict),
        2 => style.status(LevelStatus::Critical, verdict),
        _ => style.paint("35", verdict),
    };
    let _ = writeln!(out, "{verdict}");
    out
}

/// Columns padded to their widest cell, two spaces apart; the last one unpadded.
pub(super) fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A wait as people read it: `850µs`, `12ms`, `1.2s`, `95s`.
pub(super) fn seconds(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(s) if s < 1e-3 => format!("{:.0}µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.0}ms", s * 1e3),
        Some(s) if s < 10.0 => format!("{:.1}s", s),
        Some(s) => format!("{s:.0}s"),
    }
}

/// A wait as people read it (`850µs`, `12ms`, `1.2s`); none at all is `0`.
pub(super) fn wait(seconds: f64) -> String {
    if seconds == 0.0 {
        "0".into()
    } else {
        self::seconds(Some(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::ApiserverReport;

    fn report() -> StatusReport {
        StatusReport {
            apiservers: vec![ApiserverReport {
                apiserver: "10.0.0.5:6443".into(),
                levels: vec![
                    LevelReport {
                        priority_level: "workload-low".into(),
                        limit_seats: Some(200.0),
                        nominal_limit_seats: Some(100.0),
                        executing_seats: Some(150.0),
                        headroom_seats: Some(50.0),
                        status: LevelStatus::Critical,
                        ..Default::default()
                    },
                    LevelReport {
                        priority_level: "catch-all".into(),
                        limit_seats: Some(50.0),
                        nominal_limit_seats: Some(100.0),
                        executing_seats: Some(0.0),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            alerts: Vec::new(),
            config_findings: None,
            audit: Vec::new(),
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: None,
        }
    }

    #[test]
    fn bars_mark_seats_in_use_the_limit_and_the_nominal() {
        let r = report();
        // 150 of 200 in use, nominal 100: 15 full cells, the nominal mark hidden under them.
        assert_eq!(
            bar(&r.apiservers[0].levels[0]),
            format!("{}{}", "█".repeat(15), "░".repeat(5))
        );
        // Lent away: the limit (50) is half of the nominal (100), marked at the end.
        assert_eq!(
            bar(&r.apiservers[0].levels[1]),
            format!("{}{}│", "░".repeat(10), "·".repeat(9))
        );
    }

    #[test]
    fn the_clients_above_their_share_are_listed_with_the_flag_to_set() {
        let mut r = report();
        let client = |user: &str, observed: f64| crate::analyze::ClientAdvice {
            apiserver: "10.0.0.5:6443".into(),
            priority_level: "workload-low".into(),
            user: Some(user.into()),
            sustainable_requests_per_second: Some(20.0),
            observed_requests_per_second: Some(observed),
            flag: "--kube-api-qps=16 --kube-api-burst=8".into(),
            ..Default::default()
        };
        r.clients = vec![client("agent", 41.0), client("quiet", 3.0)];
        let out = render(&r, 2, Style::default());
        assert!(
            out.contains(
                "Clients above their share (apf-monitor advise says more):\n  agent on 10.0.0.5:6443 workload-low: \
                 41/s, its share sustains 20/s; set --kube-api-qps=16 --kube-api-burst=8\n"
            ),
            "{out}"
        );
        assert!(!out.contains("quiet on"), "{out}");
    }

    #[test]
    fn colour_and_bars_only_when_asked() {
        let r = report();
        let plain = render(&r, 2, Style::default());
        assert!(!plain.contains('\x1b') && !plain.contains('█'), "{plain}");
        assert!(plain.contains("critical"), "{plain}");
        let bars = render(
            &r,
            2,
            Style {
                bars: true,
                colour: false,
            },
        );
        assert!(bars.contains('█') && !bars.contains('\x1b'), "{bars}");
        let tty = render(
            &r,
            2,
            Style {
                bars: true,
                colour: true,
            },
        );
        assert!(tty.contains("\x1b[1;31mcritical\x1b[0m"), "{tty}");
        assert!(tty.contains("\x1b[1;31mCRITICAL\x1b[0m"), "{tty}");
    }
}
