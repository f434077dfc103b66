//! Seats for a level short of them: how many it lacks for its load, and the share move that gives them, from levels
//! that can spare shares beyond their own load ([`apf::share_move`]), said with its numbers, or why there is none.
use std::collections::BTreeMap;

use super::{demand_seats, demand_words, quarter_free, server_words, Remediation, FREE_AFTER};
use crate::analyze::LevelReport;
use apf::defaults::default_shares;
use apf::model::FlowcontrolObjects;
use apf::share_move::{plan, smallest_move, Donor, ShareMove};
use apf::{limits, EXEMPT};

/// A level's shortfall and what a share move can do about it.
pub(super) struct Shortfall {
    /// Seats in use and waiting.
    pub demand: f64,
    /// Seats it lacks for that demand with a quarter of its limit free (0 or fewer: none), in whole seats.
    pub needed: f64,
    /// The seats one share is worth, when the replica's shares are known.
    pub per_share: Option<f64>,
    /// The seats of the replica's levels together (its ServerCL, lowest and highest the nominal limits allow), when
    /// the shares are known and agree with them.
    pub server_seats: Option<(u32, u32)>,
    /// The move, when the shares are known.
    pub proposal: Option<ShareMove>,
}

/// The shares of each level of the replica: the cluster's PriorityLevelConfigurations when read, else the default
/// levels' own.
fn shares_of<'a>(
    replica_levels: &'a [LevelReport],
    objects: Option<&FlowcontrolObjects>,
) -> BTreeMap<&'a str, u32> {
    replica_levels
        .iter()
        .filter_map(|l| {
            let name = l.priority_level.as_str();
            let shares = match objects {
                Some(o) => o
                    .priority_levels
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| p.shares_or_default()),
                None => default_shares(name),
            };
            Some((name, shares?))
        })
        .collect()
}

/// What `level` lacks and the move that gives it, from the other levels of its replica.
pub(super) fn shortfall(
    level: &LevelReport,
    replica_levels: &[LevelReport],
    objects: Option<&FlowcontrolObjects>,
) -> Option<Shortfall> {
    let limit = level.limit_seats?;
    let demand = demand_seats(level)?;
    // In whole seats, as the sentences write them: the move then covers what they say it must.
    let needed = quarter_free(demand).0 - limit.round();
    let shares = shares_of(replica_levels, objects);
    let known: Vec<(u32, f64)> = replica_levels
        .iter()
        .filter_map(|l| {
            Some((
                *shares.get(l.priority_level.as_str())?,
                l.nominal_limit_seats?,
            ))
        })
        .collect();
    // `None` unless every level's reported NominalCL agrees with its shares for one worth of a share.
    let per_share = limits::seats_per_share(&known);
    // Every level's nominal limit must agree with its shares: a level whose shares are not known (made after the
    // objects were read) leaves the replica's seats unknown rather than guessed. The exempt level holds no share of
    // them.
    let all_known = replica_levels.iter().all(|l| {
        shares.contains_key(l.priority_level.as_str())
            || l.priority_level == EXEMPT
            || l.nominal_limit_seats.unwrap_or(0.0) == 0.0
    });
    let server_seats = all_known
        .then(|| limits::server_concurrency(&known))
        .flatten();
    let proposal = per_share.map(|per_share| {
        let donors: Vec<Donor> = replica_levels
            .iter()
            .filter(|l| l.priority_level != level.priority_level && l.priority_level != EXEMPT)
            .filter_map(|l| {
                let shares = *shares.get(l.priority_level.as_str())?;
                // What its own load needs: its peak demand of the window (or now) with a quarter free, and never
                // less than the seats its configuration keeps from lending (NominalCL − LendableCL).
                let peak = demand_seats(l)?.max(l.demand_seats_max.unwrap_or(0.0));
                let needs_seats =
                    (peak / (1.0 - FREE_AFTER)).max(l.lower_limit_seats.unwrap_or(0.0));
                // What it lends now, and may lend: a share it gives carries its part of that away from the level
                // short of seats, which borrows it (1.26+).
                let nominal = l.nominal_limit_seats.unwrap_or(0.0);
                let lent_seats = l
                    .limit_seats
                    .map_or(0.0, |limit| (nominal - limit).max(0.0));
                let lendable_share = match (l.lower_limit_seats, objects) {
                    (Some(lower), _) if nominal > 0.0 => (1.0 - lower / nominal).clamp(0.0, 1.0),
                    (_, Some(o)) => o
                        .priority_levels
                        .iter()
                        .find(|p| p.name == l.priority_level)
                        .map_or(0.0, |p| f64::from(p.lendable_percent_or_default()) / 100.0),
                    // It lends at least what it lends.
                    _ if nominal > 0.0 => lent_seats / nominal,
                    _ => 0.0,
                };
                Some(Donor {
                    name: l.priority_level.clone(),
                    shares,
                    needs_seats,
                    lent_seats,
                    lendable_share,
                })
            })
            .collect();
        let nominal = level.nominal_limit_seats.unwrap_or(limit);
        plan(needed, nominal, limit - nominal, per_share, &donors)
    });
    Some(Shortfall {
        demand,
        needed,
        per_share,
        server_seats,
        proposal,
    })
}

/// `40 shares from workload-low`, `31 shares from workload-high, 17 from global-default and 10 from node-high`.
pub(super) fn from_words(from: &[(String, u32)]) -> String {
    let parts: Vec<String> = from
        .iter()
        .enumerate()
        .map(|(i, (name, n))| {
            let unit = if i > 0 {
                ""
            } else if *n == 1 {
                " share"
            } else {
                " shares"
            };
            format!("{n}{unit} from {name}")
        })
        .collect();
    match parts.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// What the server's seats are, said where they bound the advice.
pub(super) fn more_concurrency(server_seats: Option<(u32, u32)>) -> String {
    let today = server_seats
        .map(|s| format!(", {} seats on this replica today", server_words(s)))
        .unwrap_or_default();
    format!(
        "more concurrency (--max-requests-inflight + --max-mutating-requests-inflight{today}) or more replicas"
    )
}

/// No single flow dominates the level: more seats for it, from levels that can spare them, or why there are none.
pub(super) fn move_shares(
    level: &LevelReport,
    replica_levels: &[LevelReport],
    objects: Option<&FlowcontrolObjects>,
) -> Remediation {
    let name = &level.priority_level;
    let sentence = |s: String| Remediation {
        sentence: s,
        ..Default::default()
    };
    let Some(s) = shortfall(level, replica_levels, objects) else {
        return sentence(format!(
            "Raise the nominalConcurrencyShares of {name} (no single flow dominates it), taking shares from a level \
             with headroom; its limit or seats in use are not known, so how many is not known."
        ));
    };
    let load = format!("its load ({})", demand_words(level));
    let limit = level.limit_seats.unwrap_or(0.0).round();
    let (need, need_words) = quarter_free(s.demand);
    let borrowing = match level.nominal_limit_seats {
        Some(n) if limit > n => format!(
            " It already borrows {:.0} seats beyond its nominal {n:.0}.",
            limit - n
        ),
        _ => String::new(),
    };
    let Some(proposal) = s.proposal else {
        if s.needed < smallest_move(level.nominal_limit_seats.unwrap_or(limit)) {
            return sentence(not_worth_a_move(level, &load, s.demand));
        }
        return sentence(format!(
            "Raise the shares of {name}: {load} needs {need_words}, {:.0} more than its {limit:.0}. How many \
             shares that is is not known (the shares differ from the defaults and the cluster's \
             PriorityLevelConfigurations were not read).{borrowing}",
            need - limit
        ));
    };
    // Read through a Prometheus there are no flows (no dumps): the flow schemas rejected say who it is.
    let send_less = if level.top_flows.is_empty() {
        "the clients behind it must send less (its flow schemas' rejections say which)"
    } else {
        "the clients behind it must send less (its top flows)"
    };
    if let Some(server) = s.server_seats.filter(|&(_, high)| need > f64::from(high)) {
        return sentence(format!(
            "No share move can carry {name}: {load} needs {need_words}, more than this replica has ({}). {}, or \
             the server needs {}.",
            server_words(server),
            capitalize(send_less),
            more_concurrency(None)
        ));
    }
    let per_share = s.per_share.unwrap_or(0.0);
    let proposal = rounded(proposal);
    let set = match &proposal {
        ShareMove::Move { from, .. } => {
            share_changes(name, from, &shares_of(replica_levels, objects))
        }
        _ => Vec::new(),
    };
    let mut r = sentence(match proposal {
        ShareMove::TooSmall { .. } => not_worth_a_move(level, &load, s.demand),
        ShareMove::Move {
            from,
            seats,
            nominal_seats,
            short,
            ..
        } if short <= 0.0 => format!(
            "Raise the shares of {name}: move {} ({}) so it gets {}: {limit:.0} + {seats:.0} = {:.0} in all, enough \
             for {load}, which needs {need_words}.{borrowing}",
            from_words(&from),
            if from.len() == 1 {
                "what it spares beyond its own load"
            } else {
                "what they spare beyond their own load"
            },
            gain_words(seats, nominal_seats, per_share),
            limit + seats
        ),
        ShareMove::Move {
            from,
            seats,
            nominal_seats,
            spare,
            ..
        } => format!(
            "Raise the shares of {name}: move {} so it gets {}, {}: {limit:.0} + {seats:.0} = {:.0} in all, still \
             about {:.0} short for {load}, which needs {need_words}: {send_less}, or the server needs {}.{borrowing}",
            from_words(&from),
            gain_words(seats, nominal_seats, per_share),
            all_or_some(from.len(), nominal_seats, spare),
            limit + seats,
            need - limit - seats,
            more_concurrency(s.server_seats)
        ),
        ShareMove::NoSpare { spare } => format!(
            "{name} is short of seats: {load} needs {need_words}, {:.0} more than its {limit:.0}, and the other \
             levels cannot spare them ({spare:.0} seats in all beyond their own load and the seats they keep): \
             {send_less}, or the server needs {}.{borrowing}",
            need - limit,
            more_concurrency(s.server_seats)
        ),
    });
    if !set.is_empty() {
        // The move as a person makes it: plan's manifests (the objects in force, with these shares), for kubectl.
        let flags: Vec<String> = set
            .iter()
            .map(|c| format!("--set {}.{}={}", c.level, c.field.name(), c.value))
            .collect();
        r.sentence.push_str(&format!(
            " To make it: `apf-monitor plan {} --output manifests | kubectl apply -f -`.",
            flags.join(" ")
        ));
    }
    r.set = set;
    r
}

/// What a move gives, rounded as the sentence writes it: `about 20 more seats (1 share ≈ 2.45 seats)`, or where the
/// donors lend to it today, `about 45 more seats (71 of nominal limit at 1 share ≈ 2.45 seats, less the 26 it
/// borrows of them today)`.
pub(super) fn gain_words(seats: f64, nominal_seats: f64, per_share: f64) -> String {
    let lost = nominal_seats.round() - seats.round();
    if lost < 1.0 {
        format!("about {seats:.0} more seats (1 share ≈ {per_share:.2} seats)")
    } else {
        format!(
            "about {seats:.0} more seats ({:.0} of nominal limit at 1 share ≈ {per_share:.2} seats, less the {lost:.0} \
             it borrows of them today)",
            nominal_seats.round()
        )
    }
}

/// A move as `plan --set` says it: the level's shares with what it receives, each donor's with what it gives.
fn share_changes(
    level: &str,
    from: &[(String, u32)],
    shares: &BTreeMap<&str, u32>,
) -> Vec<apf::plan::Change> {
    let change = |level: &str, value: u32| apf::plan::Change {
        level: level.to_string(),
        field: apf::plan::Field::Shares,
        value,
    };
    let Some(&own) = shares.get(level) else {
        return Vec::new();
    };
    let received: u32 = from.iter().map(|(_, n)| n).sum();
    let mut out = vec![change(level, own.saturating_add(received))];
    for (donor, n) in from {
        match shares.get(donor.as_str()) {
            Some(&has) => out.push(change(donor, has.saturating_sub(*n))),
            None => return Vec::new(),
        }
    }
    out
}

/// A move's seats (and what the levels spare) rounded as a sentence says them, so that the sums it writes add up: `{x:.0}` rounds half to even,
/// [`f64::round`] away from zero.
pub(super) fn rounded(m: ShareMove) -> ShareMove {
    match m {
        ShareMove::Move {
            from,
            seats,
            nominal_seats,
            short,
            spare,
        } => ShareMove::Move {
            from,
            seats: seats.round(),
            nominal_seats: nominal_seats.round(),
            // Whether the move covers the need: as computed.
            short,
            spare: spare.round(),
        },
        ShareMove::TooSmall { seats } => ShareMove::TooSmall {
            seats: seats.round(),
        },
        ShareMove::NoSpare { spare } => ShareMove::NoSpare {
            spare: spare.round(),
        },
    }
}

/// What a move that leaves the level short takes: all the others spare, or what the levels with most to spare give
/// in one move ([`apf::share_move::MAX_DONORS`] at most) while others spare more.
pub(super) fn all_or_some(donors: usize, seats: f64, spare: f64) -> String {
    if spare > seats + 0.5 {
        format!(
            "what the {donors} levels with most to spare give in one move ({spare:.0} seats spare in all, more \
             levels' worth)"
        )
    } else {
        "all the other levels spare beyond their own load".to_string()
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// The level lacks nothing, or too little for a share move to matter.
fn not_worth_a_move(level: &LevelReport, load: &str, demand: f64) -> String {
    let (name, limit) = (
        &level.priority_level,
        level.limit_seats.unwrap_or(0.0).round(),
    );
    let (need, need_words) = quarter_free(demand);
    let fits = if need <= limit {
        format!("{load} fits its {limit:.0} seats with a quarter of them free ({need_words})")
    } else {
        format!(
            "{load} needs {need_words}, only {:.0} more than its {limit:.0}, too few to be worth moving shares",
            need - limit
        )
    };
    let ask = if level.top_flows.is_empty() {
        "the flow schemas it rejects say which clients to ask"
    } else {
        "its top flows say which client to ask"
    };
    format!("No share move for {name}: {fits}. If the pressure grows, {ask}.")
}

#[cfg(test)]
mod tests {
    use super::super::remediate;
    use super::super::tests::{flow, idle_replica, level};
    use super::*;
    use crate::analyze::ListCosts;

    /// The default levels of a 600-seat replica (1 share ≈ 2.45 seats), idle but for `busy`.
    fn replica(busy: LevelReport) -> Vec<LevelReport> {
        let defaults = apf::defaults::default_priority_levels(apf::KubeVersion::new(34, 0));
        idle_replica(&defaults, &[&busy])
    }

    /// [`replica`], the idle levels lending all they may (their limit is what they keep) to `busy`, which borrows
    /// it: `busy` with its limit raised by what they lend, and the replica.
    fn lending(busy: &LevelReport) -> (LevelReport, Vec<LevelReport>) {
        let mut levels = replica(busy.clone());
        let mut lent = 0.0;
        for l in levels
            .iter_mut()
            .filter(|l| l.priority_level != busy.priority_level)
        {
            if let (Some(lower), Some(nominal)) = (l.lower_limit_seats, l.nominal_limit_seats) {
                l.limit_seats = Some(lower);
                lent += nominal - lower;
            }
        }
        let mut borrower = busy.clone();
        borrower.limit_seats = busy.limit_seats.map(|l| l + lent);
        for l in levels
            .iter_mut()
            .filter(|l| l.priority_level == busy.priority_level)
        {
            *l = borrower.clone();
        }
        (borrower, levels)
    }

    fn global_default(executing: f64, queued: f64) -> LevelReport {
        let mut l = level("global-default", 49.0, 49.0, executing, queued);
        l.lower_limit_seats = Some(24.0);
        // Three flows, none over half.
        l.top_flows = vec![
            flow("global-default", "a", 2.0, 15.0, "a", "get pods"),
            flow("global-default", "b", 2.0, 15.0, "b", "get nodes"),
            flow("global-default", "c", 2.0, 15.0, "c", "get services"),
        ];
        l
    }

    #[test]
    fn shares_come_from_what_donors_spare_beyond_the_seats_they_keep() {
        let low = global_default(45.0, 6.0);
        let levels = replica(low.clone());
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        // Demand 51 seats; a quarter free needs 68: 19 seats, 8 shares. workload-low keeps 24 of its 245 seats
        // (it lends 90 %): 90 shares spare, the most.
        assert!(
            r.sentence.starts_with(
                "Raise the shares of global-default: move 8 shares from workload-low (what it spares beyond its own \
                 load) so it gets about 20 more seats (1 share ≈ 2.45 seats): 49 + 20 = 69 in all, enough for its load (45 in \
                 use + 6 requests waiting, a seat each = 51 seats), which needs 68 seats to keep a quarter free (51 / \
                 0.75)."
            ),
            "{}",
            r.sentence
        );
        assert!(r.manifest.is_none());
        // How to make it: plan's manifests of the objects in force with the move, through kubectl.
        assert!(
            r.sentence.ends_with(
                " To make it: `apf-monitor plan --set global-default.shares=28 --set workload-low.shares=92 --output \
                 manifests | kubectl apply -f -`."
            ),
            "{}",
            r.sentence
        );
        // The move as `plan --set` says it, for its prediction: global-default 20 + 8, workload-low 100 - 8.
        assert_eq!(
            r.change_key().as_deref(),
            Some("global-default.shares=28 workload-low.shares=92")
        );
    }

    /// The crowd (`config/scenarios/crowd.yaml`): workload-low borrows beyond its 245 seats what the idle levels
    /// lend. Shares taken from them carry away what they may lend of them: the move gives their worth less that,
    /// and says so; the replay predicted 362 → 406 for such a move, not the 71 seats its shares are worth.
    #[test]
    fn a_move_from_levels_that_lend_is_worth_their_shares_less_what_they_lend() {
        let mut low = level("workload-low", 245.0, 363.0, 345.0, 0.0);
        low.lower_limit_seats = Some(25.0);
        low.top_flows = vec![
            flow("service-accounts", "agent", 0.0, 115.0, "agent", "get pods"),
            flow(
                "service-accounts",
                "collector",
                0.0,
                115.0,
                "collector",
                "get pods",
            ),
            flow(
                "service-accounts",
                "runner",
                0.0,
                115.0,
                "runner",
                "get pods",
            ),
        ];
        // Its limit as given: what it borrows is part of it.
        let (_, levels) = lending(&low);
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        super::super::tests::assert_adds_up(&r.sentence);
        let gets = regex::Regex::new(
            r"so it gets about (\d+) more seats \((\d+) of nominal limit at 1 share ≈ 2\.45 seats, less the (\d+) it borrows of them today\)",
        )
        .unwrap();
        let c = gets
            .captures(&r.sentence)
            .unwrap_or_else(|| panic!("{}", r.sentence));
        let (gains, worth): (f64, f64) = (c[1].parse().unwrap(), c[2].parse().unwrap());
        // Lenders of a quarter to a half of their seats: a share is worth half to three quarters of its seats.
        assert!(gains < 0.8 * worth && gains > 0.4 * worth, "{}", r.sentence);
        // Lending nothing (limits at their nominal), the same move is worth all its seats.
        let r = remediate(&low, &replica(low.clone()), &ListCosts::default(), None);
        assert!(!r.sentence.contains("borrows of them"), "{}", r.sentence);
    }

    #[test]
    fn the_cluster_s_own_shares_are_read_from_its_objects() {
        // Shares changed from the defaults: without the objects, how many shares is not known.
        let low = global_default(45.0, 6.0);
        let mut levels = replica(low.clone());
        let workload_high = levels
            .iter()
            .position(|l| l.priority_level == "workload-high")
            .unwrap();
        levels[workload_high].nominal_limit_seats = Some(150.0);
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        assert!(
            r.sentence
                .contains("needs 68 seats to keep a quarter free (51 / 0.75), 19 more than its 49"),
            "{}",
            r.sentence
        );
        assert!(r.sentence.contains("is not known"), "{}", r.sentence);
        // With the cluster's objects, its own shares are known: workload-high's 61 agree with its 150 seats.
        let objects = apf::model::FlowcontrolObjects {
            priority_levels: apf::defaults::default_priority_levels(apf::KubeVersion::new(33, 0))
                .into_iter()
                .map(|mut p| {
                    if p.name == "workload-high" {
                        p.shares = Some(61);
                    }
                    p
                })
                .collect(),
            flow_schemas: Vec::new(),
        };
        levels[workload_high].nominal_limit_seats = Some((61.0f64 * 2.45).ceil());
        let r = remediate(&low, &levels, &ListCosts::default(), Some(&objects));
        assert!(
            r.sentence
                .starts_with("Raise the shares of global-default: move 8 shares"),
            "{}",
            r.sentence
        );
    }

    #[test]
    fn a_demand_beyond_the_server_is_not_a_share_move() {
        // 300 requests of 10 seats wait: a demand of thousands of seats on a 600-seat replica.
        let mut low = global_default(49.0, 300.0);
        low.inqueue_seats = Some(3000.0);
        let levels = replica(low.clone());
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        assert!(
            r.sentence.starts_with(
                "No share move can carry global-default: its load (49 in use + 3000 for 300 requests waiting = 3049 \
                 seats) needs 4065 seats to keep a quarter free (3049 / 0.75), more than this replica has (598 to \
                 600)"
            ),
            "{}",
            r.sentence
        );
        assert!(!r.sentence.contains("shares from"), "{}", r.sentence);
        assert!(r.sentence.contains("(its top flows)"), "{}", r.sentence);
        // Read through a Prometheus: no flows to name; the flow schemas rejected say who.
        low.top_flows.clear();
        let r = remediate(&low, &replica(low.clone()), &ListCosts::default(), None);
        assert!(
            r.sentence.contains(
                "The clients behind it must send less (its flow schemas' rejections say which), or the server \
                 needs more concurrency"
            ),
            "{}",
            r.sentence
        );
    }

    /// The same 300 requests of 10 seats waiting, but the window's rates say what they hold once served: 4 LISTs a
    /// second of 10 seats for 1.5 s (2 of them 429s) is 60 seats. The queue is a backlog of 15 s of arrivals, not
    /// the load: a move carries it.
    #[test]
    fn a_queue_is_not_the_load_where_the_window_tells_its_rates() {
        let mut low = global_default(49.0, 300.0);
        low.inqueue_seats = Some(3000.0);
        low.flow_schema_costs.insert(
            "global-default".into(),
            crate::analyze::SchemaCost {
                dispatched_per_second: Some(2.0),
                rejected_per_second: 2.0,
                seats_per_request: Some(10.0),
                seconds_per_request: Some(1.5),
                ..Default::default()
            },
        );
        let levels = replica(low.clone());
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        assert!(
            r.sentence.starts_with(
                "Raise the shares of global-default: move 13 shares from workload-low (what it spares beyond its own \
                 load) so it gets about 32 more seats (1 share ≈ 2.45 seats): 49 + 32 = 81 in all, enough for its \
                 load (60 seats its requests of the window hold once served: requests a second, 429s included, × \
                 seats × seconds each, by flow schema), which needs 80 seats to keep a quarter free (60 / 0.75)."
            ),
            "{}",
            r.sentence
        );
        assert!(r.sentence.contains("shares from"), "{}", r.sentence);
        crate::alert::remediation::tests::assert_adds_up(&r.sentence);
    }

    #[test]
    fn a_need_past_the_donors_spare_is_partly_moved_and_the_rest_said() {
        // Every other level busy to its limit but workload-high (49 spare seats: 20 shares) and node-high (25: 10).
        let mut low = global_default(49.0, 200.0);
        low.inqueue_seats = Some(200.0);
        let mut levels = replica(low.clone());
        for l in levels.iter_mut() {
            if !["global-default", "workload-high", "node-high", "exempt"]
                .contains(&l.priority_level.as_str())
            {
                l.executing_seats = l.limit_seats;
            }
        }
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        // 249 seats / 0.75 − 49 = 283 lacking; 20 + 10 shares spare: 74 seats, 209 still short of 332.
        assert!(
            r.sentence.starts_with(
                "Raise the shares of global-default: move 20 shares from workload-high and 10 from node-high so it \
                 gets about 74 more seats (1 share ≈ 2.45 seats), all the other levels spare beyond their own load: \
                 49 + 74 = 123 in all, still about 209 short for its load (49 in use + 200 for 200 requests waiting = 249 \
                 seats), which needs 332 seats to keep a quarter free (249 / 0.75)"
            ),
            "{}",
            r.sentence
        );
        // Four levels with seats to spare (all idle: workload-low 90 shares, workload-high 20, node-high 10, system
        // 9): 296 seats lacking, one move takes three levels' 294, and says the rest is there.
        let mut low = global_default(49.0, 210.0);
        low.inqueue_seats = Some(210.0);
        let r = remediate(&low, &replica(low.clone()), &ListCosts::default(), None);
        assert!(
            r.sentence.contains(
                "move 90 shares from workload-low, 20 from workload-high and 10 from node-high so it gets about 294 \
                 more seats (1 share ≈ 2.45 seats), what the 3 levels with most to spare give in one move (316 seats \
                 spare in all, more levels' worth): 49 + 294 = 343 in all, still about 2 short"
            ),
            "{}",
            r.sentence
        );
        assert!(
            r.sentence
                .contains("--max-requests-inflight + --max-mutating-requests-inflight, 598 to 600 seats on this replica today"),
            "{}",
            r.sentence
        );
        // kube-apiserver reports no nominal limit for the exempt level: the replica's seats are still told.
        let mut levels = replica(low.clone());
        for l in levels.iter_mut().filter(|l| l.priority_level == "exempt") {
            l.nominal_limit_seats = None;
        }
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        assert!(
            r.sentence
                .contains("598 to 600 seats on this replica today"),
            "{}",
            r.sentence
        );
    }

    #[test]
    fn a_shortfall_of_two_seats_is_not_worth_a_move() {
        // The demo's "move 1 shares ... about 2 more seats": workload-low at 170 of 270 (borrowing 25).
        let mut wl = level("workload-low", 245.0, 270.0, 170.0, 0.0);
        wl.lower_limit_seats = Some(24.0);
        let levels = replica(wl.clone());
        let r = remediate(&wl, &levels, &ListCosts::default(), None);
        assert!(
            r.sentence.starts_with(
                "No share move for workload-low: its load (170 in use) fits its 270 seats with a quarter of them free"
            ),
            "{}",
            r.sentence
        );
        let mut wl = level("workload-low", 245.0, 245.0, 195.0, 0.0);
        wl.lower_limit_seats = Some(24.0);
        let r = remediate(&wl, &replica(wl.clone()), &ListCosts::default(), None);
        // 195 / 0.75 = 260: 15 short, under a tenth of 245.
        assert!(
            r.sentence.contains(
                "needs 260 seats to keep a quarter free (195 / 0.75), only 15 more than its 245"
            ),
            "{}",
            r.sentence
        );
    }

    #[test]
    fn nothing_to_spare_says_so() {
        let mut low = global_default(49.0, 40.0);
        low.inqueue_seats = Some(40.0);
        let mut levels = replica(low.clone());
        for l in levels.iter_mut() {
            if l.priority_level != "global-default" && l.priority_level != "exempt" {
                l.executing_seats = l.limit_seats;
            }
        }
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        assert!(
            r.sentence.starts_with(
                "global-default is short of seats: its load (49 in use + 40 for 40 requests waiting = 89 seats) \
                 needs 119 seats to keep a quarter free (89 / 0.75), 70 more than its 49, and the other levels \
                 cannot spare them (0 seats in all"
            ),
            "{}",
            r.sentence
        );
    }

    #[test]
    fn unknown_limits_say_so() {
        let mut low = global_default(45.0, 6.0);
        low.limit_seats = None;
        let levels = replica(low.clone());
        assert!(remediate(&low, &levels, &ListCosts::default(), None)
            .sentence
            .contains("not known"));
    }

    #[test]
    fn donors_are_named_in_one_phrase() {
        let f = |v: &[(&str, u32)]| {
            from_words(
                &v.iter()
                    .map(|(n, s)| (n.to_string(), *s))
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(f(&[("a", 1)]), "1 share from a");
        assert_eq!(f(&[("a", 2), ("b", 1)]), "2 shares from a and 1 from b");
        assert_eq!(
            f(&[("a", 3), ("b", 2), ("c", 1)]),
            "3 shares from a, 2 from b and 1 from c"
        );
    }

    #[test]
    fn every_sum_a_share_sentence_writes_adds_up() {
        let (mut checked, mut moves, mut quarters, mut lent) = (0, 0, 0, 0);
        for executing in [10.0, 30.4, 45.0, 48.6, 49.0] {
            for (queued, seats_each) in [
                (0.0, 1.0),
                (6.4, 1.0),
                (40.0, 1.0),
                (100.0, 2.0),
                (300.0, 10.0),
            ] {
                for with_seats in [false, true] {
                    let mut low = global_default(executing, queued);
                    low.inqueue_seats = with_seats.then_some(queued * seats_each);
                    for (low, levels) in [
                        (low.clone(), replica(low.clone())),
                        lending(&low),
                        (low.clone(), vec![low.clone()]),
                    ] {
                        let r = remediate(&low, &levels, &ListCosts::default(), None);
                        super::super::tests::assert_adds_up(&r.sentence);
                        checked += 1;
                        moves += usize::from(r.sentence.contains(" in all"));
                        quarters += usize::from(r.sentence.contains("to keep a quarter free"));
                        lent += usize::from(r.sentence.contains("it borrows of them today"));
                    }
                }
            }
        }
        assert_eq!(checked, 150);
        // The sweep reaches the sentences with sums: moves, and needs with a quarter free.
        assert!(
            moves >= 10 && quarters >= 50 && lent >= 5,
            "{moves} moves, {quarters} needs, {lent} moves from lending levels"
        );
    }
}
