//! The prediction task: what each level's remediation would do under the replica's load of the window
//! ([`crate::analyze::predict`]), for the levels under pressure whose remediation proposes a change (an isolation,
//! a share move). Off the scrape and alert path: one replay at a time on the blocking pool, each level at most once
//! a period (a minute), the latest of each published for the alert stage, which ends the remediation with it.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::alert::remediation::remediate;
use crate::analyze::predict::{self, Predictions, RemedyPrediction, ReplaySettings};
use crate::analyze::{Analysis, ApiserverReport, AuditReport, LevelReport, StatusReport};
use apf::model::{FlowcontrolObjects, ReplicaKey};

/// How often one level's prediction is made again.
pub const PERIOD: Duration = Duration::from_secs(60);
/// How long a prediction is said after it was made: it replayed the load of its window, not today's.
pub const KEPT: Duration = Duration::from_secs(300);
/// The most changes of one level whose predictions are kept: a remediation whose numbers move with the load
/// proposes a few changes in turn (move 10 shares, then 11), each said with its own prediction once made.
const KEPT_PER_LEVEL: usize = 8;

/// The predictions made, by replica and level, newest first, with when each was made.
type Made = BTreeMap<(ReplicaKey, String), Vec<(Instant, Arc<RemedyPrediction>)>>;

/// A prediction to make: the level, the change its remediation proposes, and what it is replayed from.
struct Job {
    key: (ReplicaKey, String),
    change_key: String,
    report: Arc<ApiserverReport>,
    /// The audit events of the replica's cluster over the window, where given.
    audit: Option<AuditReport>,
    /// The remediation's manifest as objects; why not, if it does not read as them.
    applied: Result<FlowcontrolObjects, String>,
    set: Vec<apf::plan::Change>,
}

/// A level is worth a prediction when its remediation has a change to predict and it is under pressure: 429s,
/// requests waiting, or under a quarter of its limit free.
fn under_pressure(l: &LevelReport) -> bool {
    let rejecting = l
        .rejected_per_second
        .as_ref()
        .is_some_and(|r| r.values().any(|v| *v > 0.0));
    rejecting
        || l.inqueue_requests.is_some_and(|w| w > 0.0)
        || l.headroom_ratio.is_some_and(|h| h < 0.25)
}

/// The next level due: under pressure, with a change to predict, never predicted or last predicted a period ago.
fn next_job(report: &StatusReport, made: &Made, now: Instant) -> Option<Job> {
    // When each is due (`None`: at once); the most overdue first.
    let mut best: Option<(Option<Instant>, Job)> = None;
    for a in &report.apiservers {
        let Some(objects) = a.objects.as_deref() else {
            continue;
        };
        for l in a
            .levels
            .iter()
            .filter(|l| l.priority_level != apf::EXEMPT && under_pressure(l))
        {
            let remedy = remediate(l, &a.levels, &a.list_costs, Some(objects));
            let Some(change_key) = remedy.change_key() else {
                continue;
            };
            let key = (a.key(), l.priority_level.clone());
            // Never made: at once; otherwise a period after the last, whatever the change (a remediation that
            // changes its mind every round does not make a replay every round).
            let due = made
                .get(&key)
                .and_then(|m| m.first())
                .map(|(at, _)| *at + PERIOD);
            if due.is_some_and(|d| d > now) || best.as_ref().is_some_and(|(b, _)| *b <= due) {
                continue;
            }
            let applied = match remedy.manifest.as_deref() {
                Some(m) => apf::model::parse_flowcontrol_documents(m)
                    .map_err(|e| format!("the remediation's manifest does not read: {e}")),
                None => Ok(FlowcontrolObjects::default()),
            };
            best = Some((
                due,
                Job {
                    key,
                    change_key,
                    report: Arc::clone(a),
                    // Audit events carry no replica: the cluster's.
                    audit: report
                        .audit
                        .iter()
                        .find(|r| r.cluster == a.cluster)
                        .cloned(),
                    applied,
                    set: remedy.set,
                },
            ));
        }
    }
    best.map(|(_, job)| job)
}

/// Replays the job's change (CPU-bound: on the blocking pool).
fn make(job: &Job) -> RemedyPrediction {
    let outcome = (|| {
        let before = job
            .report
            .objects
            .as_deref()
            .ok_or_else(|| predict::Unpredictable::NoObjects.to_string())?;
        let applied = job.applied.as_ref().map_err(Clone::clone)?;
        let (after, touched) =
            predict::changed(before, applied, &job.set).map_err(|e| e.to_string())?;
        let p = predict::predict(
            &job.report,
            job.audit.as_ref(),
            &after,
            &touched,
            predict::server_concurrency(&job.report),
            &ReplaySettings::default(),
        )
        .map_err(|e| e.to_string())?;
        // The window's end: the replay makes the change its lead-in after it.
        let window_end = job
            .report
            .scraped_at
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .unwrap_or_else(std::time::SystemTime::now);
        Ok(p.summary(&job.key.1, window_end))
    })();
    RemedyPrediction {
        change_key: job.change_key.clone(),
        outcome,
    }
}

/// Until the analysis stops: a prediction at a time for the level most overdue, each published as it ends; none
/// while `settings` say `analysis.predictions: false` (a reload may turn them on and off).
pub async fn run(
    mut report: watch::Receiver<Arc<StatusReport>>,
    mut settings: watch::Receiver<Analysis>,
    predictions: watch::Sender<Arc<Predictions>>,
) {
    let mut made = Made::new();
    let mut running: Option<JoinHandle<((ReplicaKey, String), RemedyPrediction)>> = None;
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            changed = report.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            // A reload that turns predictions on or off takes effect at once; the sender goes with the daemon.
            changed = settings.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            done = async {
                match running.as_mut() {
                    Some(job) => job.await,
                    None => std::future::pending().await,
                }
            }, if running.is_some() => {
                running = None;
                match done {
                    Ok((key, p)) => {
                        if let Err(why) = &p.outcome {
                            tracing::debug!(apiserver = %key.0.apiserver, level = %key.1, %why, "no prediction");
                        }
                        keep(&mut made, key, Instant::now(), p);
                    }
                    Err(e) => tracing::warn!(error = %e, "a prediction stopped"),
                }
            }
            _ = ticker.tick() => {}
        }
        // What is no longer reported, or too old, goes; everything, when predictions are turned off.
        let on = settings.borrow().predictions;
        let latest = Arc::clone(&report.borrow());
        prune(&mut made, &latest, Instant::now());
        if !on {
            made.clear();
        }
        let published: Predictions = made
            .iter()
            .map(|(k, m)| (k.clone(), m.iter().map(|(_, p)| Arc::clone(p)).collect()))
            .collect();
        predictions.send_if_modified(|p| {
            let changed = **p != published;
            if changed {
                *p = Arc::new(published);
            }
            changed
        });
        if on && running.is_none() {
            let latest = Arc::clone(&report.borrow());
            if let Some(job) = next_job(&latest, &made, Instant::now()) {
                running = Some(tokio::task::spawn_blocking(move || {
                    let p = make(&job);
                    (job.key, p)
                }));
            }
        }
    }
}

/// A prediction made: first of its level's, replacing one made before for the same change.
fn keep(made: &mut Made, key: (ReplicaKey, String), at: Instant, p: RemedyPrediction) {
    let of_level = made.entry(key).or_default();
    of_level.retain(|(_, q)| q.change_key != p.change_key);
    of_level.insert(0, (at, Arc::new(p)));
    of_level.truncate(KEPT_PER_LEVEL);
}

/// Forgets the predictions of levels no longer reported, and those made [`KEPT`] ago.
fn prune(made: &mut Made, latest: &StatusReport, now: Instant) {
    made.retain(|(replica, level), of_level| {
        of_level.retain(|(at, _)| now.saturating_duration_since(*at) < KEPT);
        !of_level.is_empty()
            && latest
                .apiservers
                .iter()
                .any(|a| a.key() == *replica && a.levels.iter().any(|l| &l.priority_level == level))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prediction(change: &str) -> RemedyPrediction {
        RemedyPrediction {
            change_key: change.into(),
            outcome: Ok(format!("Predicted for {change}.")),
        }
    }

    /// `analysis.predictions` turns the task's predictions on and off, a reload at a time: on, the remediation's
    /// change is predicted (here, why not: the replica's version is unknown); off, what was published goes.
    #[tokio::test]
    async fn predictions_follow_the_setting() {
        // A CI runner's flow floods workload-low: the remediation proposes its isolation.
        use crate::alert::remediation::isolate::tests::{cluster_objects, runner_on_workload_low};
        let (objects, low) = (cluster_objects(), runner_on_workload_low());
        let report = StatusReport {
            apiservers: vec![Arc::new(ApiserverReport {
                apiserver: "a".into(),
                levels: vec![low],
                objects: Some(Arc::new(objects)),
                ..Default::default()
            })],
            ..Default::default()
        };
        let (_report_tx, report_rx) = watch::channel(Arc::new(report));
        let (settings_tx, settings_rx) = watch::channel(Analysis {
            predictions: false,
            ..Default::default()
        });
        let (tx, mut published) = watch::channel(Arc::new(Predictions::default()));
        let task = tokio::spawn(run(report_rx, settings_rx, tx));
        settings_tx.send_modify(|s| s.predictions = true);
        let words: Vec<String> = {
            let p = tokio::time::timeout(
                Duration::from_secs(60),
                published.wait_for(|p| !p.is_empty()),
            )
            .await
            .expect("a prediction within 60 s of turning them on")
            .expect("the task runs");
            p.values().flatten().map(|p| p.words()).collect()
        };
        assert_eq!(
            words,
            ["No prediction of this change: the replica's Kubernetes version is not known (kubernetes_build_info \
              is absent from its /metrics)."]
        );
        settings_tx.send_modify(|s| s.predictions = false);
        tokio::time::timeout(
            Duration::from_secs(60),
            published.wait_for(|p| p.is_empty()),
        )
        .await
        .expect("none within 60 s of turning them off")
        .expect("the task runs");
        task.abort();
    }

    /// A job replays its replica's load with the audit events of the replica's cluster (audit events name no
    /// replica), and none of another cluster's.
    #[test]
    fn a_job_takes_the_audit_events_of_its_replicas_cluster() {
        use crate::alert::remediation::isolate::tests::{cluster_objects, runner_on_workload_low};
        let audit = |cluster: Option<&str>, requests: u64| AuditReport {
            cluster: cluster.map(str::to_string),
            requests,
            ..Default::default()
        };
        let report = |cluster: Option<&str>| StatusReport {
            apiservers: vec![Arc::new(ApiserverReport {
                apiserver: "a".into(),
                cluster: cluster.map(str::to_string),
                levels: vec![runner_on_workload_low()],
                objects: Some(Arc::new(cluster_objects())),
                ..Default::default()
            })],
            audit: vec![audit(Some("other"), 1), audit(Some("east"), 2)],
            ..Default::default()
        };
        let job = |r: &StatusReport| next_job(r, &Made::new(), Instant::now()).expect("a job");
        assert_eq!(
            job(&report(Some("east"))).audit.map(|a| a.requests),
            Some(2)
        );
        assert!(job(&report(Some("west"))).audit.is_none());
    }

    /// A remediation that proposes a few changes in turn keeps a prediction of each, newest first, one per change,
    /// for as long as [`KEPT`] says, and none of a level no longer reported.
    #[test]
    fn predictions_are_kept_per_change_for_a_while() {
        let report = StatusReport {
            apiservers: vec![Arc::new(ApiserverReport {
                apiserver: "a".into(),
                levels: vec![LevelReport {
                    priority_level: "workload-low".into(),
                    ..Default::default()
                }],
                ..Default::default()
            })],
            ..Default::default()
        };
        let replica = report.apiservers[0].key();
        let low = (replica.clone(), "workload-low".to_string());
        let t0 = Instant::now();
        let mut made = Made::new();
        keep(&mut made, low.clone(), t0, prediction("x.shares=10"));
        keep(
            &mut made,
            low.clone(),
            t0 + PERIOD,
            prediction("x.shares=11"),
        );
        keep(
            &mut made,
            low.clone(),
            t0 + 2 * PERIOD,
            prediction("x.shares=10"),
        );
        let changes = |made: &Made| -> Vec<String> {
            made.get(&low)
                .map(|m| m.iter().map(|(_, p)| p.change_key.clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(changes(&made), ["x.shares=10", "x.shares=11"]);
        for n in 0..KEPT_PER_LEVEL + 2 {
            keep(
                &mut made,
                low.clone(),
                t0 + 2 * PERIOD,
                prediction(&format!("y={n}")),
            );
        }
        assert_eq!(made[&low].len(), KEPT_PER_LEVEL);
        // Too old: gone.
        prune(&mut made, &report, t0 + 2 * PERIOD + KEPT);
        assert!(made.is_empty());
        // A level no longer reported: gone.
        keep(&mut made, (replica, "gone".into()), t0, prediction("z"));
        prune(&mut made, &report, t0);
        assert!(made.is_empty());
    }
}
