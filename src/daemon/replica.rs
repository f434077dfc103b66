//! One replica's loop: every interval, at the replica's own phase in it, the endpoints that are due (back-off and
//! metrics-only decided here), one request each and one after another, the round handed to the analysis. One
//! request per endpoint per interval at most, never two rounds at once (a round slower than the interval skips the
//! ticks it missed). Between rounds, the watch of the flowcontrol objects (`objects.rs`) hands each change to the
//! analysis at once. Stopped by its token at once: a scrape in flight is dropped, and the watch with it.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::analysis::Update;
use super::objects::{Followed, ObjectsFollow};
use super::setup::LoopSettings;
use crate::analyze::Problem;
use crate::scrape::objects::WatchEnd;
use crate::scrape::{self, Endpoint, EndpointState, ScrapeMetrics, ScrapePlan};
use crate::targets::Target;

pub async fn run(
    target: Target,
    settings: LoopSettings,
    updates: mpsc::Sender<Update>,
    metrics: ScrapeMetrics,
    stop: CancellationToken,
) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = scrape_forever(target, settings, updates, metrics) => {}
    }
}

/// Where in the interval a replica's rounds fall: spread by its name, as Prometheus spreads its targets' scrapes
/// (`scrape/target.go`, `offset`), so that the replicas of a cluster are not all asked at the same instant and
/// their rounds' buffers are not all held at once. The same name keeps the same phase across restarts and reloads.
fn phase(name: &str, interval: std::time::Duration) -> std::time::Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    let nanos = u64::try_from(interval.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    std::time::Duration::from_nanos(h.finish() % nanos)
}

async fn scrape_forever(
    target: Target,
    settings: LoopSettings,
    updates: mpsc::Sender<Update>,
    metrics: ScrapeMetrics,
) {
    metrics.register_replica(&target.name, &settings.endpoints);
    let mut states: BTreeMap<Endpoint, EndpointState> = BTreeMap::new();
    let mut objects: Option<Arc<apf::model::FlowcontrolObjects>> = None;
    let mut follow = ObjectsFollow::new(
        settings.objects_interval,
        settings.interval,
        settings.max_backoff,
        settings.max_body_bytes,
    );
    // The first round at once (a replica is read as soon as it is known), the next ones at the replica's phase.
    let mut ticker = tokio::time::interval_at(
        Instant::now() + phase(&target.name, settings.interval),
        settings.interval,
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            tokio::select! {
                _ = ticker.tick() => {}
                followed = follow.next() => {
                    match followed {
                        // Told at once, not at the next round: who got the 429s is classified on them.
                        Followed::Changed(latest) => {
                            objects = Some(Arc::clone(&latest));
                            let update = Update::Objects {
                                apiserver: target.name.clone(),
                                objects: latest,
                            };
                            if updates.send(update).await.is_err() {
                                return;
                            }
                        }
                        Followed::Ended(end) => {
                            if let WatchEnd::Unavailable(e) | WatchEnd::Failed(e) = &end {
                                metrics.record_error(&target.name, Endpoint::PriorityLevelConfigurations, e);
                            }
                            follow.ended(end, &target.name, std::time::Instant::now());
                        }
                    }
                    continue;
                }
            }
        }
        let now = std::time::Instant::now();
        let due: Vec<Endpoint> = settings
            .endpoints
            .iter()
            .copied()
            .filter(|e| *e != Endpoint::PriorityLevelConfigurations || follow.list_due(now))
            .filter(|e| states.get(e).is_none_or(|s| s.is_due(now)))
            .collect();
        if due.is_empty() {
            continue;
        }
        let plan = ScrapePlan {
            endpoints: due,
            request_details: settings.request_details,
            max_body_bytes: settings.max_body_bytes,
            max_line_bytes: settings.max_line_bytes,
            // The window keeps no more of a level and flow schema: a dump's other flows would be cut on arrival.
            flows_per_schema: Some(crate::analyze::FLOWS_PER_SCHEMA),
            protobuf: settings.protobuf,
        };
        // The round's time is when /metrics was asked for (it is asked first): the apiserver reads its gauges a
        // moment later, where the end of the round would come after the dumps too, later by a varying time that
        // the trends would read as a change of the gauges.
        let asked = Instant::now();
        let mut round = scrape::scrape_replica(&target, &plan).await;
        list_for_new_levels(&target, &plan, &mut round, &objects, &mut follow, &states).await;
        let finished = std::time::Instant::now();
        for r in &round.results {
            let state = states.entry(r.endpoint).or_default();
            match &r.outcome {
                Ok(()) => {
                    if state.consecutive_failures > 0 || state.unavailable {
                        tracing::info!(apiserver = %target.name, endpoint = r.endpoint.label(), "scraping works again");
                    }
                    state.record_success();
                }
                Err(e) => note_failure(&target.name, r.endpoint, e, state, finished, &settings),
            }
        }
        if let Some(listed) = round.objects.take() {
            let levels = round.snapshot.iter().flat_map(|s| s.levels.keys());
            follow.listed(&target, &listed, levels, finished);
            objects = Some(Arc::new(listed.objects));
        }
        let unavailable: Vec<Endpoint> = states
            .iter()
            .filter(|(_, s)| s.unavailable)
            .map(|(e, _)| *e)
            .collect();
        let wall = SystemTime::now();
        metrics.record(&target.name, &round.results, &unavailable, wall);
        if follow.watching() {
            metrics.record_current(&target.name, Endpoint::PriorityLevelConfigurations, wall);
        }
        let update = Update::Round {
            apiserver: target.name.clone(),
            round: Box::new(round),
            objects: objects.clone(),
            at: asked,
            wall,
        };
        if updates.send(update).await.is_err() {
            // The analysis is gone: the daemon is stopping.
            return;
        }
    }
}

/// Where no watch follows the objects, a level of this round's `/metrics` they lack (one just applied) has them
/// listed in this round, after the other endpoints: not asked for in the round already, so still one request per
/// endpoint per interval.
async fn list_for_new_levels(
    target: &Target,
    plan: &ScrapePlan,
    round: &mut scrape::ReplicaScrape,
    objects: &Option<Arc<apf::model::FlowcontrolObjects>>,
    follow: &mut ObjectsFollow,
    states: &BTreeMap<Endpoint, EndpointState>,
) {
    const LIST: Endpoint = Endpoint::PriorityLevelConfigurations;
    let (Some(snapshot), Some(known)) = (&round.snapshot, objects) else {
        return;
    };
    if plan.endpoints.contains(&LIST) {
        return;
    }
    let now = std::time::Instant::now();
    follow.levels_seen(snapshot.levels.keys(), known, now);
    if !follow.list_due(now) || states.get(&LIST).is_some_and(|s| !s.is_due(now)) {
        return;
    }
    let list = ScrapePlan {
        endpoints: vec![LIST],
        ..plan.clone()
    };
    let listed = scrape::scrape_replica(target, &list).await;
    round.results.extend(listed.results);
    round.objects = listed.objects;
}

/// Books a failed request (its back-off) and says so in the log: at the first failure and then rarely, so that a
/// dead replica does not flood it.
fn note_failure(
    apiserver: &str,
    endpoint: Endpoint,
    error: &scrape::ScrapeError,
    state: &mut EndpointState,
    at: std::time::Instant,
    settings: &LoopSettings,
) {
    let verdict =
        state.record_failure(endpoint, error, at, settings.interval, settings.max_backoff);
    let problem = Problem::Scrape {
        endpoint,
        error: error.clone(),
    };
    match verdict {
        scrape::Verdict::Unavailable { first: true } => tracing::warn!(
            apiserver,
            endpoint = endpoint.label(),
            "{problem}; continuing without it (tried again every {}s)",
            scrape::UNAVAILABLE_RETRY.as_secs()
        ),
        scrape::Verdict::Unavailable { first: false } => {}
        scrape::Verdict::RetryAfter(delay) => {
            if state.consecutive_failures == 1 || state.consecutive_failures % 20 == 0 {
                tracing::warn!(
                    apiserver,
                    endpoint = endpoint.label(),
                    failures = state.consecutive_failures,
                    next_try_in_s = delay.as_secs_f64(),
                    "{problem}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::phase;
    use std::time::Duration;

    #[test]
    fn replicas_are_spread_over_the_interval_each_at_its_own_phase() {
        let interval = Duration::from_secs(5);
        let phases: Vec<Duration> = (0..200)
            .map(|i| phase(&format!("10.0.{}.{}:6443", i / 256, i % 256), interval))
            .collect();
        assert!(phases.iter().all(|p| *p < interval));
        // The same name, the same phase (across restarts and reloads).
        assert_eq!(phase("10.0.0.7:6443", interval), phases[7]);
        // Spread over the whole interval: each fifth of it holds some of them.
        for fifth in 0..5 {
            let (from, to) = (interval * fifth / 5, interval * (fifth + 1) / 5);
            assert!(
                phases.iter().any(|p| (from..to).contains(p)),
                "none in {from:?}..{to:?}"
            );
        }
        assert_eq!(phase("any", Duration::ZERO), Duration::ZERO);
    }
}
