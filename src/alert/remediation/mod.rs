//! The concrete change an alert proposes, and that stays right once a person has made it: isolate the flow that
//! dominates a shared priority level (with a `flowcontrol.apiserver.k8s.io/v1` manifest), or say that is done;
//! slow down the one client a level already holds alone; paginate a LIST; or move shares to the level from levels
//! that can spare them. Pure functions of the report; numbers that are not known are said to be unknown, never
//! guessed.
pub(crate) mod isolate;
mod own_level;
mod queues;
mod shares;

pub use isolate::isolation_manifest;

use crate::analyze::{FlowReport, LevelReport, ListCosts};
use apf::model::FlowcontrolObjects;

/// A sentence, and a manifest when the change is one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Remediation {
    pub sentence: String,
    pub manifest: Option<String>,
    /// The PriorityLevelConfiguration fields a share move sets (`plan --set`): what its prediction replays.
    pub set: Vec<apf::plan::Change>,
}

impl Remediation {
    /// What identifies the change it proposes, when it proposes one that can be predicted: its manifest, or the
    /// fields it sets. A prediction made for one change is said only with that change.
    pub fn change_key(&self) -> Option<String> {
        if let Some(m) = &self.manifest {
            return Some(m.clone());
        }
        (!self.set.is_empty()).then(|| {
            self.set
                .iter()
                .map(|c| format!("{}.{}={}", c.level, c.field.name(), c.value))
                .collect::<Vec<_>>()
                .join(" ")
        })
    }
}

/// The share of the limit a level should have free once the change is made: APFHeadroomLow's clear threshold.
const FREE_AFTER: f64 = 0.25;

/// Pressure a flow puts on its level (as the analysis ranks flows).
fn pressure(f: &FlowReport) -> f64 {
    apf::model::flow_pressure(f.waiting_requests, f.executing_seats)
}

/// The flow holding more than half of the level's waiting requests + executing seats, if one does.
pub fn dominant_flow(level: &LevelReport) -> Option<&FlowReport> {
    let flows: f64 = level.top_flows.iter().map(pressure).sum();
    let level_total = level.inqueue_requests.unwrap_or(0.0) + level.executing_seats.unwrap_or(0.0);
    // The top flows are a truncated list; the level's own totals cover the rest when known.
    let total = flows.max(level_total);
    let top = level
        .top_flows
        .iter()
        .max_by(|a, b| pressure(a).total_cmp(&pressure(b)))?;
    (total > 0.0 && pressure(top) > 0.5 * total).then_some(top)
}

/// The proposal for one level of one replica; `replica_levels` are all levels of that replica (to find donors).
pub fn remediate(
    level: &LevelReport,
    replica_levels: &[LevelReport],
    lists: &ListCosts,
    objects: Option<&FlowcontrolObjects>,
) -> Remediation {
    // Queue-full 429s in bursts while seats are free most of the time: the queues are what is short.
    if let Some(r) = queues::lengthen(level, objects) {
        return r;
    }
    if let Some(owner) = own_level::owner(level, objects) {
        let r = own_level::slow_down(&owner, level, replica_levels, lists, objects);
        return with_rate(
            r,
            level
                .top_flows
                .iter()
                .max_by(|a, b| pressure(a).total_cmp(&pressure(b))),
        );
    }
    if let Some(flow) = dominant_flow(level) {
        let r = isolate::isolate(flow, level, replica_levels, lists, objects);
        return with_rate(r, Some(flow));
    }
    shares::move_shares(level, replica_levels, objects)
}

/// The remediation's last words: the rate the culprit's client should stay under on this replica, and the flag that
/// sets it (rate advice), when its costs are known; only a ceiling when it sends less than that rate.
fn with_rate(mut r: Remediation, culprit: Option<&FlowReport>) -> Remediation {
    let Some(a) = culprit.and_then(|f| f.advice.as_ref()) else {
        return r;
    };
    let (Some(qps), Some(sustainable)) = (a.recommended_qps, a.sustainable_requests_per_second)
    else {
        return r;
    };
    let sentence = r.sentence.trim_end().trim_end_matches('.');
    r.sentence = match a.observed_requests_per_second {
        // Within its share (or its rate unknown): the rate is a ceiling, not a change to make.
        Some(o) if o <= qps => format!(
            "{sentence}. Its client sends {} requests/s on this replica, within what its share sustains ({}).",
            apf::advice::shown(o),
            apf::advice::shown(sustainable),
        ),
        None => format!(
            "{sentence}. Its client stays within its share on this replica up to {} requests/s (its share sustains \
             {}): {}.",
            apf::advice::number(qps),
            apf::advice::shown(sustainable),
            a.flag
        ),
        Some(_) => format!(
            "{sentence}. Its client should stay under {} requests/s on this replica (its share sustains {}): {}.",
            apf::advice::number(qps),
            apf::advice::shown(sustainable),
            a.flag
        ),
    };
    r
}

/// Seats the level's load holds once served: per flow schema over the window, its requests a second (dispatched
/// and rejected: a client that got 429s wanted more than it got) × their seats × their seconds each (Little's law).
/// `None` where no flow schema's rates and execution time are known (one scrape; read before 1.24's counters).
fn offered_seats(l: &LevelReport) -> Option<f64> {
    let mut offered = None;
    for cost in l.flow_schema_costs.values() {
        let (Some(dispatched), Some(seconds)) =
            (cost.dispatched_per_second, cost.seconds_per_request)
        else {
            continue;
        };
        let seats = cost.seats_per_request.unwrap_or(1.0).max(1.0);
        *offered.get_or_insert(0.0) += (dispatched + cost.rejected_per_second) * seats * seconds;
    }
    offered.filter(|o: &f64| o.is_finite())
}

/// Seats the level's load asks for: what its requests of the window hold once served ([`offered_seats`]), or the
/// seats in use now where more; without the window's rates, in use now plus what its waiting requests will hold
/// (1.28+ reports their seats; before, each waiting request counts as one). A queue is not the load's size: under
/// sustained overload it holds up to 15 s of arrivals, and grows and empties as they time out. `None` when seats in
/// use are not known. Each part is rounded as [`demand_words`] writes it, so that what a sentence derives from it
/// adds up as written.
fn demand_seats(l: &LevelReport) -> Option<f64> {
    let executing = l.executing_seats?.round();
    if let Some(offered) = offered_seats(l) {
        return Some(offered.round().max(executing));
    }
    let queued = l.inqueue_seats.or(l.inqueue_requests).unwrap_or(0.0);
    Some(executing + queued.round())
}

/// The load [`demand_seats`] counts, as a sentence says it: `412 seats its requests of the window hold once served:
/// requests a second, 429s included, × seats × seconds each, by flow schema`, with `; 430 in use now` where that is
/// more; without the window's rates `116 in use + 392 for 196 requests waiting = 508 seats` (before 1.28, `116 in use +
/// 196 requests waiting, a seat each = 312 seats`), or `116 in use` with none waiting. Every figure is rounded before
/// the sum, so that the sum is the one written.
fn demand_words(l: &LevelReport) -> String {
    let executing = l.executing_seats.unwrap_or(0.0).round();
    if let Some(offered) = offered_seats(l) {
        let offered = offered.round();
        let now = if executing > offered {
            format!("; {executing:.0} in use now, more")
        } else {
            String::new()
        };
        return format!(
            "{offered:.0} seats its requests of the window hold once served: requests a second, 429s included, × \
             seats × seconds each, by flow schema{now}"
        );
    }
    match (l.inqueue_requests, l.inqueue_seats) {
        (Some(q), Some(s)) if q > 0.0 => {
            let (q, s) = (q.round(), s.round());
            format!(
                "{executing:.0} in use + {s:.0} for {q:.0} requests waiting = {:.0} seats",
                executing + s
            )
        }
        (Some(q), None) if q > 0.0 => {
            let q = q.round();
            format!(
                "{executing:.0} in use + {q:.0} requests waiting, a seat each = {:.0} seats",
                executing + q
            )
        }
        _ => format!("{executing:.0} in use"),
    }
}

/// The seats a load of `demand` needs to keep a quarter of them free ([`FREE_AFTER`]), and how: `555 seats to keep
/// a quarter free (416 / 0.75)`. The demand is rounded as [`demand_words`] says it.
fn quarter_free(demand: f64) -> (f64, String) {
    let demand = demand.round();
    let need = (demand / (1.0 - FREE_AFTER)).round();
    (
        need,
        format!(
            "{need:.0} seats to keep a quarter free ({demand:.0} / {})",
            1.0 - FREE_AFTER
        ),
    )
}

/// The replica's seats as a sentence says them: `600`, or `598 to 600` where the levels' nominal limits leave a few
/// open ([`apf::limits::server_concurrency`]).
fn server_words((low, high): (u32, u32)) -> String {
    if low == high {
        low.to_string()
    } else {
        format!("{low} to {high}")
    }
}

fn seats_word(n: u32) -> String {
    format!("{n} seat{}", if n == 1 { "" } else { "s" })
}

/// What the client behind a LIST flow can change: paginate, or read from an informer's cache, priced in seats
/// where the replica's object counts are known. `None` for a flow that is not a LIST.
fn client_advice(flow: &FlowReport, level: &LevelReport, lists: &ListCosts) -> Option<String> {
    let example = flow.example_request.as_deref()?;
    if !example.starts_with("list ") {
        return None;
    }
    let mut advice =
        "have the client paginate its LIST (limit/continue) or read from an informer's cache instead".to_string();
    let resource =
        crate::analyze::verb_and_resource(example).map(|(_, r)| r.split('.').next().unwrap_or(r));
    if let Some(cost) = resource.and_then(|r| list_cost(r, level, lists)) {
        advice.push_str(&cost);
    }
    Some(advice)
}

/// What one LIST of all of `resource` costs in seats here, and what a page or an informer would cost instead.
fn list_cost(resource: &str, level: &LevelReport, lists: &ListCosts) -> Option<String> {
    let (seats, objects, bytes) = lists.list(resource)?;
    let minor = lists.minor?;
    let of_limit = level
        .limit_seats
        .map(|l| format!(" of the level's {l:.0}"))
        .unwrap_or_default();
    let reads = match (objects, bytes) {
        (Some(o), Some(b)) => format!("{o:.0} objects, {:.1} MB", b / 1e6),
        (Some(o), None) => format!("{o:.0} objects"),
        (None, Some(b)) => format!("{:.1} MB", b / 1e6),
        (None, None) => return None,
    };
    // A page of 100: from 1.34 priced by its bytes, before by the 2·limit objects the estimator assumes of etcd.
    let page = match (minor >= 34, objects, bytes) {
        (true, Some(o), Some(b)) if o > 0.0 => {
            apf::limits::list_seats(minor, None, Some(b / o * 100.0))
        }
        (false, _, _) => apf::limits::list_seats(minor, Some(200.0), None),
        _ => None,
    };
    Some(format!(
        ": one `list {resource}` here reads {reads} and holds {}{of_limit} while it runs{}, where an informer lists \
         once and then watches",
        seats_word(seats),
        page.map(|p| format!("; a page of 100 (limit=100) holds {}", seats_word(p)))
            .unwrap_or_default()
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn flow(
        schema: &str,
        flow: &str,
        waiting: f64,
        seats: f64,
        user: &str,
        example: &str,
    ) -> FlowReport {
        FlowReport {
            flow_schema: schema.into(),
            flow: flow.into(),
            waiting_requests: waiting,
            executing_seats: seats,
            users: if user.is_empty() {
                vec![]
            } else {
                vec![user.into()]
            },
            example_request: (!example.is_empty()).then(|| example.to_string()),
            ..Default::default()
        }
    }

    pub(crate) fn level(
        name: &str,
        nominal: f64,
        limit: f64,
        executing: f64,
        queued: f64,
    ) -> LevelReport {
        LevelReport {
            priority_level: name.into(),
            limit_seats: Some(limit),
            nominal_limit_seats: Some(nominal),
            executing_seats: Some(executing),
            headroom_seats: Some(limit - executing),
            headroom_ratio: Some((limit - executing) / limit),
            inqueue_requests: Some(queued),
            ..Default::default()
        }
    }

    /// Every sum a remediation writes adds up as written: `a in use + b for c requests waiting = d seats`, `n seats
    /// to keep a quarter free (d / 0.75)`, `x more than its l`, `l + s = t in all`, `still about k short ... which
    /// needs n`, and `about s more seats (1 share ≈ p seats)` for the shares moved.
    pub(crate) fn assert_adds_up(sentence: &str) {
        use std::sync::LazyLock;
        let re = |pattern: &str| regex::Regex::new(pattern).unwrap();
        static SUM: LazyLock<regex::Regex> = LazyLock::new(|| {
            regex::Regex::new(
                r"(\d+) in use \+ (\d+) (?:for \d+ requests waiting|requests waiting, a seat each) = (\d+) seats",
            )
            .unwrap()
        });
        static QUARTER: LazyLock<regex::Regex> = LazyLock::new(|| {
            regex::Regex::new(
                r"(\d+) seats to keep a quarter free \((\d+) / 0\.75\)(?:, (?:only )?(\d+) more than (?:its|the level's) (\d+))?",
            )
            .unwrap()
        });
        static TOTAL: LazyLock<regex::Regex> = LazyLock::new(|| {
            regex::Regex::new(r"(\d+) \+ (\d+) = (\d+) in all(?:, still about (\d+) short)?")
                .unwrap()
        });
        static SHARES: LazyLock<regex::Regex> = LazyLock::new(|| {
            regex::Regex::new(
                r"move (\d+) shares? from [\w-]+((?:, \d+ from [\w-]+)*(?: and \d+ from [\w-]+)?)",
            )
            .unwrap()
        });
        // `about 20 more seats (1 share ≈ 2.45 seats)`, or with what the donors lend it today taken off: `about 45
        // more seats (71 of nominal limit at 1 share ≈ 2.45 seats, less the 26 it borrows of them today)`.
        static GETS: LazyLock<regex::Regex> = LazyLock::new(|| {
            regex::Regex::new(
                r"about (\d+) more seats \((?:(\d+) of nominal limit at )?1 share ≈ ([\d.]+) seats(?:, less the (\d+) it borrows of them today)?\)",
            )
            .unwrap()
        });
        let n = |c: &regex::Captures<'_>, i: usize| -> f64 { c[i].parse().unwrap() };
        for c in SUM.captures_iter(sentence) {
            assert_eq!(n(&c, 1) + n(&c, 2), n(&c, 3), "{sentence}");
        }
        let mut need = None;
        for c in QUARTER.captures_iter(sentence) {
            assert_eq!(n(&c, 1), (n(&c, 2) / 0.75).round(), "{sentence}");
            if c.get(3).is_some() {
                assert_eq!(n(&c, 3), n(&c, 1) - n(&c, 4), "{sentence}");
            }
            need = Some(n(&c, 1));
        }
        for c in TOTAL.captures_iter(sentence) {
            assert_eq!(n(&c, 1) + n(&c, 2), n(&c, 3), "{sentence}");
            match (c.get(4), need) {
                (Some(_), Some(need)) => assert_eq!(n(&c, 4), need - n(&c, 3), "{sentence}"),
                (None, Some(need)) => assert!(n(&c, 3) >= need, "enough: {sentence}"),
                _ => {}
            }
        }
        if let (Some(m), Some(g)) = (SHARES.captures(sentence), GETS.captures(sentence)) {
            let more: f64 = re(r"(\d+) from")
                .captures_iter(&m[2])
                .map(|c| n(&c, 1))
                .sum();
            let moved = n(&m, 1) + more;
            // The shares' worth, and what it gains: that worth less what it borrows of them today.
            let (worth, gains) = match (g.get(2), g.get(4)) {
                (Some(_), Some(_)) => {
                    assert_eq!(n(&g, 2) - n(&g, 4), n(&g, 1), "{sentence}");
                    (n(&g, 2), n(&g, 1))
                }
                (None, None) => (n(&g, 1), n(&g, 1)),
                _ => panic!("half a lending phrase: {sentence}"),
            };
            assert!(gains <= worth, "{sentence}");
            // The worth of a share is written to two decimals.
            let tolerance = 0.5 + 0.005 * moved;
            assert!((moved * n(&g, 3) - worth).abs() <= tolerance, "{sentence}");
        }
    }

    /// The levels `levels` of a 600-seat replica, each with the seats kube-apiserver gives its shares
    /// ([`apf::limits::seat_limits`]) and one seat in use, but those in `busy`, as given.
    pub(crate) fn idle_replica(
        levels: &[apf::PriorityLevelConfig],
        busy: &[&LevelReport],
    ) -> Vec<LevelReport> {
        let limits = apf::limits::seat_limits(levels, 600);
        levels
            .iter()
            .zip(limits)
            .map(|(p, seats)| {
                if let Some(b) = busy.iter().find(|b| b.priority_level == p.name) {
                    return (*b).clone();
                }
                if p.exempt {
                    return level(&p.name, 0.0, 600.0, 0.0, 0.0);
                }
                let nominal = f64::from(seats.nominal);
                let mut l = level(&p.name, nominal, nominal, 1.0, 0.0);
                l.lower_limit_seats = Some(f64::from(seats.lower));
                l
            })
            .collect()
    }

    #[test]
    fn the_fix_ends_with_the_rate_its_client_should_stay_under() {
        let mut l = level("global-default", 49.0, 49.0, 45.0, 6.0);
        l.top_flows = vec![flow("global-default", "bob", 6.0, 40.0, "bob", "get pods")];
        let plain = remediate(&l, std::slice::from_ref(&l), &ListCosts::default(), None);
        assert!(!plain.sentence.contains("requests/s"), "no advice, no rate");
        l.top_flows[0].advice = Some(crate::analyze::ClientAdvice {
            sustainable_requests_per_second: Some(6.14),
            recommended_qps: Some(4.9),
            observed_requests_per_second: Some(12.0),
            flag: "--kube-api-qps=4.9 --kube-api-burst=8".into(),
            ..Default::default()
        });
        let r = remediate(&l, std::slice::from_ref(&l), &ListCosts::default(), None);
        assert!(
            r.sentence.starts_with(plain.sentence.trim_end_matches('.')),
            "{}",
            r.sentence
        );
        assert!(
            r.sentence.ends_with(
                "Its client should stay under 4.9 requests/s on this replica (its share sustains 6.14): \
                 --kube-api-qps=4.9 --kube-api-burst=8."
            ),
            "{}",
            r.sentence
        );
        // A client within its rate is not told to change: the rate is a ceiling.
        let advice = l.top_flows[0].advice.as_mut().unwrap();
        advice.observed_requests_per_second = Some(3.0);
        let r = remediate(&l, std::slice::from_ref(&l), &ListCosts::default(), None);
        assert!(
            r.sentence.ends_with(
                "Its client sends 3 requests/s on this replica, within what its share sustains (6.14)."
            ),
            "{}",
            r.sentence
        );
        l.top_flows[0]
            .advice
            .as_mut()
            .unwrap()
            .observed_requests_per_second = None;
        let r = remediate(&l, std::slice::from_ref(&l), &ListCosts::default(), None);
        assert!(
            r.sentence.ends_with(
                "Its client stays within its share on this replica up to 4.9 requests/s (its share sustains 6.14): \
                 --kube-api-qps=4.9 --kube-api-burst=8."
            ),
            "{}",
            r.sentence
        );
    }

    #[test]
    fn a_flow_dominates_with_more_than_half_of_the_pressure() {
        let mut l = level("global-default", 49.0, 49.0, 45.0, 6.0);
        l.top_flows = vec![
            flow("global-default", "a", 2.0, 15.0, "a", "get pods"),
            flow("global-default", "b", 2.0, 15.0, "b", "get nodes"),
        ];
        assert!(dominant_flow(&l).is_none(), "17 of 51 is not over half");
        l.top_flows[0].executing_seats = 40.0;
        assert_eq!(dominant_flow(&l).map(|f| f.flow.as_str()), Some("a"));
    }

    #[test]
    fn demand_counts_the_seats_of_waiting_requests() {
        let mut l = level("x", 12.0, 116.0, 116.0, 196.0);
        assert_eq!(demand_seats(&l), Some(312.0), "before 1.28: one each");
        assert_eq!(
            demand_words(&l),
            "116 in use + 196 requests waiting, a seat each = 312 seats"
        );
        l.inqueue_seats = Some(392.0);
        assert_eq!(demand_seats(&l), Some(508.0));
        assert_eq!(
            demand_words(&l),
            "116 in use + 392 for 196 requests waiting = 508 seats"
        );
        assert_eq!(
            quarter_free(508.0).1,
            "677 seats to keep a quarter free (508 / 0.75)"
        );
        l.executing_seats = None;
        assert_eq!(demand_seats(&l), None);
    }

    /// With the window's rates, the load is what its requests hold once served, not the queue of the last scrape:
    /// 20 LISTs a second of 10 seats for 2 s (5 of them 429s) and 30 GETs of 1 seat for 0.1 s hold 403 seats, while
    /// 300 requests of 10 seats wait (a queue of 15 s of arrivals, 3000 seats).
    #[test]
    fn with_the_window_s_rates_the_load_is_what_its_requests_hold_once_served() {
        use crate::analyze::SchemaCost;
        let mut l = level("global-default", 24.0, 49.0, 49.0, 300.0);
        l.inqueue_seats = Some(3000.0);
        l.flow_schema_costs = [
            ("lists", 15.0, 5.0, 10.0, 2.0),
            ("gets", 30.0, 0.0, 1.0, 0.1),
        ]
        .into_iter()
        .map(|(name, dispatched, rejected, seats, seconds)| {
            (
                name.to_string(),
                SchemaCost {
                    dispatched_per_second: Some(dispatched),
                    rejected_per_second: rejected,
                    seats_per_request: Some(seats),
                    seconds_per_request: Some(seconds),
                    ..Default::default()
                },
            )
        })
        .collect();
        assert_eq!(demand_seats(&l), Some(403.0));
        assert_eq!(
            demand_words(&l),
            "403 seats its requests of the window hold once served: requests a second, 429s included, × seats × \
             seconds each, by flow schema"
        );
        // More in use now than the window's mean: the larger.
        l.executing_seats = Some(420.0);
        assert_eq!(demand_seats(&l), Some(420.0));
        assert!(demand_words(&l).ends_with("; 420 in use now, more"));
    }
}
