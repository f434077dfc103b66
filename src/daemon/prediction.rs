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
use crate::analyze::{ApiserverReport, LevelReport, StatusReport};
use apf::model::{FlowcontrolObjects, ReplicaKey};

/// How often one level's prediction is made again.
pub const PERIOD: Duration = Duration::from_secs(60);

/// A prediction to make: the level, the change its remediation proposes, and what it is replayed from.
struct Job {
    key: (ReplicaKey, String),
    change_key: String,
    report: Arc<ApiserverReport>,
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
fn next_job(
    report: &StatusReport,
    made: &BTreeMap<(ReplicaKey, String), (Instant, Arc<RemedyPrediction>)>,
    now: Instant,
) -> Option<Job> {
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
            let due = made.get(&key).map(|(at, _)| *at + PERIOD);
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
            &after,
            &touched,
            predict::server_concurrency(&job.report),
            &ReplaySettings::default(),
        )
        .map_err(|e| e.to_string())?;
        Ok(p.summary(&job.key.1))
    })();
    RemedyPrediction {
        change_key: job.change_key.clone(),
        outcome,
    }
}

/// Until the analysis stops: a prediction at a time for the level most overdue, each published as it ends.
pub async fn run(
    mut report: watch::Receiver<Arc<StatusReport>>,
    predictions: watch::Sender<Arc<Predictions>>,
) {
    let mut made: BTreeMap<(ReplicaKey, String), (Instant, Arc<RemedyPrediction>)> =
        BTreeMap::new();
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
                        made.insert(key, (Instant::now(), Arc::new(p)));
                    }
                    Err(e) => tracing::warn!(error = %e, "a prediction stopped"),
                }
                // What is no longer reported goes.
                let latest = Arc::clone(&report.borrow());
                made.retain(|(replica, level), _| {
                    latest.apiservers.iter().any(|a| {
                        a.key() == *replica && a.levels.iter().any(|l| &l.priority_level == level)
                    })
                });
                let published: Predictions =
                    made.iter().map(|(k, (_, p))| (k.clone(), Arc::clone(p))).collect();
                predictions.send_replace(Arc::new(published));
            }
            _ = ticker.tick() => {}
        }
        if running.is_none() {
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
