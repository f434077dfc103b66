//! The alerting stage: one task that owns the alert state (rules, life cycle, groups, silences) and the receivers'
//! deliveries. It runs a round on every new report and every second (group timers), publishes its view for export,
//! answers the silences API, takes a reloaded setup without losing state, and at the stop sends what every group
//! owes, delivers what is queued until the deadline and saves the state file.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::setup::{AlertSetup, ReceiverSetup};
use super::{LeaderState, Leadership};
use crate::alert::notification_log::{self, NotificationLog};
use crate::alert::{AlertState, AlertView, Alerting, Engine, Notification, Router, TokioClock};
use crate::analyze::predict::{attach, Predictions};
use crate::analyze::{NotifierReport, StatusReport};
use crate::export::SilenceRequest;
use crate::notify::{Delivery, NotifyMetrics, ReceiverConfig};

/// What the daemon asks of the alerting stage.
pub enum Command {
    /// A reloaded config: new rules, route and receivers; alert state and silences are kept.
    Reconfigure(Box<AlertSetup>),
    /// Send what is owed, deliver until `deadline`, save the state, and end.
    Stop {
        deadline: Instant,
        done: oneshot::Sender<()>,
    },
}

/// A receiver fed by the grouping router (Slack, email, webhook, console).
struct Routed {
    config: ReceiverConfig,
    delivery: Delivery,
    /// Sent by the Lease holder only (every kind but the console, which is this process' own log).
    leader_only: bool,
}

/// An Alertmanager receiver: every alert, on change and every `resend_interval`, from every replica of
/// apf-monitor (Alertmanager de-duplicates).
struct AlertmanagerFeed {
    config: ReceiverConfig,
    delivery: Delivery,
    resend: Duration,
    last_sent: Option<Instant>,
    last_set: Vec<(u64, bool)>,
}

pub struct AlertStage {
    alerting: Alerting,
    clock: TokioClock,
    routed: BTreeMap<String, Routed>,
    feeds: Vec<AlertmanagerFeed>,
    /// Deliveries of receivers a reload removed or changed, finishing their queues.
    closing: Vec<JoinHandle<Vec<Notification>>>,
    leadership: Leadership,
    /// The term of the Lease whose log this replica took over last (0: none yet).
    term: u64,
    /// What the direct receivers confirmed (the holder's notification log), recorded onto the log handed over.
    delivered: NotificationLog,
    /// `delivered` changed since it was last handed to the Lease keeper.
    delivered_changed: bool,
    /// How long an entry of the log is kept without being sent again: two repeat intervals.
    log_keep: Duration,
    confirmed_tx: mpsc::UnboundedSender<Notification>,
    confirmed: mpsc::UnboundedReceiver<Notification>,
    metrics: NotifyMetrics,
    state_file: Option<std::path::PathBuf>,
    /// The state last written: a round that changed nothing writes nothing (no fsync every second).
    saved_state: Option<AlertState>,
    view: watch::Sender<Arc<AlertView>>,
}

/// The names the route sends to: the configured list, or every receiver when it is empty.
fn routed_by(route: &crate::alert::RouteConfig, name: &str) -> bool {
    route.receivers.is_empty() || route.receivers.iter().any(|r| r == name)
}

fn router_of(setup: &AlertSetup) -> Router {
    let names: Vec<String> = setup
        .receivers
        .iter()
        .filter(|r| r.config.alertmanager.is_none() && routed_by(&setup.route, &r.config.name))
        .map(|r| r.config.name.clone())
        .collect();
    Router::new(&setup.route, &names, setup.external_url.clone())
}

impl AlertStage {
    /// Builds the stage and restores the saved state; needs a tokio runtime (the deliveries start here).
    pub fn new(
        setup: AlertSetup,
        leadership: Leadership,
        metrics: NotifyMetrics,
        clock: TokioClock,
        view: watch::Sender<Arc<AlertView>>,
    ) -> Self {
        let state = match &setup.state_file {
            Some(path) => match AlertState::load(path) {
                Ok(state) => state,
                Err(e) => {
                    // A corrupt state file must not keep the monitor down: start empty, and say so.
                    tracing::warn!(error = %e, path = %path.display(), "alert state not restored; starting with none");
                    AlertState::default()
                }
            },
            None => AlertState::default(),
        };
        let engine = Engine::new(format!("{}/", setup.external_url.trim_end_matches('/')));
        let alerting = Alerting::restored(setup.rules.clone(), engine, router_of(&setup), state)
            .with_warm_up(setup.warm_up);
        let (confirmed_tx, confirmed) = mpsc::unbounded_channel();
        let mut stage = AlertStage {
            alerting,
            clock,
            routed: BTreeMap::new(),
            feeds: Vec::new(),
            closing: Vec::new(),
            leadership,
            term: 0,
            delivered: NotificationLog::default(),
            delivered_changed: false,
            log_keep: setup.route.repeat_interval.0 * 2,
            confirmed_tx,
            confirmed,
            metrics,
            state_file: setup.state_file.clone(),
            saved_state: None,
            view,
        };
        stage.set_receivers(&setup);
        stage
    }

    /// Keeps the delivery of every receiver whose config is unchanged (its queue and retries go on), starts the new
    /// ones, and lets the removed or changed ones finish their queues.
    fn set_receivers(&mut self, setup: &AlertSetup) {
        let mut old_routed = std::mem::take(&mut self.routed);
        let mut old_feeds = std::mem::take(&mut self.feeds);
        for ReceiverSetup { config, receiver } in &setup.receivers {
            if !routed_by(&setup.route, &config.name) {
                continue;
            }
            if let Some(am) = &config.alertmanager {
                let kept = old_feeds
                    .iter()
                    .position(|f| f.config == *config)
                    .map(|i| old_feeds.swap_remove(i));
                let feed = kept.unwrap_or_else(|| AlertmanagerFeed {
                    config: config.clone(),
                    delivery: Delivery::spawn(
                        receiver.clone(),
                        &config.delivery,
                        self.metrics.clone(),
                    ),
                    resend: am.resend_interval.0,
                    last_sent: None,
                    last_set: Vec::new(),
                });
                self.feeds.push(feed);
                continue;
            }
            let routed = match old_routed.remove(&config.name) {
                Some(r) if r.config == *config => r,
                other => {
                    if let Some(r) = other {
                        self.closing.push(r.delivery.close());
                    }
                    let leader_only = config.console.is_none();
                    Routed {
                        config: config.clone(),
                        delivery: Delivery::spawn_confirming(
                            receiver.clone(),
                            &config.delivery,
                            self.metrics.clone(),
                            leader_only.then(|| self.confirmed_tx.clone()),
                        ),
                        leader_only,
                    }
                }
            };
            self.routed.insert(config.name.clone(), routed);
        }
        for (_, r) in old_routed {
            self.closing.push(r.delivery.close());
        }
        for f in old_feeds {
            self.closing.push(f.delivery.close());
        }
        self.closing.retain(|task| !task.is_finished());
    }

    fn reconfigure(&mut self, setup: AlertSetup) {
        self.alerting
            .reconfigure(setup.rules.clone(), router_of(&setup));
        self.state_file = setup.state_file.clone();
        self.saved_state = None;
        self.log_keep = setup.route.repeat_interval.0 * 2;
        self.set_receivers(&setup);
    }

    fn leader_only(&self) -> BTreeSet<String> {
        self.routed
            .iter()
            .filter(|(_, r)| r.leader_only)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Direct receivers are the Lease holder's: a follower routes nothing to them (and books nothing as sent). A
    /// replica that just took the Lease first takes over what the previous holder's receivers confirmed.
    fn follow_leadership(&mut self) -> LeaderState {
        let state = self.leadership.state();
        if state.leading && state.term != self.term {
            self.term = state.term;
            self.delivered = (*state.handed_over).clone();
            let now = self.clock.now();
            self.alerting
                .take_over(&self.delivered, &self.leader_only(), now);
            self.delivered_changed = true;
        }
        let paused = if state.leading {
            BTreeSet::new()
        } else {
            self.leader_only()
        };
        self.alerting.router.pause(paused);
        state
    }

    /// Who sends the direct notifications, for the status page and `/metrics`.
    fn notifier(&self, state: &LeaderState) -> NotifierReport {
        let election = self.leadership.election();
        NotifierReport {
            leading: state.leading,
            lease: election.map(|e| e.lease.clone()),
            identity: election.map(|e| e.identity.clone()),
            leader: state.holder.clone(),
            leader_since: state
                .since
                .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            log_entries: state.log_entries,
            log_bytes: state.log_bytes,
        }
    }

    /// A notification its receiver accepted: into the log (direct receivers only send it the confirmations).
    fn confirm(&mut self, n: Notification) {
        // Without an election there is no Lease to keep the log in, and no one to hand it to.
        if self.leadership.election().is_none() {
            return;
        }
        let now = self.clock.now();
        self.delivered.record(&n, now);
        self.delivered_changed = true;
    }

    /// The log, expired and bounded, to the Lease keeper while this replica holds the Lease.
    fn hand_log(&mut self) {
        if !self.delivered_changed || self.term == 0 || !self.leadership.is_leader() {
            return;
        }
        self.delivered.expire(self.clock.now(), self.log_keep);
        let dropped = self.delivered.bound(notification_log::MAX_BYTES);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "the notification log outgrew its bound: its oldest entries are dropped (after a failover, their \
                 alerts are announced again)"
            );
        }
        self.leadership.record(self.term, self.delivered.clone());
        self.delivered_changed = false;
    }

    /// One round: rules on the report (`None`: the last report's conditions again, for the timers), life cycle,
    /// routing, delivery, view and state file.
    pub fn round(&mut self, report: Option<&StatusReport>) {
        let leader = self.follow_leadership();
        let now = self.clock.now();
        let notifications = match report {
            Some(report) => self.alerting.round(now, report),
            None => self.alerting.tick(now),
        };
        self.send(notifications);
        self.feed_alertmanagers();
        self.hand_log();
        let mut view = self.alerting.view();
        view.notifier = Some(self.notifier(&leader));
        self.view.send_replace(Arc::new(view));
        self.save();
    }

    fn send(&mut self, notifications: Vec<Notification>) {
        for n in notifications {
            match self.routed.get(&n.receiver) {
                Some(r) => r.delivery.enqueue(n),
                None => {
                    tracing::debug!(receiver = %n.receiver, "notification for an unknown receiver")
                }
            }
        }
    }

    fn feed_alertmanagers(&mut self) {
        if self.feeds.is_empty() {
            return;
        }
        let all: Vec<crate::alert::Alert> = self.alerting.engine.alerts();
        let set: Vec<(u64, bool)> = all
            .iter()
            .map(|a| (a.fingerprint(), a.is_resolved()))
            .collect();
        let instant = Instant::now();
        for am in &mut self.feeds {
            let due = am
                .last_sent
                .is_none_or(|t| instant.duration_since(t) >= am.resend);
            // While Alertmanager is down, one snapshot waiting is enough: a backlog of old ones would be replayed in
            // order before the current one once it is back.
            let backlog = am.delivery.queued() > 0;
            if !all.is_empty() && !backlog && (due || am.last_set != set) {
                am.delivery.enqueue(Notification {
                    receiver: am.config.name.clone(),
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
    }

    fn save(&mut self) {
        let Some(path) = &self.state_file else {
            return;
        };
        let state = self.alerting.state();
        if self.saved_state.as_ref() == Some(&state) {
            return;
        }
        match state.save(path) {
            Ok(()) => self.saved_state = Some(state),
            Err(e) => tracing::warn!(error = %e, "alert state not saved (tried again next round)"),
        }
    }

    fn silence(&mut self, request: SilenceRequest) {
        let now = self.clock.now();
        let silences = &mut self.alerting.silences;
        // A requester that gave up waiting is no reason to stop.
        match request {
            SilenceRequest::List(reply) => {
                let _ = reply.send(silences.list(now));
            }
            SilenceRequest::Get(id, reply) => {
                let _ = reply.send(silences.get(&id, now));
            }
            SilenceRequest::Add(input, reply) => {
                let _ = reply.send(silences.add(input, now));
            }
            SilenceRequest::Expire(id, reply) => {
                let _ = reply.send(silences.expire(&id, now));
            }
        }
        self.save();
    }

    /// The stop: every group's owed notification now, every delivery drained until the deadline, what could not be
    /// delivered owed again in the state file (so a restart sends it), the state saved.
    pub async fn stop(mut self, deadline: Instant) {
        self.follow_leadership();
        let now = self.clock.now();
        let owed = self.alerting.flush(now);
        self.send(owed);
        self.feed_alertmanagers();
        let mut drains = Vec::new();
        for (_, r) in std::mem::take(&mut self.routed) {
            drains.push(tokio::spawn(r.delivery.drain(deadline)));
        }
        for f in std::mem::take(&mut self.feeds) {
            // What Alertmanager misses is sent again after the restart (firing alerts are re-sent anyway).
            drains.push(tokio::spawn(async move {
                let _ = f.delivery.drain(deadline).await;
                Vec::new()
            }));
        }
        // Receivers a reload removed: their queues get the same deadline, and what is left of them is not owed to
        // anyone any more.
        for task in std::mem::take(&mut self.closing) {
            drains.push(tokio::spawn(async move {
                let abort = task.abort_handle();
                if tokio::time::timeout_at(deadline, task).await.is_err() {
                    abort.abort();
                }
                Vec::new()
            }));
        }
        let mut undelivered = 0;
        for drain in drains {
            if let Ok(left) = drain.await {
                for n in &left {
                    self.alerting.undo(n, now);
                }
                undelivered += left.len();
            }
        }
        // Every delivery has ended: what they confirmed goes to the Lease before it is released.
        while let Ok(n) = self.confirmed.try_recv() {
            self.confirm(n);
        }
        self.hand_log();
        self.saved_state = None;
        self.save();
        if undelivered > 0 {
            tracing::warn!(
                undelivered,
                "stopped with notifications undelivered: they are in the state file and go out after the restart"
            );
        }
    }

    /// Rounds on every new report and every second, until [`Command::Stop`] (or until every sender is gone).
    pub async fn run(
        mut self,
        mut report: watch::Receiver<Arc<StatusReport>>,
        predictions: watch::Receiver<Arc<Predictions>>,
        mut commands: mpsc::Receiver<Command>,
        mut silences: mpsc::Receiver<SilenceRequest>,
    ) {
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The analysis ends before the stop (its replica loops stopped first): rounds go on without new reports.
        let mut report_open = true;
        loop {
            tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(Command::Reconfigure(setup)) => self.reconfigure(*setup),
                    Some(Command::Stop { deadline, done }) => {
                        self.stop(deadline).await;
                        let _ = done.send(());
                        return;
                    }
                    None => return,
                },
                Some(request) = silences.recv() => self.silence(request),
                Some(n) = self.confirmed.recv() => {
                    // To the Lease at once: the window in which a holder killed would have its last notification
                    // sent again is the write's, not a round's.
                    self.confirm(n);
                    self.hand_log();
                }
                changed = report.changed(), if report_open => {
                    if changed.is_err() {
                        report_open = false;
                        continue;
                    }
                    let latest = Arc::clone(&report.borrow_and_update());
                    // Each remediation ends with the latest prediction made for its change.
                    let latest = attach(&latest, &predictions.borrow());
                    self.round(Some(&latest));
                }
                // The group timers and `for`: a new report, if one came meanwhile, is the branch above's.
                _ = ticker.tick() => self.round(None),
            }
        }
    }
}
