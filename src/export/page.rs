//! The status page at `/`: the alerts with their fix, then per replica and level a headroom bar, the trend of the
//! window, queues, rejections and the flows behind them. Server-rendered, no script and no external asset (it works
//! offline and behind any proxy), reloading itself; replicas side by side where the screen is wide, one under the
//! other on a phone.
use std::fmt::Write;

use html_escape::{encode_double_quoted_attribute as attr, encode_text as text};

use crate::analyze::{
    AlertReport, ApiserverReport, FlowReport, LevelReport, LevelStatus, StatusReport,
};
use apf::model::EXEMPT;
use apf::review::{Finding, Severity};

const STYLE: &str = "\
:root{--ok:#2e7d32;--warning:#e0a000;--critical:#c62828;--muted:#666;--line:#ddd;--track:#eee}\
*{box-sizing:border-box}\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;padding:1rem;color:#222;background:#fafafa}\
h1{font-size:1.4rem;margin:0}h2{font-size:1.1rem;margin:0 0 .5rem}small,.muted{color:var(--muted)}\
header.top{display:flex;flex-wrap:wrap;gap:.5rem 1.5rem;align-items:baseline;margin-bottom:1rem}\
a{color:#1565c0}\
.alerts{display:grid;gap:.5rem;margin-bottom:1rem}\
.alert{background:#fff;border:1px solid var(--line);border-left:6px solid var(--muted);border-radius:4px;padding:.5rem .75rem}\
.alert.firing.critical{border-left-color:var(--critical)}.alert.firing.warning{border-left-color:var(--warning)}\
.alert.resolved,.alert.silenced,.alert.inhibited,.alert li.resolved,.alert li.silenced,.alert li.inhibited{opacity:.6}\
.alert p{margin:.2rem 0}.alert ul.members{list-style:none;margin:0;padding:0}.alert ul.members li{margin:.15rem 0}.alert details{font-size:12px;color:#444}.alert pre{overflow:auto;background:#f4f4f4;padding:.5rem;font-size:12px}\
.badge{display:inline-block;padding:0 .4rem;border-radius:3px;font-size:12px;color:#fff;background:var(--muted);text-transform:uppercase}\
.badge.critical{background:var(--critical)}.badge.warning{background:var(--warning);color:#222}.badge.ok{background:var(--ok)}\
h2.cluster{margin:1.4rem 0 .6rem}.replicas{display:grid;gap:1rem;grid-template-columns:repeat(auto-fit,minmax(min(100%,36rem),1fr))}\
.replica{background:#fff;border:1px solid var(--line);border-radius:4px;padding:.75rem;min-width:0}\
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
details.findings{background:#fff;border:1px solid var(--line);border-radius:4px;padding:.5rem .75rem;margin-bottom:1rem}\
details.findings li{margin:.4rem 0}details.findings pre{overflow:auto;background:#f4f4f4;padding:.5rem;font-size:12px}\
";

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
         <a href=\"/api/v1/silences\">/api/v1/silences</a></nav></header>",
        if firing > 0 {
            format!("({firing} firing) ")
        } else {
            String::new()
        },
        plural(report.apiservers.len(), "replica", "replicas"),
        text(&worst_level(report))
    );
    render_alerts(&mut h, &report.alerts);
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
                "least headroom: {} on {} ({} of {} seats free, {:.0} %)",
                l.priority_level,
                a.display_name(),
                num(l.headroom_seats),
                num(l.limit_seats),
                ratio * 100.0
            )
        })
        .unwrap_or_default()
}

fn num(v: Option<f64>) -> String {
    v.map(crate::analyze::round::shown)
        .unwrap_or_else(|| "–".into())
}

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
struct AlertGroup<'a> {
    alerts: Vec<&'a AlertReport>,
}

fn groups(alerts: &[AlertReport]) -> Vec<AlertGroup<'_>> {
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

fn render_alerts(h: &mut String, alerts: &[AlertReport]) {
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

fn render_replica(h: &mut String, a: &ApiserverReport) {
    let _ = write!(
        h,
        "<section class=\"replica\"><h2>{} <small>{}{}</small></h2>",
        text(&a.apiserver),
        text(a.kubernetes_version.as_deref().unwrap_or("")),
        a.scraped_at
            .as_deref()
            .map(|s| format!(" · scraped {}", text(s)))
            .unwrap_or_default()
    );
    for e in &a.errors {
        let _ = write!(h, "<p class=\"err\">{}</p>", text(&e.to_string()));
    }
    if a.levels.is_empty() {
        h.push_str("<p class=\"muted\">No APF metrics read from this replica.</p></section>");
        return;
    }
    if let Some(note) = a.absent_without_dumps() {
        let _ = write!(h, "<p class=\"muted\">{}</p>", text(&note));
    }
    h.push_str(
        "<div class=\"scroll\"><table><thead><tr><th>priority level</th><th>seats in use / limit</th>\
         <th>headroom trend</th><th>queued</th><th>rejected/s</th><th>exhausted in</th></tr>\
         </thead><tbody>",
    );
    for l in &a.levels {
        render_level(h, l);
    }
    h.push_str("</tbody></table></div></section>");
}

fn status_class(l: &LevelReport) -> &'static str {
    if l.priority_level == EXEMPT {
        return "exempt";
    }
    match l.status {
        LevelStatus::Ok => "ok",
        LevelStatus::Warning => "warning",
        LevelStatus::Critical => "critical",
    }
}

fn render_level(h: &mut String, l: &LevelReport) {
    let class = status_class(l);
    let _ = write!(
        h,
        "<tr class=\"{class}\"><td class=\"level\">{}<br><span class=\"badge {class}\">{class}</span></td><td>{}</td>",
        text(&l.priority_level),
        seats_bar(l, class)
    );
    if l.priority_level == EXEMPT {
        // Never limited, never queued: only its seats in use mean something.
        h.push_str(
            "<td colspan=\"4\" class=\"muted\">exempt: never limited, never queued</td></tr>",
        );
        return;
    }
    let rejected = l
        .rejected_per_second
        .as_ref()
        .map(|r| r.values().sum::<f64>());
    let rejected_title = l
        .rejected_per_second
        .iter()
        .flatten()
        .map(|(reason, v)| format!("{reason} {}", num(Some(*v))))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        h,
        "<td>{}</td><td class=\"num\">{}</td><td class=\"num\" title=\"{}\">{}</td><td class=\"num\">{}</td></tr>",
        trend_svg(l),
        queue_cell(l),
        attr(&rejected_title),
        num(rejected),
        match l.seconds_to_exhaustion {
            Some(s) if s <= 0.0 => "exhausted".to_string(),
            Some(s) => format!("{s:.0} s"),
            None => "–".into(),
        },
    );
    // Who is behind the pressure, on a row of its own under the level: the table stays narrow enough for two
    // replicas side by side.
    if !l.top_flows.is_empty() {
        let _ = write!(
            h,
            "<tr class=\"{class} flows\"><td></td><td colspan=\"5\">{}</td></tr>",
            flows_cell(&l.top_flows)
        );
    }
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        (part / whole * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    }
}

/// Seats in use against the enforced limit; the nominal limit marked. The track is as long as the larger of the
/// two, so seats lent away (limit under nominal) show as the hatched part beyond the limit.
fn seats_bar(l: &LevelReport, class: &str) -> String {
    let used = l.executing_seats.unwrap_or(0.0);
    let Some(limit) = l.limit_seats else {
        return format!(
            "<div class=\"nums\">{} seats in use</div>",
            num(l.executing_seats)
        );
    };
    let nominal = l.nominal_limit_seats;
    let scale = limit.max(nominal.unwrap_or(0.0)).max(used);
    let nominal_mark = nominal
        .map(|n| {
            format!(
                "<span class=\"nominal\" style=\"left:{:.1}%\"></span>",
                pct(n, scale)
            )
        })
        .unwrap_or_default();
    let title = format!(
        "{} of {} seats in use (enforced limit); nominal {}{}",
        num(Some(used)),
        num(Some(limit)),
        num(nominal),
        l.upper_limit_seats
            .map(|u| format!(", can borrow up to {}", num(Some(u))))
            .unwrap_or_default()
    );
    format!(
        "<div class=\"bar\" role=\"img\" title=\"{t}\" aria-label=\"{t}\"><span class=\"limit\" style=\"width:{:.1}%\"></span>\
         <span class=\"fill {class}\" style=\"width:{:.1}%\"></span>{nominal_mark}</div>\
         <div class=\"nums\">{} / {}<br><span class=\"muted\">nominal {} · headroom {}</span></div>",
        pct(limit, scale),
        pct(used, scale),
        num(Some(used)),
        num(Some(limit)),
        num(nominal),
        num(l.headroom_seats),
        t = attr(&title),
    )
}

/// Headroom over the window as a line; the zero line in red when the level came near it.
fn trend_svg(l: &LevelReport) -> String {
    let points = &l.headroom_trend;
    if points.len() < 2 {
        return "<span class=\"muted\">–</span>".into();
    }
    let (w, hgt) = (100.0, 24.0);
    let t0 = points.first().map(|p| p.0).unwrap_or(0.0);
    let span = (points.last().map(|p| p.0).unwrap_or(0.0) - t0).max(1e-9);
    let top = points
        .iter()
        .map(|p| p.1)
        .chain(l.limit_seats)
        .fold(0.0f64, f64::max)
        .max(1.0);
    let bottom = points.iter().map(|p| p.1).fold(0.0f64, f64::min);
    let y = |v: f64| hgt - 2.0 - (v - bottom) / (top - bottom) * (hgt - 4.0);
    let line: Vec<String> = points
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", (t - t0) / span * w, y(*v)))
        .collect();
    let (first, last) = (points[0].1, points[points.len() - 1].1);
    format!(
        "<svg class=\"trend\" viewBox=\"0 0 {w} {hgt}\" preserveAspectRatio=\"none\" role=\"img\">\
         <title>headroom {} → {} seats over the last {:.0} s</title>\
         <line x1=\"0\" x2=\"{w}\" y1=\"{z:.1}\" y2=\"{z:.1}\" stroke=\"#c62828\" stroke-width=\"0.5\"/>\
         <polyline fill=\"none\" stroke=\"#1565c0\" stroke-width=\"1.5\" vector-effect=\"non-scaling-stroke\" points=\"{}\"/></svg>\
         <div class=\"nums\">{} → {}</div>",
        num(Some(first)),
        num(Some(last)),
        span,
        line.join(" "),
        num(Some(first)),
        num(Some(last)),
        z = y(0.0),
    )
}

/// Requests waiting against the queues' capacity, and the fullest queue against queueLengthLimit (the queue that
/// answers `queue-full` first).
fn queue_cell(l: &LevelReport) -> String {
    let mut out = format!(
        "{}{}",
        num(l.inqueue_requests),
        l.queue_capacity_requests
            .map(|c| format!(" <span class=\"muted\">of {}</span>", num(Some(c))))
            .unwrap_or_default()
    );
    if let (Some(fullest), Some(max)) = (l.fullest_queue_requests, l.queue_length_limit) {
        let fill = pct(fullest, max);
        let class = if fill >= 80.0 {
            "critical"
        } else if fill >= 50.0 {
            "warning"
        } else {
            "ok"
        };
        let _ = write!(
            out,
            "<div class=\"bar small\" title=\"fullest queue {f} of {m} (queueLengthLimit)\"><span class=\"limit\" \
             style=\"width:100%\"></span><span class=\"fill {class}\" style=\"width:{fill:.1}%\"></span></div>\
             <div class=\"nums muted\">fullest {f} / {m}</div>",
            f = num(Some(fullest)),
            m = num(Some(max)),
        );
    }
    out
}

fn flows_cell(flows: &[FlowReport]) -> String {
    if flows.is_empty() {
        return String::new();
    }
    let mut out = String::from("<ul class=\"flows\">");
    for f in flows.iter().take(3) {
        let _ = write!(
            out,
            "<li><b>{}</b>{}: {} waiting, {} seats{}{}</li>",
            text(&f.flow_schema),
            if f.flow.is_empty() {
                String::new()
            } else {
                format!(" / {}", text(&f.flow))
            },
            num(Some(f.waiting_requests)),
            num(Some(f.executing_seats)),
            if f.users.is_empty() {
                String::new()
            } else {
                format!(" · {}", text(&f.users.join(", ")))
            },
            f.example_request
                .as_deref()
                .map(|r| format!(" · <span class=\"muted\">{}</span>", text(r)))
                .unwrap_or_default()
        );
    }
    out.push_str("</ul>");
    out
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
            }],
            config_findings: None,
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
            ],
            alerts: Vec::new(),
            config_findings: None,
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
            }],
            alerts: Vec::new(),
            config_findings: None,
        };
        let h = render(&report);
        assert!(
            h.contains("least headroom: workload-low on a (10 of 100 seats free, 10 %)"),
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
}
