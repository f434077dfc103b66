//! A flow schema's load told by audit events: each flow's share of the schema's audited requests (served and
//! rejected apart) times what this replica's counters say the schema was sent (audit events name no replica), its
//! own execution time, and seats that add up to the schema's estimated seats. Counts over the whole window, where
//! the dumps give the top flows as sampled.
use super::workload::{
    bursts_words, execution_time, flow_name, matched, whole_seats, Load, LoadFlow,
};
use crate::analyze::{AuditedSchema, LevelReport, SchemaCost};
use apf::model::FlowcontrolObjects;
use apf_sim::ObservedFlow;

/// Fewer audited requests of a flow schema than this over the window, and its flows' shares are noise: the dumps
/// and counters tell it instead.
pub(super) const MIN_AUDITED_REQUESTS: u64 = 30;

/// Unlisted flows of a schema replayed as at most this many flows (as [`super::workload`]'s unseen flows).
const REST_FLOWS: usize = 8;

/// One part of the schema's load before its seats are known: its arrivals per second here, and the share of them
/// that are LISTs (`None`: its width is known, from the dumps).
struct Part {
    rate: f64,
    lists: f64,
    known_seats: Option<f64>,
}

/// The flows of `schema` on this replica from what the audit events tell of it; `dispatched` and the schema's
/// rejections are the replica's own counters.
#[allow(clippy::too_many_arguments)]
pub(super) fn audited_flows(
    load: &mut Load,
    level: &LevelReport,
    schema: &str,
    cost: &SchemaCost,
    dispatched: f64,
    seconds: f64,
    audited: &AuditedSchema,
    objects: &FlowcontrolObjects,
) {
    let rejected = cost.rejected_per_second;
    let served_all = audited.requests.saturating_sub(audited.rejected) as f64;
    // A flow's arrivals here: its share of the schema's served requests times what the replica dispatched, and of
    // its 429s times what the replica rejected (by its share of all requests when the events hold no 429).
    let arrivals = |requests: u64, turned_away: u64| -> f64 {
        let served = requests.saturating_sub(turned_away) as f64;
        let served_share = if served_all > 0.0 {
            served / served_all
        } else {
            0.0
        };
        let rejected_share = if audited.rejected > 0 {
            turned_away as f64 / audited.rejected as f64
        } else {
            requests as f64 / audited.requests as f64
        };
        dispatched * served_share + rejected * rejected_share
    };
    // The audited durations run from receipt to response: they set the flows' execution times apart, the
    // replica's request_execution_seconds their scale.
    let scale = audited
        .seconds_per_request
        .filter(|s| *s > 0.0)
        .map_or(1.0, |s| seconds / s);
    let shown_seats = |flow: &str| {
        level
            .top_flows
            .iter()
            .find(|f| f.flow_schema == schema && f.flow == flow)
            .and_then(|f| f.seats_per_request)
    };
    let mut parts: Vec<Part> = audited
        .flows
        .iter()
        .map(|f| Part {
            rate: arrivals(f.requests, f.rejected),
            lists: f.list_requests as f64 / f.requests.max(1) as f64,
            known_seats: shown_seats(&f.flow_distinguisher),
        })
        .collect();
    let listed = |n: fn(&apf::audit::FlowRow) -> u64| audited.flows.iter().map(n).sum::<u64>();
    let rest_requests = audited.requests.saturating_sub(listed(|f| f.requests));
    let rest_rejected = audited.rejected.saturating_sub(listed(|f| f.rejected));
    let rest_lists = audited
        .list_requests
        .saturating_sub(listed(|f| f.list_requests));
    parts.push(Part {
        rate: if rest_requests > 0 {
            arrivals(rest_requests, rest_rejected)
        } else {
            0.0
        },
        lists: rest_lists as f64 / rest_requests.max(1) as f64,
        known_seats: None,
    });
    let seats = seats_of(&parts, cost.seats_per_request.unwrap_or(1.0));
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            "0 %".to_string()
        } else {
            format!("{:.0} %", 100.0 * part as f64 / whole as f64)
        }
    };
    for ((f, part), seats) in audited.flows.iter().zip(&parts).zip(&seats) {
        if part.rate <= 0.0 {
            continue;
        }
        let execution = f.seconds_per_request.map_or(seconds, |s| s * scale);
        let only_user = (f.users == 1 && !f.more_users)
            .then(|| f.top_users.first())
            .flatten();
        let (request, identity) = match (only_user, &f.example) {
            (Some(user), Some(example)) => matched(
                user,
                example.clone(),
                &example_words(example),
                schema,
                objects,
            ),
            _ => (
                None,
                "more than one user in it: kept in its flow schema whatever the change".to_string(),
            ),
        };
        load.flows.push(LoadFlow {
            flow: ObservedFlow {
                name: flow_name(schema, &f.flow_distinguisher),
                flow_schema: schema.to_string(),
                flow: f.flow_distinguisher.clone(),
                request,
                requests_per_second: part.rate,
                seats: whole_seats(*seats),
                execution: execution_time(execution),
                profile: cost.arrival_profile.clone(),
            },
            priority_level: level.priority_level.clone(),
            users: f.top_users.clone(),
            told_from: format!(
                "audit events: {} of its flow schema's served requests and {} of its 429s, times this replica's \
                 counters of the schema; execution time {}; {}; {identity}{}",
                percent(
                    f.requests.saturating_sub(f.rejected),
                    audited.requests.saturating_sub(audited.rejected)
                ),
                percent(f.rejected, audited.rejected),
                if f.seconds_per_request.is_some() {
                    "its audited mean (receipt to response less queue wait) scaled to the schema's \
                     request_execution_seconds"
                } else {
                    "its flow schema's mean (no request of it served in the events)"
                },
                seats_words(part, *seats),
                bursts_words(cost)
            ),
        });
    }
    let (Some(rest), Some(rest_seats)) = (parts.last(), seats.last()) else {
        return;
    };
    if rest.rate <= 0.0 {
        return;
    }
    let flows = audited.flows_not_listed.clamp(1, REST_FLOWS);
    for i in 0..flows {
        load.flows.push(LoadFlow {
            flow: ObservedFlow {
                name: format!("{schema} (flows not listed, {})", i + 1),
                flow_schema: schema.to_string(),
                flow: format!("unlisted-{}", i + 1),
                request: None,
                requests_per_second: rest.rate / flows as f64,
                seats: whole_seats(*rest_seats),
                execution: execution_time(seconds),
                profile: cost.arrival_profile.clone(),
            },
            priority_level: level.priority_level.clone(),
            users: Vec::new(),
            told_from: format!(
                "audit events: the {} flows of its flow schema past the {} listed, spread over {flows}, at the \
                 schema's mean execution time; kept in {schema} whatever the change{}",
                audited.flows_not_listed,
                audited.flows.len(),
                bursts_words(cost)
            ),
        });
    }
}

/// Each part's seats per request: its width where the dumps showed it, else one seat for a request other than a
/// LIST and, for a LIST, the width that makes the parts' seats add up to what kube-apiserver estimated of the
/// schema's arrivals (`mean_seats` per request). Where that cannot be (no LISTs, or the widths shown take it all),
/// the parts not shown share what is left evenly.
fn seats_of(parts: &[Part], mean_seats: f64) -> Vec<f64> {
    let total: f64 = parts.iter().map(|p| p.rate).sum::<f64>() * mean_seats;
    let known: f64 = parts
        .iter()
        .filter_map(|p| Some(p.rate * p.known_seats?))
        .sum();
    let unknown = parts.iter().filter(|p| p.known_seats.is_none());
    let (single, listing): (f64, f64) = unknown.clone().fold((0.0, 0.0), |(s, l), p| {
        (s + p.rate * (1.0 - p.lists), l + p.rate * p.lists)
    });
    let list_width = (listing > 0.0)
        .then(|| (total - known - single) / listing)
        .filter(|w| *w >= 1.0);
    let even = {
        let rate: f64 = unknown.map(|p| p.rate).sum();
        if rate > 0.0 {
            ((total - known) / rate).max(1.0)
        } else {
            1.0
        }
    };
    parts
        .iter()
        .map(|p| match (p.known_seats, list_width) {
            (Some(s), _) => s,
            (None, Some(w)) => 1.0 + p.lists * (w - 1.0),
            (None, None) => even,
        })
        .collect()
}

/// How a part's seats were told.
fn seats_words(part: &Part, seats: f64) -> String {
    if part.known_seats.is_some() {
        format!(
            "{} seats a request, as the dumps saw it",
            whole_seats(seats)
        )
    } else if part.lists > 0.0 {
        format!(
            "{} seats a request: {:.0} % of its requests LISTs, as wide as makes its flow schema's estimated seats \
             add up (any other request 1 seat)",
            whole_seats(seats),
            part.lists * 100.0
        )
    } else {
        format!(
            "{} seat{} a request",
            whole_seats(seats),
            if whole_seats(seats) == 1 { "" } else { "s" }
        )
    }
}

/// `list pods`, `get /healthz`.
fn example_words(r: &apf::matching::Request) -> String {
    match &r.target {
        apf::matching::Target::Resource {
            api_group,
            resource,
            ..
        } if api_group.is_empty() => format!("{} {resource}", r.verb),
        apf::matching::Target::Resource {
            api_group,
            resource,
            ..
        } => format!("{} {resource}.{api_group}", r.verb),
        apf::matching::Target::NonResource { path } => format!("{} {path}", r.verb),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// flood.yaml's service-accounts schema: 30 LISTs/s of 10 seats beside 20 GETs/s of one; the schema's mean of
    /// 6.4 seats fits neither, the LISTs' share tells each.
    #[test]
    fn lists_take_the_width_that_adds_up_to_the_schemas_seats() {
        let part = |rate: f64, lists: f64| Part {
            rate,
            lists,
            known_seats: None,
        };
        let seats = seats_of(&[part(30.0, 1.0), part(20.0, 0.0), part(0.0, 0.0)], 6.4);
        assert!((seats[0] - 10.0).abs() < 1e-9, "{seats:?}");
        assert_eq!(seats[1], 1.0);
    }

    fn flow(
        user: &str,
        requests: u64,
        rejected: u64,
        lists: u64,
        seconds: f64,
    ) -> apf::audit::FlowRow {
        apf::audit::FlowRow {
            flow_schema: "service-accounts".into(),
            priority_level: "workload-low".into(),
            flow_distinguisher: user.into(),
            requests,
            rejected,
            served: requests - rejected,
            seconds_per_request: Some(seconds),
            list_requests: lists,
            example: None,
            users: 1,
            more_users: false,
            top_users: vec![user.into()],
        }
    }

    /// A minute of flood.yaml's service-accounts schema in audit events, on a replica that dispatched 30/s of it and
    /// rejected 20/s: the agent got every 429, so its 30/s are its 600 of the 1,860 served and all the rejected; the
    /// execution times keep their ratio at the replica's mean; the requests beyond the listed flows go as a rest.
    #[test]
    fn each_flow_gets_its_share_of_the_replicas_counters() {
        let audited = AuditedSchema {
            priority_level: "workload-low".into(),
            flow_schema: "service-accounts".into(),
            requests: 3_060,
            rejected: 1_200,
            served: 1_860,
            // The audited durations run 10 % long (admission, the response): the counters' mean sets the scale.
            seconds_per_request: Some(1.1 * (600.0 * 2.0 + 1_200.0 * 0.05 + 60.0 * 0.05) / 1_860.0),
            list_requests: 1_800,
            flows: vec![
                flow("agent", 1_800, 1_200, 1_800, 2.2),
                flow("cert-manager", 1_200, 0, 0, 0.055),
            ],
            flows_not_listed: 3,
        };
        let cost = SchemaCost {
            seconds_per_request: Some((600.0 * 2.0 + 1_200.0 * 0.05 + 60.0 * 0.05) / 1_860.0),
            seats_per_request: Some((1_800.0 * 10.0 + 1_260.0) / 3_060.0),
            dispatched_per_second: Some(31.0),
            rejected_per_second: 20.0,
            ..Default::default()
        };
        let level = LevelReport {
            priority_level: "workload-low".into(),
            ..Default::default()
        };
        let mut load = Load::default();
        let seconds = cost.seconds_per_request.unwrap();
        audited_flows(
            &mut load,
            &level,
            "service-accounts",
            &cost,
            31.0,
            seconds,
            &audited,
            &FlowcontrolObjects::default(),
        );
        let got: Vec<(String, f64, u32, f64)> = load
            .flows
            .iter()
            .map(|f| {
                (
                    f.flow.name.clone(),
                    f.flow.requests_per_second,
                    f.flow.seats,
                    f.flow.execution.as_secs_f64(),
                )
            })
            .collect();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.max(1.0);
        assert_eq!(got.len(), 5, "{got:?}");
        let (agent, cert) = (&got[0], &got[1]);
        assert!(
            close(agent.1, 30.0) && agent.2 == 10 && close(agent.3, 2.0),
            "{agent:?}"
        );
        assert!(
            close(cert.1, 20.0) && cert.2 == 1 && close(cert.3, 0.05),
            "{cert:?}"
        );
        // The rest: 60 requests over 3 flows, 1/s in all here, one seat, the schema's mean.
        let rest: f64 = got[2..].iter().map(|f| f.1).sum();
        assert!(close(rest, 1.0), "{got:?}");
        assert!(
            got[2..].iter().all(|f| f.2 == 1 && close(f.3, seconds)),
            "{got:?}"
        );
        assert!(load.flows[0]
            .told_from
            .contains("32 % of its flow schema's served requests"));
    }

    /// A width the dumps showed is kept; the others share what is left.
    #[test]
    fn a_width_shown_is_kept() {
        let seats = seats_of(
            &[
                Part {
                    rate: 30.0,
                    lists: 1.0,
                    known_seats: Some(10.0),
                },
                Part {
                    rate: 20.0,
                    lists: 0.0,
                    known_seats: None,
                },
            ],
            6.4,
        );
        assert_eq!(seats, vec![10.0, 1.0]);
    }
}
