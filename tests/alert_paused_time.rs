//! The alert life cycle on paused tokio time: pending for `for`, firing, notified after `group_wait`, repeated after
//! `repeat_interval`, resolved with its notice, then a restart from the state file that neither re-sends nor
//! forgets. Minutes pass in milliseconds.
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use apf_monitor::alert::driver::run;
use apf_monitor::alert::{AlertState, Alerting, Engine, Router, Rules, Silences, TokioClock};
use apf_monitor::analyze::{ApiserverReport, LevelReport, StatusReport};
use apf_monitor::config::{DurationValue, Interval, RouteConfig, RuleConfig, RuleName};
use apf_monitor::notify::Notification;
use tokio::sync::mpsc;

/// workload-low with `free` of 100 seats free, nothing queued.
fn report(free: f64) -> StatusReport {
    StatusReport {
        apiservers: vec![ApiserverReport {
            apiserver: "10.0.0.5:6443".into(),
            levels: vec![LevelReport {
                priority_level: "workload-low".into(),
                limit_seats: Some(100.0),
                nominal_limit_seats: Some(100.0),
                executing_seats: Some(100.0 - free),
                headroom_seats: Some(free),
                headroom_ratio: Some(free / 100.0),
                inqueue_requests: Some(0.0),
                ..Default::default()
            }],
            ..Default::default()
        }],
        alerts: vec![],
    }
}

fn alerting() -> (Rules, Engine, Router) {
    // Only APFHeadroomLow, with its defaults (threshold 0.2, clear 0.25, for 1m).
    let mut cfg = BTreeMap::new();
    for rule in RuleName::ALL
        .into_iter()
        .filter(|r| *r != RuleName::APFHeadroomLow)
    {
        cfg.insert(
            rule,
            RuleConfig {
                disabled: true,
                ..Default::default()
            },
        );
    }
    let route = RouteConfig {
        group_wait: DurationValue(Duration::from_secs(30)),
        group_interval: Interval(Duration::from_secs(60)),
        repeat_interval: Interval(Duration::from_secs(300)),
        ..RouteConfig::default()
    };
    (
        Rules::new(&cfg, "https://runbooks.example").unwrap(),
        Engine::new("http://apf-monitor/"),
        Router::new(&route, &["slack".to_string()], "http://apf-monitor/"),
    )
}

/// Runs `rounds` rounds 10 s apart on paused time, the report of round i given by `free(i)`; returns what was sent,
/// each with the (tokio) second it was handed over.
async fn drive(
    a: Alerting,
    clock: TokioClock,
    rounds: u32,
    free: impl Fn(u32) -> f64,
    state: &std::path::Path,
) -> (Alerting, Vec<(u64, Notification)>) {
    let start = tokio::time::Instant::now();
    let (tx, mut rx) = mpsc::channel(64);
    let mut i = 0;
    let collector = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(n) = rx.recv().await {
            got.push((start.elapsed().as_secs(), n));
        }
        got
    });
    let next = move || {
        i += 1;
        (i <= rounds).then(|| report(free(i)))
    };
    let (a, err) = run(
        a,
        clock,
        Duration::from_secs(10),
        Some(state.to_path_buf()),
        next,
        tx,
    )
    .await;
    assert!(err.is_none(), "{err:?}");
    (a, collector.await.unwrap())
}

fn summary(sent: &[(u64, Notification)]) -> Vec<(u64, &'static str)> {
    sent.iter().map(|(t, n)| (*t, n.status())).collect()
}

#[tokio::test(start_paused = true)]
async fn pending_firing_repeat_resolve_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("alerts.json");
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let clock = TokioClock::starting_at(base);
    let (rules, engine, router) = alerting();
    let a = Alerting::new(rules, engine, router, Silences::default());

    // Rounds at 0, 10, 20 ... s. Headroom 10 % from the first round; at 0.22 (between fire and clear) from round 40
    // (t = 390 s): hysteresis keeps it firing; 50 % from round 46 (t = 450 s): it clears.
    let (a, sent) = drive(
        a,
        clock,
        50,
        |i| {
            if i < 40 {
                10.0
            } else if i < 46 {
                22.0
            } else {
                50.0
            }
        },
        &state,
    )
    .await;
    let s = summary(&sent);
    // Pending for `for` (1m): fires at 60 s; group_wait 30 s: first notification at 90 s; repeat_interval 300 s:
    // again at 390 s; clear at 450 s: resolved at the next group_interval boundary (60 s steps from 90 s), 450 s.
    assert_eq!(
        s,
        vec![(90, "firing"), (390, "firing"), (450, "resolved")],
        "{s:?}"
    );
    let fired = &sent[0].1.alerts[0];
    assert_eq!(fired.alertname(), "APFHeadroomLow");
    assert_eq!(
        fired.starts_at,
        base + Duration::from_secs(60),
        "starts when `for` has elapsed"
    );
    assert!(sent[2].1.alerts[0].ends_at.is_some());
    drop(a);

    // Restart from the state file while a new alert fires: what was notified is not re-sent before repeat_interval,
    // and when the condition is gone after the restart, the resolution still goes out.
    let (rules, engine, router) = alerting();
    let a = Alerting::new(rules, engine, router, Silences::default());
    let (a, sent) = drive(
        a,
        TokioClock::starting_at(base + Duration::from_secs(1000)),
        15,
        |_| 10.0,
        &state,
    )
    .await;
    assert_eq!(summary(&sent), vec![(90, "firing")]);
    drop(a);
    let saved = AlertState::load(&state).unwrap();
    let (rules, engine, router) = alerting();
    let restored = Alerting::restored(rules, engine, router, saved);
    let (_, sent) = drive(
        restored,
        TokioClock::starting_at(base + Duration::from_secs(1200)),
        20,
        |_| 50.0,
        &state,
    )
    .await;
    let s = summary(&sent);
    assert_eq!(
        s.iter().filter(|(_, st)| *st == "firing").count(),
        0,
        "nothing re-sent after the restart: {s:?}"
    );
    assert_eq!(
        s.iter().filter(|(_, st)| *st == "resolved").count(),
        1,
        "the resolution is not forgotten: {s:?}"
    );
}
