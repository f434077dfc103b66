//! The demo's live lines: every interval, what is not OK or has changed on the levels the demo follows (each level of
//! the hot replica, the tightest level of each other one), with the alert rules behind a status named, so a WARNING
//! with most seats free says which rule gives it and what that rule read.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::table::num as fmt_num;
use crate::alert::rules::severity_status;
use crate::analyze::{AlertReport, ApiserverReport, LevelReport, LevelStatus, StatusReport};

/// How far the headroom of a level that stays OK must move (a share of its limit) before it is shown again: a
/// ramping level shows, an idle one whose few requests come and go does not.
const HEADROOM_STEP: f64 = 0.1;

/// Which rule explains a status first, among those of its severity: the one closest to the 429s.
const RULE_ORDER: [&str; 6] = [
    "APFRequestsRejected",
    "APFQueueNearFull",
    "APFHeadroomExhausted",
    "APFExhaustionPredicted",
    "APFSaturationRecurring",
    "APFHeadroomLow",
];

/// What the demo last showed (or first saw) of one followed level.
struct Shown {
    status: LevelStatus,
    /// The status's rules as the line said them.
    rules: String,
    /// The rule whose reading was said under the line.
    explained: Option<String>,
    headroom_ratio: f64,
}

/// The live view's memory between intervals.
#[derive(Default)]
pub struct LiveView {
    /// By replica and level.
    shown: BTreeMap<String, Shown>,
    started: bool,
}

impl LiveView {
    /// The lines of one interval: a line for each followed level that is not OK, whose status or rules changed, or
    /// whose headroom moved [`HEADROOM_STEP`] since its last line; under a status that appears or changes, what its
    /// first rule read. The first interval names the idle levels once; an interval with nothing to say says so.
    pub fn lines(&mut self, report: &StatusReport, elapsed: Duration, hot: &str) -> Vec<String> {
        let t = format!("[{:>4}s]", elapsed.as_secs());
        let mut lines = Vec::new();
        // One column width for every level, so a level applied during the demo lines up with the defaults.
        let width = report
            .apiservers
            .iter()
            .flat_map(|a| &a.levels)
            .map(|l| l.priority_level.len())
            .max()
            .unwrap_or(0)
            .max(15);
        for a in &report.apiservers {
            for e in &a.errors {
                lines.push(format!("{t} {}: {e}", a.apiserver));
            }
            let mut idle = Vec::new();
            for l in self.followed(a, hot) {
                let key = format!("{} {}", a.apiserver, l.priority_level);
                let alerts = status_alerts(report, a, l);
                let rules = rule_names(&alerts);
                let ratio = l.headroom_ratio.unwrap_or(1.0);
                let last = self.shown.get(&key);
                let changed = match last {
                    Some(s) => {
                        s.status != l.status
                            || s.rules != rules
                            || (s.headroom_ratio - ratio).abs() >= HEADROOM_STEP
                    }
                    None => {
                        l.executing_seats.unwrap_or(0.0) > 0.0
                            || l.inqueue_requests.unwrap_or(0.0) > 0.0
                    }
                };
                let was = last.map(|s| s.status);
                let explained = alerts.first().map(|r| alert_name(r).to_string());
                let explain = l.status != LevelStatus::Ok
                    && (was != Some(l.status) || last.is_some_and(|s| s.explained != explained));
                let shown = Shown {
                    status: l.status,
                    rules,
                    explained,
                    headroom_ratio: ratio,
                };
                if l.status == LevelStatus::Ok && !changed {
                    if last.is_none() {
                        idle.push(l.priority_level.as_str());
                        self.shown.insert(key, shown);
                    }
                    continue;
                }
                let behind = match (l.status, was) {
                    (LevelStatus::Ok, Some(w)) if w != LevelStatus::Ok => {
                        format!("was {}", status_word(w))
                    }
                    _ => shown.rules.clone(),
                };
                lines.push(level_line(&t, a, l, width, &behind));
                if explain {
                    if let Some(why) = alerts.first().map(|r| reason(r, l)) {
                        lines.push(format!("{:8}{why}", ""));
                    }
                }
                self.shown.insert(key, shown);
            }
            if !idle.is_empty() {
                lines.push(if a.apiserver == hot {
                    format!(
                        "{t} {} OK and idle: {} (a line follows once one is not OK or its headroom moves {:.0} points)",
                        a.apiserver,
                        idle.join(", "),
                        HEADROOM_STEP * 100.0
                    )
                } else {
                    // The tightest level idle: every level is.
                    format!("{t} {} every level OK and idle", a.apiserver)
                });
            }
        }
        lines.extend(audit_lines(report, &t));
        if lines.is_empty() && self.started {
            lines.push(format!("{t} all OK, no change"));
        }
        self.started = true;
        lines
    }
}

impl LiveView {
    /// The levels the demo follows on a replica: every non-exempt level of the hot one; of another, the tightest
    /// (least headroom; among equals, the busiest), and those last shown not OK, so their recovery is said too.
    fn followed<'a>(&self, a: &'a ApiserverReport, hot: &str) -> Vec<&'a LevelReport> {
        let levels = a
            .levels
            .iter()
            .filter(|l| l.priority_level != apf::model::EXEMPT);
        if a.apiserver == hot {
            return levels.collect();
        }
        let key = |l: &LevelReport| {
            (
                l.headroom_ratio.unwrap_or(1.0),
                -l.executing_seats.unwrap_or(0.0),
            )
        };
        let tightest = levels.clone().min_by(|x, y| {
            let (a, b) = (key(x), key(y));
            a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1))
        });
        levels
            .filter(|l| {
                tightest.is_some_and(|t| std::ptr::eq(t, *l))
                    || self
                        .shown
                        .get(&format!("{} {}", a.apiserver, l.priority_level))
                        .is_some_and(|s| s.status != LevelStatus::Ok)
            })
            .collect()
    }
}

/// The alerts behind a level's status: pending or active on it, of the severity the status is; the one that
/// explains it best first (firing before pending, then nearest the 429s).
fn status_alerts<'r>(
    report: &'r StatusReport,
    a: &ApiserverReport,
    l: &LevelReport,
) -> Vec<&'r AlertReport> {
    if l.status == LevelStatus::Ok {
        return Vec::new();
    }
    let mut alerts: Vec<&AlertReport> = report
        .alerts
        .iter()
        .filter(|r| {
            r.state != "resolved"
                && r.labels.get("apiserver") == Some(&a.apiserver)
                && r.labels.get("cluster") == a.cluster.as_ref()
                && r.labels.get("priority_level") == Some(&l.priority_level)
                && severity_status(r.labels.get("severity").map(String::as_str)) == l.status
        })
        .collect();
    let rank = |r: &AlertReport| {
        let name = alert_name(r);
        (
            r.state == "pending",
            RULE_ORDER
                .iter()
                .position(|n| *n == name)
                .unwrap_or(RULE_ORDER.len()),
        )
    };
    alerts.sort_by_key(|r| rank(r));
    alerts
}

/// The rule that explains the status, `(pending)` while its `for` runs, and how many other rules hold at that
/// severity: `APFRequestsRejected +2 more`.
fn rule_names(alerts: &[&AlertReport]) -> String {
    let names: BTreeSet<&str> = alerts.iter().map(|r| alert_name(r)).collect();
    let Some(first) = alerts.first() else {
        return String::new();
    };
    let mut out = alert_name(first).to_string();
    if first.state == "pending" {
        out.push_str(" (pending)");
    }
    if names.len() > 1 {
        out.push_str(&format!(" +{} more", names.len() - 1));
    }
    out
}

fn alert_name(alert: &AlertReport) -> &str {
    alert
        .labels
        .get("alertname")
        .map(String::as_str)
        .unwrap_or("?")
}

/// What an alert's rule read: its summary without the `LEVEL on REPLICA: ` the line already says.
fn reason(alert: &AlertReport, l: &LevelReport) -> String {
    let name = alert_name(alert);
    let summary = alert
        .annotations
        .get("summary")
        .map(String::as_str)
        .unwrap_or("");
    let said = summary
        .strip_prefix(&format!("{} on ", l.priority_level))
        .and_then(|rest| rest.split_once(": "))
        .map_or(summary, |(_, said)| said);
    format!("{name}: {said}")
}

fn status_word(s: LevelStatus) -> String {
    format!("{s:?}").to_uppercase()
}

/// One level's line: its numbers, its status and what gives it (or what it was), and its top flow.
fn level_line(t: &str, a: &ApiserverReport, l: &LevelReport, width: usize, behind: &str) -> String {
    let rejected = l
        .rejected_per_second
        .as_ref()
        .map(|r| r.values().fold(0.0, |a, b| a + b));
    let top = l
        .top_flows
        .first()
        .map(|f| format!("  top flow {}/{}", f.flow_schema, f.flow))
        .unwrap_or_default();
    let status = match behind {
        "" => status_word(l.status),
        b => format!("{} {b}", status_word(l.status)),
    };
    format!(
        "{t} {:<15} {:<width$} limit {:>4} in use {:>4} headroom {:>5} ({:>4}) queued {:>4} rejected/s {:>6}  {status}{top}",
        a.apiserver,
        l.priority_level,
        fmt_num(l.limit_seats),
        fmt_num(l.executing_seats),
        fmt_num(l.headroom_seats),
        l.headroom_ratio
            .map(|r| format!("{:.0}%", r * 100.0))
            .unwrap_or_else(|| "-".into()),
        fmt_num(l.inqueue_requests),
        fmt_num(rejected),
    )
}

/// Who got the 429s, from the replicas' audit events: the most rejected users of each cluster.
fn audit_lines(report: &StatusReport, t: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for a in &report.audit {
        let mut users: Vec<(&str, &crate::analyze::AuditUser)> = a
            .levels
            .iter()
            .flat_map(|l| {
                l.rejected_users()
                    .map(move |u| (l.priority_level.as_str(), u))
            })
            .collect();
        users.sort_by(|x, y| y.1.rejected_per_second.total_cmp(&x.1.rejected_per_second));
        if users.is_empty() {
            continue;
        }
        let named: Vec<String> = users
            .iter()
            .take(3)
            .map(|(level, u)| {
                format!(
                    "{} {}/s in {level}",
                    u.user,
                    crate::analyze::round::shown(u.rejected_per_second)
                )
            })
            .collect();
        lines.push(format!(
            "{t} who got 429s (audit events): {}",
            named.join(", ")
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(name: &str, limit: f64, used: f64, status: LevelStatus) -> LevelReport {
        LevelReport {
            priority_level: name.into(),
            limit_seats: Some(limit),
            executing_seats: Some(used),
            headroom_seats: Some(limit - used),
            headroom_ratio: Some((limit - used) / limit),
            inqueue_requests: Some(0.0),
            status,
            ..Default::default()
        }
    }

    fn alert(rule: &str, severity: &str, state: &str, summary: &str) -> AlertReport {
        let labels = [
            ("alertname", rule),
            ("severity", severity),
            ("apiserver", "hot:1"),
            ("priority_level", "workload-low"),
        ];
        AlertReport {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: [("summary".to_string(), summary.to_string())].into(),
            state: state.into(),
            active_since: None,
        }
    }

    /// The hot replica with workload-low at `used` of 135 seats (`status`), and catch-all idle but for `idle_used`
    /// seats; a second replica whose tightest level is calm.
    fn report(
        used: f64,
        status: LevelStatus,
        idle_used: f64,
        alerts: Vec<AlertReport>,
    ) -> StatusReport {
        StatusReport {
            apiservers: vec![
                ApiserverReport {
                    apiserver: "hot:1".into(),
                    levels: vec![
                        level("catch-all", 13.0, idle_used, LevelStatus::Ok),
                        level("exempt", 0.0, 0.0, LevelStatus::Ok),
                        level("workload-low", 135.0, used, status),
                    ],
                    ..Default::default()
                },
                ApiserverReport {
                    apiserver: "other:1".into(),
                    levels: vec![
                        level("catch-all", 13.0, 0.0, LevelStatus::Ok),
                        level("workload-low", 135.0, 30.0, LevelStatus::Ok),
                    ],
                    ..Default::default()
                },
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            alerts,
            ..Default::default()
        }
    }

    fn tick(view: &mut LiveView, s: u64, r: &StatusReport) -> Vec<String> {
        view.lines(r, Duration::from_secs(s), "hot:1")
    }

    #[test]
    fn idle_levels_are_named_once_and_a_status_names_its_rule_and_what_it_read() {
        let mut view = LiveView::default();
        let first = tick(&mut view, 5, &report(50.0, LevelStatus::Ok, 0.0, vec![]));
        assert_eq!(first.len(), 3, "{first:#?}");
        assert!(
            first[0].contains("hot:1")
                && first[0].contains("workload-low")
                && first[0].ends_with("OK"),
            "{first:#?}"
        );
        assert_eq!(first[1], "[   5s] hot:1 OK and idle: catch-all (a line follows once one is not OK or its headroom moves 10 points)");
        assert!(
            first[2].contains("other:1") && first[2].contains("workload-low"),
            "{first:#?}"
        );
        assert!(!first.iter().any(|l| l.contains("exempt")), "{first:#?}");

        // Nothing moved (an idle level's one request is no news): one line says so.
        let calm = tick(&mut view, 10, &report(55.0, LevelStatus::Ok, 1.0, vec![]));
        assert_eq!(calm, ["[  10s] all OK, no change"]);

        // A WARNING with most seats free says which rule gives it, and under it what that rule read.
        let predicted = alert(
            "APFExhaustionPredicted",
            "warning",
            "pending",
            "workload-low on hot:1: no headroom left in 40s at this trend (75 of 135 seats free at the last scrape)",
        );
        let warned = tick(
            &mut view,
            15,
            &report(60.0, LevelStatus::Warning, 0.0, vec![predicted.clone()]),
        );
        assert_eq!(warned.len(), 2, "{warned:#?}");
        assert!(
            warned[0].contains("( 56%)")
                && warned[0].ends_with("WARNING APFExhaustionPredicted (pending)"),
            "{warned:#?}"
        );
        assert_eq!(
            warned[1],
            "        APFExhaustionPredicted: no headroom left in 40s at this trend (75 of 135 seats free at the last scrape)"
        );
        // Still WARNING by the same rule, now firing: the line, not the reason again.
        let firing = AlertReport {
            state: "firing".into(),
            ..predicted
        };
        let again = tick(
            &mut view,
            20,
            &report(70.0, LevelStatus::Warning, 0.0, vec![firing]),
        );
        assert_eq!(again.len(), 1, "{again:#?}");
        assert!(
            again[0].ends_with("WARNING APFExhaustionPredicted"),
            "{again:#?}"
        );

        // Critical: the rule nearest the 429s explains it, the others are named; a warning's alert is not.
        let alerts = vec![
            alert("APFHeadroomExhausted", "critical", "firing", "workload-low on hot:1: 40 requests wait for 400 seats (10 seats each); 5 of 135 seats free at the last scrape"),
            alert("APFRequestsRejected", "critical", "firing", "workload-low on hot:1: 2.5 requests/s rejected with 429 (queue-full)"),
            alert("APFHeadroomLow", "warning", "inhibited", "workload-low on hot:1: 5 of 135 seats free (4%) at the last scrape"),
        ];
        let critical = tick(
            &mut view,
            25,
            &report(130.0, LevelStatus::Critical, 0.0, alerts),
        );
        assert!(
            critical[0].ends_with("CRITICAL APFRequestsRejected +1 more"),
            "{critical:#?}"
        );
        assert_eq!(
            critical[1],
            "        APFRequestsRejected: 2.5 requests/s rejected with 429 (queue-full)"
        );

        // Recovered: said once, with what it was; then quiet again.
        let ok = tick(&mut view, 30, &report(20.0, LevelStatus::Ok, 0.0, vec![]));
        assert_eq!(ok.len(), 1, "{ok:#?}");
        assert!(ok[0].ends_with("OK was CRITICAL"), "{ok:#?}");
        assert_eq!(
            tick(&mut view, 35, &report(21.0, LevelStatus::Ok, 0.0, vec![])),
            ["[  35s] all OK, no change"]
        );
        // A level that stays OK is shown again once its headroom moves ten points of its limit.
        let ramp = tick(&mut view, 40, &report(40.0, LevelStatus::Ok, 0.0, vec![]));
        assert_eq!(ramp.len(), 1, "{ramp:#?}");
        assert!(
            ramp[0].contains("workload-low") && ramp[0].contains("( 70%)"),
            "{ramp:#?}"
        );
    }

    #[test]
    fn another_replica_shows_its_tightest_level_and_the_recovery_of_one_that_was_not_ok() {
        let other = |wl: f64, status: LevelStatus, isolated: f64| StatusReport {
            apiservers: vec![ApiserverReport {
                apiserver: "other:1".into(),
                levels: vec![
                    level("catch-all", 13.0, 0.0, LevelStatus::Ok),
                    level("isolate-agent", 50.0, isolated, LevelStatus::Ok),
                    level("workload-low", 135.0, wl, status),
                ],
                ..Default::default()
            }]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            ..Default::default()
        };
        let mut view = LiveView::default();
        let warned = tick(&mut view, 5, &other(120.0, LevelStatus::Warning, 0.0));
        assert_eq!(warned.len(), 1, "{warned:#?}");
        assert!(
            warned[0].contains("workload-low") && warned[0].ends_with("WARNING"),
            "{warned:#?}"
        );
        // The agent moved to its own level: that is now the tightest, and workload-low's recovery is said, of it.
        let moved = tick(&mut view, 10, &other(5.0, LevelStatus::Ok, 45.0));
        assert_eq!(moved.len(), 2, "{moved:#?}");
        assert!(
            moved[0].contains("isolate-agent") && moved[0].ends_with("OK"),
            "{moved:#?}"
        );
        assert!(
            moved[1].contains("workload-low") && moved[1].ends_with("OK was WARNING"),
            "{moved:#?}"
        );
        // All idle: the tightest is some idle level, which was never anything else.
        let idle = tick(&mut view, 15, &other(0.0, LevelStatus::Ok, 0.0));
        assert!(idle.iter().all(|l| !l.contains("was")), "{idle:#?}");
    }
}
