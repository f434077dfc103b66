//! A replica on the status page: per priority level a headroom bar against the enforced and nominal limits, the
//! trend of the window, queues, rejections and the flows behind the pressure.
use std::fmt::Write;

use html_escape::{encode_double_quoted_attribute as attr, encode_text as text};

use super::num;
use crate::analyze::{ApiserverReport, FlowReport, LevelReport, LevelStatus};
use apf::model::EXEMPT;

pub(super) fn render_replica(h: &mut String, a: &ApiserverReport) {
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
        "<tr class=\"{class}\"><td class=\"level\">{}<br><span class=\"badge {class}\">{class}</span></td>\
         <td data-label=\"seats in use / limit\">{}</td>",
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
        "<td data-label=\"headroom trend\">{}</td><td class=\"num\" data-label=\"queued\">{}</td>\
         <td class=\"num\" data-label=\"rejected/s\" title=\"{}\">{}</td>\
         <td class=\"num\" data-label=\"exhausted in\">{}</td></tr>",
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
pub(super) fn seats_bar(l: &LevelReport, class: &str) -> String {
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
pub(super) fn trend_svg(l: &LevelReport) -> String {
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

/// The flow's rate against what its share sustains (`apf-monitor advise`): ` · 41/s of 20/s sustainable`, marked
/// when above.
fn rate(f: &FlowReport) -> String {
    let Some(a) = &f.advice else {
        return String::new();
    };
    let Some(sustainable) = a.sustainable_requests_per_second else {
        return String::new();
    };
    let observed = a
        .observed_requests_per_second
        .map(|o| format!("{}/s of ", apf::advice::shown(o)))
        .unwrap_or_default();
    let class = if a.above_share() { "above" } else { "muted" };
    format!(
        " · <span class=\"{class}\" title=\"{}\">{observed}{}/s sustainable</span>",
        text(&a.advice),
        apf::advice::shown(sustainable)
    )
}

fn flows_cell(flows: &[FlowReport]) -> String {
    if flows.is_empty() {
        return String::new();
    }
    let mut out = String::from("<ul class=\"flows\">");
    for f in flows.iter().take(3) {
        let _ = write!(
            out,
            "<li><b>{}</b>{}: {} waiting, {} seats{}{}{}</li>",
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
                .unwrap_or_default(),
            rate(f)
        );
    }
    out.push_str("</ul>");
    out
}
