//! The status page at `/`: first, per replica and level, a headroom bar, the trend of the window, queues,
//! rejections and the flows behind them (what the page is opened for); then the alerts with their fix, folded; who
//! got 429s; the configuration review. Server-rendered, no script and no external asset (it works offline and behind
//! any proxy), reloading itself; replicas side by side where the screen is wide, a lone last one filling its row,
//! and one under the other on a phone, where each level is a card with its numbers labelled.
//!
//! The markup is in askama templates (`templates/status/`): they HTML-escape every value unless told otherwise, so
//! a name from the cluster or the config cannot reach the page unescaped by a forgotten call, and they are compiled
//! and type-checked with the crate, so a field the template reads and the code no longer computes fails the build.
//! The Rust here only works out what is shown (numbers formatted, CSS classes, bar widths). maud escapes by default
//! too, but its markup is Rust macro code beside the logic; askama keeps it in HTML files of its own.
//!
//! Here: the page's frame and the configuration review's findings; `levels.rs`: a replica's table of priority
//! levels; `alerts.rs`: the alerts, grouped; `audit.rs`: who got 429s (audit events).
mod alerts;
mod audit;
mod levels;

use askama::Template;

use crate::analyze::{ApiserverReport, StatusReport};
use apf::review::{Finding, Severity};

#[derive(Template)]
#[template(path = "status/page.html", whitespace = "minimize")]
struct Page<'a> {
    firing: usize,
    pending: usize,
    replicas: String,
    worst_level: String,
    notifier: Option<Notifier<'a>>,
    no_replica: bool,
    clusters: Vec<Cluster<'a>>,
    alerts: Vec<alerts::Group<'a>>,
    audits: Vec<audit::Audit<'a>>,
    findings: Option<Findings<'a>>,
}

/// Who sends Slack, email and webhook notifications, when the replicas of apf-monitor elect one.
struct Notifier<'a> {
    lease: &'a str,
    identity: &'a str,
    leading: bool,
    leader: Option<&'a str>,
    since: Option<&'a str>,
}

fn notifier(report: &StatusReport) -> Option<Notifier<'_>> {
    let n = report.notifier.as_ref()?;
    Some(Notifier {
        lease: n.lease.as_deref()?,
        identity: n.identity.as_deref().unwrap_or(""),
        leading: n.leading,
        leader: n.leader.as_deref(),
        since: n.leader_since.as_deref(),
    })
}

/// A cluster's replicas under a heading of their own; `name` None: replicas without a cluster, no heading.
struct Cluster<'a> {
    name: Option<&'a str>,
    replicas: Vec<levels::Replica<'a>>,
    count: String,
    status: String,
}

fn clusters(report: &StatusReport) -> Vec<Cluster<'_>> {
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
    clusters
        .into_iter()
        .map(|(name, replicas)| Cluster {
            name,
            count: plural(replicas.len(), "replica", "replicas"),
            status: format!("{:?}", worst(&replicas)).to_lowercase(),
            replicas: replicas.into_iter().map(|a| levels::replica(a)).collect(),
        })
        .collect()
}

pub fn render(report: &StatusReport) -> String {
    let count = |state: &str| report.alerts.iter().filter(|a| a.state == state).count();
    Page {
        firing: count("firing"),
        pending: count("pending"),
        replicas: plural(report.apiservers.len(), "replica", "replicas"),
        worst_level: worst_level(report),
        notifier: notifier(report),
        no_replica: report.apiservers.is_empty(),
        clusters: clusters(report),
        alerts: alerts::alerts(&report.alerts),
        audits: audit::audits(&report.audit),
        findings: findings(report.config_findings.as_deref().unwrap_or_default()),
    }
    .render()
    // Writing to a String fails only if a value's Display does, and none here does.
    .expect("the status page renders")
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
struct Findings<'a> {
    count: String,
    critical: usize,
    findings: &'a [Finding],
}

fn findings(findings: &[Finding]) -> Option<Findings<'_>> {
    (!findings.is_empty()).then(|| Findings {
        count: plural(findings.len(), "finding", "findings"),
        critical: findings
            .iter()
            .filter(|f| f.severity == Severity::Critical)
            .count(),
        findings,
    })
}

#[cfg(test)]
mod tests {
    use super::alerts::{groups, AlertGroup};
    use super::*;
    use crate::analyze::{AlertReport, FlowReport, LevelReport, LevelStatus};

    /// Every string from outside (the cluster's objects and metrics, the config, audit events, the Lease) reaches
    /// the page escaped: each is markup here, and the page must show it as text, whatever template field it lands
    /// in. A template that passed one through `|safe` would put an `<i>` element on the page.
    #[test]
    fn values_are_escaped() {
        let x = |what: &str| format!("<i>{what}</i>");
        // askama writes `<` and `>` as numeric character references.
        let escaped = |what: &str| format!("&#60;i&#62;{what}&#60;/i&#62;");
        let advice = crate::analyze::ClientAdvice {
            advice: x("advice"),
            sustainable_requests_per_second: Some(1.0),
            ..Default::default()
        };
        let alert = AlertReport {
            labels: [
                ("alertname", x("alertname")),
                ("apiserver", x("alert replica")),
                ("priority_level", x("alert level")),
                ("severity", x("severity")),
            ]
            .map(|(k, v)| (k.to_string(), v))
            .into(),
            annotations: [
                ("summary", x("summary")),
                ("description", x("description")),
                ("top_flows", x("top flows")),
                ("remediation", x("remediation")),
                ("remediation_manifest", x("manifest")),
                ("runbook_url", "javascript:alert(1)".to_string()),
            ]
            .map(|(k, v)| (k.to_string(), v))
            .into(),
            state: "firing\"><script>".into(),
            active_since: Some(x("active since")),
        };
        let runbook = AlertReport {
            annotations: [(
                "runbook_url".to_string(),
                "https://runbooks/\"><i>runbook</i>".to_string(),
            )]
            .into(),
            state: "pending".into(),
            ..Default::default()
        };
        let report = StatusReport {
            alerts: vec![alert, runbook],
            apiservers: vec![ApiserverReport {
                apiserver: x("replica"),
                cluster: Some(x("cluster")),
                read_through: Some(x("prometheus")),
                kubernetes_version: Some(x("version")),
                scraped_at: Some(x("scraped at")),
                errors: vec![crate::analyze::Problem::Scrape {
                    endpoint: crate::scrape::Endpoint::Metrics,
                    error: crate::scrape::ScrapeError::Http {
                        status: 500,
                        detail: x("scrape error"),
                    },
                }],
                levels: vec![LevelReport {
                    priority_level: x("level"),
                    limit_seats: Some(10.0),
                    executing_seats: Some(3.0),
                    headroom_seats: Some(7.0),
                    headroom_ratio: Some(0.7),
                    rejected_per_second: Some([(x("reason\""), 1.0)].into()),
                    top_flows: vec![FlowReport {
                        flow_schema: x("flow schema"),
                        flow: x("flow"),
                        users: vec![x("flow user")],
                        example_request: Some(x("request")),
                        advice: Some(advice),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            config_findings: Some(vec![Finding {
                check: "exempt_grant",
                severity: Severity::Critical,
                object: x("object"),
                why: x("why"),
                fix: x("fix"),
                manifest: Some(x("finding manifest")),
            }]),
            audit: vec![crate::analyze::AuditReport {
                cluster: Some(x("audit cluster")),
                classified_on: Some(x("classified on")),
                requests: 2,
                rejected: 1,
                levels: vec![crate::analyze::AuditLevel {
                    priority_level: x("audit level"),
                    users: vec![crate::analyze::AuditUser {
                        user: x("user"),
                        flow_schema: x("audit flow schema"),
                        rejected: 1,
                        user_agent: Some(x("user agent")),
                        last_rejection: Some(x("last 429")),
                        ..Default::default()
                    }],
                    users_not_shown: 0,
                }],
                ..Default::default()
            }],
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: Some(crate::analyze::NotifierReport {
                lease: Some(x("lease")),
                identity: Some(x("identity")),
                leader: Some(x("leader")),
                leader_since: Some(x("leader since")),
                ..Default::default()
            }),
        };
        let h = render(&report);
        assert!(!h.contains("<i>"), "{h}");
        assert!(!h.contains("<script>"), "{h}");
        for what in [
            "alertname",
            "alert replica",
            "alert level",
            "active since",
            "summary",
            "description",
            "top flows",
            "remediation",
            "manifest",
            "replica",
            "cluster",
            "prometheus",
            "version",
            "scraped at",
            "level",
            "flow schema",
            "flow",
            "flow user",
            "request",
            "advice",
            "object",
            "why",
            "fix",
            "finding manifest",
            "audit cluster",
            "classified on",
            "audit level",
            "user",
            "audit flow schema",
            "user agent",
            "last 429",
            "lease",
            "identity",
            "leader",
            "leader since",
        ] {
            assert!(h.contains(&escaped(what)), "{what} not shown escaped: {h}");
        }
        assert!(
            h.contains("metrics: HTTP 500: &#60;i&#62;scrape error"),
            "{h}"
        );
        // In an attribute, a quote cannot close it.
        assert!(h.contains("&#60;i&#62;reason&#34;&#60;/i&#62; 1"), "{h}");
        assert!(!h.contains("javascript:"), "{h}");
        assert!(!h.contains("\"><i>runbook"), "{h}");
        assert!(h.contains("href=\"https://runbooks/&#34;&#62;"), "{h}");
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

    /// The page of one replica with these levels.
    fn page_of(levels: Vec<LevelReport>) -> String {
        render(&StatusReport {
            apiservers: vec![std::sync::Arc::new(ApiserverReport {
                apiserver: "a".into(),
                levels,
                ..Default::default()
            })],
            ..Default::default()
        })
    }

    #[test]
    fn the_bar_scales_to_the_larger_of_limit_and_nominal() {
        // Borrowed above nominal: the track is the limit, nominal marked at half.
        let b = page_of(vec![level("workload-low", 200.0, 100.0, 150.0)]);
        assert!(b.contains("class=\"limit\" style=\"width:100.0%\""), "{b}");
        assert!(b.contains("class=\"fill ok\" style=\"width:75.0%\""), "{b}");
        assert!(b.contains("class=\"nominal\" style=\"left:50.0%\""), "{b}");
        // Lent away: the limit covers half the track, seats in use measured on the same scale.
        let b = page_of(vec![LevelReport {
            status: LevelStatus::Critical,
            ..level("catch-all", 50.0, 100.0, 50.0)
        }]);
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
        let svg = page_of(vec![l.clone()]);
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
        assert!(h.contains("FlowSchema/&#60;admins&#62;"), "{h}");
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
            h.contains("<b>apf-monitor-b-&#60;2&#62;</b> sends the notifications since 2026-11-27T21:04:11Z; this replica stands by"),
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
