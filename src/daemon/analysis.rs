//! The analysis stage: one task owning every replica's history. Rounds come in from the replica loops (and the
//! supervisor says when a replica comes or goes); each one re-analyses that replica and publishes the whole report
//! on a watch channel, which export and alerting read.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::analyze::review::{review, Finding, ReviewInput};
use crate::analyze::{Analysis, ApiserverReport, Point, Problem, ReplicaHistory, StatusReport};
use crate::apf::plan::{infer_server_concurrency, DEFAULT_SERVER_CONCURRENCY};
use crate::apf::KubeVersion;
use crate::model::FlowcontrolObjects;
use crate::scrape::{Endpoint, ReplicaScrape};

/// What the replica loops and the supervisor tell the analysis.
pub enum Update {
    /// One round of a replica: what was fetched, and the latest flowcontrol objects.
    Round {
        apiserver: String,
        round: Box<ReplicaScrape>,
        objects: Option<Arc<FlowcontrolObjects>>,
        at: Instant,
        wall: SystemTime,
    },
    /// The replica is no longer a target: its history and its part of the report go.
    Removed { apiserver: String },
}

#[derive(Default)]
struct ReplicaState {
    history: ReplicaHistory,
    /// Seconds (on the stage's clock) of the last successful `/metrics` scrape.
    last_metrics_success: Option<f64>,
    /// Problems of the latest round, by endpoint.
    errors: BTreeMap<Endpoint, Problem>,
    report: ApiserverReport,
    /// The latest flowcontrol objects this replica served.
    objects: Option<Arc<FlowcontrolObjects>>,
}

pub struct AnalysisStage {
    settings: watch::Receiver<Analysis>,
    started: Instant,
    replicas: BTreeMap<String, ReplicaState>,
    report: watch::Sender<Arc<StatusReport>>,
    ready: watch::Sender<bool>,
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
            report,
            ready,
        }
    }

    /// Takes updates until every sender is gone (the replica loops and the supervisor stopped).
    pub async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        while let Some(update) = updates.recv().await {
            self.take(update);
        }
    }

    fn seconds(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.started).as_secs_f64()
    }

    fn take(&mut self, update: Update) {
        match update {
            Update::Removed { apiserver } => {
                self.replicas.remove(&apiserver);
            }
            Update::Round {
                apiserver,
                round,
                objects,
                at,
                wall,
            } => self.record(apiserver, *round, objects, at, wall),
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
        let analysis = self.settings.borrow().clone();
        let state = self.replicas.entry(apiserver.clone()).or_default();
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
        state.history.prune(now, analysis.window_seconds);
        let stale = state
            .last_metrics_success
            .is_none_or(|t| now - t > analysis.window_seconds);
        let mut report = if stale {
            // Numbers older than the window would be presented as current: withhold them (honest over complete).
            ApiserverReport {
                apiserver: apiserver.clone(),
                ..Default::default()
            }
        } else {
            analysis.analyze_replica(&apiserver, &state.history, now)
        };
        if stale && state.last_metrics_success.is_some() {
            report.errors.push(Problem::Stale {
                window_seconds: analysis.window_seconds,
            });
        }
        report.errors.extend(state.errors.values().cloned());
        report.objects = state.objects.clone();
        state.report = report;
    }

    fn publish(&self) {
        let report = StatusReport {
            apiservers: self.replicas.values().map(|r| r.report.clone()).collect(),
            alerts: Vec::new(),
            config_findings: self.review(),
        };
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
            .flat_map(|r| r.history.iter())
            .flat_map(|p| p.snapshot.flow_users())
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
