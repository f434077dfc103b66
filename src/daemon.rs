//! The daemon's main job: one scrape loop per replica feeding the analysis, whose report `/metrics` serves.
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::analyze::{Analysis, ApiserverReport, Point, Problem, ReplicaHistory};
use crate::config::ScrapeConfig;
use crate::export::ExportState;
use crate::model::PriorityLevelConfig;
use crate::scrape::{self, Endpoint, EndpointState, ReplicaScrape, ScrapeError, ScrapePlan};
use crate::targets::Target;

/// Which endpoints the configuration asks for.
pub fn enabled_endpoints(scrape: &ScrapeConfig) -> Vec<Endpoint> {
    Endpoint::ALL
        .into_iter()
        .filter(|e| match e {
            Endpoint::Metrics => true,
            Endpoint::DumpPriorityLevels => scrape.debug_dumps && scrape.dump_priority_levels,
            Endpoint::DumpQueues => scrape.debug_dumps && scrape.dump_queues,
            Endpoint::DumpRequests => scrape.debug_dumps && scrape.dump_requests,
            Endpoint::PriorityLevelConfigurations => !scrape.objects_interval.0.is_zero(),
        })
        .collect()
}

#[derive(Default)]
struct ReplicaState {
    history: ReplicaHistory,
    /// Seconds (on the hub's clock) of the last successful `/metrics` scrape.
    last_metrics_success: Option<f64>,
    /// Problems of the latest round, by endpoint, for reports.
    errors: BTreeMap<Endpoint, Problem>,
}

/// Where every replica's rounds land: history, analysis, self-metrics, and the report that is served.
pub struct Hub {
    pub export: Arc<ExportState>,
    analysis: Analysis,
    started: Instant,
    replicas: Mutex<BTreeMap<String, ReplicaState>>,
}

impl Hub {
    pub fn new(export: Arc<ExportState>, analysis: Analysis) -> Self {
        Self {
            export,
            analysis,
            started: Instant::now(),
            replicas: Mutex::new(BTreeMap::new()),
        }
    }

    fn seconds(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.started).as_secs_f64()
    }

    /// Error counters exist at 0 for every target, endpoint and reason from start-up, so rules see them at once.
    pub fn register(&self, apiserver: &str, endpoints: &[Endpoint]) {
        let mut m = self
            .export
            .self_metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for e in endpoints {
            for reason in ScrapeError::REASONS {
                m.scrape_errors_total
                    .entry((apiserver.into(), e.label().into(), reason.into()))
                    .or_insert(0);
            }
            m.parse_errors_total
                .entry((apiserver.into(), e.label().into()))
                .or_insert(0);
            if *e != Endpoint::Metrics {
                m.endpoint_available
                    .insert((apiserver.into(), e.label().into()), 1);
            }
        }
        drop(m);
        self.replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(apiserver.to_string())
            .or_default();
    }

    /// Takes one round's results: updates self-metrics, the history and the served report.
    pub fn record(
        &self,
        apiserver: &str,
        mut round: ReplicaScrape,
        objects: Option<&[PriorityLevelConfig]>,
        unavailable: &[Endpoint],
    ) {
        let now = Instant::now();
        let now_s = self.seconds(now);
        let wall = SystemTime::now();
        let unix = wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        {
            let mut m = self
                .export
                .self_metrics
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for r in &round.results {
                let key = (apiserver.to_string(), r.endpoint.label().to_string());
                m.scrape_duration_seconds
                    .insert(key.clone(), r.duration.as_secs_f64());
                *m.parse_errors_total.entry(key.clone()).or_insert(0) += r.invalid;
                match &r.outcome {
                    Ok(()) => {
                        m.last_success_timestamp_seconds.insert(key.clone(), unix);
                    }
                    Err(e) => {
                        *m.scrape_errors_total
                            .entry((key.0.clone(), key.1.clone(), e.reason().into()))
                            .or_insert(0) += 1;
                    }
                }
                if r.endpoint != Endpoint::Metrics {
                    m.endpoint_available
                        .insert(key, u8::from(!unavailable.contains(&r.endpoint)));
                }
            }
            if let Some(v) = round
                .snapshot
                .as_ref()
                .and_then(|s| s.kubernetes_version.clone())
            {
                m.kubernetes_version.insert(apiserver.to_string(), v);
            }
        }

        let mut replicas = self.replicas.lock().unwrap_or_else(|p| p.into_inner());
        let state = replicas.entry(apiserver.to_string()).or_default();
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
            if let Some(objects) = objects {
                for plc in objects {
                    if let Some(level) = snapshot.levels.get_mut(&plc.name) {
                        level.config = Some(plc.clone());
                    }
                }
            }
            if !snapshot.has_apf() {
                state
                    .errors
                    .insert(Endpoint::Metrics, Problem::NoApfMetrics);
            }
            state.history.push(Point {
                at: now_s,
                wall_time: humantime::format_rfc3339_seconds(wall).to_string(),
                snapshot: Arc::new(snapshot),
            });
            state.last_metrics_success = Some(now_s);
            self.export.ready.store(true, Ordering::Relaxed);
        }
        state.history.prune(now_s, self.analysis.window_seconds);
        let report = self.report_for(apiserver, state, now_s);
        drop(replicas);

        let mut served = self
            .export
            .report
            .write()
            .unwrap_or_else(|p| p.into_inner());
        match served
            .apiservers
            .binary_search_by(|a| a.apiserver.as_str().cmp(apiserver))
        {
            Ok(i) => served.apiservers[i] = report,
            Err(i) => served.apiservers.insert(i, report),
        }
    }

    fn report_for(&self, apiserver: &str, state: &ReplicaState, now_s: f64) -> ApiserverReport {
        let stale = state
            .last_metrics_success
            .is_none_or(|t| now_s - t > self.analysis.window_seconds);
        let mut report = if stale {
            // Numbers older than the window would be presented as current: withhold them (honest over complete).
            ApiserverReport {
                apiserver: apiserver.to_string(),
                ..Default::default()
            }
        } else {
            self.analysis
                .analyze_replica(apiserver, &state.history, now_s)
        };
        if stale && state.last_metrics_success.is_some() {
            report.errors.push(Problem::Stale {
                window_seconds: self.analysis.window_seconds,
            });
        }
        report.errors.extend(state.errors.values().cloned());
        report
    }
}

/// Settings of one replica's loop.
#[derive(Debug, Clone)]
pub struct LoopSettings {
    pub interval: Duration,
    pub max_backoff: Duration,
    pub objects_interval: Duration,
    pub request_details: bool,
    pub max_body_bytes: u64,
    pub max_line_bytes: usize,
    pub endpoints: Vec<Endpoint>,
}

impl LoopSettings {
    pub fn from_config(scrape: &ScrapeConfig) -> Self {
        Self {
            interval: scrape.interval.0,
            max_backoff: scrape.max_backoff.0,
            objects_interval: scrape.objects_interval.0,
            request_details: scrape.request_details,
            max_body_bytes: scrape.max_body_bytes.0,
            max_line_bytes: usize::try_from(scrape.max_line_bytes.0).unwrap_or(usize::MAX),
            endpoints: enabled_endpoints(scrape),
        }
    }
}

/// Scrapes one replica every interval, forever: one request per endpoint per interval at most, never two rounds
/// at once (a round ends within the timeout, which is no longer than the interval).
pub async fn replica_loop(target: Target, settings: LoopSettings, hub: Arc<Hub>) {
    hub.register(&target.name, &settings.endpoints);
    let mut states: BTreeMap<Endpoint, EndpointState> = BTreeMap::new();
    let mut objects: Option<Vec<crate::model::PriorityLevelConfig>> = None;
    let mut next_objects = Instant::now();
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let due: Vec<Endpoint> = settings
            .endpoints
            .iter()
            .copied()
            .filter(|e| *e != Endpoint::PriorityLevelConfigurations || now >= next_objects)
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
        };
        let mut round = scrape::scrape_replica(&target, &plan).await;
        let finished = Instant::now();
        for r in &round.results {
            let state = states.entry(r.endpoint).or_default();
            match &r.outcome {
                Ok(()) => {
                    if state.consecutive_failures > 0 || state.unavailable {
                        tracing::info!(apiserver = %target.name, endpoint = r.endpoint.label(), "scraping works again");
                    }
                    state.record_success();
                    if r.endpoint == Endpoint::PriorityLevelConfigurations {
                        next_objects = finished + settings.objects_interval;
                    }
                }
                Err(e) => {
                    let verdict = state.record_failure(
                        r.endpoint,
                        e,
                        finished,
                        settings.interval,
                        settings.max_backoff,
                    );
                    match verdict {
                        scrape::Verdict::Unavailable { first: true } => tracing::warn!(
                            apiserver = %target.name,
                            endpoint = r.endpoint.label(),
                            "{}; continuing without it (tried again every {}s)",
                            Problem::Scrape { endpoint: r.endpoint, error: e.clone() },
                            scrape::UNAVAILABLE_RETRY.as_secs()
                        ),
                        scrape::Verdict::Unavailable { first: false } => {}
                        scrape::Verdict::RetryAfter(delay) => {
                            // Warn on the first failure and then rarely, so a dead replica does not flood the log.
                            if state.consecutive_failures == 1
                                || state.consecutive_failures % 20 == 0
                            {
                                tracing::warn!(
                                    apiserver = %target.name,
                                    endpoint = r.endpoint.label(),
                                    failures = state.consecutive_failures,
                                    next_try_in_s = delay.as_secs_f64(),
                                    "{}",
                                    Problem::Scrape { endpoint: r.endpoint, error: e.clone() }
                                );
                            }
                        }
                    }
                }
            }
        }
        if let Some(list) = round.objects.take() {
            objects = Some(list);
        }
        let unavailable: Vec<Endpoint> = states
            .iter()
            .filter(|(_, s)| s.unavailable)
            .map(|(e, _)| *e)
            .collect();
        hub.record(&target.name, round, objects.as_deref(), &unavailable);
    }
}

/// The alerting stage wired to the receivers: a round every second on the latest report.
pub struct AlertStage {
    pub alerting: Arc<Mutex<crate::alert::Alerting>>,
    /// Receivers fed by the grouping router (Slack, email, webhook, console), by name; `direct` ones are sent by
    /// the leader only.
    routed: BTreeMap<String, (crate::notify::Delivery, bool)>,
    /// Alertmanager receivers: every alert, on change and every `resend_interval`, from every replica.
    alertmanagers: Vec<AlertmanagerFeed>,
    leadership: crate::leader::Leadership,
    state_file: Option<std::path::PathBuf>,
    /// The state last written: a round that changed nothing writes nothing (no fsync every second).
    saved_state: Option<crate::alert::AlertState>,
}

struct AlertmanagerFeed {
    delivery: crate::notify::Delivery,
    name: String,
    resend: Duration,
    last_sent: Option<Instant>,
    last_set: Vec<(u64, bool)>,
}

impl AlertStage {
    /// Builds rules, router, receivers and restores the saved state; errors name the bad setting.
    pub fn build(
        config: &crate::config::Config,
        export: &ExportState,
        leadership: crate::leader::Leadership,
    ) -> anyhow::Result<Self> {
        use anyhow::Context;
        // 0.0.0.0 is where we listen, not an address a reader of a notification can open.
        let external_url = config.alerting.external_url.clone().unwrap_or_else(|| {
            if config.listen.ip().is_unspecified() {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
                format!("http://{host}:{}", config.listen.port())
            } else {
                // SocketAddr's own form brackets an IPv6 address, as a URL needs.
                format!("http://{}", config.listen)
            }
        });
        let rules = crate::alert::Rules::new(&config.rules, &config.alerting.runbook_base_url)
            .map_err(|e| anyhow::anyhow!("rules: {e}"))?;
        let routed_names: Vec<String> = config
            .receivers
            .iter()
            .filter(|r| r.alertmanager.is_none())
            .filter(|r| {
                config.route.receivers.is_empty() || config.route.receivers.contains(&r.name)
            })
            .map(|r| r.name.clone())
            .collect();
        let engine = crate::alert::Engine::new(format!("{}/", external_url.trim_end_matches('/')));
        let router = crate::alert::Router::new(&config.route, &routed_names, external_url.clone());
        let state = match &config.alerting.state_file {
            Some(path) => match crate::alert::AlertState::load(path) {
                Ok(state) => state,
                Err(e) => {
                    // A corrupt state file must not keep the monitor down: start empty, and say so.
                    tracing::warn!(error = %e, path = %path.display(), "alert state not restored; starting with none");
                    crate::alert::AlertState::default()
                }
            },
            None => crate::alert::AlertState::default(),
        };
        let alerting = crate::alert::Alerting::restored(rules, engine, router, state);
        let mut routed = BTreeMap::new();
        let mut alertmanagers = Vec::new();
        for r in &config.receivers {
            let receiver = crate::notify::build(r)
                .map_err(|e| anyhow::anyhow!("receivers: {}: {e}", r.name))?;
            let delivery =
                crate::notify::Delivery::spawn(receiver, &r.delivery, export.notifications.clone());
            if let Some(am) = &r.alertmanager {
                if config.route.receivers.is_empty() || config.route.receivers.contains(&r.name) {
                    alertmanagers.push(AlertmanagerFeed {
                        delivery,
                        name: r.name.clone(),
                        resend: am.resend_interval.0,
                        last_sent: None,
                        last_set: Vec::new(),
                    });
                }
            } else if routed_names.contains(&r.name) {
                routed.insert(r.name.clone(), (delivery, r.console.is_none()));
            }
        }
        if let Some(path) = &config.alerting.state_file {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| {
                    format!("alerting.state_file: cannot create {}", dir.display())
                })?;
            }
        }
        Ok(Self {
            alerting: Arc::new(Mutex::new(alerting)),
            routed,
            alertmanagers,
            leadership,
            state_file: config.alerting.state_file.clone(),
            saved_state: None,
        })
    }

    /// One round: rules on the latest report, life cycle, routing, delivery, status and state file.
    pub fn round(&mut self, export: &ExportState, now: SystemTime) {
        let report = export.report();
        let (notifications, alerts, pending, state, statuses) = {
            let mut a = self.alerting.lock().unwrap_or_else(|p| p.into_inner());
            let notifications = a.round(now, &report);
            let statuses = crate::alert::rules::level_statuses(&a.last_candidates);
            let alerts = a.alerts();
            let pending: Vec<(crate::alert::LabelSet, SystemTime)> = a
                .engine
                .pending()
                .into_iter()
                .map(|(l, t)| (l.clone(), t))
                .collect();
            (
                notifications,
                alerts,
                pending,
                self.state_file.as_ref().map(|_| a.state()),
                statuses,
            )
        };
        let leader = self.leadership.is_leader();
        for n in notifications {
            match self.routed.get(&n.receiver) {
                Some((delivery, direct)) => {
                    if !*direct || leader {
                        delivery.enqueue(n);
                    }
                }
                None => {
                    tracing::debug!(receiver = %n.receiver, "notification for an unknown receiver")
                }
            }
        }
        let all: Vec<crate::alert::Alert> = alerts.iter().map(|(a, _)| a.clone()).collect();
        let set: Vec<(u64, bool)> = all
            .iter()
            .map(|a| (a.fingerprint(), a.is_resolved()))
            .collect();
        let instant = Instant::now();
        for am in &mut self.alertmanagers {
            let due = am
                .last_sent
                .is_none_or(|t| instant.duration_since(t) >= am.resend);
            // While Alertmanager is down, one snapshot waiting is enough: a backlog of old ones would be replayed in
            // order before the current one once it is back.
            let backlog = am.delivery.queued() > 0;
            if !all.is_empty() && !backlog && (due || am.last_set != set) {
                am.delivery.enqueue(crate::notify::Notification {
                    receiver: am.name.clone(),
                    group_key: "{}".into(),
                    group_labels: Default::default(),
                    common_labels: Default::default(),
                    common_annotations: Default::default(),
                    alerts: all.clone(),
                    external_url: String::new(),
                });
                am.last_sent = Some(instant);
                am.last_set = set.clone();
            }
        }
        let rfc = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
        let mut reports: Vec<crate::analyze::AlertReport> = pending
            .into_iter()
            .map(|(labels, since)| crate::analyze::AlertReport {
                labels,
                annotations: Default::default(),
                state: "pending".into(),
                active_since: Some(rfc(since)),
            })
            .collect();
        for (a, muted) in alerts {
            let state = match (a.is_resolved(), muted) {
                (true, _) => "resolved",
                (false, Some(why)) => why,
                (false, None) => "firing",
            };
            reports.push(crate::analyze::AlertReport {
                labels: a.labels,
                annotations: a.annotations,
                state: state.into(),
                active_since: Some(rfc(a.starts_at)),
            });
        }
        let mut served = export.report.write().unwrap_or_else(|p| p.into_inner());
        served.alerts = reports;
        for a in &mut served.apiservers {
            for l in &mut a.levels {
                l.status = statuses
                    .get(&(a.apiserver.clone(), l.priority_level.clone()))
                    .copied()
                    .unwrap_or_default();
            }
        }
        drop(served);
        if let (Some(path), Some(state)) = (&self.state_file, state) {
            if self.saved_state.as_ref() != Some(&state) {
                match state.save(path) {
                    Ok(()) => self.saved_state = Some(state),
                    Err(e) => {
                        tracing::warn!(error = %e, "alert state not saved (tried again next round)")
                    }
                }
            }
        }
    }
}

/// Runs alert rounds every second, forever.
pub async fn alert_loop(mut stage: AlertStage, export: Arc<ExportState>) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        stage.round(&export, SystemTime::now());
    }
}
