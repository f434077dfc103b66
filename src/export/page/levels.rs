//! A replica on the status page: per priority level a headroom bar against the enforced and nominal limits, the
//! trend of the window, queues, rejections and the flows behind the pressure. Here the numbers are worked out and
//! formatted; `templates/status/replica.html` lays them out.
use super::num;
use crate::analyze::{ApiserverReport, FlowReport, LevelReport, LevelStatus};
use apf::model::EXEMPT;

/// One replica's panel.
pub(super) struct Replica<'a> {
    pub(super) name: &'a str,
    pub(super) version: &'a str,
    pub(super) scraped_at: Option<&'a str>,
    pub(super) errors: Vec<String>,
    /// Why some levels show no flows (no request dumps).
    pub(super) note: Option<String>,
    pub(super) levels: Vec<Level<'a>>,
}

pub(super) fn replica(a: &ApiserverReport) -> Replica<'_> {
    Replica {
        name: &a.apiserver,
        version: a.kubernetes_version.as_deref().unwrap_or(""),
        scraped_at: a.scraped_at.as_deref(),
        errors: a.errors.iter().map(ToString::to_string).collect(),
        // Without levels the panel says so; the note would only add to it.
        note: (!a.levels.is_empty())
            .then(|| a.absent_without_dumps())
            .flatten(),
        levels: a.levels.iter().map(level).collect(),
    }
}

/// One priority level's row, and the row of its top flows under it.
pub(super) struct Level<'a> {
    pub(super) name: &'a str,
    /// ok, warning, critical or exempt: the row's mark, its badge and its bar's colour.
    pub(super) class: &'static str,
    /// Never limited, never queued: only its seats in use mean something.
    pub(super) exempt: bool,
    pub(super) seats: Seats,
    pub(super) trend: Option<Trend>,
    pub(super) queued: String,
    pub(super) queue_capacity: Option<String>,
    pub(super) fullest_queue: Option<FullestQueue>,
    pub(super) rejected: String,
    /// By reason, on hover.
    pub(super) rejected_by_reason: String,
    pub(super) exhausted_in: String,
    pub(super) flows: Vec<Flow<'a>>,
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

pub(super) fn level(l: &LevelReport) -> Level<'_> {
    let class = status_class(l);
    let rejected = l
        .rejected_per_second
        .as_ref()
        .map(|r| r.values().sum::<f64>());
    let rejected_by_reason = l
        .rejected_per_second
        .iter()
        .flatten()
        .map(|(reason, v)| format!("{reason} {}", num(Some(*v))))
        .collect::<Vec<_>>()
        .join(", ");
    Level {
        name: &l.priority_level,
        class,
        exempt: l.priority_level == EXEMPT,
        seats: seats(l),
        trend: trend(l),
        queued: num(l.inqueue_requests),
        queue_capacity: l.queue_capacity_requests.map(|c| num(Some(c))),
        fullest_queue: fullest_queue(l),
        rejected: num(rejected),
        rejected_by_reason,
        exhausted_in: match l.seconds_to_exhaustion {
            Some(s) if s <= 0.0 => "exhausted".to_string(),
            Some(s) => format!("{s:.0} s"),
            None => "–".into(),
        },
        flows: l.top_flows.iter().take(3).map(flow).collect(),
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
/// two, so seats lent away (limit under nominal) show as the hatched part beyond the limit. Widths are percents
/// of the track, one decimal.
pub(super) struct Seats {
    pub(super) in_use: String,
    /// None: no limit read, only the seats in use are shown.
    pub(super) bar: Option<SeatsBar>,
}

pub(super) struct SeatsBar {
    pub(super) title: String,
    pub(super) limit_width: String,
    pub(super) in_use_width: String,
    pub(super) nominal_at: Option<String>,
    pub(super) limit: String,
    pub(super) nominal: String,
    pub(super) headroom: String,
}

pub(super) fn seats(l: &LevelReport) -> Seats {
    let used = l.executing_seats.unwrap_or(0.0);
    let Some(limit) = l.limit_seats else {
        return Seats {
            in_use: num(l.executing_seats),
            bar: None,
        };
    };
    let nominal = l.nominal_limit_seats;
    let scale = limit.max(nominal.unwrap_or(0.0)).max(used);
    let title = format!(
        "{} of {} seats in use (enforced limit); nominal {}{}",
        num(Some(used)),
        num(Some(limit)),
        num(nominal),
        l.upper_limit_seats
            .map(|u| format!(", can borrow up to {}", num(Some(u))))
            .unwrap_or_default()
    );
    Seats {
        in_use: num(Some(used)),
        bar: Some(SeatsBar {
            title,
            limit_width: format!("{:.1}", pct(limit, scale)),
            in_use_width: format!("{:.1}", pct(used, scale)),
            nominal_at: nominal.map(|n| format!("{:.1}", pct(n, scale))),
            limit: num(Some(limit)),
            nominal: num(nominal),
            headroom: num(l.headroom_seats),
        }),
    }
}

/// Headroom over the window as a line in a 100 x 24 box; the zero line in red when the level came near it.
/// Coordinates one decimal.
pub(super) struct Trend {
    pub(super) points: String,
    pub(super) zero_at: String,
    pub(super) first: String,
    pub(super) last: String,
    pub(super) over: String,
}

pub(super) fn trend(l: &LevelReport) -> Option<Trend> {
    let points = &l.headroom_trend;
    if points.len() < 2 {
        return None;
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
    Some(Trend {
        points: line.join(" "),
        zero_at: format!("{:.1}", y(0.0)),
        first: num(Some(points[0].1)),
        last: num(Some(points[points.len() - 1].1)),
        over: format!("{span:.0}"),
    })
}

/// The fullest queue against queueLengthLimit: the queue that answers `queue-full` first.
pub(super) struct FullestQueue {
    pub(super) requests: String,
    pub(super) limit: String,
    pub(super) class: &'static str,
    pub(super) width: String,
}

fn fullest_queue(l: &LevelReport) -> Option<FullestQueue> {
    let (fullest, max) = (l.fullest_queue_requests?, l.queue_length_limit?);
    let fill = pct(fullest, max);
    Some(FullestQueue {
        requests: num(Some(fullest)),
        limit: num(Some(max)),
        class: if fill >= 80.0 {
            "critical"
        } else if fill >= 50.0 {
            "warning"
        } else {
            "ok"
        },
        width: format!("{fill:.1}"),
    })
}

/// A flow behind the pressure.
pub(super) struct Flow<'a> {
    pub(super) flow_schema: &'a str,
    pub(super) flow: &'a str,
    pub(super) waiting: String,
    pub(super) seats: String,
    pub(super) users: String,
    pub(super) example_request: Option<&'a str>,
    pub(super) rate: Option<Rate<'a>>,
}

/// The flow's rate against what its share sustains (`apf-monitor advise`): `41/s of 20/s sustainable`, marked when
/// above.
pub(super) struct Rate<'a> {
    pub(super) observed: Option<String>,
    pub(super) sustainable: String,
    pub(super) above: bool,
    pub(super) advice: &'a str,
}

fn flow(f: &FlowReport) -> Flow<'_> {
    let rate = f.advice.as_ref().and_then(|a| {
        Some(Rate {
            sustainable: apf::advice::shown(a.sustainable_requests_per_second?),
            observed: a.observed_requests_per_second.map(apf::advice::shown),
            above: a.above_share(),
            advice: &a.advice,
        })
    });
    Flow {
        flow_schema: &f.flow_schema,
        flow: &f.flow,
        waiting: num(Some(f.waiting_requests)),
        seats: num(Some(f.executing_seats)),
        users: f.users.join(", "),
        example_request: f.example_request.as_deref(),
        rate,
    }
}
