//! The status page at `/`: the alerts with their fix, then per replica and level a headroom bar, the trend of the
//! window, queues, rejections and the flows behind them. Server-rendered, no script and no external asset (it works
//! offline and behind any proxy), reloading itself; replicas side by side where the screen is wide, a lone last one
//! filling its row, and one under the other on a phone, where each level is a card with its numbers labelled.
//!
//! Here: the page's frame, its style and the configuration review's findings; `alerts.rs`: the alerts, grouped;
//! `audit.rs`: who got 429s (audit events); `levels.rs`: a replica's table of priority levels.
mod alerts;
mod audit;
mod levels;

use std::fmt::Write;

use html_escape::encode_text as text;

use crate::analyze::{ApiserverReport, StatusReport};
use apf::review::{Finding, Severity};

use alerts::render_alerts;
use audit::render_audit;
use levels::render_replica;

const STYLE: &str = "\
:root{--ok:#2e7d32;--warning:#e0a000;--critical:#c62828;--muted:#666;--line:#ddd;--track:#eee}\
*{box-sizing:border-box}\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;padding:1rem;color:#222;background:#fafafa}\
h1{font-size:1.4rem;margin:0}h2{font-size:1.1rem;margin:0 0 .5rem}small,.muted{color:var(--muted)}.above{color:var(--critical);font-weight:600}\
header.top{display:flex;flex-wrap:wrap;gap:.5rem 1.5rem;align-items:baseline;margin-bottom:1rem}\
a{color:#1565c0}\
.alerts{display:grid;gap:.5rem;margin-bottom:1rem}\
.alert{background:#fff;border:1px solid var(--line);border-left:6px solid var(--muted);border-radius:4px;padding:.5rem .75rem}\
.alert.firing.critical{border-left-color:var(--critical)}.alert.firing.warning{border-left-color:var(--warning)}\
.alert.resolved,.alert.silenced,.alert.inhibited,.alert li.resolved,.alert li.silenced,.alert li.inhibited{opacity:.6}\
.alert p{margin:.2rem 0}.alert ul.members{list-style:none;margin:0;padding:0}.alert ul.members li{margin:.15rem 0}.alert details{font-size:12px;color:#444}.alert pre{overflow:auto;background:#f4f4f4;padding:.5rem;font-size:12px}\
.badge{display:inline-block;padding:0 .4rem;border-radius:3px;font-size:12px;color:#fff;background:var(--muted);text-transform:uppercase}\
.badge.critical{background:var(--critical)}.badge.warning{background:var(--warning);color:#222}.badge.ok{background:var(--ok)}\
h2.cluster{margin:1.4rem 0 .6rem}.replicas{display:flex;flex-wrap:wrap;gap:1rem}\
.replica{flex:1 1 36rem;background:#fff;border:1px solid var(--line);border-radius:4px;padding:.75rem;min-width:0}\
.err{color:var(--critical);margin:.25rem 0}\
.scroll{overflow-x:auto}\
table{border-collapse:collapse;width:100%}\
th,td{padding:3px 6px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}\
th{font-weight:600;font-size:12px;color:var(--muted)}\
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}\
tr.warning td:first-child{box-shadow:inset 4px 0 var(--warning)}tr.critical td:first-child{box-shadow:inset 4px 0 var(--critical)}\
tr:has(+tr.flows) td{border-bottom:0}tr.flows td{padding-top:0}\
.level{font-weight:600}\
.bar{position:relative;height:10px;min-width:6rem;background:repeating-linear-gradient(45deg,#f3f3f3 0 3px,#e2e2e2 3px 6px);border-radius:2px}\
.bar .limit{position:absolute;left:0;top:0;bottom:0;background:var(--track)}\
.bar .fill{position:absolute;left:0;top:0;bottom:0;background:var(--ok);border-radius:2px}\
.bar .fill.warning{background:var(--warning)}.bar .fill.critical{background:var(--critical)}.bar .fill.exempt{background:#90a4ae}\
.bar .nominal{position:absolute;top:-3px;bottom:-3px;width:2px;margin-left:-1px;background:#222}\
.bar.small{height:6px;min-width:4rem}\
.nums{font-size:12px}\
svg.trend{display:block;width:5.5rem;height:1.6rem}\
ul.flows{font-size:12px;margin:0;padding-left:1rem}\
section.audit{background:#fff;border:1px solid var(--line);border-radius:4px;padding:.5rem .75rem;margin-bottom:1rem}\
section.audit td{overflow-wrap:anywhere}\
details.findings{background:#fff;border:1px solid var(--line);border-radius:4px;padding:.5rem .75rem;margin-bottom:1rem}\
details.findings li{margin:.4rem 0}details.findings pre{overflow:auto;background:#f4f4f4;padding:.5rem;font-size:12px}\
@media (max-width:40rem){\
.replica thead{display:none}.replica table,.replica tbody{display:block}\
.replica tr{display:grid;grid-template-columns:6.5rem 1fr 1fr;gap:.3rem .6rem;padding:.4rem 0;border-bottom:1px solid var(--line)}\
.replica td{display:block;border:0;padding:0;min-width:0}.replica td.level{grid-row:span 3}\
.replica td[data-label]::before{content:attr(data-label);display:block;font-size:11px;color:var(--muted)}\
.replica td.num{text-align:left}.replica tr.flows{display:block;padding-top:0}.replica tr.flows td:first-child{display:none}\
.replica tr:has(+tr.flows){border-bottom:0}\
section.audit thead{display:none}section.audit table,section.audit tbody{display:block}\
section.audit tr{display:grid;grid-template-columns:1fr 1fr;gap:.2rem .6rem;padding:.4rem 0;border-bottom:1px solid var(--line)}\
section.audit td{display:block;border:0;padding:0;min-width:0}section.audit td.user{grid-column:1/-1}\
section.audit td[data-label]::before{content:attr(data-label);display:block;font-size:11px;color:var(--muted)}section.audit td.num{text-align:left}\
}\
";

/// Who sends Slack, email and webhook notifications, when the replicas of apf-monitor elect one.
fn notifier(report: &StatusReport) -> String {
    let Some(n) = &report.notifier else {
        return String::new();
    };
    let Some(lease) = &n.lease else {
        return String::new();
    };
    let since = n
        .leader_since
        .as_deref()
        .map(|t| format!(" since {t}"))
        .unwrap_or_default();
    let who = if n.leading {
        format!("<b>this replica</b> sends the notifications{since}")
    } else {
        match &n.leader {
            Some(leader) => format!(
                "<b>{}</b> sends the notifications{since}; this replica stands by",
                text(leader)
            ),
            None => "no replica holds the Lease: notifications wait for one".to_string(),
        }
    };
    format!(
        "<span class=\"notifier\" title=\"Lease {} · this replica: {}\">{who}</span>",
        html_escape::encode_double_quoted_attribute(lease),
        html_escape::encode_double_quoted_attribute(n.identity.as_deref().unwrap_or("")),
    )
}

pub fn render(report: &StatusReport) -> String {
    let mut h = String::with_capacity(32 * 1024);
    let firing = report.alerts.iter().filter(|a| a.state == "firing").count();
    let pending = report
        .alerts
        .iter()
        .filter(|a| a.state == "pending")
        .count();
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"5\"><title>{}apf-monitor</title><style>{STYLE}</style></head><body>\
         <header class=\"top\"><h1>apf-monitor</h1><span>{} · {firing} firing · {pending} pending</span>\
         <span class=\"muted\">{}</span>\
         <nav><a href=\"/metrics\">/metrics</a> · <a href=\"/api/v1/status\">/api/v1/status</a> · \
         <a href=\"/api/v1/silences\">/api/v1/silences</a></nav>{}</header>",
        if firing > 0 {
            format!("({firing} firing) ")
        } else {
            String::new()
        },
        plural(report.apiservers.len(), "replica", "replicas"),
        text(&worst_level(report)),
        notifier(report)
    );
    render_alerts(&mut h, &report.alerts);
    render_audit(&mut h, &report.audit);
    render_findings(
        &mut h,
        report.config_findings.as_deref().unwrap_or_default(),
    );
    if report.apiservers.is_empty() {
        h.push_str("<p>No replica scraped yet.</p>");
    }
    // A fleet: each cluster under a heading of its own, the worst first; replicas without a cluster (and the
    // rows of a Prometheus that fails) come first, without one.
    let mut clusters: Vec<(Option<&str>, Vec<&ApiserverReport>)> = Vec::new();
    for a in &report.apiservers {
        let c = a.cluster.as_deref();
        match clusters.iter_mut().find(|(k, _)| *k == c) {
            Some((_, v)) => v.push(a),
            None => clusters.push((c, vec![a])),
        }
    }
    let worst = |v: &[&ApiserverReport]| {
        v.iter()
            .flat_map(|a| &a.levels)
            .map(|l| l.status)
            .max()
            .unwrap_or_default()
    };
    clusters.sort_by(|(x, xs), (y, ys)| {
        x.is_some()
            .cmp(&y.is_some())
            .then_with(|| worst(ys).cmp(&worst(xs)))
            .then_with(|| x.cmp(y))
    });
    // One <main>; a grid of replicas per cluster inside it.
    h.push_str("<main>");
    for (cluster, replicas) in clusters {
        if let Some(c) = cluster {
            let status = format!("{:?}", worst(&replicas)).to_lowercase();
            let _ = write!(
                h,
                "<h2 class=\"cluster\">cluster {} <small>{} · {status}</small></h2>",
                text(c),
                plural(replicas.len(), "replica", "replicas"),
            );
        }
        h.push_str("<div class=\"replicas\">");
        for a in replicas {
            render_replica(&mut h, a);
        }
        h.push_str("</div>");
    }
    h.push_str("</main></body></html>");
    h
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The level with the least headroom anywhere: the one line to read first.
fn worst_level(report: &StatusReport) -> String {
    report
        .apiservers
        .iter()
        .flat_map(|a| a.levels.iter().map(move |l| (a, l)))
        .filter_map(|(a, l)| Some((a, l, l.headroom_ratio?)))
        .min_by(|x, y| x.2.total_cmp(&y.2))
        .map(|(a, l, ratio)| {
            format!(
                "least headroom at the last scrape: {} on {} ({} of {} seats free, {:.0} %)",
                l.priority_level,
                a.display_name(),
                num(l.headroom_seats),
                num(l.limit_seats),
                ratio * 100.0
            )
        })
        .unwrap_or_default()
}

pub(super) fn num(v: Option<f64>) -> String {
    v.map(crate::analyze::round::shown)
        .unwrap_or_else(|| "–".into())
}

/// The configuration review, folded: what is wrong with the objects matters, but less than what is on fire now.
fn render_findings(h: &mut String, findings: &[Finding]) {
    if findings.is_empty() {
        return;
    }
    let critical = findings
        .iter()
        .filter(|f| f.severity == Severity::Critical)
        .count();
    let _ = write!(
        h,
        "<details class=\"findings\"><summary><b>Configuration review:</b> {} ({critical} critical)</summary><ul>",
        plural(findings.len(), "finding", "findings")
    );
    for f in findings {
        let _ = write!(
            h,
            "<li><span class=\"badge {}\">{}</span> <b>{}</b> <span class=\"muted\">{}</span><br>{}<br><b>Fix:</b> {}{}</li>",
            f.severity.label(),
            f.severity.label(),
            text(&f.object),
            text(f.check),
            text(&f.why),
            text(&f.fix),
            f.manifest
                .as_deref()
                .map(|m| format!("<pre>{}</pre>", text(m)))
                .unwrap_or_default()
        );
    }
    h.push_str("</ul></details>");
}

#[cfg(test)]
mod tests {
    use super::alerts::{groups, AlertGroup};
    use super::levels::{seats_bar, trend_svg};
    use super::*;
    use crate::analyze::{AlertReport, LevelReport, LevelStatus};

    #[test]
    fn values_are_escaped() {
        let report = StatusReport {
            alerts: vec![AlertReport {
                labels: [("alertname".to_string(), "<script>x</script>".to_string())].into(),
                annotations: [
                    ("summary".to_string(), "a & b".to_string()),
                    ("runbook_url".to_string(), "javascript:alert(1)".to_string()),
                    ("remediation_manifest".to_string(), "kind: <x>".to_string()),
                ]
                .into(),
                state: "firing\"><script>".into(),
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
                    priority_level: "level<1>\"".into(),
                    limit_seats: Some(10.0),
                    executing_seats: Some(3.0),
                    rejected_per_second: Some([("a\"b".to_string(), 1.0)].into()),
                    ..Default::default()
                }],
                ..Default::default()
            }]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            config_findings: None,
            audit: Vec::new(),
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: None,
        };
        let h = render(&report);
        assert!(h.contains("&lt;script&gt;x&lt;/script&gt;"), "{h}");
        assert!(!h.contains("<script>"), "{h}");
        assert!(h.contains("a &amp; b"));
        assert!(h.contains("metrics: HTTP 500: &lt;html&gt;"), "{h}");
        assert!(h.contains("level&lt;1&gt;"));
        assert!(h.contains("kind: &lt;x&gt;"));
        assert!(!h.contains("javascript:"), "{h}");
        assert!(!h.contains("a\"b"), "{h}");
    }

    fn level(name: &str, limit: f64, nominal: f64, used: f64) -> LevelReport {
        LevelReport {
            priority_level: name.into(),
            limit_seats: Some(limit),
            nominal_limit_seats: Some(nominal),
            executing_seats: Some(used),
            headroom_seats: Some(limit - used),
            headroom_ratio: Some((limit - used) / limit),
            ..Default::default()
        }
    }

    #[test]
    fn the_bar_scales_to_the_larger_of_limit_and_nominal() {
        // Borrowed above nominal: the track is the limit, nominal marked at half.
        let b = seats_bar(&level("workload-low", 200.0, 100.0, 150.0), "ok");
        assert!(b.contains("class=\"limit\" style=\"width:100.0%\""), "{b}");
        assert!(b.contains("class=\"fill ok\" style=\"width:75.0%\""), "{b}");
        assert!(b.contains("class=\"nominal\" style=\"left:50.0%\""), "{b}");
        // Lent away: the limit covers half the track, seats in use measured on the same scale.
        let b = seats_bar(&level("catch-all", 50.0, 100.0, 50.0), "critical");
        assert!(b.contains("class=\"limit\" style=\"width:50.0%\""), "{b}");
        assert!(
            b.contains("class=\"fill critical\" style=\"width:50.0%\""),
            "{b}"
        );
        assert!(b.contains("50 / 50"), "{b}");
    }

    #[test]
    fn a_fleet_is_grouped_by_cluster_worst_first() {
        let replica = |cluster: Option<&str>, name: &str, status: LevelStatus| ApiserverReport {
            apiserver: name.into(),
            cluster: cluster.map(String::from),
            read_through: Some("prom:9090".into()),
            levels: vec![LevelReport {
                status,
                ..level("workload-low", 100.0, 100.0, 10.0)
            }],
            ..Default::default()
        };
        let report = StatusReport {
            apiservers: vec![
                replica(Some("a"), "10.0.0.5:6443", LevelStatus::Ok),
                replica(Some("b"), "10.0.0.5:6443", LevelStatus::Critical),
                replica(Some("b"), "10.0.0.6:6443", LevelStatus::Ok),
                ApiserverReport {
                    apiserver: "dead:9090".into(),
                    errors: vec![crate::analyze::Problem::NoReplicas],
                    ..Default::default()
                },
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            alerts: Vec::new(),
            config_findings: None,
            audit: Vec::new(),
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: None,
        };
        let h = render(&report);
        let at = |needle: &str| h.find(needle).unwrap_or_else(|| panic!("{needle}: {h}"));
        // The source's own row first, then cluster b (critical) before cluster a.
        assert!(
            at("dead:9090") < at("cluster b <small>2 replicas · critical"),
            "{h}"
        );
        assert!(
            at("cluster b <small>") < at("cluster a <small>1 replica · ok"),
            "{h}"
        );
        assert!(h.contains("no flows, no fullest queue"), "{h}");
    }

    #[test]
    fn the_trend_draws_the_window_and_the_header_names_the_worst_level() {
        let mut l = level("workload-low", 100.0, 100.0, 90.0);
        l.headroom_trend = vec![(-20.0, 60.0), (-10.0, 30.0), (0.0, 10.0)];
        let svg = trend_svg(&l);
        assert!(svg.contains("points=\"0.0,"), "{svg}");
        assert!(
            svg.contains("headroom 60 → 10 seats over the last 20 s"),
            "{svg}"
        );
        let report = StatusReport {
            apiservers: vec![ApiserverReport {
                apiserver: "a".into(),
                levels: vec![level("global-default", 100.0, 100.0, 5.0), l],
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
        };
        let h = render(&report);
        assert!(
            h.contains(
                "least headroom at the last scrape: workload-low on a (10 of 100 seats free, 10 %)"
            ),
            "{h}"
        );
        assert!(h.contains("<svg class=\"trend\""));
    }

    #[test]
    fn alerts_of_a_level_with_one_fix_are_grouped_worst_first() {
        let alert =
            |name: &str, severity: &str, state: &str, replica: &str, fix: &str| AlertReport {
                labels: [
                    ("alertname".to_string(), name.to_string()),
                    ("severity".to_string(), severity.to_string()),
                    ("apiserver".to_string(), replica.to_string()),
                    ("priority_level".to_string(), "workload-low".to_string()),
                ]
                .into(),
                annotations: [
                    ("remediation".to_string(), fix.to_string()),
                    ("summary".to_string(), format!("{name} on {replica}")),
                ]
                .into(),
                state: state.into(),
                active_since: None,
            };
        let alerts = vec![
            alert(
                "APFHeadroomLow",
                "warning",
                "pending",
                "a",
                "isolate the agent",
            ),
            alert(
                "APFRequestsRejected",
                "critical",
                "firing",
                "b",
                "isolate the agent",
            ),
            alert(
                "APFExhaustionPredicted",
                "warning",
                "firing",
                "c",
                "raise the shares",
            ),
            alert(
                "APFHeadroomExhausted",
                "critical",
                "firing",
                "a",
                "isolate the agent",
            ),
        ];
        let g = groups(&alerts);
        assert_eq!(g.len(), 2);
        let names = |g: &AlertGroup| -> Vec<String> {
            g.alerts
                .iter()
                .map(|a| a.labels["alertname"].clone())
                .collect()
        };
        assert_eq!(
            names(&g[0]),
            [
                "APFRequestsRejected",
                "APFHeadroomExhausted",
                "APFHeadroomLow"
            ]
        );
        assert_eq!(names(&g[1]), ["APFExhaustionPredicted"]);
        let h = render(&StatusReport {
            apiservers: Vec::new(),
            alerts,
            config_findings: None,
            audit: Vec::new(),
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: None,
        });
        assert_eq!(h.matches("isolate the agent").count(), 1, "{h}");
        assert!(h.contains("APFHeadroomLow on a"), "{h}");
    }

    #[test]
    fn config_findings_are_listed_folded_with_their_fix() {
        let report = StatusReport {
            config_findings: Some(vec![Finding {
                check: "exempt_grant",
                severity: Severity::Critical,
                object: "FlowSchema/<admins>".into(),
                why: "never limited".into(),
                fix: "point it to workload-high".into(),
                manifest: Some("kind: FlowSchema".into()),
            }]),
            ..Default::default()
        };
        let h = render(&report);
        assert!(
            h.contains("<b>Configuration review:</b> 1 finding (1 critical)"),
            "{h}"
        );
        assert!(h.contains("FlowSchema/&lt;admins&gt;"), "{h}");
        assert!(
            h.contains("<b>Fix:</b> point it to workload-high<pre>kind: FlowSchema</pre>"),
            "{h}"
        );
        // Nothing found: nothing shown.
        assert!(!render(&StatusReport::default()).contains("Configuration review"));
    }

    #[test]
    fn the_header_says_who_sends_the_notifications() {
        let with = |leading: bool, leader: Option<&str>| {
            render(&StatusReport {
                notifier: Some(crate::analyze::NotifierReport {
                    leading,
                    lease: Some("apf-monitor/apf-monitor-notifier".into()),
                    identity: Some("apf-monitor-a-1".into()),
                    leader: leader.map(str::to_string),
                    leader_since: leader.map(|_| "2026-11-27T21:04:11Z".to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let h = with(false, Some("apf-monitor-b-<2>"));
        assert!(
            h.contains("<b>apf-monitor-b-&lt;2&gt;</b> sends the notifications since 2026-11-27T21:04:11Z; this replica stands by"),
            "{h}"
        );
        assert!(h.contains(
            "title=\"Lease apf-monitor/apf-monitor-notifier · this replica: apf-monitor-a-1\""
        ));
        assert!(with(true, Some("apf-monitor-a-1"))
            .contains("<b>this replica</b> sends the notifications since"));
        assert!(with(false, None).contains("no replica holds the Lease"));
        // Without an election (one replica) there is nothing to say.
        let alone = render(&StatusReport {
            notifier: Some(crate::analyze::NotifierReport {
                leading: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(!alone.contains("class=\"notifier\""));
    }
}
