//! `report --html FILE`: one self-contained page (inline styles and SVG, no script, no external resource: it works
//! offline and attaches to a ticket) with, per incident, its seats, queues and 429s on one time axis and the
//! replayed alerts marked on it.
//!
//! The markup, the SVG charts' included, is in askama templates (`templates/report/`), which HTML-escape every value
//! (see `export::page` for why askama): here the numbers are worked out and formatted, coordinates included.
use std::fmt::Write;

use askama::Template;

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

#[derive(Template)]
#[template(path = "report/page.html", whitespace = "minimize")]
struct Page<'a> {
    title: String,
    sources: String,
    step: &'a str,
    replicas: usize,
    incidents: Vec<Incident<'a>>,
}

/// One incident's section: its facts, then its chart.
struct Incident<'a> {
    n: usize,
    priority_level: &'a str,
    apiserver: &'a str,
    cluster: &'a str,
    rejected: String,
    peak: String,
    first_rejection: String,
    last_rejection: String,
    recovered: String,
    headroom_low_since: String,
    most_waiting: String,
    flow_schemas: Vec<(&'a str, String)>,
    /// A line per replayed alert: its name and what it did.
    alerts: Vec<(String, Vec<Words>)>,
    remediation: Option<Vec<Words>>,
    chart: Option<Chart>,
}

/// A stretch of words, set as code or as text: the words' own Markdown code spans ("its `for` not reached",
/// "mostly `list pods`") become `<code>` elements; a backtick without its pair stays a backtick.
pub(super) struct Words {
    code: bool,
    text: String,
}

fn with_code(text: &str) -> Vec<Words> {
    let parts: Vec<&str> = text.split('`').collect();
    let mut out: Vec<Words> = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        let paired = n % 2 == 1 && n + 1 < parts.len();
        if paired {
            out.push(Words {
                code: true,
                text: part.to_string(),
            });
            continue;
        }
        let text = if n % 2 == 1 {
            format!("`{part}")
        } else {
            part.to_string()
        };
        match out.last_mut() {
            Some(last) if !last.code => last.text.push_str(&text),
            _ => out.push(Words { code: false, text }),
        }
    }
    out
}

pub(super) fn page(report: &Report, incidents: &[(IncidentReport, &Timeline)]) -> String {
    Page {
        title: format!(
            "API Priority and Fairness from {} to {}",
            clock(&report.from),
            clock(&report.to)
        ),
        sources: report.sources.join(", "),
        step: &report.step,
        replicas: report.replicas,
        incidents: incidents
            .iter()
            .enumerate()
            .map(|(n, (i, timeline))| incident(n + 1, i, timeline))
            .collect(),
    }
    .render()
    // Writing to a String fails only if a value's Display does, and none here does.
    .expect("the report's page renders")
}

fn incident<'a>(n: usize, i: &'a IncidentReport, timeline: &Timeline) -> Incident<'a> {
    Incident {
        n,
        priority_level: &i.priority_level,
        apiserver: &i.apiserver,
        cluster: i.cluster.as_deref().unwrap_or("(no cluster label)"),
        rejected: format!("{:.0}", i.rejected_total),
        peak: format!("{:.1}", i.peak_rejected_per_second),
        first_rejection: i.first_rejection.as_deref().map_or("-".into(), clock),
        last_rejection: i.last_rejection.as_deref().map_or("-".into(), clock),
        recovered: i
            .recovered_at
            .as_deref()
            .map_or("not by the window's end".into(), clock),
        headroom_low_since: i.headroom_low_since.as_deref().map_or("-".into(), clock),
        most_waiting: format!(
            "{}{}",
            i.max_waiting_requests
                .map_or("-".into(), |w| format!("{w:.0}")),
            i.queue_capacity_requests
                .map_or(String::new(), |c| format!(" of {c:.0} queue places"))
        ),
        flow_schemas: i
            .flow_schemas
            .iter()
            .map(|s| (s.flow_schema.as_str(), format!("{:.0}", s.rejected)))
            .collect(),
        alerts: alert_lines(i)
            .into_iter()
            .map(|(name, what)| (name, with_code(&what)))
            .collect(),
        remediation: i.remediation.as_deref().map(with_code),
        chart: chart(i, timeline),
    }
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

/// An incident's chart: the replayed alerts' rows above three panels on one time axis. Coordinates in the SVG's
/// own units, formatted as drawn.
struct Chart {
    width: String,
    height: String,
    left: String,
    label: String,
    rows: Vec<Row>,
    panels: Vec<PanelView>,
    first_429: Option<Mark>,
    ticks: Vec<Tick>,
    from: String,
    to: String,
}

/// A replayed alert's row: its name at the left, a dashed line while pending, a thick one while firing.
struct Row {
    name_x: String,
    name_y: String,
    y: String,
    name: String,
    colour: &'static str,
    spans: Vec<RowSpan>,
}

struct RowSpan {
    pending: String,
    fired: String,
    end: String,
}

struct PanelView {
    title: &'static str,
    title_x: String,
    title_y: String,
    top: String,
    frame_width: String,
    tick_x: String,
    max_y: String,
    max: String,
    bottom: String,
    lines: Vec<LineView>,
}

struct LineView {
    d: String,
    colour: &'static str,
    dashed: bool,
    legend_x: String,
    legend_y: String,
    name: String,
}

/// The first 429, across everything.
struct Mark {
    x: String,
    bottom: String,
    label_x: String,
    label_y: String,
}

/// A time tick on a whole minute (or hour, or day).
struct Tick {
    x: String,
    bottom: String,
    end: String,
    label_y: String,
    label: String,
}

fn chart(i: &IncidentReport, timeline: &Timeline) -> Option<Chart> {
    let points = shown(i, timeline);
    let (first, last) = (points.first()?, points.last()?);
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
    let clamp = |t: f64| axis.x(t.clamp(axis.t0, axis.t1));
    let rows = rows
        .into_iter()
        .enumerate()
        .map(|(k, row)| {
            let y = 34.0 + 14.0 * k as f64;
            Row {
                name_x: format!("{:.0}", LEFT - 8.0),
                name_y: format!("{:.0}", y + 4.0),
                y: format!("{y:.0}"),
                colour: if row.critical { COLOURS[0] } else { COLOURS[2] },
                spans: row
                    .spans
                    .iter()
                    .map(|(pending, fired, ended)| RowSpan {
                        pending: format!("{:.1}", clamp(*pending)),
                        fired: format!("{:.1}", clamp(*fired)),
                        end: format!(
                            "{:.1}",
                            clamp(ended.unwrap_or(axis.t1)).max(clamp(*fired) + 2.0)
                        ),
                    })
                    .collect(),
                name: row.name,
            }
        })
        .collect();
    let panels = panels
        .iter()
        .enumerate()
        .map(|(k, panel)| {
            let top = panels_top + k as f64 * (PANEL + gap);
            let max = nice(
                panel
                    .series
                    .iter()
                    .flat_map(|l| l.points.iter().filter_map(|(_, v)| *v))
                    .fold(0.0, f64::max),
            );
            let mut legend_x = LEFT + 4.0;
            let lines = panel
                .series
                .iter()
                .map(|l| {
                    let line = LineView {
                        d: path(&axis, &l.points, top, max, 2.5 * step),
                        colour: l.colour,
                        dashed: l.dashed,
                        legend_x: format!("{legend_x:.0}"),
                        legend_y: format!("{:.0}", top - 6.0),
                        name: l.name.clone(),
                    };
                    legend_x += 14.0 + 6.5 * l.name.chars().count() as f64;
                    line
                })
                .collect();
            PanelView {
                title: panel.title,
                title_x: format!("{:.0}", LEFT - 8.0),
                title_y: format!("{:.0}", top + PANEL / 2.0),
                top: format!("{top}"),
                frame_width: format!("{:.0}", WIDTH - LEFT - RIGHT),
                tick_x: format!("{:.0}", LEFT - 6.0),
                max_y: format!("{:.0}", top + 10.0),
                max: count(max),
                bottom: format!("{:.0}", top + PANEL),
                lines,
            }
        })
        .collect();
    let first_429 = i.first.map(|t| {
        let x = axis.x(t);
        Mark {
            x: format!("{x:.1}"),
            bottom: format!("{bottom:.0}"),
            label_x: format!("{:.1}", x + 3.0),
            label_y: format!("{:.0}", panels_top - gap + 12.0),
        }
    });
    // Time ticks on whole minutes.
    let span = axis.t1 - axis.t0;
    let every = [
        60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 43200.0, 86400.0,
    ]
    .into_iter()
    .find(|e| span / e <= 8.0)
    .unwrap_or(86400.0 * 7.0);
    let mut ticks = Vec::new();
    let mut t = (axis.t0 / every).ceil() * every;
    while t <= axis.t1 {
        let label = super::rfc3339(t);
        ticks.push(Tick {
            x: format!("{:.1}", axis.x(t)),
            bottom: format!("{bottom:.0}"),
            end: format!("{:.0}", bottom + 4.0),
            label_y: format!("{:.0}", bottom + 16.0),
            label: label.get(11..16).unwrap_or(&label).to_string(),
        });
        t += every;
    }
    Some(Chart {
        width: format!("{WIDTH}"),
        height: format!("{height:.0}"),
        left: format!("{LEFT}"),
        label: format!("{} on {}", i.priority_level, replica(i)),
        rows,
        panels,
        first_429,
        ticks,
        from: clock(&super::rfc3339(axis.t0)),
        to: clock(&super::rfc3339(axis.t1)),
    })
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

#[cfg(test)]
mod tests {
    use askama::Template;

    use super::super::shape::{AlertReplay, IncidentReport, Report, SchemaReport};
    use super::{page, with_code, Words};
    use crate::analyze::incidents::{LevelPoint, Timeline};

    /// The page's own macro, alone.
    #[derive(Template)]
    #[template(
        source = "{% import \"report/words.html\" as w %}{% call w::words(words) %}{% endcall %}",
        ext = "html"
    )]
    struct Shown {
        words: Vec<Words>,
    }

    fn shown(text: &str) -> String {
        Shown {
            words: with_code(text),
        }
        .render()
        .unwrap()
    }

    #[test]
    fn code_spans_become_code_elements_and_everything_is_escaped() {
        assert_eq!(
            shown("pending once from 10:00 without firing (its `for` not reached)"),
            "pending once from 10:00 without firing (its <code>for</code> not reached)"
        );
        // askama writes `<` and `>` as numeric character references.
        assert_eq!(
            shown("a <b> & `list <pods>` then `get`"),
            "a &#60;b&#62; &#38; <code>list &#60;pods&#62;</code> then <code>get</code>"
        );
        // A backtick without its pair is text.
        assert_eq!(shown("one ` alone"), "one ` alone");
        assert_eq!(shown("`a` and ` b"), "<code>a</code> and ` b");
        assert_eq!(shown("no code"), "no code");
    }

    /// Every string from outside (the Prometheus's labels, the flow schemas, the replayed alerts' words, the
    /// sources) reaches the page escaped, in the facts and in the chart alike.
    #[test]
    fn values_are_escaped() {
        let x = |what: &str| format!("<i>{what}</i>");
        let report = Report {
            sources: vec![x("source")],
            step: x("step"),
            from: "2026-11-24T10:00:00Z".into(),
            to: "2026-11-24T11:00:00Z".into(),
            ..Default::default()
        };
        let points: Vec<LevelPoint> = (0..3)
            .map(|k| LevelPoint {
                time: 1_800_000_000.0 + 15.0 * k as f64,
                executing_seats: Some(5.0),
                rejected: 1.0,
                rejected_by: vec![(x("flow schema"), "queue-full".into(), 1.0)],
                ..Default::default()
            })
            .collect();
        let mut timeline = Timeline::default();
        timeline.points = points;
        let incident = IncidentReport {
            cluster: Some(x("cluster")),
            apiserver: x("replica"),
            priority_level: x("level"),
            started_at: "2026-11-24T10:00:00Z".into(),
            first_rejection: Some(x("first 429")),
            last_rejection: None,
            peak_rejected_per_second: 1.0,
            rejected_total: 3.0,
            flow_schemas: vec![SchemaReport {
                flow_schema: x("flow schema"),
                rejected: 3.0,
                reasons: Default::default(),
            }],
            headroom_low_since: None,
            max_waiting_requests: None,
            queue_capacity_requests: None,
            longest_wait_p99_seconds: None,
            min_headroom_seats: None,
            recovered_at: None,
            alerts: vec![AlertReplay {
                alertname: x("alertname"),
                severity: Some("critical".into()),
                reason: Some(x("reason")),
                pending_at: "2026-11-24T10:00:00Z".into(),
                fired_at: Some("2026-11-24T10:00:15Z".into()),
                resolved_at: None,
                lead_seconds: Some(0.0),
                pending: 1_800_000_000.0,
                fired: Some(1_800_000_015.0),
                ended: None,
            }],
            remediation: Some(format!("{} `{}`", x("remediation"), x("code"))),
            first: Some(1_800_000_015.0),
            points: 0..3,
        };
        let h = page(&report, &[(incident, &timeline)]);
        assert!(!h.contains("<i>"), "{h}");
        for what in [
            "source",
            "step",
            "cluster",
            "replica",
            "level",
            "first 429",
            "flow schema",
            "alertname",
            "reason",
            "remediation",
            "code",
        ] {
            assert!(
                h.contains(&format!("&#60;i&#62;{what}&#60;/i&#62;")),
                "{what} not shown escaped: {h}"
            );
        }
        // The chart names the flow schema too (its line's legend), and the alert's row.
        assert!(h.contains("fill=\"#c0392b\">&#60;i&#62;flow schema"), "{h}");
        assert!(
            h.contains("text-anchor=\"end\">&#60;i&#62;alertname&#60;/i&#62; (&#60;i&#62;reason"),
            "{h}"
        );
    }
}
