//! `report --html FILE`: one self-contained page (inline styles and SVG, no script, no external resource: it works
//! offline and attaches to a ticket) with, per incident, its seats, queues and 429s on one time axis and the
//! replayed alerts marked on it.
use std::fmt::Write;

use super::shape::{IncidentReport, Report};
use super::text::{alert_lines, clock, count, replica};
use crate::analyze::incidents::{LevelPoint, Timeline};

const WIDTH: f64 = 880.0;
const PANEL: f64 = 130.0;
const LEFT: f64 = 215.0;
const RIGHT: f64 = 16.0;
/// Flow schemas drawn apart in the 429 panel; the rest are summed as "others".
const SCHEMAS_DRAWN: usize = 4;
const COLOURS: [&str; 5] = ["#c0392b", "#2471a3", "#d68910", "#7d3c98", "#566573"];

/// Text for an element or a double-quoted attribute.
fn escape(text: &str) -> String {
    html_escape::encode_double_quoted_attribute(text).into_owned()
}

/// Text whose `code` spans (the words' own Markdown: "its `for` not reached", "mostly `list pods`") become
/// `<code>` elements, everything escaped; a backtick without its pair stays a backtick.
fn with_code(text: &str) -> String {
    let parts: Vec<&str> = text.split('`').collect();
    let mut out = String::new();
    for (n, part) in parts.iter().enumerate() {
        let paired = n % 2 == 1 && n + 1 < parts.len();
        if paired {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            if n % 2 == 1 {
                out.push('`');
            }
            out.push_str(&escape(part));
        }
    }
    out
}

pub(super) fn page(report: &Report, incidents: &[(IncidentReport, &Timeline)]) -> String {
    let mut out = String::new();
    let title = format!(
        "API Priority and Fairness from {} to {}",
        clock(&report.from),
        clock(&report.to)
    );
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n<p class=\"meta\">Read from {} with a \
         step of {}: {} replicas. apf-monitor's rules replayed on the same history.</p>\n",
        escape(&title),
        escape(&title),
        escape(&report.sources.join(", ")),
        escape(&report.step),
        report.replicas
    );
    if incidents.is_empty() {
        out.push_str("<p>No non-exempt priority level of any replica rejected a request in this window.</p>\n");
    }
    for (n, (incident, timeline)) in incidents.iter().enumerate() {
        section(&mut out, n + 1, incident, timeline);
    }
    out.push_str("</body></html>\n");
    out
}

fn section(out: &mut String, n: usize, i: &IncidentReport, timeline: &Timeline) {
    let cluster = i.cluster.as_deref().unwrap_or("(no cluster label)");
    let _ = write!(
        out,
        "<section><h2>{n}. Priority level <code>{}</code> on replica <code>{}</code>, cluster <code>{}</code></h2>\n\
         <table class=\"facts\"><tr><th>429s</th><td>{:.0}, peak {:.1}/s, from {} to {}</td></tr>\
         <tr><th>Recovered</th><td>{}</td></tr>\
         <tr><th>Headroom low since</th><td>{}</td></tr>\
         <tr><th>Most waiting</th><td>{}{}</td></tr>",
        escape(&i.priority_level),
        escape(&i.apiserver),
        escape(cluster),
        i.rejected_total,
        i.peak_rejected_per_second,
        escape(&i.first_rejection.as_deref().map_or("-".into(), clock)),
        escape(&i.last_rejection.as_deref().map_or("-".into(), clock)),
        escape(&i.recovered_at.as_deref().map_or("not by the window's end".into(), clock)),
        escape(&i.headroom_low_since.as_deref().map_or("-".into(), clock)),
        i.max_waiting_requests.map_or("-".into(), |w| format!("{w:.0}")),
        i.queue_capacity_requests
            .map_or(String::new(), |c| format!(" of {c:.0} queue places")),
    );
    let schemas: Vec<String> = i
        .flow_schemas
        .iter()
        .map(|s| format!("{} {:.0}", escape(&s.flow_schema), s.rejected))
        .collect();
    if !schemas.is_empty() {
        let _ = write!(
            out,
            "<tr><th>Flow schemas</th><td>{}</td></tr>",
            schemas.join(", ")
        );
    }
    for (name, what) in alert_lines(i) {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(&name),
            with_code(&what)
        );
    }
    if i.alerts.is_empty() {
        out.push_str(
            "<tr><th>Alerts</th><td>none of apf-monitor's rules would have fired</td></tr>",
        );
    }
    if let Some(r) = &i.remediation {
        let _ = write!(
            out,
            "<tr><th>Remediation</th><td>{}</td></tr>",
            with_code(r)
        );
    }
    out.push_str("</table>\n");
    chart(out, i, timeline);
    out.push_str("</section>\n");
}

/// The points shown: the incident with as much again before and after it (at least 20 points each side), and the
/// replayed alerts' start.
fn shown<'t>(i: &IncidentReport, timeline: &'t Timeline) -> &'t [LevelPoint] {
    let points = &timeline.points;
    let len = i.points.len().max(1);
    let pad = len.max(20);
    let mut first = i.points.start.saturating_sub(pad);
    if let Some(earliest) = i.alerts.iter().map(|a| a.pending).reduce(f64::min) {
        if let Some(at) = points.iter().position(|p| p.time >= earliest) {
            first = first.min(at.saturating_sub(5));
        }
    }
    let last = (i.points.end + pad).min(points.len());
    &points[first..last]
}

struct Axis {
    t0: f64,
    t1: f64,
}

impl Axis {
    fn x(&self, t: f64) -> f64 {
        let span = (self.t1 - self.t0).max(1.0);
        LEFT + (t - self.t0) / span * (WIDTH - LEFT - RIGHT)
    }
}

/// One series as an SVG path, in a panel whose top is `top` and scale `max`. It breaks where a value is missing
/// and across points further apart than `gap` seconds (a calm stretch the report did not keep).
fn path(axis: &Axis, points: &[(f64, Option<f64>)], top: f64, max: f64, gap: f64) -> String {
    let mut d = String::new();
    let mut pen_down = false;
    let mut last_t = f64::NEG_INFINITY;
    for (t, v) in points {
        if t - last_t > gap {
            pen_down = false;
        }
        last_t = *t;
        match v {
            Some(v) => {
                let y = top + PANEL - (v / max).clamp(0.0, 1.0) * PANEL;
                let _ = write!(
                    d,
                    "{}{:.1},{:.1} ",
                    if pen_down { "L" } else { "M" },
                    axis.x(*t),
                    y
                );
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    d
}

/// A rounded-up scale for values up to `max`.
fn nice(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= max)
        .unwrap_or(max)
}

/// One line of a panel: its legend, colour, points (time, value) and whether it is a reference (dashed).
struct Line<'a> {
    name: String,
    colour: &'a str,
    points: Vec<(f64, Option<f64>)>,
    dashed: bool,
}

fn line<'a>(
    name: &str,
    colour: &'a str,
    points: Vec<(f64, Option<f64>)>,
    dashed: bool,
) -> Line<'a> {
    Line {
        name: name.to_string(),
        colour,
        points,
        dashed,
    }
}

struct Panel<'a> {
    title: &'a str,
    series: Vec<Line<'a>>,
}

fn chart(out: &mut String, i: &IncidentReport, timeline: &Timeline) {
    let points = shown(i, timeline);
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return;
    };
    let axis = Axis {
        t0: first.time,
        t1: last.time,
    };
    let step = points
        .windows(2)
        .map(|w| w[1].time - w[0].time)
        .filter(|d| *d > 0.0)
        .reduce(f64::min)
        .unwrap_or(1.0);
    let of = |f: &dyn Fn(&LevelPoint) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
        points.iter().map(|p| (p.time, f(p))).collect()
    };
    let capacity = timeline.queue_capacity_requests;
    let mut rate_series: Vec<Line> = Vec::new();
    let drawn: Vec<&str> = i
        .flow_schemas
        .iter()
        .take(SCHEMAS_DRAWN)
        .map(|s| s.flow_schema.as_str())
        .collect();
    let per_second = |p: &LevelPoint, prev: Option<&LevelPoint>, pick: &dyn Fn(&str) -> bool| {
        let dt = prev.map(|q| p.time - q.time).filter(|d| *d > 0.0)?;
        let n: f64 = p
            .rejected_by
            .iter()
            .filter(|(s, _, _)| pick(s))
            .map(|(_, _, n)| n)
            .sum();
        Some(n / dt)
    };
    let rates = |pick: &dyn Fn(&str) -> bool| -> Vec<(f64, Option<f64>)> {
        points
            .iter()
            .enumerate()
            .map(|(k, p)| {
                (
                    p.time,
                    per_second(p, k.checked_sub(1).map(|j| &points[j]), pick),
                )
            })
            .collect()
    };
    for (k, schema) in drawn.iter().enumerate() {
        rate_series.push(line(schema, COLOURS[k], rates(&|s| s == *schema), false));
    }
    if i.flow_schemas.len() > SCHEMAS_DRAWN {
        rate_series.push(line(
            "other flow schemas",
            COLOURS[4],
            rates(&|s| !drawn.contains(&s)),
            false,
        ));
    }
    let panels = [
        Panel {
            title: "seats",
            series: vec![
                line("in use", COLOURS[0], of(&|p| p.executing_seats), false),
                line("limit", COLOURS[1], of(&|p| p.limit_seats), false),
                line(
                    "nominal limit",
                    COLOURS[4],
                    of(&|p| p.nominal_limit_seats),
                    true,
                ),
            ],
        },
        Panel {
            title: "requests waiting",
            series: {
                let mut s = vec![line(
                    "waiting",
                    COLOURS[2],
                    of(&|p| p.inqueue_requests),
                    false,
                )];
                if capacity.is_some() {
                    s.push(line("queue capacity", COLOURS[4], of(&|_| capacity), true));
                }
                s
            },
        },
        Panel {
            title: "429s per second",
            series: rate_series,
        },
    ];
    // The replayed alerts that fired, one row each (pending dashed, firing solid), above the panels.
    let rows = alert_rows(i);
    let strip = 18.0 + 14.0 * rows.len() as f64;
    let gap = 34.0;
    let panels_top = 24.0 + strip + gap;
    let height = panels_top + panels.len() as f64 * (PANEL + gap) - gap + 30.0;
    let bottom = height - 30.0;
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" role=\"img\" \
         aria-label=\"{} on {}\">\
         <text x=\"{LEFT}\" y=\"18\" class=\"title\">apf-monitor's alerts, replayed</text>",
        escape(&i.priority_level),
        escape(&replica(i))
    );
    if rows.is_empty() {
        let _ = write!(
            out,
            "<text x=\"{LEFT}\" y=\"36\" class=\"legend\">none would have fired</text>"
        );
    }
    for (
        k,
        AlertRow {
            name,
            critical,
            spans,
        },
    ) in rows.iter().enumerate()
    {
        let y = 34.0 + 14.0 * k as f64;
        let colour = if *critical { COLOURS[0] } else { COLOURS[2] };
        let _ = write!(
            out,
            "<text x=\"{:.0}\" y=\"{:.0}\" class=\"legend\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + 4.0,
            escape(name)
        );
        for (pending, fired, ended) in spans {
            let clamp = |t: f64| axis.x(t.clamp(axis.t0, axis.t1));
            let end = clamp(ended.unwrap_or(axis.t1));
            let _ = write!(
                out,
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.0}\" y2=\"{y:.0}\" stroke=\"{colour}\" \
                 stroke-dasharray=\"3 3\"/>\
                 <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.0}\" y2=\"{y:.0}\" stroke=\"{colour}\" \
                 stroke-width=\"7\"/>",
                clamp(*pending),
                clamp(*fired),
                clamp(*fired),
                end.max(clamp(*fired) + 2.0)
            );
        }
    }
    for (k, panel) in panels.iter().enumerate() {
        let top = panels_top + k as f64 * (PANEL + gap);
        let max = nice(
            panel
                .series
                .iter()
                .flat_map(|l| l.points.iter().filter_map(|(_, v)| *v))
                .fold(0.0, f64::max),
        );
        let _ = write!(
            out,
            "<text x=\"{:.0}\" y=\"{:.0}\" class=\"title\" text-anchor=\"end\">{}</text>\
             <rect x=\"{LEFT}\" y=\"{top}\" width=\"{:.0}\" height=\"{PANEL}\" class=\"frame\"/>\
             <text x=\"{:.0}\" y=\"{:.0}\" class=\"tick\" text-anchor=\"end\">{}</text>\
             <text x=\"{:.0}\" y=\"{:.0}\" class=\"tick\" text-anchor=\"end\">0</text>",
            LEFT - 8.0,
            top + PANEL / 2.0,
            panel.title,
            WIDTH - LEFT - RIGHT,
            LEFT - 6.0,
            top + 10.0,
            count(max),
            LEFT - 6.0,
            top + PANEL
        );
        let mut legend_x = LEFT + 4.0;
        for Line {
            name,
            colour,
            points,
            dashed,
        } in &panel.series
        {
            let _ = write!(
                out,
                "<path d=\"{}\" stroke=\"{colour}\" fill=\"none\" stroke-width=\"1.6\"{}/>\
                 <text x=\"{legend_x:.0}\" y=\"{:.0}\" class=\"legend\" fill=\"{colour}\">{}</text>",
                path(&axis, points, top, max, 2.5 * step),
                if *dashed { " stroke-dasharray=\"5 4\"" } else { "" },
                top - 6.0,
                escape(name)
            );
            legend_x += 14.0 + 6.5 * name.chars().count() as f64;
        }
    }
    // The first 429, across everything.
    if let Some(t) = i.first {
        let x = axis.x(t);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"24\" y2=\"{bottom:.0}\" stroke=\"#1b2631\" \
             stroke-dasharray=\"1 3\"/><text x=\"{:.1}\" y=\"{:.0}\" class=\"mark\">first 429</text>",
            x + 3.0,
            panels_top - gap + 12.0
        );
    }
    // Time ticks on whole minutes.
    let span = axis.t1 - axis.t0;
    let every = [
        60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 43200.0, 86400.0,
    ]
    .into_iter()
    .find(|e| span / e <= 8.0)
    .unwrap_or(86400.0 * 7.0);
    let mut t = (axis.t0 / every).ceil() * every;
    while t <= axis.t1 {
        let label = super::rfc3339(t);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{bottom:.0}\" y2=\"{:.0}\" class=\"frame\"/>\
             <text x=\"{x:.1}\" y=\"{:.0}\" class=\"tick\" text-anchor=\"middle\">{}</text>",
            bottom + 4.0,
            bottom + 16.0,
            escape(label.get(11..16).unwrap_or(&label)),
            x = axis.x(t)
        );
        t += every;
    }
    let _ = write!(
        out,
        "</svg>\n<p class=\"meta\">Times in UTC, {} to {}.</p>\n",
        escape(&clock(&super::rfc3339(axis.t0))),
        escape(&clock(&super::rfc3339(axis.t1)))
    );
}

/// A replayed alert that fired: its name (and reason), whether critical, and each time it went pending, fired and
/// ended.
struct AlertRow {
    name: String,
    critical: bool,
    spans: Vec<(f64, f64, Option<f64>)>,
}

/// The replayed alerts that fired, a row per alert name (and reason).
fn alert_rows(i: &IncidentReport) -> Vec<AlertRow> {
    let mut rows: Vec<AlertRow> = Vec::new();
    for a in &i.alerts {
        let Some(fired) = a.fired else {
            continue;
        };
        let name = match &a.reason {
            Some(r) => format!("{} ({r})", a.alertname),
            None => a.alertname.clone(),
        };
        let span = (a.pending, fired, a.ended);
        match rows.iter_mut().find(|r| r.name == name) {
            Some(row) => row.spans.push(span),
            None => rows.push(AlertRow {
                critical: a.severity.as_deref() == Some("critical"),
                name,
                spans: vec![span],
            }),
        }
    }
    rows
}

const STYLE: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:920px;\
color:#1b2631;padding:0 12px}h1{font-size:20px}h2{font-size:16px;margin-top:32px}code{font-size:13px}\
.meta{color:#566573}table.facts{border-collapse:collapse;margin:8px 0}table.facts th{text-align:left;\
font-weight:600;padding:2px 16px 2px 0;vertical-align:top;white-space:nowrap}table.facts td{padding:2px 0}\
svg{width:100%;height:auto;background:#fff}svg .frame{fill:none;stroke:#d5d8dc}svg .tick{font-size:10px;\
fill:#566573}svg .title{font-size:12px;font-weight:600;fill:#1b2631}svg .legend{font-size:11px}\
svg .mark{font-size:10px}section{border-top:1px solid #d5d8dc}";

#[cfg(test)]
mod tests {
    use super::with_code;

    #[test]
    fn code_spans_become_code_elements_and_everything_is_escaped() {
        assert_eq!(
            with_code("pending once from 10:00 without firing (its `for` not reached)"),
            "pending once from 10:00 without firing (its <code>for</code> not reached)"
        );
        assert_eq!(
            with_code("a <b> & `list <pods>` then `get`"),
            "a &lt;b&gt; &amp; <code>list &lt;pods&gt;</code> then <code>get</code>"
        );
        // A backtick without its pair is text.
        assert_eq!(with_code("one ` alone"), "one ` alone");
        assert_eq!(with_code("`a` and ` b"), "<code>a</code> and ` b");
        assert_eq!(with_code("no code"), "no code");
    }
}
