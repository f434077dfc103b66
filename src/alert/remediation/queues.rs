//! Queues too short for the bursts a level takes: its 429s are queue-full ones while it has seats free most of the
//! time. How long its queues must be to hold a burst until seats free up, and what that costs in waiting, from the
//! bursting flow schema's arrivals scrape by scrape; or why no queue length holds it.
use super::Remediation;
use crate::analyze::{LevelReport, SchemaCost, FULL};
use apf::model::FlowcontrolObjects;

/// The room proposed beyond a burst's peak: bursts differ, and a queue at its limit refuses the next request.
const MARGIN: f64 = 1.25;
/// A proposed queueLengthLimit is a multiple of this (the default levels' is 50).
const STEP: f64 = 50.0;
/// Queue-full 429s make a level's 429s a queue's problem from this share of them on.
const QUEUE_FULL_SHARE: f64 = 0.5;
/// A level full for less than this share of the window has seats most of the time: its trouble is bursts.
const FULL_SHARE: f64 = 0.5;

/// The flow schema whose bursts fill the level's queues: its arrivals came in bursts and it was rejected the most.
fn bursting(level: &LevelReport) -> Option<(&str, &SchemaCost)> {
    level
        .flow_schema_costs
        .iter()
        .filter(|(_, c)| !c.arrival_profile.is_empty() && c.rejected_per_second > 0.0)
        .max_by(|a, b| a.1.rejected_per_second.total_cmp(&b.1.rejected_per_second))
        .map(|(s, c)| (s.as_str(), c))
}

/// The most requests of the schema left waiting at once, replaying its arrivals scrape by scrape against a
/// service of `per_second`: a queue that grows while arrivals outpace it and drains while they do not.
fn peak_waiting(cost: &SchemaCost, mean: f64, per_second: f64) -> f64 {
    let (mut waiting, mut peak) = (0.0f64, 0.0f64);
    // Twice round: a burst at the window's end carries into its start.
    for (seconds, multiple) in cost.arrival_profile.iter().chain(&cost.arrival_profile) {
        waiting = (waiting + (mean * multiple - per_second) * seconds).max(0.0);
        peak = peak.max(waiting);
    }
    peak
}

/// The proposal for a level whose queues fill in bursts, `None` where its trouble is not that (or cannot be sized:
/// no rates, no bursts seen at the scrapes' resolution, its queuing not known).
pub(super) fn lengthen(
    level: &LevelReport,
    objects: Option<&FlowcontrolObjects>,
) -> Option<Remediation> {
    let rates = level.rejected_per_second.as_ref()?;
    let total: f64 = rates.values().sum();
    let queue_full = rates.get("queue-full").copied().unwrap_or(0.0);
    if queue_full <= 0.0 || queue_full < QUEUE_FULL_SHARE * total {
        return None;
    }
    let full = level.time_above(FULL)?;
    if full >= FULL_SHARE {
        return None;
    }
    let name = &level.priority_level;
    let config = objects?.priority_levels.iter().find(|p| &p.name == name)?;
    let (length, hand) = (config.queue_length_limit?, config.hand_size?);
    let limit = level.limit_seats?;
    let (schema, cost) = bursting(level)?;
    let mean = cost.dispatched_per_second? + cost.rejected_per_second;
    let seats = cost.seats_per_request.unwrap_or(1.0).max(1.0);
    let seconds = cost.seconds_per_request.filter(|s| *s > 0.0)?;
    // What the level serves of the schema's requests a second with every seat theirs: a burst has it to itself.
    let per_second = limit / (seats * seconds);
    let peak = peak_waiting(cost, mean, per_second).round();
    if peak <= 0.0 || per_second <= 0.0 {
        return None;
    }
    // A flow queues in its hand of queues: a burst of one client's fills those.
    let each = (peak / f64::from(hand)).ceil();
    let needed = (each * MARGIN).ceil();
    // In steps of [`STEP`]: a burst's peak moves from window to window, a proposal that moved with it would never
    // be the one its prediction was made for.
    let proposed = ((needed.max(2.0 * f64::from(length)) / STEP).ceil() * STEP)
        .min(f64::from(u32::MAX)) as u32;
    let drain = peak / per_second;
    let wait_limit = apf::limits::QUEUE_WAIT_LIMIT.as_secs_f64();
    let why = format!(
        "{name}'s 429s are queue-full ones ({} a second of {}), while it was full only {:.0}% of the window: its \
         queues fill in bursts. {schema}'s arrivals, scrape by scrape, leave about {peak:.0} requests waiting at a \
         burst's peak beyond what its {limit:.0} seats serve ({per_second:.0} requests a second of {:.2} s, {} \
         seat{} each)",
        crate::analyze::round::shown(queue_full),
        crate::analyze::round::shown(total),
        full * 100.0,
        seconds,
        seats,
        if seats == 1.0 { "" } else { "s" },
    );
    if drain > wait_limit {
        return Some(Remediation {
            sentence: format!(
                "{why}; serving them takes about {drain:.0} s, more than the {wait_limit:.0} s a request may \
                 wait: no queue length holds such a burst. Its client must spread its requests (a lower client-side \
                 QPS and burst), or the level needs more seats."
            ),
            ..Default::default()
        });
    }
    let change = apf::plan::Change {
        level: name.clone(),
        field: apf::plan::Field::QueueLengthLimit,
        value: proposed,
    };
    Some(Remediation {
        sentence: format!(
            "{why}. Lengthen its queues: raise queueLengthLimit from {length} to {proposed}, so that a flow's {hand} \
             queues (handSize) hold a burst: {peak:.0} / {hand} = {each:.0} each, with a quarter to spare \
             ({needed:.0}{}, in steps of {STEP:.0}). The last of a burst then waits about {drain:.1} s instead of \
             a 429, under the {wait_limit:.0} s a request may wait. To make it: `apf-monitor plan --set \
             {name}.queueLengthLimit={proposed} --output manifests | kubectl apply -f -`.",
            if 2.0 * f64::from(length) > needed {
                format!(", and twice today's {length} at least")
            } else {
                String::new()
            }
        ),
        manifest: None,
        set: vec![change],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::remediation::remediate;
    use crate::alert::remediation::tests::level;
    use crate::analyze::ListCosts;

    /// `config/scenarios/bursts.yaml`: every 20 s a batch job sends 1,000 GETs a second for 2 s (its mean: 100 a
    /// second) into workload-low's 363 seats, which idle the rest of the time; its queue-full 429s.
    fn bursty(full_share: f64) -> (LevelReport, FlowcontrolObjects) {
        let mut l = level("workload-low", 245.0, 363.0, 20.0, 0.0);
        l.rejected_per_second = Some([("queue-full".to_string(), 48.0)].into());
        let below = 100.0 * (1.0 - full_share);
        l.seat_utilization_window = vec![(0.95, below), (1.0, 100.0), (f64::INFINITY, 100.0)];
        let profile = (0..20)
            .map(|s| (1.0, if s < 2 { 10.0 } else { 0.0 }))
            .collect();
        l.flow_schema_costs.insert(
            "service-accounts".into(),
            SchemaCost {
                seconds_per_request: Some(1.0),
                seats_per_request: Some(1.0),
                dispatched_per_second: Some(52.0),
                rejected_per_second: 48.0,
                arrival_profile: profile,
            },
        );
        let objects = FlowcontrolObjects {
            priority_levels: apf::defaults::default_priority_levels(apf::KubeVersion::new(34, 0)),
            flow_schemas: Vec::new(),
        };
        (l, objects)
    }

    /// The peak the bursts leave waiting (2 s of 1,000 a second against 363 served: 1,274), over a flow's 6
    /// queues with a quarter to spare: 267 each, 300 in steps of 50; proposed with its command, and predicted as any
    /// change is.
    #[test]
    fn queue_full_429s_in_bursts_get_queues_that_hold_a_burst() {
        let (l, objects) = bursty(0.14);
        let r = remediate(
            &l,
            std::slice::from_ref(&l),
            &ListCosts::default(),
            Some(&objects),
        );
        for words in [
            "workload-low's 429s are queue-full ones (48 a second of 48), while it was full only 14% of the window",
            "leave about 1274 requests waiting at a burst's peak beyond what its 363 seats serve (363 requests a \
             second of 1.00 s, 1 seat each)",
            "raise queueLengthLimit from 50 to 300, so that a flow's 6 queues (handSize) hold a burst: 1274 / 6 = \
             213 each, with a quarter to spare (267, in steps of 50)",
            "The last of a burst then waits about 3.5 s instead of a 429",
            "`apf-monitor plan --set workload-low.queueLengthLimit=300 --output manifests | kubectl apply -f -`",
        ] {
            assert!(r.sentence.contains(words), "{words}\n{}", r.sentence);
        }
        assert_eq!(
            r.change_key().as_deref(),
            Some("workload-low.queueLengthLimit=300")
        );
        assert!(r.manifest.is_none());
    }

    /// A small burst still doubles the queues at least: a queue at its limit refuses the next request.
    #[test]
    fn queues_grow_to_twice_their_length_at_least() {
        let (mut l, objects) = bursty(0.14);
        l.limit_seats = Some(900.0);
        let r = lengthen(&l, Some(&objects)).unwrap();
        // 2 s of 1,000 against 900: 200 waiting, 34 each, 43 with a quarter to spare; 100, twice 50.
        assert!(
            r.sentence.contains("from 50 to 100")
                && r.sentence
                    .contains("(43, and twice today's 50 at least, in steps of 50)"),
            "{}",
            r.sentence
        );
    }

    /// Not a queue's problem: a level full most of the window (more seats, or less load), 429s that are mostly
    /// time-outs, arrivals not seen in bursts, or the level's queuing not known. And a burst that would take longer
    /// to serve than a request may wait is no queue's to hold: said so, with no change to make.
    #[test]
    fn only_bursts_a_queue_can_hold_get_longer_queues() {
        let (l, objects) = bursty(0.8);
        assert!(lengthen(&l, Some(&objects)).is_none());
        let (mut l, objects) = bursty(0.14);
        l.rejected_per_second = Some(
            [
                ("queue-full".to_string(), 10.0),
                ("time-out".to_string(), 38.0),
            ]
            .into(),
        );
        assert!(lengthen(&l, Some(&objects)).is_none());
        let (mut l, objects) = bursty(0.14);
        l.flow_schema_costs
            .values_mut()
            .for_each(|c| c.arrival_profile.clear());
        assert!(lengthen(&l, Some(&objects)).is_none());
        let (l, _) = bursty(0.14);
        assert!(lengthen(&l, None).is_none());
        // 60 seats serve 60 a second of a mean of 100: what waits grows loop after loop (2,680 over two), 45 s to
        // serve.
        let (mut l, objects) = bursty(0.14);
        l.limit_seats = Some(60.0);
        let r = lengthen(&l, Some(&objects)).unwrap();
        assert!(
            r.sentence
                .contains("serving them takes about 45 s, more than the 15 s a request may wait"),
            "{}",
            r.sentence
        );
        assert!(r.set.is_empty() && r.change_key().is_none());
    }
}
