//! The daemon's alerting stage on paused tokio time, through the task `serve` runs (`AlertStage::run`): pending for
//! `for`, firing, notified after `group_wait`, repeated after `repeat_interval`, resolved with its notice, a restart
//! from the state file that neither re-sends nor forgets, and a stop that sends what groups owe and keeps what it
//! could not deliver for the next start. Minutes pass in milliseconds.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apf_monitor::alert::{
    AlertView, Notification, RouteConfig, RuleConfig, RuleName, Rules, TokioClock,
};
use apf_monitor::analyze::{ApiserverReport, LevelReport, StatusReport};
use apf_monitor::daemon::{AlertSetup, AlertStage, Command, Leadership, ReceiverSetup};
use apf_monitor::notify::{NotifyError, NotifyMetrics, Receiver, SendFuture};
use apf_monitor::values::{DurationValue, Interval};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::common;

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

/// A receiver that records what it gets and when (tokio seconds since `start`), or never answers; `tried` has the
/// status of every notification it was handed, answered or not.
struct Capture {
    start: Instant,
    got: Arc<Mutex<Vec<(u64, Notification)>>>,
    tried: Arc<Mutex<Vec<&'static str>>>,
    hang: bool,
}

impl Receiver for Capture {
    fn name(&self) -> &str {
        "capture"
    }

    fn send<'a>(&'a self, n: &'a Notification) -> SendFuture<'a> {
        Box::pin(async move {
            self.tried.lock().unwrap().push(n.status());
            if self.hang {
                std::future::pending::<()>().await;
            }
            let at = self.start.elapsed().as_secs();
            self.got.lock().unwrap().push((at, n.clone()));
            Ok::<(), NotifyError>(())
        })
    }
}

/// Only APFHeadroomLow, with its defaults (threshold 0.2, clear 0.25, for 1m).
fn setup(state: &std::path::Path, receiver: Arc<dyn Receiver>) -> AlertSetup {
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
    AlertSetup {
        rules: Rules::new(&cfg, "https://runbooks.example").unwrap(),
        route: RouteConfig {
            group_wait: DurationValue(Duration::from_secs(30)),
            group_interval: Interval(Duration::from_secs(60)),
            repeat_interval: Interval(Duration::from_secs(300)),
            ..RouteConfig::default()
        },
        external_url: "http://apf-monitor".into(),
        receivers: vec![ReceiverSetup {
            config: common::receiver("capture"),
            receiver,
        }],
        console_by_default: false,
        state_file: Some(state.to_path_buf()),
        warm_up: Duration::from_secs(60),
    }
}

struct Run {
    report: watch::Sender<Arc<StatusReport>>,
    commands: mpsc::Sender<Command>,
    got: Arc<Mutex<Vec<(u64, Notification)>>>,
    tried: Arc<Mutex<Vec<&'static str>>>,
    view: watch::Receiver<Arc<AlertView>>,
    task: tokio::task::JoinHandle<()>,
    _silences: mpsc::Sender<apf_monitor::export::SilenceRequest>,
}

/// Starts the stage as the daemon does, its wall clock at `base`, restoring the state file.
fn start(state: &std::path::Path, base: SystemTime, hang: bool, first: StatusReport) -> Run {
    let got = Arc::new(Mutex::new(Vec::new()));
    let tried = Arc::new(Mutex::new(Vec::new()));
    let receiver = Arc::new(Capture {
        start: Instant::now(),
        got: got.clone(),
        tried: tried.clone(),
        hang,
    });
    let (view_tx, view) = watch::channel(Arc::new(AlertView::default()));
    let stage = AlertStage::new(
        setup(state, receiver),
        Leadership::always(),
        NotifyMetrics::default(),
        TokioClock::starting_at(base),
        view_tx,
    );
    let (report, report_rx) = watch::channel(Arc::new(first));
    let (commands, commands_rx) = mpsc::channel(4);
    let (silences, silences_rx) = mpsc::channel(4);
    // No prediction task here: the predictions stay empty.
    let (_, predictions_rx) = watch::channel(Arc::new(
        apf_monitor::analyze::predict::Predictions::default(),
    ));
    let task = tokio::spawn(stage.run(report_rx, predictions_rx, commands_rx, silences_rx));
    Run {
        report,
        commands,
        got,
        tried,
        view,
        task,
        _silences: silences,
    }
}

impl Run {
    /// A new report every 10 s for `rounds` rounds, round i's headroom given by `free(i)`.
    async fn drive(&self, rounds: u32, free: impl Fn(u32) -> f64) {
        for i in 1..=rounds {
            self.report.send_replace(Arc::new(report(free(i))));
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }

    /// The stop the daemon sends at SIGTERM.
    async fn stop(self, grace: Duration) -> Vec<(u64, Notification)> {
        let (done, finished) = oneshot::channel();
        self.commands
            .send(Command::Stop {
                deadline: Instant::now() + grace,
                done,
            })
            .await
            .unwrap();
        finished.await.unwrap();
        self.task.await.unwrap();
        let got = self.got.lock().unwrap();
        got.clone()
    }
}

fn summary(sent: &[(u64, Notification)]) -> Vec<(u64, &'static str)> {
    sent.iter().map(|(t, n)| (*t, n.status())).collect()
}

#[tokio::test(start_paused = true)]
async fn pending_firing_repeat_resolve_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("alerts.json");
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);

    // Reports at 0, 10, 20 ... s. Headroom 10 % from the first one; at 0.22 (between fire and clear) from round 40
    // (t = 390 s): hysteresis keeps it firing; 50 % from round 46 (t = 450 s): it clears.
    let run = start(&state, base, false, report(10.0));
    run.drive(50, |i| {
        if i < 40 {
            10.0
        } else if i < 46 {
            22.0
        } else {
            50.0
        }
    })
    .await;
    let sent = run.stop(Duration::from_secs(5)).await;
    let s = summary(&sent);
    // Pending for `for` (1m): fires at 60 s; group_wait 30 s: first notification at 90 s; repeat_interval 300 s:
    // again at 390 s; clear at 450 s: resolved at the group_interval boundary (60 s steps from 90 s), 450 s.
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

    // A new alert after a restart (the state file holds the first one, resolved): notified once, and the stop has
    // nothing more to send.
    let run = start(
        &state,
        base + Duration::from_secs(1000),
        false,
        report(10.0),
    );
    run.drive(15, |_| 10.0).await;
    assert_eq!(
        run.view.borrow().alerts[0].state,
        "firing",
        "the view export serves"
    );
    let sent = run.stop(Duration::from_secs(5)).await;
    assert_eq!(summary(&sent), vec![(90, "firing")]);

    // Restarted while the headroom came back: the firing alert resolves at once and its resolution goes out at the
    // group's next flush. The stop at 1150 s owed nothing, so it sent nothing and kept the group's timers: its next
    // flush (1090 s + group_interval, 1150 s) is past by this start, and the resolution goes out at once. What was
    // notified before the restart is not re-sent.
    let run = start(
        &state,
        base + Duration::from_secs(1200),
        false,
        report(50.0),
    );
    run.drive(20, |_| 50.0).await;
    let s = summary(&run.stop(Duration::from_secs(5)).await);
    assert_eq!(s, vec![(0, "resolved")], "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stop_sends_what_groups_owe_and_keeps_what_it_could_not_deliver() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("alerts.json");
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);

    // Firing at 60 s; stopped at 70 s, inside group_wait: the notification goes out at the stop, not lost.
    let run = start(&state, base, false, report(10.0));
    run.drive(7, |_| 10.0).await;
    let s = summary(&run.stop(Duration::from_secs(5)).await);
    assert_eq!(s, vec![(70, "firing")], "{s:?}");

    // Resolved at 100 s, its notice due at the next group_interval (130 s); the receiver hangs and the stop's
    // deadline passes at 110 s: the notice is not delivered...
    let run = start(&state, base + Duration::from_secs(70), true, report(10.0));
    run.drive(3, |i| if i < 3 { 10.0 } else { 50.0 }).await;
    let tried = run.tried.clone();
    let s = summary(&run.stop(Duration::from_secs(2)).await);
    assert!(s.is_empty(), "{s:?}");
    assert_eq!(
        tried.lock().unwrap().first(),
        Some(&"resolved"),
        "the stop handed the resolution to the receiver"
    );
    // ...so it is owed in the state file, and the next start sends it at once.
    let run = start(&state, base + Duration::from_secs(200), false, report(50.0));
    run.drive(1, |_| 50.0).await;
    let s = summary(&run.stop(Duration::from_secs(5)).await);
    assert_eq!(s, vec![(0, "resolved")], "{s:?}");
}

/// A restart whose replica is not read yet (its first scrape takes its time) neither resolves nor re-announces what
/// was firing: a replica not read is not a replica that is fine.
#[tokio::test(start_paused = true)]
async fn a_restart_holds_the_alerts_of_a_replica_not_read_yet() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("alerts.json");
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let run = start(&state, base, false, report(10.0));
    run.drive(10, |_| 10.0).await;
    let s = summary(&run.stop(Duration::from_secs(5)).await);
    assert_eq!(s, vec![(90, "firing")], "{s:?}");

    // 50 s without a report of the replica (within the warm-up of 60 s), then read again, still short of headroom.
    let run = start(
        &state,
        base + Duration::from_secs(200),
        false,
        StatusReport::default(),
    );
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert!(
        run.view.borrow().alerts.iter().any(|a| a.state == "firing"),
        "{:?}",
        run.view.borrow().alerts
    );
    run.drive(3, |_| 10.0).await;
    let s = summary(&run.stop(Duration::from_secs(5)).await);
    assert!(s.is_empty(), "{s:?}");
}
