//! One Prometheus source's loop: every interval, one read of every replica it holds (one query per family), with
//! a baseline one window back for the replicas new to the loop, handed to the analysis. Never two rounds at once
//! (a round ends within the timeout, which is no longer than the interval). Stopped by its token at once.
use std::collections::BTreeSet;
use std::time::SystemTime;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::analysis::Update;
use super::setup::PrometheusSetup;
use crate::analyze::Problem;
use crate::scrape::prometheus::{read_round, ObjectCounts};
use crate::scrape::{Endpoint, EndpointResult, ScrapeMetrics};
use apf::model::ReplicaKey;

pub async fn run(
    setup: PrometheusSetup,
    updates: mpsc::Sender<Update>,
    metrics: ScrapeMetrics,
    stop: CancellationToken,
) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = query_forever(setup, updates, metrics) => {}
    }
}

async fn query_forever(
    setup: PrometheusSetup,
    updates: mpsc::Sender<Update>,
    metrics: ScrapeMetrics,
) {
    let source = &setup.source;
    metrics.register_replica(&source.name, &[Endpoint::Prometheus]);
    // The replicas this loop has sent: the others get a baseline.
    let mut seen: BTreeSet<ReplicaKey> = BTreeSet::new();
    let mut failures: u64 = 0;
    let mut object_counts = ObjectCounts::default();
    let mut ticker = tokio::time::interval(setup.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let wall = SystemTime::now();
        let time = wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let started = std::time::Instant::now();
        // The whole round (a baseline included) within the timeout: a slow Prometheus cannot stack rounds up.
        let round = match tokio::time::timeout(
            setup.timeout,
            read_round(
                source,
                time,
                setup.window_seconds,
                |k| !seen.contains(k),
                &mut object_counts,
            ),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(crate::scrape::ScrapeError::Timeout(setup.timeout)),
        };
        let outcome = match round {
            Ok(round) => {
                if failures > 0 {
                    tracing::info!(source = %source.name, "the Prometheus answers again");
                }
                failures = 0;
                if round.replicas.is_empty() {
                    tracing::warn!(
                        source = %source.name,
                        selector = %source.selector,
                        "{}", Problem::NoReplicas
                    );
                }
                if round.stale > 0 {
                    tracing::debug!(
                        source = %source.name,
                        replicas = round.stale,
                        "left out: their newest samples are older than max_sample_age"
                    );
                }
                seen = round.replicas.iter().map(|r| r.key.clone()).collect();
                metrics.record_source(&source.name, round.replicas.len(), round.stale);
                metrics.record(
                    &source.name,
                    &[EndpointResult {
                        endpoint: Endpoint::Prometheus,
                        duration: started.elapsed(),
                        outcome: Ok(()),
                        invalid: round.unlabelled as u64,
                    }],
                    &[],
                    wall,
                );
                Ok(round.replicas)
            }
            Err(error) => {
                failures += 1;
                metrics.record(
                    &source.name,
                    &[EndpointResult {
                        endpoint: Endpoint::Prometheus,
                        duration: started.elapsed(),
                        outcome: Err(error.clone()),
                        invalid: 0,
                    }],
                    &[],
                    wall,
                );
                let problem = Problem::Scrape {
                    endpoint: Endpoint::Prometheus,
                    error,
                };
                if failures == 1 || failures % 20 == 0 {
                    tracing::warn!(source = %source.name, url = %source.url, failures, "{problem}");
                }
                Err(problem)
            }
        };
        let update = Update::Fleet {
            source: source.name.clone(),
            outcome,
            baseline_age_seconds: setup.window_seconds,
            at: Instant::now(),
            wall,
        };
        if updates.send(update).await.is_err() {
            // The analysis is gone: the daemon is stopping.
            return;
        }
    }
}
