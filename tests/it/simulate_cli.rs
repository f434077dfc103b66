//! `apf-monitor simulate` as a person runs it: twice in one directory, the second is refused while the first runs,
//! instead of overwriting its kubeconfig; and `--run`, a scenario in virtual time and its report.
use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// `simulate` on a free port writing `kubeconfig`; its stdout's lines arrive on the receiver.
fn simulate(kubeconfig: &Path) -> (Child, Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["simulate", "--scenario", "idle", "--listen", "127.0.0.1:0"])
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = common::stdout_lines(&mut child);
    (child, rx)
}

/// The URL of replica 0 once `simulate` has said where its kubeconfig is (written by then).
fn started(lines: &Receiver<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut url = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("simulate did not say where its kubeconfig is");
        if let Some(rest) = line.trim().strip_prefix("replica 0 ") {
            url = rest.split_whitespace().next().map(str::to_string);
        }
        if line.starts_with("kubeconfig: ") {
            return url.expect("no replica line before the kubeconfig's");
        }
    }
}

/// The exit status and stderr of `child` once it has exited, or `None` if it still runs after `patience`.
fn exited(child: &mut Child, patience: Duration) -> Option<(Option<i32>, String)> {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return Some((status.code(), err));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_simulate_is_refused_while_the_first_holds_the_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("apf-monitor-sim.kubeconfig");
    let (first, first_lines) = simulate(&kubeconfig);
    let first_url = started(&first_lines);
    let written = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(written.contains(&first_url), "{written}");

    let (mut second, _) = simulate(&kubeconfig);
    let refused = exited(&mut second, Duration::from_secs(30));
    if refused.is_none() {
        let _ = second.kill();
    }
    let (code, err) = refused.expect("the second simulate ran beside the first");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{} is the kubeconfig of another `apf-monitor simulate`, still running (its cluster at {first_url})",
            kubeconfig.display()
        )) && err.contains("--kubeconfig-out FILE"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), written);
    // The first one still serves what its kubeconfig names.
    assert!(common::get_text(&format!("{first_url}/metrics"))
        .await
        .is_some_and(|b| b.contains("apiserver_flowcontrol")));

    // Once the first has stopped, the file is free: the next simulate takes it over.
    common::terminate(first).await;
    let (third, third_lines) = simulate(&kubeconfig);
    let third_url = started(&third_lines);
    let rewritten = std::fs::read_to_string(&kubeconfig).unwrap();
    common::terminate(third).await;
    assert!(rewritten.contains(&third_url), "{rewritten}");
}

/// `apf-monitor simulate ARGS` run to its end in `dir`: exit code, stdout, stderr.
fn simulate_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("simulate")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One client of two threads on a level of one seat: 4 s, each call 1 s, no think.
const ONE_SEAT: &str = "duration: 4s\n\
    priority_levels:\n  - {name: tight, concurrency_limit: 1, queues: 4, hand_size: 2, queue_length_limit: 1, request_wait_limit: 1500ms}\n\
    flows:\n  - {name: pair, priority_level: tight, hash: 7, threads: 2, duration: 1s}\n";

#[test]
fn run_simulates_the_duration_and_prints_the_report_as_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.yaml"), ONE_SEAT).unwrap();
    let (code, out, err) = simulate_in(
        dir.path(),
        &["--run", "--output", "json", "--scenario", "s.yaml"],
    );
    assert_eq!(code, Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["duration_seconds"], 4.0, "{out}");
    assert_eq!(report["seed"], 1, "{out}");
    assert_eq!(report["kubernetes_version"], "1.34.0", "{out}");
    let flows = report["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 1, "{out}");
    let pair = &flows[0];
    assert_eq!(pair["name"], "pair");
    assert_eq!(pair["priority_level"], "tight");
    assert_eq!(pair["flow_schema"], "pair");
    // One seat, always busy: 1 on average. The two threads alternate, each waiting a second for the other's call;
    // the queue holds one, so none is rejected.
    assert_eq!(pair["mean_executing_seats"], 1.0, "{out}");
    assert_eq!(pair["rejected"], serde_json::json!({}), "{out}");
    let dispatched = pair["dispatched"].as_u64().unwrap();
    assert!((4..=5).contains(&dispatched), "{out}");
    let level = report["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "tight")
        .expect("the scenario's level is reported");
    assert_eq!(level["concurrency_limit"], 1, "{out}");
    assert_eq!(level["mean_seats_in_use"], 1.0, "{out}");
    // No listener, no kubeconfig: nothing written beside the scenario.
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "{files:?}");
}

#[test]
fn run_takes_the_seed_from_the_flag_else_the_scenario_else_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.yaml"), ONE_SEAT).unwrap();
    std::fs::write(
        dir.path().join("seeded.yaml"),
        format!("seed: 7\n{ONE_SEAT}"),
    )
    .unwrap();
    let seed = |args: &[&str]| {
        let mut all = vec!["--run", "--output", "json"];
        all.extend_from_slice(args);
        let (code, out, err) = simulate_in(dir.path(), &all);
        assert_eq!(code, Some(0), "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["seed"].clone()
    };
    assert_eq!(seed(&["--scenario", "s.yaml"]), 1);
    assert_eq!(seed(&["--scenario", "seeded.yaml"]), 7);
    assert_eq!(seed(&["--scenario", "seeded.yaml", "--seed", "9"]), 9);
}

#[test]
fn run_prints_a_table_per_flow_and_per_level() {
    let dir = tempfile::tempdir().unwrap();
    // A third thread: two wait for the one seat, longer than the wait limit now and then.
    let crowded = ONE_SEAT.replace("threads: 2", "threads: 3");
    std::fs::write(dir.path().join("s.yaml"), crowded).unwrap();
    let (code, out, err) = simulate_in(dir.path(), &["--run", "--scenario", "s.yaml"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "virtual-time run: 4s of the scenario on Kubernetes v1.34.0, seed 1",
        "{out}"
    );
    let header = lines
        .iter()
        .position(|l| l.starts_with("FLOW "))
        .unwrap_or_else(|| panic!("{out}"));
    let words = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(
        words(lines[header]),
        "FLOW PRIORITY LEVEL DISPATCHED REJECTED MEAN SEATS MEAN WAIT P99 WAIT"
    );
    // Dispatched, rejected by reason, mean seats (the one seat always busy), then the waits.
    let row = words(lines[header + 1]);
    assert!(row.starts_with("pair tight 5 2 time-out 1 "), "{out}");
    let levels = lines
        .iter()
        .position(|l| l.starts_with("PRIORITY LEVEL "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        words(lines[levels + 1]).starts_with("tight 1 5 2 time-out 1 "),
        "{out}"
    );
    assert!(out.contains("idle priority levels: exempt,"), "{out}");
}

#[test]
fn run_refuses_the_flags_of_a_served_cluster() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.yaml"), ONE_SEAT).unwrap();
    for flags in [
        &["--listen", "127.0.0.1:0"][..],
        &["--tls"],
        &["--replicas", "3"],
        &["--require-token"],
        &["--kubeconfig-out", "k"],
        &["--audit-log", "a.log"],
        &["--audit-webhook", "http://127.0.0.1:1/"],
    ] {
        let mut args = vec!["--run", "--scenario", "s.yaml"];
        args.extend_from_slice(flags);
        let (code, out, err) = simulate_in(dir.path(), &args);
        assert_eq!(code, Some(2), "{flags:?}: {out}{err}");
        assert!(
            err.contains("'--run' cannot be used with") && err.contains(flags[0]),
            "{flags:?}: {err}"
        );
    }
    // --output is --run's.
    let (code, _, err) = simulate_in(dir.path(), &["--output", "json"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--run"), "{err}");
}

#[test]
fn run_of_a_bad_scenario_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        ONE_SEAT.replace("priority_level: tight", "priority_level: loose"),
    )
    .unwrap();
    let (code, out, err) = simulate_in(dir.path(), &["--run", "--scenario", "bad.yaml"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("--scenario \"bad.yaml\"")
            && err.contains(
                "flow \"pair\": priority_level \"loose\" is not one of the scenario's priority_levels"
            ),
        "{err}"
    );
}

/// The shipped example of the simulator's page: with fair queuing the narrow and the wide client each get about
/// half of the 6 seats; with the former round robin the narrow one takes them all and the wide one times out.
#[test]
fn the_fair_queuing_example_shares_the_level_and_round_robin_starves_the_wide_client() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("config/scenarios/fair-queuing.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fq.yaml"), &text).unwrap();
    std::fs::write(
        dir.path().join("rr.yaml"),
        format!("dispatch: round-robin\n{text}"),
    )
    .unwrap();
    let flows = |file: &str| {
        let (code, out, err) = simulate_in(
            dir.path(),
            &["--run", "--output", "json", "--scenario", file],
        );
        assert_eq!(code, Some(0), "{err}");
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        let get = |name: &str| {
            report["flows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["name"] == name)
                .unwrap_or_else(|| panic!("{name}: {out}"))
                .clone()
        };
        (get("narrow"), get("wide"), out)
    };
    let (narrow, wide, out) = flows("fq.yaml");
    for f in [&narrow, &wide] {
        let seats = f["mean_executing_seats"].as_f64().unwrap();
        assert!((2.7..=3.0).contains(&seats), "{out}");
        assert_eq!(f["rejected"], serde_json::json!({}), "{out}");
    }
    let (narrow, wide, out) = flows("rr.yaml");
    assert_eq!(narrow["mean_executing_seats"], 6.0, "{out}");
    assert_eq!(wide["mean_executing_seats"], 0.0, "{out}");
    assert!(wide["rejected"]["time-out"].as_u64().unwrap() > 0, "{out}");
}
