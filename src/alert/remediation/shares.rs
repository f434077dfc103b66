//! Seats for a level short of them: how many it lacks for its load, and the share move that gives them, from levels
//! that can spare shares beyond their own load ([`apf::share_move`]), said with its numbers, or why there is none.
use std::collections::BTreeMap;

use super::{demand_seats, demand_words, Remediation, FREE_AFTER};
use crate::analyze::LevelReport;
use apf::defaults::default_shares;
use apf::model::FlowcontrolObjects;
use apf::share_move::{plan, smallest_move, Donor, ShareMove};
use apf::{limits, EXEMPT};

/// A level's shortfall and what a share move can do about it.
pub(super) struct Shortfall {
    /// Seats in use and waiting.
    pub demand: f64,
    /// Seats it lacks for that demand with a quarter of its limit free (0 or fewer: none).
    pub needed: f64,
    /// The seats one share is worth, when the replica's shares are known.
    pub per_share: Option<f64>,
    /// The seats of the replica's levels together (its ServerCL), when the shares are known.
    pub server_seats: Option<f64>,
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
    let needed = demand / (1.0 - FREE_AFTER) - limit;
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
    // A level whose shares are not known (made after the objects were read) counts by its seats.
    let server_seats = per_share.map(|p| {
        let shares: f64 = replica_levels
            .iter()
            .map(|l| match shares.get(l.priority_level.as_str()) {
                Some(s) => f64::from(*s),
                None => (l.nominal_limit_seats.unwrap_or(0.0) / p).round(),
            })
            .sum();
        p * shares
    });
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
                Some(Donor {
                    name: l.priority_level.clone(),
                    shares,
                    needs_seats,
                })
            })
            .collect();
        let nominal = level.nominal_limit_seats.unwrap_or(limit);
        plan(needed, nominal, per_share, &donors)
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
pub(super) fn more_concurrency(server_seats: Option<f64>) -> String {
    let today = server_seats
        .map(|s| format!(", {s:.0} seats on this replica today"))
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
        manifest: None,
    };
    let Some(s) = shortfall(level, replica_levels, objects) else {
        return sentence(format!(
            "Raise the nominalConcurrencyShares of {name} (no single flow dominates it), taking shares from a level \
             with headroom; its limit or seats in use are not known, so how many is not known."
        ));
    };
    let load = format!("its load ({})", demand_words(level));
    let limit = level.limit_seats.unwrap_or(0.0);
    let borrowing = match level.nominal_limit_seats {
        Some(n) if limit > n => format!(
            " It already borrows {:.0} seats beyond its nominal {n:.0}.",
            limit - n
        ),
        _ => String::new(),
    };
    let Some(proposal) = s.proposal else {
        if s.needed < smallest_move(level.nominal_limit_seats.unwrap_or(limit)) {
            return sentence(not_worth_a_move(level, &load, s.needed));
        }
        return sentence(format!(
            "Raise the shares of {name}: it needs about {:.0} more seats for {load} with a quarter of its limit \
             free. How many shares that is is not known (the shares differ from the defaults and the cluster's \
             PriorityLevelConfigurations were not read).{borrowing}",
            s.needed
        ));
    };
    // Read through a Prometheus there are no flows (no dumps): the flow schemas rejected say who it is.
    let send_less = if level.top_flows.is_empty() {
        "the clients behind it must send less (its flow schemas' rejections say which)"
    } else {
        "the clients behind it must send less (its top flows)"
    };
    if let Some(server) = s
        .server_seats
        .filter(|&server| s.demand / (1.0 - FREE_AFTER) > server)
    {
        return sentence(format!(
            "No share move can carry {name}: {load} needs more seats than this replica has ({server:.0}). \
             {}, or the server needs {}.",
            capitalize(send_less),
            more_concurrency(None)
        ));
    }
    let per_share = s.per_share.unwrap_or(0.0);
    sentence(match proposal {
        ShareMove::TooSmall { seats } => not_worth_a_move(level, &load, seats),
        ShareMove::Move {
            from, seats, short, ..
        } if short <= 0.0 => format!(
            "Raise the shares of {name}: move {} ({}) so it gets about {seats:.0} more seats (1 share ≈ \
             {per_share:.2} seats), enough for {load} with a quarter of its limit free.{borrowing}",
            from_words(&from),
            if from.len() == 1 {
                "what it spares beyond its own load"
            } else {
                "what they spare beyond their own load"
            }
        ),
        ShareMove::Move {
            from,
            seats,
            short,
            spare,
        } => format!(
            "Raise the shares of {name}: move {} so it gets about {seats:.0} more seats (1 share ≈ {per_share:.2} \
             seats), {}; it would still lack about {short:.0} seats for {load}: {send_less}, or the server needs \
             {}.{borrowing}",
            from_words(&from),
            all_or_some(from.len(), seats, spare),
            more_concurrency(s.server_seats)
        ),
        ShareMove::NoSpare { spare } => format!(
            "{name} lacks about {:.0} seats for {load}, and the other levels cannot spare them ({spare:.0} seats in \
             all beyond their own load and the seats they keep): {send_less}, or the server needs {}.{borrowing}",
            s.needed,
            more_concurrency(s.server_seats)
        ),
    })
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
fn not_worth_a_move(level: &LevelReport, load: &str, needed: f64) -> String {
    let (name, limit) = (&level.priority_level, level.limit_seats.unwrap_or(0.0));
    let fits = if needed <= 0.0 {
        format!("{load} fits its {limit:.0} seats with a quarter of them free")
    } else {
        format!(
            "{load} is only about {needed:.0} seats short of a quarter of its {limit:.0} free, too few to be worth \
             moving shares"
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
                 load) so it gets about 20 more seats (1 share ≈ 2.45 seats), enough for its load (45 in use, 6 \
                 requests waiting) with a quarter of its limit free."
            ),
            "{}",
            r.sentence
        );
        assert!(r.manifest.is_none());
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
        assert!(r.sentence.contains("about 19 more seats"), "{}", r.sentence);
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
                "No share move can carry global-default: its load (49 in use, 300 requests waiting for 3000) needs \
                 more seats than this replica has (600)"
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
        // 249 seats / 0.75 − 49 = 283 lacking; 20 + 10 shares spare.
        assert!(
            r.sentence.starts_with(
                "Raise the shares of global-default: move 20 shares from workload-high and 10 from node-high so it \
                 gets about 74 more seats (1 share ≈ 2.45 seats), all the other levels spare beyond their own load; \
                 it would still lack about 210 seats"
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
                 spare in all, more levels' worth); it would still lack about 2 seats"
            ),
            "{}",
            r.sentence
        );
        assert!(
            r.sentence
                .contains("--max-requests-inflight + --max-mutating-requests-inflight, 600 seats on this replica today"),
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
            r.sentence
                .contains("is only about 15 seats short of a quarter of its 245 free"),
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
                "global-default lacks about 70 seats for its load (49 in use, 40 requests waiting for 40), and the \
                 other levels cannot spare them (0 seats in all"
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
}
