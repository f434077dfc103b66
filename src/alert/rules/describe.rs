//! What an alert says of a level, beyond its summary: every number of the level (`description`), the flows that
//! hold its seats or wait (`top_flows`), and what its resolution means.
use crate::alert::RuleName;
use crate::analyze::LevelReport;

/// What is over when a rule's alert resolves: its condition no longer holds past the clear threshold.
pub fn what_cleared(alertname: &str) -> Option<&'static str> {
    let name = RuleName::ALL
        .into_iter()
        .find(|n| n.as_str() == alertname)?;
    Some(match name {
        RuleName::APFHeadroomLow => "headroom is back above the clear threshold",
        RuleName::APFHeadroomExhausted => "no request waits for a seat any more",
        RuleName::APFQueueNearFull => "the fullest queue is back below the clear threshold",
        RuleName::APFExhaustionPredicted => "no exhaustion is in sight any more",
        RuleName::APFSaturationRecurring => {
            "the level's saturation no longer recurs: no episode since longer than half again its longest quiet \
             between two, or too few of them left in the lookback"
        }
        RuleName::APFRequestsRejected => "no more requests are rejected",
        RuleName::APFScrapeFailing => "the replica is read again",
    })
}

pub(super) fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("unknown".to_string(), |v| {
        if (v - v.round()).abs() < 0.005 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    })
}

/// The numbers of a level, one `name: value` per line, for `description`.
pub(super) fn describe(l: &LevelReport) -> String {
    let rejected =
        l.rejected_per_second
            .as_ref()
            .map_or("unknown (one scrape so far)".to_string(), |r| {
                if r.is_empty() {
                    "none".to_string()
                } else {
                    r.iter()
                        .map(|(k, v)| format!("{k} {v:.2}/s"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            });
    [
        format!(
            "limit: {} seats (nominal {})",
            fmt_opt(l.limit_seats),
            fmt_opt(l.nominal_limit_seats)
        ),
        format!("in use: {} seats", fmt_opt(l.executing_seats)),
        format!(
            "headroom: {} seats ({})",
            fmt_opt(l.headroom_seats),
            l.headroom_ratio
                .map_or("unknown".into(), |r| format!("{:.0}%", r * 100.0))
        ),
        format!(
            "queued: {} requests ({} seats)",
            fmt_opt(l.inqueue_requests),
            fmt_opt(l.inqueue_seats)
        ),
        format!(
            "fullest queue: {} / queueLengthLimit {}",
            fmt_opt(l.fullest_queue_requests),
            fmt_opt(l.queue_length_limit)
        ),
        format!("rejected: {rejected}"),
        format!(
            "seconds to exhaustion: {}",
            fmt_opt(l.seconds_to_exhaustion)
        ),
        format!(
            "wait p99: {}",
            l.wait_p99_seconds
                .map_or("unknown".into(), |w| format!("{w:.3}s"))
        ),
        format!(
            "seat utilization p99 (between scrapes too): {}",
            l.seat_utilization_p99
                .map_or("unknown".into(), |u| format!("{:.0}%", u * 100.0))
        ),
        format!("demand peak: {} seats", fmt_opt(l.demand_seats_max)),
        format!(
            "dispatches without a free seat: {}/s",
            fmt_opt(l.no_accommodation_per_second)
        ),
    ]
    .join("\n")
}

/// Who holds seats and who waits, one flow per line.
pub(super) fn top_flows(l: &LevelReport) -> String {
    if l.top_flows.is_empty() {
        return "unknown: no request dump in the window (enable debug_dumps and the RBAC rule for \
                /debug/api_priority_and_fairness/*)"
            .to_string();
    }
    l.top_flows
        .iter()
        .map(|f| {
            let mut line = format!(
                "{} / {}: {:.1} seats executing, {:.1} waiting",
                f.flow_schema,
                if f.flow.is_empty() { "-" } else { &f.flow },
                f.executing_seats,
                f.waiting_requests
            );
            if !f.users.is_empty() {
                line.push_str(&format!(", users {}", f.users.join(", ")));
            }
            if let Some(e) = &f.example_request {
                line.push_str(&format!(", e.g. `{e}`"));
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}
