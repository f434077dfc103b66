//! The analysis stage: one task owning every replica's history, keyed by cluster and replica. Rounds come in from
//! the replica loops and the Prometheus loops (and the supervisor says when a replica or source goes); each one
//! re-analyses the replicas it brings and publishes the whole report on a watch channel, which export and alerting
//! read.
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::analyze::{
    Analysis, ApiserverReport, AuditReport, ObjectsInForce, Point, Problem, ReplicaHistory,
    StatusReport,
};
use crate::audit::AuditBatch;
use crate::scrape::prometheus::FleetReplica;
use crate::scrape::{Endpoint, ReplicaScrape};
use apf::model::{FlowcontrolObjects, ReplicaKey, ReplicaSnapshot};
use apf::plan::{infer_server_concurrency, DEFAULT_SERVER_CONCURRENCY};
use apf::review::{review, Finding, ReviewInput};
use apf::KubeVersion;

/// What the replica loops, the Prometheus loops and the supervisor tell the analysis.
pub enum Update {
    /// One round of a replica: what was fetched, and the latest flowcontrol objects.
    Round {
        apiserver: String,
        round: Box<ReplicaScrape>,
        objects: Option<Arc<FlowcontrolObjects>>,
        at: Instant,
        wall: SystemTime,
    },
    /// The replica's flowcontrol objects changed (its watch saw it): who got the 429s, the queue settings, the
    /// remediations and the configuration review follow them from now on.
    Objects {
        apiserver: String,
        objects: Arc<FlowcontrolObjects>,
    },
    /// The replica is no longer a target: its history and its part of the report go.
    Removed { apiserver: String },
    /// One round of a Prometheus source: every replica it holds now (a replica it no longer holds is gone), or
    /// why it could not be read.
    Fleet {
        source: String,
        outcome: Result<Vec<FleetReplica>, Problem>,
        /// How long before `at` each replica's baseline (if any) was taken.
        baseline_age_seconds: f64,
        at: Instant,
        wall: SystemTime,
    },
    /// The Prometheus source is no longer configured: every replica read through it goes.
    SourceRemoved { source: String },
}

#[derive(Default)]
struct ReplicaState {
    /// The Prometheus source it is read through; `None` for a replica scraped directly.
    source: Option<String>,
    history: ReplicaHistory,
    /// Seconds (on the stage's clock) of the last successful `/metrics` scrape.
    last_metrics_success: Option<f64>,
    /// Problems of the latest round, by endpoint.
    errors: BTreeMap<Endpoint, Problem>,
    /// Shared with the published report.
    report: Arc<ApiserverReport>,
    /// The latest flowcontrol objects this replica served.
    objects: Option<Arc<FlowcontrolObjects>>,
}

/// Requests held while no FlowSchemas are known to classify them (the first rounds): beyond, the oldest go.
const AUDIT_PENDING_MAX: usize = 100_000;
/// Slices of the window the audited requests are counted in: they leave it a tenth of it at a time.
const AUDIT_SLICES: u32 = 10;

/// The audited requests of one cluster.
struct ClusterAudit {
    window: apf::audit::Window,
    /// Requests that came before the cluster's objects, with when they came.
    pending: VecDeque<(f64, apf::parse::audit::AuditedRequest)>,
    /// Where its objects came from at the last classification.
    classified_on: Option<String>,
    /// The objects it had in force over time, each request classified on those of when it came in.
    objects: ObjectsInForce,
}

pub struct AnalysisStage {
    settings: watch::Receiver<Analysis>,
    started: Instant,
    replicas: BTreeMap<ReplicaKey, ReplicaState>,
    /// What each Prometheus source's last round said was wrong with it (shown as a row of its own).
    sources: BTreeMap<String, Option<Problem>>,
    report: watch::Sender<Arc<StatusReport>>,
    ready: watch::Sender<bool>,
    /// Who got the 429s, by cluster (`None`: events not tied to one).
    audit: BTreeMap<Option<String>, ClusterAudit>,
    /// Distinct users kept per slice (`audit.max_users`).
    audit_max_users: usize,
}

/// A replica scraped directly: no cluster.
fn direct(apiserver: String) -> ReplicaKey {
    ReplicaKey {
        cluster: None,
        apiserver,
    }
}

impl AnalysisStage {
    pub fn new(
        settings: watch::Receiver<Analysis>,
        report: watch::Sender<Arc<StatusReport>>,
        ready: watch::Sender<bool>,
    ) -> Self {
        Self {
            settings,
            started: Instant::now(),
            replicas: BTreeMap::new(),
            sources: BTreeMap::new(),
            report,
            ready,
            audit: BTreeMap::new(),
            audit_max_users: crate::audit::AuditConfig::default().max_users,
        }
    }

    /// Keeps at most `max_users` distinct audited users per slice of the window (`audit.max_users`).
    pub fn with_audit_max_users(mut self, max_users: usize) -> Self {
        self.audit_max_users = max_users.max(1);
        self
    }

    /// Takes updates until every sender of rounds is gone (the replica loops and the supervisor stopped); audited
    /// requests are counted as they come and shown at the next publication.
    pub async fn run(
        mut self,
        mut updates: mpsc::Receiver<Update>,
        mut audit: mpsc::Receiver<AuditBatch>,
    ) {
        let mut audit_open = true;
        loop {
            tokio::select! {
                update = updates.recv() => match update {
                    Some(update) => self.take(update),
                    None => break,
                },
                batch = audit.recv(), if audit_open => match batch {
                    Some(batch) => {
                        let now = self.seconds(Instant::now());
                        self.take_audit(batch, now);
                    }
                    None => audit_open = false,
                },
            }
        }
    }

    fn seconds(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.started).as_secs_f64()
    }

    fn take(&mut self, update: Update) {
        match update {
            Update::Removed { apiserver } => {
                self.replicas.remove(&direct(apiserver));
            }
            Update::Objects { apiserver, objects } => {
                let key = direct(apiserver);
                if let Some(state) = self.replicas.get_mut(&key) {
                    state.objects = Some(objects);
                    let now = self.seconds(Instant::now());
                    self.reanalyze(&key, now);
                }
                self.note_objects();
            }
            Update::Round {
                apiserver,
                round,
                objects,
                at,
                wall,
            } => {
                self.record(apiserver, *round, objects, at, wall);
                self.note_objects();
            }
            Update::Fleet {
                source,
                outcome,
                baseline_age_seconds,
                at,
                wall,
            } => {
                self.record_fleet(source, outcome, baseline_age_seconds, at, wall);
            }
            Update::SourceRemoved { source } => {
                self.sources.remove(&source);
                self.replicas
                    .retain(|_, r| r.source.as_deref() != Some(source.as_str()));
            }
        }
        self.publish();
    }

    fn record(
        &mut self,
        apiserver: String,
        mut round: ReplicaScrape,
        objects: Option<Arc<FlowcontrolObjects>>,
        at: Instant,
        wall: SystemTime,
    ) {
        let now = self.seconds(at);
        let key = direct(apiserver);
        let state = self.replicas.entry(key.clone()).or_default();
        if objects.is_some() {
            state.objects = objects.clone();
        }
        for r in &round.results {
            match &r.outcome {
                Ok(()) => {
                    state.errors.remove(&r.endpoint);
                }
                Err(e) => {
                    state.errors.insert(
                        r.endpoint,
                        Problem::Scrape {
                            endpoint: r.endpoint,
                            error: e.clone(),
                        },
                    );
                }
            }
        }
        if let Some(mut snapshot) = round.snapshot.take() {
            snapshot.attach_configs(objects.iter().flat_map(|o| &o.priority_levels));
            self.push(&key, snapshot, now, wall);
        }
        self.reanalyze(&key, now);
    }

    /// A Prometheus round: each replica's snapshot (after its baseline when it has no history yet); the replicas
    /// of the source it no longer holds go. When the source fails, its replicas keep their numbers for the window,
    /// then go: stale numbers are not shown as current, and the source's own row says why.
    fn record_fleet(
        &mut self,
        source: String,
        outcome: Result<Vec<FleetReplica>, Problem>,
        baseline_age_seconds: f64,
        at: Instant,
        wall: SystemTime,
    ) {
        let now = self.seconds(at);
        let window = self.settings.borrow().window_seconds;
        let of_source = |r: &ReplicaState| r.source.as_deref() == Some(source.as_str());
        match outcome {
            Ok(replicas) => {
                let held: BTreeSet<ReplicaKey> = replicas.iter().map(|r| r.key.clone()).collect();
                self.replicas
                    .retain(|key, r| !of_source(r) || held.contains(key));
                let problem = replicas.is_empty().then_some(Problem::NoReplicas);
                self.sources.insert(source.clone(), problem);
                for r in replicas {
                    let state = self.replicas.entry(r.key.clone()).or_default();
                    if state.source.as_ref().is_some_and(|s| *s != source) {
                        // Two sources holding one replica (an HA pair given as two URLs): the first one read keeps
                        // it, so its history is one series of points, not two interleaved.
                        continue;
                    }
                    state.source = Some(source.clone());
                    state.errors.clear();
                    if let (Some(baseline), true) = (r.baseline, state.history.is_empty()) {
                        let then = wall
                            .checked_sub(std::time::Duration::from_secs_f64(baseline_age_seconds))
                            .unwrap_or(wall);
                        self.push(&r.key, baseline, now - baseline_age_seconds, then);
                    }
                    self.push(&r.key, r.snapshot, now, wall);
                    self.reanalyze(&r.key, now);
                }
            }
            Err(problem) => {
                self.sources.insert(source.clone(), Some(problem));
                self.replicas.retain(|_, r| {
                    !of_source(r) || r.last_metrics_success.is_some_and(|t| now - t <= window)
                });
            }
        }
    }

    /// A snapshot of `/metrics` (scraped, or read from a Prometheus) joins the replica's history.
    fn push(&mut self, key: &ReplicaKey, snapshot: ReplicaSnapshot, now: f64, wall: SystemTime) {
        let Some(state) = self.replicas.get_mut(key) else {
            return;
        };
        if !snapshot.has_apf() {
            state
                .errors
                .insert(Endpoint::Metrics, Problem::NoApfMetrics);
        }
        state.history.push(Point {
            at: now,
            wall_time: humantime::format_rfc3339_seconds(wall).to_string(),
            snapshot: Arc::new(snapshot),
        });
        state.last_metrics_success = Some(now);
        self.ready
            .send_if_modified(|ready| !std::mem::replace(ready, true));
    }

    /// The replica's report from its history and errors as of `now`.
    fn reanalyze(&mut self, key: &ReplicaKey, now: f64) {
        let analysis = self.settings.borrow().clone();
        let Some(state) = self.replicas.get_mut(key) else {
            return;
        };
        state
            .history
            .prune(now, analysis.window_seconds, analysis.lookback_seconds);
        let stale = state
            .last_metrics_success
            .is_none_or(|t| now - t > analysis.window_seconds);
        let mut report = if stale {
            // Numbers older than the window would be presented as current: withhold them (honest over complete).
            ApiserverReport {
                apiserver: key.apiserver.clone(),
                ..Default::default()
            }
        } else {
            analysis.analyze_replica(&key.apiserver, &state.history, now)
        };
        report.cluster = key.cluster.clone();
        report.read_through = state.source.clone();
        if stale && state.last_metrics_success.is_some() {
            report.errors.push(Problem::Stale {
                window_seconds: analysis.window_seconds,
            });
        }
        report.errors.extend(state.errors.values().cloned());
        report.objects = state.objects.clone();
        state.report = Arc::new(report);
    }

    /// The flowcontrol objects that classify `cluster`'s requests: those of its first replica that served them (for
    /// events tied to no cluster, of any replica), and where they came from.
    fn objects_of(&self, cluster: &Option<String>) -> Option<(Arc<FlowcontrolObjects>, String)> {
        let of = |want: Option<&Option<String>>| {
            self.replicas.iter().find_map(|(key, r)| {
                let fits = want.is_none_or(|c| key.cluster == *c);
                Some((r.objects.clone().filter(|_| fits)?, r.report.display_name()))
            })
        };
        of(Some(cluster)).or_else(|| cluster.is_none().then(|| of(None)).flatten())
    }

    /// The objects each cluster's audited requests are classified on, from now on.
    fn note_objects(&mut self) {
        let wall = SystemTime::now();
        let current: Vec<(Option<String>, Arc<FlowcontrolObjects>)> = self
            .audit
            .keys()
            .filter_map(|c| Some((c.clone(), self.objects_of(c)?.0)))
            .collect();
        for (cluster, objects) in current {
            if let Some(audit) = self.audit.get_mut(&cluster) {
                audit.objects.note(&objects, wall);
            }
        }
    }

    fn take_audit(&mut self, batch: AuditBatch, now: f64) {
        let window = self.settings.borrow().window_seconds;
        let limits = apf::audit::Limits {
            max_users: self.audit_max_users,
            keep_waits: false,
        };
        let objects = self.objects_of(&batch.cluster);
        let entry = self
            .audit
            .entry(batch.cluster.clone())
            .or_insert_with(|| ClusterAudit {
                window: apf::audit::Window::new(
                    Duration::from_secs_f64(window),
                    AUDIT_SLICES,
                    limits,
                ),
                pending: VecDeque::new(),
                classified_on: None,
                objects: ObjectsInForce::default(),
            });
        entry
            .window
            .set_window(Duration::from_secs_f64(window), AUDIT_SLICES);
        let Some((objects, source)) = objects else {
            entry
                .pending
                .extend(batch.requests.into_iter().map(|r| (now, r)));
            while entry.pending.len() > AUDIT_PENDING_MAX {
                entry.pending.pop_front();
            }
            return;
        };
        entry.classified_on = Some(source);
        entry.objects.note(&objects, SystemTime::now());
        let in_force = &entry.objects;
        // Requests held for the objects are counted when they came, as long as that is inside the window.
        for (at, r) in std::mem::take(&mut entry.pending) {
            if at > now - window {
                let o = in_force.at(&r.received).unwrap_or(&objects);
                let _ = entry
                    .window
                    .at(at)
                    .classify(&r, &o.flow_schemas, &o.priority_levels);
            }
        }
        let ledger = entry.window.at(now);
        for r in &batch.requests {
            let o = in_force.at(&r.received).unwrap_or(&objects);
            // No FlowSchema matched and no catch-all: counted as unmatched, shown nowhere else.
            let _ = ledger.classify(r, &o.flow_schemas, &o.priority_levels);
        }
    }

    /// Who got the 429s, per cluster, as of `now`.
    fn audit_reports(&mut self, now: f64) -> Vec<AuditReport> {
        let waiting: Vec<Option<String>> = self
            .audit
            .iter()
            .filter(|(_, a)| !a.pending.is_empty())
            .map(|(c, _)| c.clone())
            .collect();
        for cluster in waiting {
            self.take_audit(
                AuditBatch {
                    cluster,
                    requests: Vec::new(),
                },
                now,
            );
        }
        let top = self.settings.borrow().top_flows;
        self.audit
            .iter_mut()
            .map(|(cluster, a)| {
                // The rates cover what the window's slices hold (the window and the part of the slice it begins
                // in), or the time since the start while it is shorter: no event came before it that was not counted.
                let seconds = a.window.span(now).min(now).max(1.0);
                let ledger = a.window.merged(now);
                let mut report = AuditReport::of(&ledger, seconds, top);
                report.cluster = cluster.clone();
                report.classified_on = a.classified_on.clone();
                report.pending_requests = a.pending.len() as u64;
                report
            })
            .collect()
    }

    fn publish(&mut self) {
        let audit = self.audit_reports(self.seconds(Instant::now()));
        // A Prometheus source that fails (or holds nothing) is a row of its own: one problem, one alert.
        let sources = self.sources.iter().filter_map(|(name, problem)| {
            Some(Arc::new(ApiserverReport {
                apiserver: name.clone(),
                errors: vec![problem.clone()?],
                ..Default::default()
            }))
        });
        let mut report = StatusReport {
            apiservers: self
                .replicas
                .values()
                .map(|r| r.report.clone())
                .chain(sources)
                .collect(),
            alerts: Vec::new(),
            config_findings: self.review(),
            audit,
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: None,
        };
        crate::analyze::advise(&mut report);
        self.report.send_replace(Arc::new(report));
    }

    /// The configuration review over the objects the first replica serves (every replica serves the same ones),
    /// at that replica's server concurrency, with the traffic every replica's window saw in `dump_requests`.
    /// `None` until objects were read.
    fn review(&self) -> Option<Vec<Finding>> {
        let (state, objects) = self
            .replicas
            .values()
            .find_map(|r| Some((r, r.objects.as_ref()?)))?;
        let latest = state.history.latest().map(|p| &p.snapshot);
        let version = latest
            .and_then(|s| s.minor())
            .map(|minor| KubeVersion::new(minor, 0));
        let served = latest.map(|s| s.nominal_limits()).unwrap_or_default();
        let server_concurrency = infer_server_concurrency(&objects.priority_levels, &served)
            .unwrap_or(DEFAULT_SERVER_CONCURRENCY);
        let traffic: BTreeSet<(String, String, String)> = self
            .replicas
            .values()
            .flat_map(|r| r.history.flow_users())
            .collect();
        let traffic: Vec<_> = traffic.into_iter().collect();
        Some(review(&ReviewInput {
            flow_schemas: &objects.flow_schemas,
            priority_levels: &objects.priority_levels,
            server_concurrency,
            traffic: &traffic,
            version,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(limit: f64, executing: f64, rejected: f64) -> ReplicaSnapshot {
        let text = format!(
            "apiserver_flowcontrol_current_limit_seats{{priority_level=\"workload-low\"}} {limit}\n\
             apiserver_flowcontrol_current_executing_seats{{priority_level=\"workload-low\",flow_schema=\"service-accounts\"}} {executing}\n\
             apiserver_flowcontrol_rejected_requests_total{{priority_level=\"workload-low\",flow_schema=\"service-accounts\",reason=\"queue-full\"}} {rejected}\n"
        );
        let mut builder = apf::model::SnapshotBuilder::new();
        apf::parse::exposition::parse_all(
            text.as_bytes(),
            apf::model::is_wanted_sample,
            &mut builder,
        );
        builder.finish()
    }

    fn key(cluster: &str, apiserver: &str) -> ReplicaKey {
        ReplicaKey {
            cluster: Some(cluster.into()),
            apiserver: apiserver.into(),
        }
    }

    fn stage() -> (AnalysisStage, watch::Receiver<Arc<StatusReport>>) {
        let (_settings_tx, settings) = watch::channel(Analysis {
            top_flows: 5,
            ..Analysis::default()
        });
        let (report, report_rx) = watch::channel(Arc::new(StatusReport::default()));
        let (ready, _) = watch::channel(false);
        (AnalysisStage::new(settings, report, ready), report_rx)
    }

    fn fleet(outcome: Result<Vec<FleetReplica>, Problem>, at: Instant) -> Update {
        Update::Fleet {
            source: "prom".into(),
            outcome,
            baseline_age_seconds: 60.0,
            at,
            wall: SystemTime::now(),
        }
    }

    #[test]
    fn a_fleet_round_has_rates_at_once_and_replicas_come_and_go_with_the_source() {
        let (mut stage, report) = stage();
        let t0 = stage.started + std::time::Duration::from_secs(100);
        // Same address in two clusters: two replicas. The baseline one window back gives the rate at once.
        stage.take(fleet(
            Ok(vec![
                FleetReplica {
                    key: key("a", "10.0.0.5:6443"),
                    baseline: Some(snapshot(100.0, 10.0, 0.0)),
                    snapshot: snapshot(100.0, 40.0, 120.0),
                },
                FleetReplica {
                    key: key("b", "10.0.0.5:6443"),
                    baseline: None,
                    snapshot: snapshot(50.0, 5.0, 0.0),
                },
            ]),
            t0,
        ));
        let r = report.borrow().clone();
        assert_eq!(r.apiservers.len(), 2);
        let a = &r.apiservers[0];
        assert_eq!(a.cluster.as_deref(), Some("a"));
        assert_eq!(a.read_through.as_deref(), Some("prom"));
        assert_eq!(a.levels[0].headroom_seats, Some(60.0));
        assert_eq!(
            a.levels[0]
                .rejected_per_second
                .as_ref()
                .map(|r| r["queue-full"]),
            Some(2.0)
        );
        // Without a baseline, no rate yet: absent, not zero.
        assert_eq!(r.apiservers[1].levels[0].rejected_per_second, None);

        // The source fails: one row of its own; the replicas keep their numbers for the window.
        let failure = Problem::Scrape {
            endpoint: Endpoint::Prometheus,
            error: crate::scrape::ScrapeError::Connect("refused".into()),
        };
        let t1 = t0 + std::time::Duration::from_secs(30);
        stage.take(fleet(Err(failure.clone()), t1));
        let r = report.borrow().clone();
        assert_eq!(r.apiservers.len(), 3);
        assert_eq!(r.apiservers[2].apiserver, "prom");
        assert_eq!(r.apiservers[2].errors, vec![failure.clone()]);
        // Past the window, stale numbers are not shown as current: the replicas go.
        stage.take(fleet(Err(failure), t0 + std::time::Duration::from_secs(61)));
        let r = report.borrow().clone();
        assert_eq!(r.apiservers.len(), 1, "{:?}", r.apiservers);

        // It answers again, holding only cluster b's replica; the source's row goes.
        stage.take(fleet(
            Ok(vec![FleetReplica {
                key: key("b", "10.0.0.5:6443"),
                baseline: None,
                snapshot: snapshot(50.0, 5.0, 0.0),
            }]),
            t0 + std::time::Duration::from_secs(70),
        ));
        let r = report.borrow().clone();
        assert_eq!(r.apiservers.len(), 1);
        assert_eq!(r.apiservers[0].cluster.as_deref(), Some("b"));
        // Another source holding the same replica does not take it over.
        stage.take(Update::Fleet {
            source: "prom-b".into(),
            outcome: Ok(vec![FleetReplica {
                key: key("b", "10.0.0.5:6443"),
                baseline: None,
                snapshot: snapshot(50.0, 45.0, 0.0),
            }]),
            baseline_age_seconds: 60.0,
            at: t0 + std::time::Duration::from_secs(70),
            wall: SystemTime::now(),
        });
        let r = report.borrow().clone();
        assert_eq!(r.apiservers[0].read_through.as_deref(), Some("prom"));
        assert_eq!(r.apiservers[0].levels[0].headroom_seats, Some(45.0));
        stage.take(Update::SourceRemoved {
            source: "prom-b".into(),
        });
        // Holding nothing is a problem of the source, said on its row.
        stage.take(fleet(Ok(vec![]), t0 + std::time::Duration::from_secs(71)));
        let r = report.borrow().clone();
        assert_eq!(r.apiservers.len(), 1);
        assert_eq!(r.apiservers[0].errors, vec![Problem::NoReplicas]);
        stage.take(Update::SourceRemoved {
            source: "prom".into(),
        });
        assert!(report.borrow().apiservers.is_empty());
    }
}
