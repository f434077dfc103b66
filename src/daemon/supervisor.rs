//! The target supervisor: one loop per replica and one per Prometheus source, started and stopped from a watch of
//! the target list (static targets and sources reloaded, replicas discovered). A replica (or source) that leaves has
//! its loop stopped, then its history, report and self-metric series dropped (a source's: every replica read
//! through it); its alerts resolve because it left the report. One whose settings changed gets a new loop and keeps
//! its history.
use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::analysis::Update;
use super::setup::{PrometheusSetup, Replica, ReplicaSpec, Targets};
use super::{prometheus, replica};
use crate::scrape::ScrapeMetrics;

struct Running<S> {
    spec: S,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl<S> Running<S> {
    async fn stop(self) {
        self.stop.cancel();
        // The loop drops its scrape at once; waiting for it keeps its last round ahead of what follows.
        let _ = self.task.await;
    }
}

/// Runs until `stop` is cancelled (or the target list's sender is gone); then stops every loop, without dropping
/// any replica's series or alerts: a stop is not a removal.
pub async fn run(
    mut targets: watch::Receiver<Arc<Targets>>,
    updates: mpsc::Sender<Update>,
    metrics: ScrapeMetrics,
    stop: CancellationToken,
) {
    let mut running: BTreeMap<String, Running<ReplicaSpec>> = BTreeMap::new();
    let mut sources: BTreeMap<String, Running<PrometheusSetup>> = BTreeMap::new();
    loop {
        let wanted = Arc::clone(&targets.borrow_and_update());
        reconcile(&mut running, &wanted.replicas, &updates, &metrics).await;
        reconcile_sources(&mut sources, &wanted.prometheus, &updates, &metrics).await;
        tokio::select! {
            _ = stop.cancelled() => break,
            changed = targets.changed() => if changed.is_err() { break },
        }
    }
    for (_, r) in std::mem::take(&mut running) {
        r.stop().await;
    }
    for (_, r) in std::mem::take(&mut sources) {
        r.stop().await;
    }
}

async fn reconcile_sources(
    running: &mut BTreeMap<String, Running<PrometheusSetup>>,
    wanted: &[PrometheusSetup],
    updates: &mpsc::Sender<Update>,
    metrics: &ScrapeMetrics,
) {
    let gone: Vec<String> = running
        .keys()
        .filter(|name| !wanted.iter().any(|w| &w.source.name == *name))
        .cloned()
        .collect();
    for name in gone {
        if let Some(r) = running.remove(&name) {
            r.stop().await;
        }
        metrics.forget_replica(&name);
        tracing::info!(source = %name, "Prometheus source removed: the replicas read through it go");
        if updates
            .send(Update::SourceRemoved {
                source: name.clone(),
            })
            .await
            .is_err()
        {
            return;
        }
    }
    for setup in wanted {
        let name = &setup.source.name;
        match running.get(name) {
            Some(r) if r.spec.same_as(setup) => continue,
            Some(_) => {
                if let Some(r) = running.remove(name) {
                    r.stop().await;
                }
                tracing::info!(source = %name, "Prometheus source settings changed: its loop restarts");
            }
            None => {
                tracing::info!(source = %name, url = %setup.source.url, "Prometheus source added")
            }
        }
        let stop = CancellationToken::new();
        let task = tokio::spawn(prometheus::run(
            setup.clone(),
            updates.clone(),
            metrics.clone(),
            stop.clone(),
        ));
        running.insert(
            name.clone(),
            Running {
                spec: setup.clone(),
                stop,
                task,
            },
        );
    }
}

async fn reconcile(
    running: &mut BTreeMap<String, Running<ReplicaSpec>>,
    wanted: &[Replica],
    updates: &mpsc::Sender<Update>,
    metrics: &ScrapeMetrics,
) {
    let names: Vec<&str> = wanted.iter().map(|r| r.target.name.as_str()).collect();
    let gone: Vec<String> = running
        .keys()
        .filter(|name| !names.contains(&name.as_str()))
        .cloned()
        .collect();
    for name in gone {
        if let Some(r) = running.remove(&name) {
            r.stop().await;
        }
        metrics.forget_replica(&name);
        tracing::info!(apiserver = %name, "replica removed: its series and alerts go");
        if updates
            .send(Update::Removed {
                apiserver: name.clone(),
            })
            .await
            .is_err()
        {
            return;
        }
    }
    for replica in wanted {
        let name = &replica.target.name;
        match running.get(name) {
            Some(r) if r.spec == replica.spec => continue,
            Some(_) => {
                if let Some(r) = running.remove(name) {
                    r.stop().await;
                }
                tracing::info!(apiserver = %name, "replica settings changed: its loop restarts");
            }
            None => {
                tracing::info!(apiserver = %name, url = %replica.target.base_url, "replica added")
            }
        }
        let stop = CancellationToken::new();
        let task = tokio::spawn(replica::run(
            replica.target.clone(),
            replica.spec.settings.clone(),
            updates.clone(),
            metrics.clone(),
            stop.clone(),
        ));
        running.insert(
            name.clone(),
            Running {
                spec: replica.spec.clone(),
                stop,
                task,
            },
        );
    }
}
