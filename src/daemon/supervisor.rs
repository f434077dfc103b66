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
use super::setup::{PrometheusSetup, Replica, Targets};
use super::{prometheus, replica};
use crate::scrape::ScrapeMetrics;

/// What the supervisor runs a loop for: a replica, or a Prometheus source.
trait Supervised: Clone {
    /// What the log calls it.
    const KIND: &'static str;
    fn name(&self) -> &str;
    /// Where it is read from, for the log.
    fn url(&self) -> String;
    /// Its loop may go on as it is (nothing it was built from changed).
    fn same_as(&self, running: &Self) -> bool;
    fn spawn(
        &self,
        updates: mpsc::Sender<Update>,
        metrics: ScrapeMetrics,
        stop: CancellationToken,
    ) -> JoinHandle<()>;
    /// What the analysis is told when it leaves.
    fn removed(name: String) -> Update;
}

impl Supervised for Replica {
    const KIND: &'static str = "replica";
    fn name(&self) -> &str {
        &self.target.name
    }
    fn url(&self) -> String {
        self.target.base_url.to_string()
    }
    fn same_as(&self, running: &Self) -> bool {
        self.spec == running.spec
    }
    fn spawn(
        &self,
        updates: mpsc::Sender<Update>,
        metrics: ScrapeMetrics,
        stop: CancellationToken,
    ) -> JoinHandle<()> {
        tokio::spawn(replica::run(
            self.target.clone(),
            self.spec.settings.clone(),
            updates,
            metrics,
            stop,
        ))
    }
    fn removed(apiserver: String) -> Update {
        Update::Removed { apiserver }
    }
}

impl Supervised for PrometheusSetup {
    const KIND: &'static str = "Prometheus source";
    fn name(&self) -> &str {
        &self.source.name
    }
    fn url(&self) -> String {
        self.source.url.clone()
    }
    fn same_as(&self, running: &Self) -> bool {
        PrometheusSetup::same_as(self, running)
    }
    fn spawn(
        &self,
        updates: mpsc::Sender<Update>,
        metrics: ScrapeMetrics,
        stop: CancellationToken,
    ) -> JoinHandle<()> {
        tokio::spawn(prometheus::run(self.clone(), updates, metrics, stop))
    }
    fn removed(source: String) -> Update {
        Update::SourceRemoved { source }
    }
}

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
    let mut replicas: BTreeMap<String, Running<Replica>> = BTreeMap::new();
    let mut sources: BTreeMap<String, Running<PrometheusSetup>> = BTreeMap::new();
    loop {
        let wanted = Arc::clone(&targets.borrow_and_update());
        reconcile(&mut replicas, &wanted.replicas, &updates, &metrics).await;
        reconcile(&mut sources, &wanted.prometheus, &updates, &metrics).await;
        tokio::select! {
            _ = stop.cancelled() => break,
            changed = targets.changed() => if changed.is_err() { break },
        }
    }
    for (_, r) in std::mem::take(&mut replicas) {
        r.stop().await;
    }
    for (_, r) in std::mem::take(&mut sources) {
        r.stop().await;
    }
}

/// Stops the loops no longer wanted (and says so to the analysis), restarts those whose settings changed, starts
/// the new ones.
async fn reconcile<S: Supervised>(
    running: &mut BTreeMap<String, Running<S>>,
    wanted: &[S],
    updates: &mpsc::Sender<Update>,
    metrics: &ScrapeMetrics,
) {
    let gone: Vec<String> = running
        .keys()
        .filter(|name| !wanted.iter().any(|w| w.name() == name.as_str()))
        .cloned()
        .collect();
    for name in gone {
        if let Some(r) = running.remove(&name) {
            r.stop().await;
        }
        metrics.forget_replica(&name);
        tracing::info!(name = %name, "{} removed: its series and alerts go", S::KIND);
        if updates.send(S::removed(name)).await.is_err() {
            return;
        }
    }
    for item in wanted {
        let name = item.name();
        match running.get(name) {
            Some(r) if item.same_as(&r.spec) => continue,
            Some(_) => {
                if let Some(r) = running.remove(name) {
                    r.stop().await;
                }
                tracing::info!(name, "{} settings changed: its loop restarts", S::KIND);
            }
            None => tracing::info!(name, url = %item.url(), "{} added", S::KIND),
        }
        let stop = CancellationToken::new();
        let task = item.spawn(updates.clone(), metrics.clone(), stop.clone());
        running.insert(
            name.to_string(),
            Running {
                spec: item.clone(),
                stop,
                task,
            },
        );
    }
}
