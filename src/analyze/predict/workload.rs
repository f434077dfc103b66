//! The load one replica carried over the window, as flows the simulator can replay: per flow schema what its
//! counters say (requests dispatched and rejected per second, seats and execution time per request), split among the
//! flows its dumps showed, the rest spread over flows the dumps did not show; where audit events of the window hold
//! enough of a flow schema's requests, its flows as they tell them ([`super::audited`]).
use super::audited::{audited_flows, MIN_AUDITED_REQUESTS};
use super::Unpredictable;
use crate::analyze::{ApiserverReport, AuditReport, FlowReport, LevelReport, SchemaCost};
use apf::matching::match_request;
use apf::model::FlowcontrolObjects;
use apf_sim::ObservedFlow;

/// At most this many flows stand for what a flow schema sent beyond the flows the dumps showed: fair queuing gives
/// each flow its own queue, so a rest sent as one flow would wait as one, but a rest of hundreds of tiny flows needs
/// no hundred flows to be replayed faithfully.
const UNSEEN_FLOWS_PER_SCHEMA: usize = 8;

/// A flow of the replayed load, and how it was told.
#[derive(Debug, Clone)]
pub struct LoadFlow {
    pub flow: ObservedFlow,
    /// Where the flow was seen.
    pub priority_level: String,
    /// Users seen in it (the dumps' request details).
    pub users: Vec<String>,
    /// How its rate, seats and execution time were told, in words.
    pub told_from: String,
}

/// The load of one replica over the window.
#[derive(Debug, Clone, Default)]
pub struct Load {
    pub flows: Vec<LoadFlow>,
    /// What was inferred and assumed, in words, for the reader of a prediction.
    pub notes: Vec<String>,
}

/// The flows behind each flow schema of each level, from the replica's window: every flow schema's requests per
/// second (dispatched and rejected: a client that got 429s wanted more than it got), seats and execution time; the
/// top flows' own rates as the rate advice tells them (their schema's counters when alone, else Little's law over
/// the seats the dumps saw them hold plus their share of the schema's rejections). Where `audit` (the events of
/// the replica's cluster over the window) holds enough of a flow schema's requests, they tell its flows instead
/// ([`super::audited`]).
pub fn observed_load(
    report: &ApiserverReport,
    objects: &FlowcontrolObjects,
    audit: Option<&AuditReport>,
) -> Result<Load, Unpredictable> {
    let mut load = Load::default();
    let mut any_rates = false;
    let mut audited_schemas = Vec::new();
    let mut told_schemas = 0;
    for level in &report.levels {
        for (schema, cost) in &level.flow_schema_costs {
            let Some(dispatched) = cost.dispatched_per_second else {
                continue;
            };
            any_rates = true;
            let total = dispatched + cost.rejected_per_second;
            if total <= 0.0 {
                continue;
            }
            let Some(seconds) = cost.seconds_per_request.filter(|s| *s > 0.0) else {
                load.notes.push(format!(
                    "{schema} ({}): {} requests/s left out: no execution time of its requests is on record \
                     (request_execution_seconds)",
                    level.priority_level,
                    crate::analyze::round::shown(total)
                ));
                continue;
            };
            told_schemas += 1;
            let audited = audit
                .and_then(|a| a.flow_schema(&level.priority_level, schema))
                .filter(|a| a.requests >= MIN_AUDITED_REQUESTS);
            match audited {
                Some(a) => {
                    audited_schemas.push(schema.clone());
                    audited_flows(
                        &mut load, level, schema, cost, dispatched, seconds, a, objects,
                    );
                }
                None => schema_flows(&mut load, level, schema, cost, total, seconds, objects),
            }
        }
    }
    if let Some(a) = audit.filter(|_| !audited_schemas.is_empty()) {
        load.notes.push(format!(
            "Audit events of the window ({} requests{}) tell the flows of {}: each flow's share of its flow \
             schema's audited requests, served and rejected apart, times what this replica's counters say the \
             schema was sent (audit events name no replica: every replica is taken to carry the same mix); its \
             execution time its audited mean (receipt to response less queue wait) scaled to the schema's \
             request_execution_seconds; a LIST as many seats as makes the schema's estimated seats add up, any other \
             request one.{}",
            a.requests,
            a.cluster
                .as_deref()
                .map(|c| format!(" of cluster {c}"))
                .unwrap_or_default(),
            audited_schemas.join(", "),
            if audited_schemas.len() < told_schemas {
                " The other flow schemas are told by their counters and the dumps."
            } else {
                ""
            }
        ));
    }
    if !any_rates {
        return Err(Unpredictable::NoRates);
    }
    if load.flows.is_empty() {
        return Err(Unpredictable::NoLoad);
    }
    Ok(load)
}

/// What one shown flow sends and what its requests cost, as told.
struct Told {
    rate: f64,
    seconds: f64,
    how: &'static str,
}

/// Each shown flow's requests per second (served and rejected) and execution time. By Little's law a flow's mean
/// executing requests (the dumps' seats it held over its seats per request, 1.28+) are its rate times its execution
/// time. Its flow schema's counters give the sum of the rates and the seats they asked for (work_estimated_seats,
/// 1.24+): where the flows' requests are of two widths, those two sums tell each width's rate, so each its own
/// execution time (a LIST of 10 seats for 2 s beside GETs of 1 seat for 50 ms). Otherwise every flow of the schema
/// takes its mean execution time. The schema's 429s go to the flows by their waiting requests.
fn tell(flows: &[&FlowReport], cost: &SchemaCost, dispatched: f64, seconds: f64) -> Vec<Told> {
    let schema_seats = cost.seats_per_request.unwrap_or(1.0);
    let seats = |f: &FlowReport| f.seats_per_request.unwrap_or(schema_seats).max(1.0);
    let waiting: f64 = flows.iter().map(|f| f.waiting_requests).sum();
    let rejected = |f: &FlowReport| {
        if waiting > 0.0 {
            cost.rejected_per_second * f.waiting_requests / waiting
        } else {
            cost.rejected_per_second * f.schema_share.unwrap_or(0.0)
        }
    };
    if let [only] = flows {
        if only.schema_share.is_some_and(|s| s >= 1.0 - 1e-9) {
            return vec![Told {
                rate: dispatched + cost.rejected_per_second,
                seconds,
                how: "its flow schema's counters (the only flow the dumps showed in it)",
            }];
        }
    }
    let executing: Vec<f64> = flows.iter().map(|f| f.executing_seats / seats(f)).collect();
    let shown_executing: f64 = executing.iter().sum();
    if shown_executing <= 0.0 {
        // Before 1.28 the dumps list waiting requests only: the flows' shares of the schema's pressure.
        return flows
            .iter()
            .map(|f| Told {
                rate: f.schema_share.unwrap_or(0.0) * (dispatched + cost.rejected_per_second),
                seconds,
                how: "its share of its flow schema's waiting and executing requests in the dumps, times the schema's \
                      counters",
            })
            .collect();
    }
    // Two widths, and the shown flows hold (nearly) all the schema executes: each width's arrivals from the two
    // sums (kube-apiserver estimates a request's seats as it arrives, so work_estimated_seats counts the rejected
    // too), less its flows' 429s, is what it was served.
    let mut widths: Vec<f64> = flows.iter().map(|f| seats(f)).collect();
    widths.sort_by(f64::total_cmp);
    widths.dedup();
    if let ([narrow, wide], Some(mean_seats)) = (widths.as_slice(), cost.seats_per_request) {
        let arrivals = dispatched + cost.rejected_per_second;
        let wide_arrivals = arrivals * (mean_seats - narrow) / (wide - narrow);
        let of_width = |w: f64| -> (f64, f64, f64) {
            let (mut held, mut turned_away) = (0.0, 0.0);
            for (f, e) in flows.iter().zip(&executing) {
                if seats(f) == w {
                    held += e;
                    turned_away += rejected(f);
                }
            }
            let arrived = if w == *wide {
                wide_arrivals
            } else {
                arrivals - wide_arrivals
            };
            (held, arrived - turned_away, turned_away)
        };
        let consistent = [*narrow, *wide].iter().all(|w| {
            let (held, served, _) = of_width(*w);
            held > 0.0 && served > 0.0
        });
        if consistent && shown_executing >= 0.9 * dispatched * seconds {
            return flows
                .iter()
                .zip(&executing)
                .map(|(f, e)| {
                    let (held, served, _) = of_width(seats(f));
                    Told {
                        rate: served * e / held + rejected(f),
                        seconds: held / served,
                        how: "Little's law over the seats the dumps saw it hold, its width's rate from its flow \
                              schema's requests and estimated seats, plus its share of the schema's 429s by its \
                              waiting requests",
                    }
                })
                .collect();
        }
    }
    flows
        .iter()
        .zip(&executing)
        .map(|(f, e)| Told {
            rate: e / seconds + rejected(f),
            seconds,
            how: "Little's law over the seats the dumps saw it hold at its flow schema's mean execution time, plus \
                  its share of the schema's 429s by its waiting requests",
        })
        .collect()
}

/// The flows of one flow schema: its top flows, then the rest of its requests over flows the dumps did not show.
fn schema_flows(
    load: &mut Load,
    level: &LevelReport,
    schema: &str,
    cost: &SchemaCost,
    total: f64,
    seconds: f64,
    objects: &FlowcontrolObjects,
) {
    let schema_seats = cost.seats_per_request.unwrap_or(1.0);
    let seen: Vec<&FlowReport> = level
        .top_flows
        .iter()
        .filter(|f| f.flow_schema == schema)
        .collect();
    let dispatched = total - cost.rejected_per_second;
    let mut left = total;
    for (f, told) in seen.iter().zip(tell(&seen, cost, dispatched, seconds)) {
        let rate = told.rate.min(left);
        if rate <= 0.0 || told.seconds <= 0.0 {
            continue;
        }
        left -= rate;
        let seats = f.seats_per_request.unwrap_or(schema_seats);
        let (request, identity) = identity(f, schema, objects);
        load.flows.push(LoadFlow {
            flow: ObservedFlow {
                name: flow_name(schema, &f.flow),
                flow_schema: schema.to_string(),
                flow: f.flow.clone(),
                request,
                requests_per_second: rate,
                seats: whole_seats(seats),
                execution: execution_time(told.seconds),
                profile: cost.arrival_profile.clone(),
            },
            priority_level: level.priority_level.clone(),
            users: f.users.clone(),
            told_from: format!("{}; {identity}{}", told.how, bursts_words(cost)),
        });
    }
    // What the flow schema sent beyond its top flows (all of it, read through a Prometheus), over flows of its own.
    if left <= 1e-3 * total {
        return;
    }
    let shown = seen.len() as u32;
    let unseen = level
        .peak_active_flows
        .map_or(1, |peak| peak.saturating_sub(shown).max(1) as usize)
        .min(UNSEEN_FLOWS_PER_SCHEMA);
    for i in 0..unseen {
        let flow = if unseen == 1 {
            String::new()
        } else {
            format!("unseen-{}", i + 1)
        };
        load.flows.push(LoadFlow {
            flow: ObservedFlow {
                name: if unseen == 1 {
                    format!("{schema} (flows not shown)")
                } else {
                    format!("{schema} (flows not shown, {})", i + 1)
                },
                flow_schema: schema.to_string(),
                flow,
                request: None,
                requests_per_second: left / unseen as f64,
                seats: whole_seats(schema_seats),
                execution: execution_time(seconds),
                profile: cost.arrival_profile.clone(),
            },
            priority_level: level.priority_level.clone(),
            users: Vec::new(),
            told_from: format!(
                "its flow schema's counters less the flows shown, spread over {unseen} flow{} (the most flows \
                 the dumps saw on the level at once, less those shown); kept in {schema} whatever the change{}",
                if unseen == 1 { "" } else { "s" },
                bursts_words(cost)
            ),
        });
    }
}

/// The flow's request when its one user and example request match the flow schema it was seen in on the objects
/// in force: a change of FlowSchemas then moves it as it would move the client. Otherwise it stays in its flow
/// schema, and why.
fn identity(
    f: &FlowReport,
    schema: &str,
    objects: &FlowcontrolObjects,
) -> (Option<apf::matching::Request>, String) {
    let [user] = f.users.as_slice() else {
        return (
            None,
            "no single user seen in it: kept in its flow schema whatever the change".into(),
        );
    };
    let Some(request) = f.request_of(user) else {
        return (
            None,
            "no example request seen: kept in its flow schema whatever the change".into(),
        );
    };
    matched(
        user,
        request,
        f.example_request.as_deref().unwrap_or("requests"),
        schema,
        objects,
    )
}

/// `request` (the flow's one user's `what`, e.g. `list pods`) when it matches the flow schema it was seen in on the
/// objects in force: a change of FlowSchemas then moves it as it would move the client. Otherwise the flow stays in
/// its flow schema, and why.
pub(super) fn matched(
    user: &str,
    request: apf::matching::Request,
    what: &str,
    schema: &str,
    objects: &FlowcontrolObjects,
) -> (Option<apf::matching::Request>, String) {
    match match_request(&objects.flow_schemas, &objects.priority_levels, &request) {
        Ok(m) if m.flow_schema == schema => (Some(request), format!("matched as {user}'s {what}")),
        _ => (
            None,
            format!(
                "{user}'s {what} would not match {schema} as seen (a group or detail of the request not shown): \
                 kept in it whatever the change"
            ),
        ),
    }
}

pub(super) fn flow_name(schema: &str, flow: &str) -> String {
    if flow.is_empty() {
        schema.to_string()
    } else {
        format!("{schema}/{flow}")
    }
}

/// The longest a replayed request holds its seats: kube-apiserver times a request out after a minute by default
/// (`--request-timeout`); a mean past ten of them is a reading gone wrong, not a request.
const LONGEST_EXECUTION: f64 = 600.0;

/// A mean execution time as the replay takes it: at least a millisecond, at most [`LONGEST_EXECUTION`] (the figures
/// come from outside: a counter or an event's timestamps).
pub(super) fn execution_time(seconds: f64) -> std::time::Duration {
    let s = if seconds.is_finite() {
        seconds
    } else {
        LONGEST_EXECUTION
    };
    std::time::Duration::from_secs_f64(s.clamp(1e-3, LONGEST_EXECUTION))
}

/// Seats a request holds, whole (kube-apiserver counts whole seats): a mean of 1.4 is mostly 1-seat requests.
pub(super) fn whole_seats(mean: f64) -> u32 {
    if mean.is_finite() {
        mean.round().clamp(1.0, f64::from(u32::MAX)) as u32
    } else {
        1
    }
}

/// What a flow says of its bursts, where its flow schema's arrivals came in them.
pub(super) fn bursts_words(cost: &SchemaCost) -> String {
    if cost.arrival_profile.is_empty() {
        return String::new();
    }
    let peak = cost
        .arrival_profile
        .iter()
        .map(|(_, m)| *m)
        .fold(0.0, f64::max);
    format!(
        "; in bursts, as its flow schema's arrivals came scrape by scrape (up to {}x its mean rate), replayed in a \
         loop",
        crate::analyze::round::shown(peak)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(name: &str, seats: f64, executing_seats: f64, waiting: f64) -> FlowReport {
        FlowReport {
            flow_schema: "service-accounts".into(),
            flow: name.into(),
            waiting_requests: waiting,
            executing_seats,
            seats_per_request: Some(seats),
            schema_share: Some(0.5),
            ..Default::default()
        }
    }

    /// 17 LISTs/s of 10 seats for 2 s (5 of them rejected) beside 20 GETs/s of 1 seat for 50 ms: the schema's means
    /// (5.1 seats, 0.78 s) fit neither, its two sums tell each width's rate, Little's law each one's execution time.
    #[test]
    fn two_widths_in_one_schema_each_get_their_rate_and_execution_time() {
        let (lists, gets) = (
            flow("agent", 10.0, 240.0, 50.0),
            flow("cert-manager", 1.0, 1.0, 0.0),
        );
        // Seats are estimated as requests arrive: the rejected LISTs count too.
        let cost = SchemaCost {
            seconds_per_request: Some(25.0 / 32.0),
            seats_per_request: Some(190.0 / 37.0),
            dispatched_per_second: Some(32.0),
            rejected_per_second: 5.0,
            ..Default::default()
        };
        let told = tell(&[&lists, &gets], &cost, 32.0, 25.0 / 32.0);
        assert!((told[0].rate - 17.0).abs() < 1e-9, "{}", told[0].rate);
        assert!((told[0].seconds - 2.0).abs() < 1e-9, "{}", told[0].seconds);
        assert!((told[1].rate - 20.0).abs() < 1e-9, "{}", told[1].rate);
        assert!((told[1].seconds - 0.05).abs() < 1e-9, "{}", told[1].seconds);
    }

    /// One width: nothing tells the flows' execution times apart, each takes the schema's mean.
    #[test]
    fn one_width_takes_the_schema_mean() {
        let (a, b) = (flow("a", 1.0, 3.0, 2.0), flow("b", 1.0, 1.0, 0.0));
        let cost = SchemaCost {
            seconds_per_request: Some(0.5),
            seats_per_request: Some(1.0),
            dispatched_per_second: Some(8.0),
            rejected_per_second: 1.0,
            ..Default::default()
        };
        let told = tell(&[&a, &b], &cost, 8.0, 0.5);
        assert_eq!((told[0].rate, told[0].seconds), (7.0, 0.5));
        assert_eq!((told[1].rate, told[1].seconds), (2.0, 0.5));
    }
}
