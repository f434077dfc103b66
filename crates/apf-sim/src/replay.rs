//! A replay: the load observed on a replica, replayed in virtual time through a configuration of FlowSchemas and
//! PriorityLevelConfigurations (the ones in force, or changed ones), to predict what each level and flow gets.
//! `apf-monitor plan --load` and the alerts' remediations run it twice, before and after a change, over several
//! seeds. The same inputs give the same runs.
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::scenario::{Arrivals, Dispatch, FlowSpec, RatePoint, Scenario, SimError};
use crate::simulator::{
    p99_seconds, FlowTally, LevelTally, SimOptions, Simulator, Tallies, ADJUST_NS,
};
use apf::reason::TIME_OUT;
use apf::{FlowSchema, KubeVersion, PriorityLevelConfig};

/// The most requests a replay sends per second, all flows together: the scenarios' own bound per flow.
const MAX_TOTAL_RATE: f64 = 50_000.0;

/// One flow of the load observed on a replica.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObservedFlow {
    /// Unique among the flows; names the flow in the outcome.
    pub name: String,
    /// The flow schema and flow distinguisher its requests were seen in.
    pub flow_schema: String,
    pub flow: String,
    /// Who sends and what, when known: its requests are then matched against the configuration replayed as
    /// kube-apiserver matches them, so a new FlowSchema that takes its user takes them. `None`: they keep going to
    /// `flow_schema` (by name) with `flow` as the distinguisher, for as long as that flow schema exists (then to
    /// the catch-all).
    #[serde(skip)]
    pub request: Option<apf::matching::Request>,
    /// Requests arriving per second (dispatched and rejected: rejected demand counts), open loop, Poisson.
    pub requests_per_second: f64,
    pub seats: u32,
    /// Mean execution time.
    #[serde(serialize_with = "seconds")]
    pub execution: Duration,
    /// How the rate moved over the window, where it came in bursts: (seconds, multiple of `requests_per_second`)
    /// one interval after the other, replayed in a loop from the start of the run. Empty: steady.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<(f64, f64)>,
}

/// A flow's rate curve over `run`: steady at `rps`, or its `profile` in a loop (each interval a step).
fn rate_curve(rps: f64, profile: &[(f64, f64)], run: Duration) -> Vec<RatePoint> {
    let steady = vec![RatePoint {
        at: Duration::ZERO,
        rps,
    }];
    let usable = |(d, m): &(f64, f64)| d.is_finite() && *d > 0.0 && m.is_finite() && *m >= 0.0;
    let period: f64 = profile.iter().filter(|i| usable(i)).map(|(d, _)| d).sum();
    // A profile of a millisecond looped over minutes is no curve worth drawing.
    if period < 1.0 {
        return steady;
    }
    let mut points = Vec::new();
    let mut at = 0.0;
    let end = run.as_secs_f64();
    while at < end {
        for (d, m) in profile.iter().filter(|i| usable(i)) {
            let level = rps * m;
            points.push(RatePoint {
                at: Duration::from_secs_f64(at),
                rps: level,
            });
            at += d;
            points.push(RatePoint {
                at: Duration::from_secs_f64(at),
                rps: level,
            });
            if at >= end {
                break;
            }
        }
    }
    points
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct Replay {
    pub version: KubeVersion,
    pub server_concurrency: u32,
    pub flows: Vec<ObservedFlow>,
    /// Replayed first through the configuration in force ([`replay_change`]'s `before`): the queues fill and the
    /// borrowing settles as they were when the change is made. Each seed adds a part of borrowing's 10 s period:
    /// the change lands at another moment of it.
    pub lead_in: Duration,
    /// After the change, simulated and not measured: queued requests of before are served or time out, borrowing
    /// adjusts (every 10 s).
    pub warm_up: Duration,
    /// Measured after the warm-up.
    pub measured: Duration,
    pub seeds: Vec<u64>,
    /// Each request's execution time drawn uniformly from `execution` x [1 - spread, 1 + spread] (0 to below 1).
    pub execution_spread: f64,
    /// Each level's smoothed seat demand when the replay starts, by name, as the replica reported it
    /// (`apiserver_flowcontrol_demand_seats_smoothed`, 1.26+). Borrowing allocates seats by it, and it remembers
    /// about five minutes of demand (it decays by 0.977 every 10 s): a level that was flooded keeps its claim on
    /// seats for minutes after its load has moved. Levels absent (new ones) start from none.
    pub smoothed_demand: BTreeMap<String, f64>,
}

impl Replay {
    /// 30 s of lead-in, 20 s of warm-up, 2 minutes measured (one minute of a draw varies by about 10 %), seeds 1
    /// to 3, execution times ±50 %.
    pub fn new(version: KubeVersion, server_concurrency: u32, flows: Vec<ObservedFlow>) -> Replay {
        Replay {
            version,
            server_concurrency,
            flows,
            lead_in: Duration::from_secs(30),
            warm_up: Duration::from_secs(20),
            measured: Duration::from_secs(120),
            seeds: vec![1, 2, 3],
            execution_spread: 0.5,
            smoothed_demand: BTreeMap::new(),
        }
    }
}

/// What a level did over the measured part of one seed's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelOutcome {
    pub priority_level: String,
    pub exempt: bool,
    pub nominal_limit_seats: u32,
    /// Time average of the enforced limit (CurrentCL from 1.26, borrowing included; NominalCL before).
    pub mean_limit_seats: f64,
    /// Time average of the seats in use (the widest of each request, additional latency included).
    pub mean_seats_in_use: f64,
    pub mean_waiting_requests: f64,
    pub dispatched_per_second: f64,
    /// By reason (`queue-full`, `time-out`, `concurrency-limit`); reasons with none absent.
    pub rejected_per_second: BTreeMap<String, f64>,
    /// Of its requests dispatched in the measured part and of those that timed out in their queue, as
    /// kube-apiserver's `request_wait_duration_seconds{execute="true"}` observes them (0 when there were none).
    pub mean_wait_seconds: f64,
    pub p99_wait_seconds: f64,
}

/// What a flow got over the measured part of one seed's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowOutcome {
    pub name: String,
    /// Where it went in the configuration replayed.
    pub flow_schema: String,
    pub priority_level: String,
    pub dispatched_per_second: f64,
    pub rejected_per_second: BTreeMap<String, f64>,
    pub mean_wait_seconds: f64,
    pub p99_wait_seconds: f64,
}

/// One seed's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayRun {
    pub seed: u64,
    pub measured_seconds: f64,
    pub levels: Vec<LevelOutcome>,
    pub flows: Vec<FlowOutcome>,
}

/// A configuration: its FlowSchemas and PriorityLevelConfigurations.
pub type Objects<'a> = (&'a [FlowSchema], &'a [PriorityLevelConfig]);

/// Replays the flows through `schemas` and `levels` once per seed, the seeds on threads of their own: the lead-in,
/// the warm-up and the measure all through them.
pub fn replay(
    r: &Replay,
    schemas: &[FlowSchema],
    levels: &[PriorityLevelConfig],
) -> Result<Vec<ReplayRun>, SimError> {
    replay_change(r, (schemas, levels), (schemas, levels))
}

/// The change as it happens: the lead-in through `before`, then `after` put in force (as kube-apiserver's APF
/// controller does), its warm-up, and the measure; once per seed.
pub fn replay_change(
    r: &Replay,
    before: Objects<'_>,
    after: Objects<'_>,
) -> Result<Vec<ReplayRun>, SimError> {
    let scenario = scenario_of(r)?;
    let n = r.seeds.len() as u64;
    std::thread::scope(|s| {
        let runs: Vec<_> = r
            .seeds
            .iter()
            .enumerate()
            .map(|(i, &seed)| {
                let scenario = scenario.clone();
                // A change lands at any moment of borrowing's 10 s period, and where it lands shapes the next
                // minutes' limits: each seed makes it at another moment, spread evenly over the period.
                let phase = Duration::from_nanos(ADJUST_NS * (2 * i as u64 + 1) / (2 * n));
                s.spawn(move || one_run(r, scenario, seed, r.lead_in + phase, before, after))
            })
            .collect();
        runs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| SimError::Scenario("a replay's run stopped".into()))
            })
            .collect()
    })
}

/// The flows as a scenario of steady open-loop rates, checked.
fn scenario_of(r: &Replay) -> Result<Scenario, SimError> {
    let bad = |m: String| Err(SimError::Scenario(format!("replay: {m}")));
    if r.flows.is_empty() {
        return bad("no flow to replay".into());
    }
    if r.seeds.is_empty() {
        return bad("no seed".into());
    }
    if r.measured.is_zero() {
        return bad("nothing measured: give a measured time above 0".into());
    }
    if !(0.0..1.0).contains(&r.execution_spread) {
        return bad(format!(
            "execution spread {} must be at least 0 and below 1",
            r.execution_spread
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut total = 0.0;
    for f in &r.flows {
        let who = format!("flow {:?}", f.name);
        if !names.insert(f.name.as_str()) {
            return bad(format!("{who} is named twice"));
        }
        if !f.requests_per_second.is_finite() || f.requests_per_second < 0.0 {
            return bad(format!(
                "{who}: {} requests/s is not a rate",
                f.requests_per_second
            ));
        }
        if f.seats == 0 {
            return bad(format!("{who}: seats must be at least 1"));
        }
        if f.execution < Duration::from_micros(1) {
            return bad(format!("{who}: execution must be at least 1µs"));
        }
        total += f.requests_per_second;
    }
    if total > MAX_TOTAL_RATE {
        return bad(format!(
            "{total:.0} requests/s together is more than the simulator's bound of {MAX_TOTAL_RATE:.0}"
        ));
    }
    let run = r.lead_in + Duration::from_nanos(ADJUST_NS) + r.warm_up + r.measured;
    let flows = r
        .flows
        .iter()
        .map(|f| {
            let (user, verb, resource) = match &f.request {
                Some(q) => (q.user.clone(), q.verb.clone(), String::new()),
                None => (String::new(), "get".into(), String::new()),
            };
            FlowSpec {
                name: f.name.clone(),
                flow_schema: None,
                user,
                groups: Vec::new(),
                verb,
                resource,
                namespace: String::new(),
                seats: f.seats,
                duration: f.execution,
                duration_spread: r.execution_spread,
                rate: rate_curve(f.requests_per_second, &f.profile, run),
                arrivals: Arrivals::Poisson,
                priority_level: None,
                hash: None,
                threads: None,
                calls: None,
                think: 0,
                start: Duration::ZERO,
                qps: None,
                burst: None,
                final_seats: None,
                additional_latency: Duration::ZERO,
                pinned: f
                    .request
                    .is_none()
                    .then(|| (f.flow_schema.clone(), f.flow.clone())),
                seen_request: f.request.clone(),
            }
        })
        .collect();
    Ok(Scenario {
        duration: run,
        seed: None,
        priority_levels: Vec::new(),
        dispatch: Dispatch::FairQueuing,
        flows,
    })
}

fn one_run(
    r: &Replay,
    scenario: Scenario,
    seed: u64,
    lead_in: Duration,
    before: Objects<'_>,
    after: Objects<'_>,
) -> ReplayRun {
    let sim = Simulator::new(SimOptions {
        seed,
        server_concurrency: r.server_concurrency,
        ..SimOptions::new(r.version, scenario)
    });
    // The replica's objects in force from the start, in place of the version's defaults, and its levels' memory of
    // demand.
    sim.configure(before.0.to_vec(), before.1.to_vec());
    sim.remember_demand(&r.smoothed_demand);
    sim.step(lead_in);
    if before != after {
        sim.configure(after.0.to_vec(), after.1.to_vec());
    }
    sim.step(r.warm_up);
    let start = sim.tallies();
    sim.step(r.measured);
    let end = sim.tallies();
    outcome(seed, &start, &end)
}

fn per_second(
    end: &BTreeMap<String, u64>,
    start: Option<&BTreeMap<String, u64>>,
    span: f64,
) -> BTreeMap<String, f64> {
    end.iter()
        .filter_map(|(reason, n)| {
            let before = start.and_then(|s| s.get(reason)).copied().unwrap_or(0);
            let d = n.saturating_sub(before);
            (d > 0).then(|| (reason.clone(), d as f64 / span))
        })
        .collect()
}

/// What the measured part added to each tally.
fn outcome(seed: u64, start: &Tallies, end: &Tallies) -> ReplayRun {
    let span_ns = end.now_ns.saturating_sub(start.now_ns).max(1) as f64;
    let span = span_ns / 1e9;
    let flow_start = |name: &str| start.flows.iter().find(|f| f.name == name);
    // Each flow's waits of the measured part, as kube-apiserver's wait metric with execute="true" observes them:
    // of its requests dispatched and of those that timed out in their queue.
    let waits: Vec<(&FlowTally, Vec<u64>)> = end
        .flows
        .iter()
        .map(|f| {
            let s = flow_start(&f.name);
            let since =
                |all: &[u64], kept: Option<usize>| all[kept.unwrap_or(0).min(all.len())..].to_vec();
            let mut w = since(&f.waits, s.map(|s| s.waits.len()));
            w.extend(since(
                &f.timed_out_waits,
                s.map(|s| s.timed_out_waits.len()),
            ));
            (f, w)
        })
        .collect();
    let flows = waits
        .iter()
        .map(|(f, w)| {
            let s = flow_start(&f.name);
            let dispatched = f.dispatched.saturating_sub(s.map_or(0, |s| s.dispatched));
            let timed_out = |t: &FlowTally| t.rejected.get(TIME_OUT).copied().unwrap_or(0);
            let waited = dispatched + timed_out(f).saturating_sub(s.map_or(0, timed_out));
            let wait_sum = f.wait_sum_ns + f.timed_out_wait_sum_ns
                - s.map_or(0.0, |s| s.wait_sum_ns + s.timed_out_wait_sum_ns);
            FlowOutcome {
                name: f.name.clone(),
                flow_schema: f.flow_schema.clone(),
                priority_level: f.priority_level.clone(),
                dispatched_per_second: dispatched as f64 / span,
                rejected_per_second: per_second(&f.rejected, s.map(|s| &s.rejected), span),
                mean_wait_seconds: if waited == 0 {
                    0.0
                } else {
                    wait_sum / waited as f64 / 1e9
                },
                p99_wait_seconds: p99_seconds(&mut w.clone()),
            }
        })
        .collect();
    let levels = end
        .levels
        .iter()
        .map(|l| {
            let s: Option<&LevelTally> = start.levels.iter().find(|s| s.name == l.name);
            let integral = |v: fn(&LevelTally) -> f64| (v(l) - s.map_or(0.0, v)) / span_ns;
            let dispatched = l.dispatched.saturating_sub(s.map_or(0, |s| s.dispatched));
            let mut level_waits: Vec<u64> = waits
                .iter()
                .filter(|(f, _)| f.priority_level == l.name)
                .flat_map(|(_, w)| w.iter().copied())
                .collect();
            let wait_sum: f64 = level_waits.iter().map(|w| *w as f64).sum();
            LevelOutcome {
                priority_level: l.name.clone(),
                exempt: l.exempt,
                nominal_limit_seats: l.nominal,
                mean_limit_seats: integral(|t| t.limit_ns),
                mean_seats_in_use: integral(|t| t.seats_ns),
                mean_waiting_requests: integral(|t| t.waiting_ns),
                dispatched_per_second: dispatched as f64 / span,
                rejected_per_second: per_second(&l.rejected, s.map(|s| &s.rejected), span),
                mean_wait_seconds: if level_waits.is_empty() {
                    0.0
                } else {
                    wait_sum / level_waits.len() as f64 / 1e9
                },
                p99_wait_seconds: p99_seconds(&mut level_waits),
            }
        })
        .collect();
    ReplayRun {
        seed,
        measured_seconds: span,
        levels,
        flows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apf::matching::{implied_groups, Request, Target};

    const AGENT: &str = "system:serviceaccount:monitoring:agent";

    fn v() -> KubeVersion {
        KubeVersion::new(34, 0)
    }

    fn list_pods(user: &str) -> Request {
        Request {
            user: user.into(),
            groups: implied_groups(user),
            verb: "list".into(),
            target: Target::Resource {
                api_group: String::new(),
                resource: "pods".into(),
                subresource: None,
                namespace: None,
            },
        }
    }

    /// The agent's 10-seat LISTs flood workload-low (seen with its user and request); cert-manager's GETs beside
    /// them were seen in the dumps without details (pinned); the controllers busy workload-high.
    fn load() -> Vec<ObservedFlow> {
        let flow = |name: &str, schema: &str, rps: f64, seats: u32, ms: u64| ObservedFlow {
            name: name.into(),
            flow_schema: schema.into(),
            flow: name.into(),
            request: None,
            requests_per_second: rps,
            seats,
            execution: Duration::from_millis(ms),
            profile: Vec::new(),
        };
        vec![
            ObservedFlow {
                request: Some(list_pods(AGENT)),
                flow: AGENT.into(),
                ..flow("agent", "service-accounts", 30.0, 10, 2000)
            },
            flow("cert-manager", "service-accounts", 20.0, 1, 50),
            flow("controllers", "kube-controller-manager", 40.0, 1, 1000),
        ]
    }

    fn short(flows: Vec<ObservedFlow>) -> Replay {
        Replay {
            lead_in: Duration::ZERO,
            warm_up: Duration::from_secs(20),
            measured: Duration::from_secs(30),
            seeds: vec![1, 2],
            ..Replay::new(v(), 600, flows)
        }
    }

    fn level<'a>(run: &'a ReplayRun, name: &str) -> &'a LevelOutcome {
        run.levels
            .iter()
            .find(|l| l.priority_level == name)
            .unwrap()
    }

    fn flow<'a>(run: &'a ReplayRun, name: &str) -> &'a FlowOutcome {
        run.flows.iter().find(|f| f.name == name).unwrap()
    }

    fn rejected(m: &BTreeMap<String, f64>) -> f64 {
        m.values().sum()
    }

    #[test]
    fn the_same_inputs_give_the_same_runs_and_each_seed_its_own() {
        let (schemas, levels) = crate::objects::default_configuration(v());
        let r = short(load());
        let a = replay(&r, &schemas, &levels).unwrap();
        assert_eq!(a, replay(&r, &schemas, &levels).unwrap());
        assert_eq!(a.len(), 2);
        assert_ne!(a[0].flows, a[1].flows);
    }

    /// Only the measured part counts: what each flow gets per second is its rate, not its rate diluted by the
    /// warm-up; the agent past workload-low's seats is rejected, and everything else is served.
    #[test]
    fn an_overloaded_level_rejects_what_it_cannot_serve_over_the_measured_part() {
        let (schemas, levels) = crate::objects::default_configuration(v());
        for run in replay(&short(load()), &schemas, &levels).unwrap() {
            let (agent, cert, ctl) = (
                flow(&run, "agent"),
                flow(&run, "cert-manager"),
                flow(&run, "controllers"),
            );
            assert_eq!(agent.priority_level, "workload-low");
            let agent_total = agent.dispatched_per_second + rejected(&agent.rejected_per_second);
            assert!((agent_total - 30.0).abs() < 4.0, "{agent:?}");
            assert!(rejected(&agent.rejected_per_second) > 5.0, "{agent:?}");
            assert!((ctl.dispatched_per_second - 40.0).abs() < 5.0, "{ctl:?}");
            assert!(rejected(&cert.rejected_per_second) == 0.0, "{cert:?}");
            let low = level(&run, "workload-low");
            // Its limit with what it borrows, and every seat of it in use.
            assert!(
                low.mean_limit_seats > f64::from(low.nominal_limit_seats),
                "{low:?}"
            );
            assert!(
                low.mean_seats_in_use > 0.9 * low.mean_limit_seats,
                "{low:?}"
            );
            assert!(
                low.mean_wait_seconds > 1.0 && low.p99_wait_seconds >= low.mean_wait_seconds,
                "{low:?}"
            );
        }
    }

    /// A flow that comes in bursts (2 s at ten times its mean rate, then 18 s of nothing) fills its queues and gets
    /// queue-full 429s, where the same mean rate steady is served at once; queues eight times longer hold its
    /// bursts until seats free up, and it waits instead. The rate curve loops the profile from the start.
    #[test]
    fn bursts_fill_the_queues_a_steady_rate_does_not_and_longer_queues_hold_them() {
        let bursty = |profile: Vec<(f64, f64)>| ObservedFlow {
            name: "batch".into(),
            flow_schema: "service-accounts".into(),
            flow: "system:serviceaccount:ci:batch".into(),
            request: None,
            requests_per_second: 100.0,
            seats: 1,
            execution: Duration::from_millis(1000),
            profile,
        };
        let curve = rate_curve(100.0, &[(2.0, 10.0), (18.0, 0.0)], Duration::from_secs(50));
        let mut f = Scenario::from_yaml(
            "duration: 60s\nflows: [{name: a, user: u, duration: 1s, rate: [{at: 0s, rps: 1}]}]",
        )
        .unwrap()
        .flows
        .remove(0);
        f.rate = curve;
        let at = |s: f64| f.rps_at(Duration::from_secs_f64(s));
        assert_eq!(
            (at(1.0), at(3.0), at(21.0), at(39.0), at(41.0)),
            (1000.0, 0.0, 1000.0, 0.0, 1000.0)
        );
        assert_eq!(rate_curve(5.0, &[], Duration::from_secs(50)).len(), 1);
        let (schemas, levels) = crate::objects::default_configuration(v());
        let mut longer = levels.clone();
        if let Some(l) = longer.iter_mut().find(|l| l.name == "workload-low") {
            l.queue_length_limit = Some(400);
        }
        let r = Replay {
            lead_in: Duration::from_secs(10),
            warm_up: Duration::from_secs(10),
            measured: Duration::from_secs(40),
            seeds: vec![1],
            ..Replay::new(v(), 600, vec![bursty(vec![(2.0, 10.0), (18.0, 0.0)])])
        };
        let before = &replay_change(&r, (&schemas, &levels), (&schemas, &levels)).unwrap()[0];
        let after = &replay_change(&r, (&schemas, &levels), (&schemas, &longer)).unwrap()[0];
        let full = |run: &ReplayRun| {
            flow(run, "batch")
                .rejected_per_second
                .get("queue-full")
                .copied()
                .unwrap_or(0.0)
        };
        assert!(full(before) > 10.0, "{:?}", flow(before, "batch"));
        assert!(
            full(after) < 0.2 * full(before),
            "{:?}",
            flow(after, "batch")
        );
        assert!(
            flow(after, "batch").mean_wait_seconds > flow(before, "batch").mean_wait_seconds,
            "{:?}",
            flow(after, "batch")
        );
        let steady = replay(
            &Replay {
                flows: vec![bursty(Vec::new())],
                ..r
            },
            &schemas,
            &levels,
        )
        .unwrap();
        assert_eq!(
            rejected(&flow(&steady[0], "batch").rejected_per_second),
            0.0
        );
    }

    /// More shares for workload-low: fewer 429s there, and the levels that gave up shares have lower limits.
    #[test]
    fn more_shares_reject_less_and_the_others_give_up_seats() {
        let (schemas, levels) = crate::objects::default_configuration(v());
        let mut more = levels.clone();
        if let Some(l) = more.iter_mut().find(|l| l.name == "workload-low") {
            l.shares = Some(300);
        }
        let r = short(load());
        let (before, after) = (
            replay(&r, &schemas, &levels).unwrap(),
            replay(&r, &schemas, &more).unwrap(),
        );
        for (b, a) in before.iter().zip(&after) {
            let low = |run| rejected(&level(run, "workload-low").rejected_per_second);
            assert!(low(a) < low(b), "{} then {}", low(b), low(a));
            let high = |run| level(run, "workload-high").nominal_limit_seats;
            assert!(high(a) < high(b));
        }
    }

    /// The agent, seen with its user and request, goes where a new FlowSchema sends it; cert-manager, pinned to
    /// service-accounts, stays and no longer waits behind the agent.
    #[test]
    fn a_flow_with_its_request_moves_with_the_flow_schemas_and_a_pinned_one_stays() {
        let (schemas, levels) = crate::objects::default_configuration(v());
        let (isolated_schemas, isolated_levels) = crate::simulator::tests::isolation(v());
        let r = short(load());
        let before = replay(&r, &schemas, &levels).unwrap();
        // The isolation made 10 s into the run, as a person applies it.
        let change = Replay {
            lead_in: Duration::from_secs(10),
            ..short(load())
        };
        let after = replay_change(
            &change,
            (&schemas, &levels),
            (&isolated_schemas, &isolated_levels),
        )
        .unwrap();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(flow(a, "agent").priority_level, "isolate-agent");
            assert_eq!(flow(a, "agent").flow_schema, "isolate-agent");
            assert_eq!(flow(a, "cert-manager").priority_level, "workload-low");
            assert_eq!(flow(a, "cert-manager").flow_schema, "service-accounts");
            assert!(rejected(&level(a, "workload-low").rejected_per_second) == 0.0);
            assert!(
                flow(a, "cert-manager").mean_wait_seconds
                    <= flow(b, "cert-manager").mean_wait_seconds
            );
        }
        // A pinned flow whose flow schema is gone goes to the catch-all.
        let mut gone = schemas.clone();
        gone.retain(|s| s.name != "service-accounts");
        let runs = replay(&r, &gone, &levels).unwrap();
        assert_eq!(flow(&runs[0], "cert-manager").flow_schema, "catch-all");
    }

    /// The mean wait a replay predicts is the one the replica's `/metrics` shows: kube-apiserver observes
    /// `request_wait_duration_seconds{execute="true"}` for every request that got a seat and for every one that
    /// timed out in its queue (its request was made, then never ran), so time-outs count at the time they waited.
    #[test]
    fn the_mean_wait_covers_what_the_wait_metric_with_execute_true_covers() {
        let (schemas, levels) = crate::objects::default_configuration(v());
        let r = short(load());
        let sim = Simulator::new(SimOptions {
            seed: 1,
            server_concurrency: r.server_concurrency,
            ..SimOptions::new(r.version, scenario_of(&r).unwrap())
        });
        sim.configure(schemas, levels);
        sim.step(r.warm_up);
        let metric = |text: &str| {
            let (mut sum, mut count) = (0.0, 0.0);
            for line in text.lines().filter(|l| {
                l.contains("priority_level=\"workload-low\"") && l.contains("execute=\"true\"")
            }) {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let value: f64 = value.parse().unwrap();
                if series.starts_with("apiserver_flowcontrol_request_wait_duration_seconds_sum{") {
                    sum += value;
                } else if series
                    .starts_with("apiserver_flowcontrol_request_wait_duration_seconds_count{")
                {
                    count += value;
                }
            }
            (sum, count)
        };
        let (start, m0) = (sim.tallies(), metric(&sim.render_metrics()));
        sim.step(r.measured);
        let (end, m1) = (sim.tallies(), metric(&sim.render_metrics()));
        let run = outcome(1, &start, &end);
        let low = level(&run, "workload-low");
        assert!(
            low.rejected_per_second
                .get("time-out")
                .is_some_and(|n| *n > 1.0),
            "{low:?}"
        );
        let shown = (m1.0 - m0.0) / (m1.1 - m0.1);
        assert!(
            (low.mean_wait_seconds - shown).abs() < 1e-6,
            "replayed {} for the metric's {shown}",
            low.mean_wait_seconds
        );
        // The flows' waits make up the level's: time-outs counted in each.
        let (mut sum, mut n) = (0.0, 0.0);
        for name in ["agent", "cert-manager"] {
            let f = flow(&run, name);
            let waited = f.dispatched_per_second
                + f.rejected_per_second.get(TIME_OUT).copied().unwrap_or(0.0);
            sum += f.mean_wait_seconds * waited;
            n += waited;
        }
        assert!((sum / n - shown).abs() < 1e-6, "{} for {shown}", sum / n);
    }

    #[test]
    fn bad_input_is_refused_with_what_is_wrong() {
        let (schemas, levels) = crate::objects::default_configuration(v());
        let err = |r: Replay| replay(&r, &schemas, &levels).unwrap_err().to_string();
        assert!(err(short(Vec::new())).contains("no flow"));
        let mut f = load();
        f[0].requests_per_second = f64::NAN;
        assert!(err(short(f)).contains("not a rate"));
        let mut f = load();
        f[1].seats = 0;
        assert!(err(short(f)).contains("seats"));
        let mut f = load();
        f[1].name = "agent".into();
        assert!(err(short(f)).contains("twice"));
        assert!(err(Replay {
            seeds: Vec::new(),
            ..short(load())
        })
        .contains("no seed"));
        let mut f = load();
        f[2].requests_per_second = 60_000.0;
        assert!(err(short(f)).contains("bound"));
    }
}
