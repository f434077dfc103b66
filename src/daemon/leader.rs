//! Which replica of apf-monitor sends the direct notifications (Slack, email, webhook): the one holding a
//! Kubernetes Lease. Alertmanager receivers are sent from every replica; Alertmanager de-duplicates.
//!
//! The holder keeps its notification log (what its receivers confirmed, [`NotificationLog`]) in an annotation of
//! the Lease; a replica that takes the Lease reads it before it sends anything, so a failover neither repeats what
//! was announced nor loses what was not.
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinHandle;

use crate::alert::notification_log::{self, NotificationLog};
use crate::alert::LeaderElectionConfig;
use crate::targets::access::AccessError;
use crate::targets::KubernetesConfig;

const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The field manager of the log's annotation (server-side field ownership).
const FIELD_MANAGER: &str = "apf-monitor";
/// How often a failed write of the log is tried again.
const WRITE_RETRY: Duration = Duration::from_secs(2);

/// The log the alerting stage recorded last, with the term it was recorded in.
type Recorded = Option<(u64, Arc<NotificationLog>)>;

/// Leader election is on but the Lease cannot be reached: said by `serve --check-config`, at start-up and by a
/// reload alike.
#[derive(Debug, thiserror::Error)]
#[error(
    "leader election needs apiserver access (in-cluster config or a kubeconfig); set \
     alerting.leader_election.enabled: false to run without it: {0}"
)]
pub struct NoLeaseAccess(#[source] AccessError);

/// The client the Lease is reached with, `None` when election is off: `enabled` unset elects when running in a
/// cluster (a service-account token is mounted). The access is discovery's own (`targets.kubernetes`).
pub async fn lease_client(
    cfg: &LeaderElectionConfig,
    access: &KubernetesConfig,
) -> Result<Option<kube::Client>, NoLeaseAccess> {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::path::Path::new(SERVICE_ACCOUNT_DIR)
            .join("token")
            .exists();
    if !cfg.enabled.unwrap_or(in_cluster) {
        return Ok(None);
    }
    let config = crate::targets::access::access(access)
        .await
        .map_err(NoLeaseAccess)?;
    crate::targets::access::client(&config)
        .map(Some)
        .map_err(NoLeaseAccess)
}

/// Who sends the direct notifications, as this replica knows it.
#[derive(Debug, Clone, Default)]
pub struct LeaderState {
    /// This replica sends them now (and has read the previous holder's log).
    pub leading: bool,
    /// Counts this replica's takeovers: the alerting stage takes each handed-over log once.
    pub term: u64,
    /// The Lease's holder as last read (this replica while it leads), and since when it holds it.
    pub holder: Option<String>,
    pub since: Option<SystemTime>,
    /// What the previous holder's receivers confirmed, read when this replica took the Lease.
    pub handed_over: Arc<NotificationLog>,
    /// The log in the Lease as last read or written: its size in bytes and its entries (group and receiver).
    pub log_bytes: usize,
    pub log_entries: usize,
}

impl LeaderState {
    /// A replica that sends without an election (one replica, or election off).
    pub fn sole() -> Self {
        Self {
            leading: true,
            ..Self::default()
        }
    }
}

/// The election this replica takes part in: its identity and the Lease, for the status page.
#[derive(Debug, Clone)]
pub struct Election {
    pub identity: String,
    /// `namespace/name`.
    pub lease: String,
}

/// Tells whether this replica sends direct notifications now, and keeps its notification log in the Lease.
#[derive(Clone)]
pub struct Leadership {
    state: watch::Receiver<LeaderState>,
    /// The log to write, with the term it belongs to (a log of an earlier term is never written).
    log: Option<Arc<watch::Sender<Recorded>>>,
    lease: Option<Arc<tokio::sync::Mutex<Option<LeaseTask>>>>,
    election: Option<Election>,
}

/// The task that keeps the Lease: told to stop, it writes the log it owes and gives the Lease up.
struct LeaseTask {
    release: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Leadership {
    /// A single replica, or election turned off: always the notifier.
    pub fn always() -> Self {
        let (_tx, rx) = watch::channel(LeaderState::sole());
        Self::from_channel(rx)
    }

    /// For tests and callers that drive leadership themselves (no Lease: the log is not kept anywhere).
    pub fn from_channel(state: watch::Receiver<LeaderState>) -> Self {
        Self {
            state,
            log: None,
            lease: None,
            election: None,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.state.borrow().leading
    }

    pub fn state(&self) -> LeaderState {
        self.state.borrow().clone()
    }

    /// `None` without an election.
    pub fn election(&self) -> Option<&Election> {
        self.election.as_ref()
    }

    /// The log as of now, to be written to the Lease while this replica holds it in `term`.
    pub fn record(&self, term: u64, log: NotificationLog) {
        if let Some(tx) = &self.log {
            tx.send_replace(Some((term, Arc::new(log))));
        }
    }

    /// Writes the log it owes, then gives the Lease up, so that another replica of apf-monitor takes over at once
    /// instead of waiting for the Lease to expire; waits at most `timeout`. Direct notifications stop here.
    pub async fn release(&self, timeout: Duration) {
        let Some(lease) = &self.lease else {
            return;
        };
        let Some(LeaseTask { release, task }) = lease.lock().await.take() else {
            return;
        };
        let _ = release.send(());
        if tokio::time::timeout(timeout, task).await.is_err() {
            tracing::warn!("the Lease was not released within {timeout:?}: another replica takes over when it expires");
        }
    }

    /// `enabled` unset: elect when running in a cluster (a service-account token is mounted), else always lead. The
    /// Lease is reached with the same apiserver access as discovery (`targets.kubernetes`).
    pub async fn start(cfg: &LeaderElectionConfig, access: &KubernetesConfig) -> Result<Self> {
        let Some(client) = lease_client(cfg, access).await? else {
            return Ok(Self::always());
        };
        let namespace = match &cfg.namespace {
            Some(ns) => ns.clone(),
            None => std::fs::read_to_string(format!("{SERVICE_ACCOUNT_DIR}/namespace"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| client.default_namespace().to_string()),
        };
        // The pod name says who leads in `kubectl get lease`; the suffix keeps two processes on one host apart.
        let identity = format!(
            "{}-{:08x}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "apf-monitor".into()),
            rand::random::<u32>()
        );
        let duration = cfg.lease_duration.0.as_secs().max(2);
        let spec = ManagerSpec {
            client: client.clone(),
            lease: cfg.lease_name.clone(),
            namespace: namespace.clone(),
            identity: identity.clone(),
            duration,
        };
        let manager = spec.build().await.with_context(|| {
            format!(
                "cannot use Lease {namespace}/{}: the service account needs get/create/patch/watch on \
                 leases in its namespace",
                cfg.lease_name
            )
        })?;
        let (state_tx, state_rx) = watch::channel(LeaderState::default());
        let (log_tx, log_rx) = watch::channel(None);
        let (release, released) = oneshot::channel::<()>();
        let lease = LeaseApi {
            api: Api::namespaced(client, &namespace),
            name: cfg.lease_name.clone(),
        };
        let (seen_tx, seen) = watch::channel(None);
        let freed = Arc::new(Notify::new());
        let watcher = tokio::spawn(lease.clone().watch(seen_tx, freed.clone()));
        let keeper = Keeper {
            lease,
            identity: identity.clone(),
            state: LeaderState::default(),
            state_tx,
            log_rx,
            unwritten: None,
            write_failing: false,
        };
        let task = tokio::spawn(async move {
            keeper.run(spec, manager, seen, freed, released).await;
            watcher.abort();
        });
        Ok(Self {
            state: state_rx,
            log: Some(Arc::new(log_tx)),
            lease: Some(Arc::new(tokio::sync::Mutex::new(Some(LeaseTask {
                release,
                task,
            })))),
            election: Some(Election {
                identity,
                lease: format!("{namespace}/{}", cfg.lease_name),
            }),
        })
    }
}

/// What kube-lease-manager's manager is built from: built again when the holder releases the Lease, since a
/// manager re-reads the Lease only once the copy it holds has expired.
struct ManagerSpec {
    client: kube::Client,
    lease: String,
    namespace: String,
    identity: String,
    duration: u64,
}

impl ManagerSpec {
    async fn build(
        &self,
    ) -> Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError> {
        kube_lease_manager::LeaseManagerBuilder::new(self.client.clone(), &self.lease)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.duration)
            .with_grace((self.duration / 3).max(1))
            .build()
            .await
    }
}

/// The Lease as this replica reads and annotates it.
#[derive(Clone)]
struct LeaseApi {
    api: Api<Lease>,
    name: String,
}

/// What a read of the Lease says.
#[derive(Debug, Clone)]
struct LeaseRead {
    holder: Option<String>,
    since: Option<SystemTime>,
    log: Option<String>,
}

impl LeaseApi {
    async fn read(&self) -> Result<LeaseRead, kube::Error> {
        Ok(Self::read_of(self.api.get(&self.name).await?))
    }

    fn read_of(lease: Lease) -> LeaseRead {
        let spec = lease.spec.unwrap_or_default();
        LeaseRead {
            holder: spec.holder_identity,
            since: spec.acquire_time.map(|t| SystemTime::from(t.0)),
            log: lease
                .metadata
                .annotations
                .and_then(|mut a| a.remove(notification_log::ANNOTATION)),
        }
    }

    /// Watches the Lease alone (a field selector on its name, which RBAC authorizes by `resourceNames`): every
    /// version goes to `seen`, and `freed` is told when it has no holder (released) or is gone. Runs until aborted;
    /// a failed watch is started again after a pause.
    async fn watch(self, seen: watch::Sender<Option<LeaseRead>>, freed: Arc<Notify>) {
        use futures_util::StreamExt;
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(290);
        loop {
            let version = match self.api.get(&self.name).await {
                Ok(lease) => {
                    let version = lease.metadata.resource_version.clone().unwrap_or_default();
                    seen.send_replace(Some(Self::read_of(lease)));
                    version
                }
                Err(e) => {
                    tracing::debug!(lease = %self.name, error = %e, "cannot read the Lease; tried again in 5 s");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    continue;
                }
            };
            let mut events = match self.api.watch(&params, &version).await {
                Ok(events) => events.boxed(),
                Err(e) => {
                    tracing::debug!(lease = %self.name, error = %e, "cannot watch the Lease; tried again in 5 s");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    continue;
                }
            };
            while let Some(Ok(event)) = events.next().await {
                match event {
                    WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                        let read = Self::read_of(lease);
                        if read.holder.is_none() {
                            freed.notify_one();
                        }
                        seen.send_replace(Some(read));
                    }
                    WatchEvent::Deleted(_) => freed.notify_one(),
                    WatchEvent::Bookmark(_) => {}
                    WatchEvent::Error(_) => break,
                }
            }
        }
    }

    /// The annotation alone, by a merge patch: the Lease's spec stays kube-lease-manager's.
    async fn write(&self, text: &str) -> Result<(), kube::Error> {
        let patch =
            serde_json::json!({"metadata": {"annotations": {notification_log::ANNOTATION: text}}});
        self.api
            .patch(
                &self.name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
    }
}

/// The task that drives kube-lease-manager: reads the log when the Lease is taken, writes it while held, tries to
/// take the Lease as soon as its holder releases it, and says who holds it.
struct Keeper {
    lease: LeaseApi,
    identity: String,
    state: LeaderState,
    state_tx: watch::Sender<LeaderState>,
    log_rx: watch::Receiver<Recorded>,
    /// The log of this term not yet in the Lease.
    unwritten: Option<Arc<NotificationLog>>,
    /// The last write failed (said once, then quietly tried again).
    write_failing: bool,
}

impl Keeper {
    async fn run(
        mut self,
        spec: ManagerSpec,
        manager: kube_lease_manager::LeaseManager,
        mut seen: watch::Receiver<Option<LeaseRead>>,
        freed: Arc<Notify>,
        mut released: oneshot::Receiver<()>,
    ) {
        let name = self.lease.name.clone();
        let mut retry = tokio::time::interval(WRITE_RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leading = false;
        self.follow(false).await;
        // `changed` sleeps until the Lease is due for renewal or expires, then returns when this replica took or
        // lost it. The other branches leave it running, except a release by the holder: then a new manager reads
        // the Lease and tries to take it at once, rather than when it would have expired.
        let mut manager = Arc::new(manager);
        let step_of = |m: &Arc<kube_lease_manager::LeaseManager>| {
            let m = m.clone();
            Box::pin(async move { m.changed().await })
        };
        let mut step = step_of(&manager);
        let (mut watching, mut recording) = (true, true);
        loop {
            tokio::select! {
                _ = &mut released => break,
                result = &mut step => {
                    match result {
                        Ok(now) if now != leading => {
                            leading = now;
                            self.follow(leading).await;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            // Stop notifying rather than risk doubles; tried again after a pause.
                            tracing::warn!(lease = %name, error = %e, "leader election: cannot reach the Lease");
                            if leading {
                                leading = false;
                                self.follow(false).await;
                            }
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                    }
                    step = step_of(&manager);
                }
                _ = freed.notified(), if !leading => match spec.build().await {
                    Ok(fresh) => {
                        manager = Arc::new(fresh);
                        step = step_of(&manager);
                    }
                    Err(e) => tracing::debug!(lease = %name, error = %e, "the Lease was released, but cannot be read"),
                },
                changed = seen.changed(), if !leading && watching => {
                    if changed.is_err() {
                        watching = false;
                        continue;
                    }
                    let read = seen.borrow_and_update().clone();
                    if let Some(read) = read {
                        self.saw(read);
                    }
                }
                changed = self.log_rx.changed(), if recording => {
                    if changed.is_err() {
                        // Every Leadership is gone: nothing more will be recorded.
                        recording = false;
                        continue;
                    }
                    self.take_recorded();
                    self.write().await;
                }
                _ = retry.tick(), if self.unwritten.is_some() => self.write().await,
            }
        }
        drop(step);
        // A graceful stop: what the receivers confirmed goes into the Lease before the next holder reads it.
        if self.log_rx.has_changed().unwrap_or(false) {
            self.take_recorded();
        }
        if self.unwritten.is_some() {
            self.write().await;
        }
        self.state.leading = false;
        self.state.holder = None;
        self.state_tx.send_replace(self.state.clone());
        match manager.release().await {
            Ok(()) => tracing::info!(lease = %name, "Lease released"),
            Err(e) => {
                tracing::warn!(lease = %name, error = %e, "the Lease could not be released; it expires on its own")
            }
        }
    }

    /// The Lease was taken or lost. Taken: the previous holder's log is read first, and only then does this replica
    /// say it leads (so nothing is sent before the log is known).
    async fn follow(&mut self, leading: bool) {
        let name = &self.lease.name;
        if leading {
            let (handed_over, since, bytes) = self.take_log().await;
            self.state = LeaderState {
                leading: true,
                term: self.state.term + 1,
                holder: Some(self.identity.clone()),
                since: Some(since),
                log_bytes: bytes,
                log_entries: handed_over.entries(),
                handed_over: Arc::new(handed_over),
            };
            // A log recorded in an earlier term is stale: the stage records onto the handed-over one.
            self.log_rx.borrow_and_update();
            self.unwritten = None;
            tracing::info!(lease = %name, identity = %self.identity, entries = self.state.log_entries, "leader election: this replica now sends direct notifications (the previous holder's notification log read)");
        } else {
            self.state.leading = false;
            self.state.holder = None;
            self.state.since = None;
            self.unwritten = None;
            tracing::info!(lease = %name, identity = %self.identity, "leader election: this replica stands by (the Lease holder sends direct notifications)");
        }
        self.state_tx.send_replace(self.state.clone());
    }

    /// The log in the Lease, when this replica took it: tried three times, then taken as empty (every firing alert
    /// is announced again: a duplicate rather than a loss).
    async fn take_log(&self) -> (NotificationLog, SystemTime, usize) {
        let name = &self.lease.name;
        for attempt in 1..=3 {
            match self.lease.read().await {
                Ok(read) => {
                    let since = read.since.unwrap_or_else(SystemTime::now);
                    let Some(text) = read.log else {
                        return (NotificationLog::default(), since, 0);
                    };
                    return match NotificationLog::decode(&text) {
                        Ok(log) => (log, since, text.len()),
                        Err(e) => {
                            tracing::warn!(lease = %name, error = %e, "the notification log in the Lease is not readable: firing alerts are announced again");
                            (NotificationLog::default(), since, text.len())
                        }
                    };
                }
                Err(e) => {
                    tracing::warn!(lease = %name, attempt, error = %e, "cannot read the notification log from the Lease");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        tracing::warn!(lease = %name, "the notification log could not be read: firing alerts are announced again");
        (NotificationLog::default(), SystemTime::now(), 0)
    }

    /// The log the alerting stage recorded last, when it belongs to this replica's current term.
    fn take_recorded(&mut self) {
        let latest = self.log_rx.borrow_and_update().clone();
        if let Some((term, log)) = latest {
            if self.state.leading && term == self.state.term {
                self.unwritten = Some(log);
            }
        }
    }

    async fn write(&mut self) {
        let Some(log) = self.unwritten.clone() else {
            return;
        };
        let text = log.encode();
        match self.lease.write(&text).await {
            Ok(()) => {
                if std::mem::take(&mut self.write_failing) {
                    tracing::info!(lease = %self.lease.name, "the notification log is written to the Lease again");
                }
                self.unwritten = None;
                self.state.log_bytes = text.len();
                self.state.log_entries = log.entries();
                self.state_tx.send_replace(self.state.clone());
            }
            Err(e) if self.write_failing => {
                tracing::debug!(lease = %self.lease.name, error = %e, "cannot write the notification log to the Lease")
            }
            Err(e) => {
                self.write_failing = true;
                tracing::warn!(lease = %self.lease.name, error = %e, "cannot write the notification log to the Lease (tried again every 2 s; a 403 means the service account lacks patch on it)");
            }
        }
    }

    /// Who holds the Lease, for the status page of a replica that stands by.
    fn saw(&mut self, read: LeaseRead) {
        self.state.holder = read.holder;
        self.state.since = read.since;
        self.state.log_bytes = read.log.as_ref().map_or(0, String::len);
        self.state.log_entries = read
            .log
            .and_then(|t| NotificationLog::decode(&t).ok())
            .map_or(0, |l| l.entries());
        self.state_tx.send_replace(self.state.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn off_means_always_the_notifier() {
        let cfg = LeaderElectionConfig {
            enabled: Some(false),
            ..Default::default()
        };
        assert!(Leadership::start(&cfg, &KubernetesConfig::default())
            .await
            .unwrap()
            .is_leader());
    }

    #[tokio::test]
    async fn forced_on_without_apiserver_access_is_a_clear_error() {
        // No cluster and no kubeconfig here: the error says how to run without election.
        let cfg = LeaderElectionConfig {
            enabled: Some(true),
            ..Default::default()
        };
        std::env::set_var("KUBECONFIG", "/nonexistent/kubeconfig");
        let err = Leadership::start(&cfg, &KubernetesConfig::default())
            .await
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("leader_election.enabled: false"), "{err}");
    }
}
