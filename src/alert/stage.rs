//! One alerting round per report: rules → life cycle → routing, pure and on a clock given to it. The task that runs
//! rounds, owns the receivers and answers the silences API is `daemon/alerting.rs`.
//!
//! Everything here takes `now` as an argument, so tests drive it with a fake clock; [`TokioClock`] maps tokio's
//! `Instant` onto wall time from a fixed base, so paused tokio time (`tokio::time::advance`) moves alert times too.
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::engine::Engine;
use super::notification_log::NotificationLog;
use super::route::Router;
use super::rules::{self, Candidate, Rules};
use super::silence::Silences;
use super::state::AlertState;
use super::{Alert, LabelSet, Notification};
use crate::analyze::{AlertReport, LevelStatus, NotifierReport, StatusReport};
use apf::model::ReplicaKey;

/// The whole alerting stage of one apf-monitor.
#[derive(Debug, Clone)]
pub struct Alerting {
    pub rules: Rules,
    pub engine: Engine,
    pub router: Router,
    pub silences: Silences,
    /// The conditions that held in the last round (pending and firing alike): the levels' status.
    last_candidates: Vec<Candidate>,
    /// The replicas of the last report: the alerts of one that is gone are resolved at once.
    apiservers: BTreeSet<ReplicaKey>,
    /// How long after its first round the alerts of a replica not read yet are held (see [`Engine::evaluate`]):
    /// the analysis window.
    warm_up: Duration,
    first_round: Option<SystemTime>,
    /// The replicas the last report had numbers of, kept during the warm-up only.
    read: BTreeSet<ReplicaKey>,
}

/// What the alerting stage publishes for the status page, `/api/v1/status` and `apf_alert_firing`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertView {
    /// Pending, firing (or muted) and recently resolved alerts.
    pub alerts: Vec<AlertReport>,
    /// Each level's status by (replica, `priority_level`): the worst severity among the rules holding on it.
    pub statuses: BTreeMap<(ReplicaKey, String), LevelStatus>,
    /// Who sends the direct notifications (set by the daemon's alerting task).
    pub notifier: Option<NotifierReport>,
}

impl AlertView {
    /// Puts the alerts and the levels' statuses into a report of the analysis.
    pub fn apply(&self, report: &mut StatusReport) {
        report.alerts = self.alerts.clone();
        report.notifier = self.notifier.clone();
        for a in &mut report.apiservers {
            let key = a.key();
            let statuses: Vec<LevelStatus> = a
                .levels
                .iter()
                .map(|l| {
                    self.statuses
                        .get(&(key.clone(), l.priority_level.clone()))
                        .copied()
                        .unwrap_or_default()
                })
                .collect();
            // A report is shared with the analysis: copied only where a level's status changes.
            if a.levels.iter().zip(&statuses).any(|(l, s)| l.status != *s) {
                let a = std::sync::Arc::make_mut(a);
                for (l, s) in a.levels.iter_mut().zip(statuses) {
                    l.status = s;
                }
            }
        }
    }
}

impl Alerting {
    pub fn new(rules: Rules, engine: Engine, router: Router, silences: Silences) -> Self {
        Self {
            rules,
            engine,
            router,
            silences,
            last_candidates: Vec::new(),
            apiservers: BTreeSet::new(),
            warm_up: Duration::ZERO,
            first_round: None,
            read: BTreeSet::new(),
        }
    }

    /// Holds the alerts of a replica not read yet during the first `warm_up` of rounds: a restarted process, or
    /// one that just took the Lease over cold, has not read every replica yet.
    pub fn with_warm_up(mut self, warm_up: Duration) -> Self {
        self.warm_up = warm_up;
        self
    }

    /// This replica took the Lease: the previous holder's log says what `receivers` were delivered (see
    /// [`Router::take_over`] and [`Engine::adopt`]).
    pub fn take_over(
        &mut self,
        log: &NotificationLog,
        receivers: &BTreeSet<String>,
        now: SystemTime,
    ) {
        let carried = log
            .groups
            .values()
            .flat_map(|g| g.receivers.iter())
            .filter(|(r, _)| receivers.contains(*r))
            .flat_map(|(_, d)| &d.firing);
        self.engine.adopt(carried, now);
        self.router.take_over(log, receivers, now);
    }

    /// Builds from the config parts and the saved state (`AlertState::default()` when there is none).
    pub fn restored(rules: Rules, engine: Engine, router: Router, state: AlertState) -> Self {
        let (engine, router, silences) = state.restore(engine, router);
        Self::new(rules, engine, router, silences)
    }

    /// New rules and route (a reload): alert states, what each receiver was told and silences are kept.
    pub fn reconfigure(&mut self, rules: Rules, router: Router) {
        self.rules = rules;
        let groups = self.router.groups().clone();
        self.router = router.with_groups(groups);
    }

    /// Evaluates the rules on the report, advances every alert's life cycle, and returns the notifications due.
    pub fn round(&mut self, now: SystemTime, report: &StatusReport) -> Vec<Notification> {
        let present: BTreeSet<ReplicaKey> = report.apiservers.iter().map(|a| a.key()).collect();
        // A replica that left (a reload, discovery, a Prometheus no longer holding it) has nothing left to alert
        // about: resolved now, not after keep_firing_for, and its resolution goes out like any other. A replica
        // without a cluster matches whatever `cluster` a rule's config labels its alerts with.
        for gone in self.apiservers.difference(&present) {
            self.engine.resolve_where(now, |labels| {
                labels.get("apiserver") == Some(&gone.apiserver)
                    && gone
                        .cluster
                        .as_ref()
                        .is_none_or(|c| labels.get("cluster") == Some(c))
            });
        }
        self.apiservers = present;
        let engine = &self.engine;
        let active_on = engine.active_apiservers();
        let candidates = self.rules.evaluate_with(
            report,
            |labels| engine.is_active(labels),
            |apiserver| active_on.contains(apiserver),
        );
        self.last_candidates = candidates.clone();
        // Since the start, a replica not read yet says nothing of its alerts (restored from the state file, or
        // taken over from the previous Lease holder): they are held until it is, or until the warm-up is over.
        self.read = if self.warming(now) {
            report
                .apiservers
                .iter()
                .filter(|a| !a.levels.is_empty())
                .map(|a| a.key())
                .collect()
        } else {
            BTreeSet::new()
        };
        self.advance(now, candidates)
    }

    /// A round without a new report, for the group timers and the alerts' `for` and `keep_firing_for`: the
    /// conditions are the last report's, so the rules are not evaluated again (they would find the same).
    pub fn tick(&mut self, now: SystemTime) -> Vec<Notification> {
        let candidates = self.last_candidates.clone();
        self.advance(now, candidates)
    }

    /// Within the warm-up that follows the first round.
    fn warming(&mut self, now: SystemTime) -> bool {
        let first = *self.first_round.get_or_insert(now);
        now.duration_since(first).unwrap_or_default() < self.warm_up
    }

    /// The alerts' life cycle on these conditions, then the notifications due.
    fn advance(&mut self, now: SystemTime, candidates: Vec<Candidate>) -> Vec<Notification> {
        let warming = self.warming(now);
        let read = &self.read;
        let unread = |labels: &LabelSet| {
            warming
                && labels.get("apiserver").is_some_and(|apiserver| {
                    !read.contains(&ReplicaKey {
                        cluster: labels.get("cluster").cloned(),
                        apiserver: apiserver.clone(),
                    })
                })
        };
        let alerts = self.engine.evaluate(now, candidates, unread);
        self.silences.gc(now);
        self.router.tick(now, &alerts, &self.silences)
    }

    /// What the groups owe, now, whatever their timers say (shutdown: what is owed goes out before the exit; see
    /// [`Router::flush_owed`]).
    pub fn flush(&mut self, now: SystemTime) -> Vec<Notification> {
        let alerts = self.engine.alerts();
        self.router.flush_owed(now, &alerts, &self.silences)
    }

    /// A notification that was never delivered: its receiver is owed it again (see [`Router::undo`]).
    pub fn undo(&mut self, n: &Notification, now: SystemTime) {
        self.router.undo(n, now);
    }

    /// Firing and recently resolved alerts, with why each is muted (`inhibited`, `silenced`), for status pages.
    pub fn alerts(&self) -> Vec<(Alert, Option<&'static str>)> {
        self.engine
            .alerts()
            .into_iter()
            .map(|a| {
                let muted = if a.is_resolved() {
                    None
                } else {
                    self.router.muted(&a)
                };
                (a, muted)
            })
            .collect()
    }

    /// What the status page and `/api/v1/status` show of alerting now.
    pub fn view(&self) -> AlertView {
        let rfc = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
        let mut alerts: Vec<AlertReport> = self
            .engine
            .pending()
            .into_iter()
            .map(|(t, since)| AlertReport {
                labels: t.labels.clone(),
                annotations: t.annotations.clone(),
                state: "pending".into(),
                active_since: Some(rfc(since)),
            })
            .collect();
        for (a, muted) in self.alerts() {
            let state = match (a.is_resolved(), muted) {
                (true, _) => "resolved",
                (false, Some(why)) => why,
                (false, None) => "firing",
            };
            alerts.push(AlertReport {
                labels: a.labels,
                annotations: a.annotations,
                state: state.into(),
                active_since: Some(rfc(a.starts_at)),
            });
        }
        AlertView {
            alerts,
            statuses: rules::level_statuses(&self.last_candidates),
            notifier: None,
        }
    }

    pub fn state(&self) -> AlertState {
        AlertState::capture(&self.engine, &self.router, &self.silences)
    }
}

/// Wall time on tokio's clock: `base_wall` plus the tokio time elapsed since `base`. Under paused time it moves only
/// with `tokio::time::advance` (or auto-advance), which is what makes the life cycle testable without waiting.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base: tokio::time::Instant,
    base_wall: SystemTime,
}

impl TokioClock {
    pub fn new() -> Self {
        Self::starting_at(SystemTime::now())
    }

    pub fn starting_at(base_wall: SystemTime) -> Self {
        Self {
            base: tokio::time::Instant::now(),
            base_wall,
        }
    }

    pub fn now(&self) -> SystemTime {
        self.base_wall + self.base.elapsed()
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::alert::{RouteConfig, RuleConfig, RuleName};
    use crate::analyze::{ApiserverReport, LevelReport};
    use crate::values::{DurationValue, Interval};
    use std::time::Duration;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    /// workload-low with `free` of 100 seats free; `queued` requests waiting.
    fn report(free: f64, queued: f64) -> StatusReport {
        let level = |name: &str, limit: f64, free: f64, queued: f64| LevelReport {
            priority_level: name.into(),
            limit_seats: Some(limit),
            nominal_limit_seats: Some(limit),
            executing_seats: Some(limit - free),
            headroom_seats: Some(free),
            headroom_ratio: Some(free / limit),
            inqueue_requests: Some(queued),
            ..Default::default()
        };
        StatusReport {
            apiservers: vec![ApiserverReport {
                apiserver: "10.0.0.5:6443".into(),
                levels: vec![
                    level("workload-low", 100.0, free, queued),
                    level("global-default", 49.0, 40.0, 0.0),
                ],
                ..Default::default()
            }]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            alerts: vec![],
            config_findings: None,
            audit: Vec::new(),
            clients: Vec::new(),
            recommendations: Vec::new(),
            notifier: None,
        }
    }

    fn alerting() -> Alerting {
        let mut cfg = BTreeMap::new();
        // Keep the test on HeadroomLow and HeadroomExhausted.
        for off in [
            RuleName::APFScrapeFailing,
            RuleName::APFExhaustionPredicted,
            RuleName::APFQueueNearFull,
        ] {
            cfg.insert(
                off,
                RuleConfig {
                    disabled: true,
                    ..Default::default()
                },
            );
        }
        let route = RouteConfig {
            group_wait: DurationValue(Duration::from_secs(30)),
            group_interval: Interval(Duration::from_secs(60)),
            repeat_interval: Interval(Duration::from_secs(600)),
            ..RouteConfig::default()
        };
        Alerting::new(
            Rules::new(&cfg, "https://runbooks").unwrap(),
            Engine::new("http://mon/"),
            Router::new(&route, &["slack".to_string()], "http://mon/"),
            Silences::default(),
        )
    }

    fn sent(n: &[Notification]) -> Vec<String> {
        n.iter()
            .flat_map(|n| n.alerts.iter())
            .map(|a| {
                format!(
                    "{}{}",
                    a.alertname(),
                    if a.is_resolved() { ":resolved" } else { "" }
                )
            })
            .collect()
    }

    /// The whole life cycle on a fake clock, 10 s rounds: pending, firing, hysteresis, inhibition, resolve.
    #[test]
    fn life_cycle_on_a_fake_clock() {
        let mut a = alerting();
        let mut log: Vec<(u64, Vec<String>)> = Vec::new();
        fn run(
            a: &mut Alerting,
            from: u64,
            to: u64,
            r: &StatusReport,
            log: &mut Vec<(u64, Vec<String>)>,
        ) {
            for s in (from..to).step_by(10) {
                let n = a.round(t(s), r);
                if !n.is_empty() {
                    log.push((s, sent(&n)));
                }
            }
        }
        // 10 of 100 free (10 %) for 0..200 s: pending 60 s, firing at 60, notified at 90 (group_wait).
        run(&mut a, 0, 200, &report(10.0, 0.0), &mut log);
        // 22 %: between fire (0.2) and clear (0.25) thresholds: still firing, nothing new.
        run(&mut a, 200, 300, &report(22.0, 0.0), &mut log);
        assert_eq!(log, [(90, vec!["APFHeadroomLow".to_string()])]);
        // Exhausted (0 free, 5 waiting) for 30 s: critical fires at 330 and inhibits the warning; notified at 360.
        run(&mut a, 300, 400, &report(0.0, 5.0), &mut log);
        assert_eq!(log[1], (360, vec!["APFHeadroomExhausted".to_string()]));
        let (alerts, muted): (Vec<_>, Vec<_>) = a.alerts().into_iter().unzip();
        assert_eq!(alerts.len(), 2);
        assert!(muted.contains(&Some("inhibited")));
        // Recovered: both resolve at 400; the warning, notified before it was inhibited, gets its resolution.
        run(&mut a, 400, 500, &report(50.0, 0.0), &mut log);
        assert_eq!(log.len(), 4, "{log:?}");
        let resolved: Vec<&String> = log[2..].iter().flat_map(|(_, v)| v).collect();
        assert!(resolved.contains(&&"APFHeadroomLow:resolved".to_string()));
        assert!(resolved.contains(&&"APFHeadroomExhausted:resolved".to_string()));
        // 22 % again, but not active any more: no new alert.
        run(&mut a, 500, 800, &report(22.0, 0.0), &mut log);
        assert_eq!(log.len(), 4);
        assert!(a.engine.pending().is_empty());
    }

    /// Repeat, a silence that mutes the repeat, then a restart from the state file that resolves the alert.
    #[test]
    fn repeat_silence_and_restart_through_rounds() {
        use crate::alert::silence::{Matcher, SilenceInput};
        let mut a = alerting();
        let mut log: Vec<(u64, Vec<String>)> = Vec::new();
        let mut rounds = |a: &mut Alerting, from: u64, to: u64, r: &StatusReport| {
            for s in (from..to).step_by(10) {
                let n = a.round(t(s), r);
                if !n.is_empty() {
                    log.push((s, sent(&n)));
                }
            }
            std::mem::take(&mut log)
        };
        let low = || vec!["APFHeadroomLow".to_string()];
        // Notified at 90, repeated at 90 + 600 (flushes every 60 s from 90).
        assert_eq!(
            rounds(&mut a, 0, 700, &report(10.0, 0.0)),
            [(90, low()), (690, low())]
        );
        a.silences
            .add(
                SilenceInput {
                    id: None,
                    matchers: vec![Matcher {
                        name: "alertname".into(),
                        value: "APFHeadroom.*".into(),
                        is_regex: true,
                        is_equal: true,
                    }],
                    starts_at: t(700),
                    ends_at: t(100_000),
                    created_by: "alice".into(),
                    comment: "resizing the cluster".into(),
                },
                t(700),
            )
            .unwrap();
        assert!(
            rounds(&mut a, 700, 1400, &report(10.0, 0.0)).is_empty(),
            "no repeat at 1290"
        );
        assert_eq!(a.alerts()[0].1, Some("silenced"));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("alerts.json");
        a.state().save(&path).unwrap();
        // Restart at 2000; the headroom came back meanwhile: resolved, and notified although silenced.
        let fresh = alerting();
        let state = AlertState::load(&path).unwrap();
        let mut b = Alerting::restored(fresh.rules, fresh.engine, fresh.router, state);
        assert_eq!(b.silences.len(), 1);
        let out = rounds(&mut b, 2000, 2010, &report(50.0, 0.0));
        assert_eq!(out, [(2000, vec!["APFHeadroomLow:resolved".to_string()])]);
        assert!(rounds(&mut b, 2010, 3000, &report(50.0, 0.0)).is_empty());
    }

    #[test]
    fn tokio_clock_maps_instants_to_wall_time() {
        let clock = TokioClock::starting_at(t(0));
        let now = clock.now();
        assert!(now >= t(0) && now < t(5));
    }

    /// Ticks between reports move the alerts on with the last report's conditions, as rounds on the same report
    /// would: APFHeadroomLow (for 1m) fires and is notified after group_wait with no new report.
    #[test]
    fn ticks_between_reports_go_on_with_the_last_conditions() {
        let (mut by_rounds, mut by_ticks) = (alerting(), alerting());
        let tight = report(10.0, 0.0);
        let (mut rounds, mut ticks) = (Vec::new(), Vec::new());
        assert!(by_ticks.round(t(0), &tight).is_empty());
        for s in 0..=100 {
            rounds.extend(sent(&by_rounds.round(t(s), &tight)));
            if s > 0 {
                ticks.extend(sent(&by_ticks.tick(t(s))));
            }
        }
        assert_eq!(rounds, ["APFHeadroomLow"]);
        assert_eq!(ticks, rounds);
        assert_eq!(by_ticks.view(), by_rounds.view());
        // The condition goes with the next report, not with a tick.
        let fine = report(90.0, 0.0);
        by_ticks.round(t(101), &fine);
        let resolved: Vec<String> = (102..=200)
            .flat_map(|s| sent(&by_ticks.tick(t(s))))
            .collect();
        assert_eq!(resolved, ["APFHeadroomLow:resolved"]);
    }
}
