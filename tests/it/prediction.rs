//! Predictions proven in the simulator (issue 52): on a loaded simulated cluster (`config/scenarios/flood.yaml`),
//! `apf-monitor plan --load` predicts what a change will do; the change is then applied with kubectl, and what
//! happened over the next minute is measured on the replica's own `/metrics`. Three changes, each on a cluster of
//! its own, side by side:
//! 1. isolating the noisy flow (the manifests `check --output manifests` proposes, given to `plan --load --apply`);
//! 2. raising workload-low's shares by half (`--set workload-low.shares=150`);
//! 3. lengthening its queues (`--set workload-low.queueLengthLimit=200`).
//!
//! The alerts' remediation proposes the isolation too: on a fourth cluster, apf-monitor's daemon says what it
//! predicts of it, the isolation is applied, and its prediction is held to what happened, as `plan --load`'s are.
//!
//! For the level the change touches and the level with load that gives up the most seats, the measured 429s per
//! second are within 30 % (or 0.5/s) of the prediction and the measured mean wait within 50 % (or 50 ms).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common;
use apf_sim::{ClusterOptions, KubeVersion, Scenario};

/// workload-low loaded past anything it can borrow (the scenario's header says how).
const LOAD: &str = include_str!("../../config/scenarios/flood.yaml");

/// The simulated replica's load before the prediction watches it: queues full, borrowing settled.
const WARM: Duration = Duration::from_secs(30);
/// `plan --load`'s window.
const WINDOW: &str = "60s";
/// The measure after the change: what `plan --load` replays and counts (after its warm-up of 20 s, the next 60 s).
const SETTLE: Duration = Duration::from_secs(20);
const MEASURE: Duration = Duration::from_secs(60);

/// What a level did between two scrapes of the replica's `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    rejected_per_second: f64,
    mean_wait_seconds: f64,
}

/// Sums of a level's series over its flow schemas: (429s, wait sum and count of the requests that executed).
fn level_totals(metrics: &str, level: &str) -> (f64, f64, f64) {
    let (mut rejected, mut wait_sum, mut wait_count) = (0.0, 0.0, 0.0);
    let of_level = format!("priority_level=\"{level}\"");
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if !series.contains(&of_level) {
            continue;
        }
        let v: f64 = value.parse().unwrap_or(0.0);
        if series.starts_with("apiserver_flowcontrol_rejected_requests_total{") {
            rejected += v;
        } else if series.contains("execute=\"true\"") {
            if series.starts_with("apiserver_flowcontrol_request_wait_duration_seconds_sum{") {
                wait_sum += v;
            } else if series
                .starts_with("apiserver_flowcontrol_request_wait_duration_seconds_count{")
            {
                wait_count += v;
            }
        }
    }
    (rejected, wait_sum, wait_count)
}

fn measured(before: &str, after: &str, seconds: f64, level: &str) -> Measured {
    let (r0, s0, c0) = level_totals(before, level);
    let (r1, s1, c1) = level_totals(after, level);
    Measured {
        rejected_per_second: (r1 - r0) / seconds,
        mean_wait_seconds: if c1 > c0 { (s1 - s0) / (c1 - c0) } else { 0.0 },
    }
}

/// One change proven: a cluster loaded with [`LOAD`], the prediction, the change applied, the measure.
struct Proof {
    name: &'static str,
    /// `plan --load`'s change: `--set ...` or `--apply FILE` (the file written from `check --output manifests`).
    isolate: bool,
    set: Option<&'static str>,
}

/// A simulated cluster of one 1.34 replica under [`LOAD`]: it, the directory of its kubeconfig, the kubeconfig,
/// and the replica's `/metrics`.
async fn loaded_cluster() -> (apf_sim::Cluster, tempfile::TempDir, PathBuf, String) {
    let (cluster, dir, kubeconfig) = common::sim_cluster(ClusterOptions {
        replicas: 1,
        listen_port: 0,
        clock_tick: Some(Duration::from_millis(20)),
        ..ClusterOptions::new(KubeVersion::new(34, 0), Scenario::from_yaml(LOAD).unwrap())
    })
    .await;
    let metrics_url = format!("{}/metrics", cluster.replica_urls()[0]);
    (cluster, dir, kubeconfig, metrics_url)
}

/// The change of `fix` applied with kubectl, then the replica's `/metrics` read [`SETTLE`] after it and again
/// [`MEASURE`] later: both bodies, and the seconds between.
async fn apply_and_measure(
    kubeconfig: &Path,
    fix: &Path,
    metrics_url: &str,
) -> (String, String, f64) {
    kubectl_apply(kubeconfig, fix);
    tokio::time::sleep(SETTLE).await;
    let start = common::get_text(metrics_url).await.unwrap();
    let t0 = std::time::Instant::now();
    tokio::time::sleep(MEASURE).await;
    let end = common::get_text(metrics_url).await.unwrap();
    (start, end, t0.elapsed().as_secs_f64())
}

/// The alerts' remediation, proven as `plan --load` is: a daemon watches a cluster of its own under the same load,
/// its remediation for workload-low proposes the isolation and ends with its prediction; the isolation is applied
/// with kubectl (`check --output manifests`, the same manifests) at once, and measured as the proofs measure.
/// (predicted, measured) of the new level and of workload-low.
async fn remediation_proof() -> BTreeMap<String, (f64, f64, f64, f64)> {
    let (cluster, dir, kubeconfig, metrics_url) = loaded_cluster().await;
    let mut config = apf_monitor::config::Config::default();
    config.scrape.interval = apf_monitor::values::Interval(Duration::from_secs(1));
    config.scrape.timeout = apf_monitor::values::Interval(Duration::from_secs(1));
    config.analysis.window = apf_monitor::values::Interval(Duration::from_secs(60));
    config.targets.kubernetes.kubeconfig = Some(kubeconfig.clone());
    let monitor = common::start_monitor(&config).await;
    // A prediction made from a window of the steady load, as `plan --load` watches it in the proofs: the first is
    // made as soon as the level is under pressure (its window still holds the replica's start); the one taken is
    // the first made once the replica has run as long as the proofs' clusters when they change.
    let url = format!("{monitor}/api/v1/status");
    let started = std::time::Instant::now();
    let mut seen = None;
    let mut taken = None;
    while started.elapsed() < Duration::from_secs(300) {
        let status: Option<Value> = common::get_text(&url)
            .await
            .and_then(|t| serde_json::from_str(&t).ok());
        if let Some(now) = status.as_ref().and_then(remediation_prediction) {
            let fresh = started.elapsed() >= WARM + Duration::from_secs(60);
            if fresh && seen.is_some() && seen.as_ref() != Some(&now) {
                taken = Some(now);
                break;
            }
            seen = Some(now);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (level, [new, low]) =
        taken.unwrap_or_else(|| panic!("no fresh remediation of workload-low with a prediction"));
    drop(monitor);
    let manifests = common::proposed_manifests(&kubeconfig).await;
    let fix = dir.path().join("fix.yaml");
    std::fs::write(&fix, &manifests.stdout).unwrap();
    let (start, end, seconds) = apply_and_measure(&kubeconfig, &fix, &metrics_url).await;
    drop(cluster);
    [(level, new), ("workload-low".to_string(), low)]
        .into_iter()
        .map(|(level, (rate, wait))| {
            let m = measured(&start, &end, seconds, &level);
            (
                format!("{level} (remediation)"),
                (rate, m.rejected_per_second, wait, m.mean_wait_seconds),
            )
        })
        .collect()
}

/// (predicted, measured) per level of interest, and the prediction's JSON.
type Outcome = (BTreeMap<String, (f64, f64, f64, f64)>, Value);

/// A wait as a remediation writes it: `12.1 s`, `50 ms`, `0`.
fn wait_seconds(number: &str, unit: Option<&str>) -> f64 {
    let v: f64 = number.parse().unwrap();
    if unit == Some("ms") {
        v / 1e3
    } else {
        v
    }
}

/// What the daemon's remediation for workload-low predicts of the isolation it proposes: (429/s, mean wait) of
/// the new level, and of workload-low after it.
fn remediation_prediction(status: &Value) -> Option<(String, [(f64, f64); 2])> {
    let remediation = status["alerts"].as_array()?.iter().find_map(|a| {
        let r = a["annotations"]["remediation"].as_str()?;
        (a["labels"]["priority_level"] == "workload-low" && r.contains("Predicted under"))
            .then_some(r)
    })?;
    let new = regex::Regex::new(
        r"the new (\S+) gets \d+ seats, its 429s (?:([\d.]+)/s|0) and mean wait ([\d.]+|0)(?: (ms|s))?",
    )
    .unwrap()
    .captures(remediation)?;
    let low = regex::Regex::new(
        r"workload-low's 429s [^;]*?(?:→ )?(?:([\d.]+)/s|0), its mean wait (?:[^,]*→ )?([\d.]+|0)(?: (ms|s))?,",
    )
    .unwrap()
    .captures(remediation)?;
    let rate = |m: Option<regex::Match<'_>>| m.map_or(0.0, |m| m.as_str().parse().unwrap());
    Some((
        new[1].to_string(),
        [
            (
                rate(new.get(2)),
                wait_seconds(&new[3], new.get(4).map(|m| m.as_str())),
            ),
            (
                rate(low.get(1)),
                wait_seconds(&low[2], low.get(3).map(|m| m.as_str())),
            ),
        ],
    ))
}

fn run_binary(args: &[&str], kubeconfig: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap()
}

fn kubectl_apply(kubeconfig: &Path, file: &Path) {
    let applied = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "-f"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "kubectl apply: {}{}",
        String::from_utf8_lossy(&applied.stdout),
        String::from_utf8_lossy(&applied.stderr)
    );
}

impl Proof {
    async fn run(&self) -> Outcome {
        let (cluster, dir, kubeconfig, metrics_url) = loaded_cluster().await;
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, "scrape: {interval: 1s, timeout: 1s}\n").unwrap();
        tokio::time::sleep(WARM).await;
        let fix = dir.path().join("fix.yaml");
        let mut args: Vec<String> = vec![
            "plan".into(),
            "--load".into(),
            "--window".into(),
            WINDOW.into(),
            "--config".into(),
            config.display().to_string(),
            "--output".into(),
            "json".into(),
        ];
        if self.isolate {
            let manifests = common::proposed_manifests(&kubeconfig).await;
            // `check` exits 1 or 2 with the level in trouble (the monitoring plugins' convention).
            assert!(
                String::from_utf8_lossy(&manifests.stdout).contains("kind: FlowSchema"),
                "{}",
                String::from_utf8_lossy(&manifests.stderr)
            );
            std::fs::write(&fix, &manifests.stdout).unwrap();
            args.extend(["--apply".into(), fix.display().to_string()]);
        }
        if let Some(set) = self.set {
            args.extend(["--set".into(), set.into()]);
            // The change as a person applies it: plan's manifests, through kubectl.
            let out = run_binary(
                &["plan", "--set", set, "--output", "manifests"],
                &kubeconfig,
            );
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(&fix, &out.stdout).unwrap();
        }
        let kc = kubeconfig.clone();
        let args_ = args.clone();
        let predicted = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args_.iter().map(String::as_str).collect();
            run_binary(&refs, &kc)
        })
        .await
        .unwrap();
        assert!(
            predicted.status.success(),
            "{}: {}",
            self.name,
            String::from_utf8_lossy(&predicted.stderr)
        );
        let prediction: Value = serde_json::from_slice(&predicted.stdout).unwrap();
        let (start, end, seconds) = apply_and_measure(&kubeconfig, &fix, &metrics_url).await;
        let levels = prediction["levels"].as_array().unwrap();
        // The level the change touches, and the level that gives up the most seats.
        let changed = levels
            .iter()
            .find(|l| {
                l["changed"] == true && l["before"]["dispatched_per_second"].as_f64() > Some(0.0)
            })
            .or_else(|| levels.iter().find(|l| l["changed"] == true))
            .unwrap_or_else(|| panic!("{}: no changed level: {prediction:#}", self.name));
        let gave_up = |l: &&Value| {
            l["before"]["limit_seats"].as_f64().unwrap()
                - l["after"]["limit_seats"].as_f64().unwrap()
        };
        // Among the levels with load: an idle one lends its seats whatever the change.
        let donor = levels
            .iter()
            .filter(|l| {
                l["changed"] != true && l["before"]["dispatched_per_second"].as_f64() > Some(0.0)
            })
            .max_by(|a, b| gave_up(a).total_cmp(&gave_up(b)))
            .unwrap();
        let mut out = BTreeMap::new();
        for l in [changed, donor] {
            let name = l["priority_level"].as_str().unwrap().to_string();
            let m = measured(&start, &end, seconds, &name);
            out.insert(
                name,
                (
                    l["after"]["rejected_per_second"].as_f64().unwrap(),
                    m.rejected_per_second,
                    l["after"]["mean_wait_seconds"].as_f64().unwrap(),
                    m.mean_wait_seconds,
                ),
            );
        }
        drop(cluster);
        (out, prediction)
    }
}

fn within(predicted: f64, measured: f64, share: f64, floor: f64) -> bool {
    (predicted - measured).abs() <= (share * measured).max(floor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn predictions_meet_what_happens_after_the_change() {
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        panic!("kubectl is needed (tests/install-deps.sh installs it)");
    }
    let proofs = [
        Proof {
            name: "isolate the agent",
            isolate: true,
            set: None,
        },
        Proof {
            name: "raise workload-low's shares",
            isolate: false,
            set: Some("workload-low.shares=150"),
        },
        Proof {
            name: "lengthen workload-low's queues",
            isolate: false,
            set: Some("workload-low.queueLengthLimit=200"),
        },
    ];
    let (mut outcomes, remedied) = tokio::join!(
        futures_util::future::join_all(proofs.iter().map(|p| p.run())),
        remediation_proof()
    );
    outcomes[0].0.extend(remedied);
    let mut failed = Vec::new();
    for (proof, (levels, prediction)) in proofs.iter().zip(&outcomes) {
        println!("{}:", proof.name);
        for (level, (p_rej, m_rej, p_wait, m_wait)) in levels {
            println!(
                "  {level}: 429/s predicted {p_rej:.2}, measured {m_rej:.2}; mean wait predicted {p_wait:.3}s, \
                 measured {m_wait:.3}s"
            );
            if !within(*p_rej, *m_rej, 0.3, 0.5) {
                failed.push(format!(
                    "{}: {level}'s 429/s {p_rej} for {m_rej}",
                    proof.name
                ));
            }
            if !within(*p_wait, *m_wait, 0.5, 0.05) {
                failed.push(format!(
                    "{}: {level}'s mean wait {p_wait} for {m_wait}",
                    proof.name
                ));
            }
        }
        if !failed.is_empty() {
            println!("{prediction:#}");
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
