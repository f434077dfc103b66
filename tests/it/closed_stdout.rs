//! A closed standard output (`apf-monitor ... | head -1` once head has exited) ends every subcommand as it ends
//! `cat` and `kubectl`: quietly, by SIGPIPE, never with a panic (exit 101); the long-running ones (`simulate`,
//! `demo`) also when the reader goes after they have said everything, stopping what they run first.
use crate::common;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn apf_monitor() -> Command {
    Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
}

/// Waits for `child` to exit, at most `patience`; kills it otherwise.
fn exit_of(mut child: Child, patience: Duration) -> (std::process::ExitStatus, Vec<u8>) {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = Vec::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_end(&mut e, &mut err).unwrap();
            }
            return (status, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {patience:?} after its reader had gone");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_command_that_prints_ends_by_sigpipe_on_a_closed_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let fs = common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let metrics = dir.path().join("metrics.txt");
    std::fs::write(&metrics, common::capture("1.35")).unwrap();
    let metrics = metrics.to_str().unwrap();
    let audit = dir.path().join("audit.log");
    std::fs::write(
        &audit,
        r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/pods","verb":"list","user":{"username":"alice","groups":["system:authenticated"]},"stageTimestamp":"2026-11-24T10:00:00.000000Z","responseStatus":{"code":429}}"#,
    )
    .unwrap();
    let audit = audit.to_str().unwrap();
    let objects = ["-f", fs.as_str(), "-f", pl.as_str()];
    let commands: Vec<Vec<&str>> = vec![
        vec!["check", "--file", metrics],
        vec!["check", "--file", metrics, "--output", "json"],
        vec![
            "check",
            "--review",
            "--objects",
            &fs,
            "--objects",
            &pl,
            "--server-concurrency",
            "600",
        ],
        vec!["plan", "-f", &pl, "--set", "workload-low.shares=150"],
        vec![
            "plan",
            "-f",
            &pl,
            "--set",
            "workload-low.shares=150",
            "--output",
            "json",
        ],
        vec![
            "plan",
            "-f",
            &pl,
            "--set",
            "workload-low.shares=150",
            "--output",
            "yaml",
        ],
        vec![
            "plan",
            "-f",
            &pl,
            "--set",
            "workload-low.shares=150",
            "--output",
            "manifests",
        ],
        [
            &["match"],
            &objects[..],
            &["--user", "alice", "--verb", "list", "--resource", "pods"],
        ]
        .concat(),
        [
            &["match"],
            &objects[..],
            &[
                "--user",
                "alice",
                "--verb",
                "list",
                "--resource",
                "pods",
                "--output",
                "json",
            ],
        ]
        .concat(),
        vec!["audit", "--file", audit, "--objects", &fs, "--objects", &pl],
        vec![
            "audit",
            "--file",
            audit,
            "--objects",
            &fs,
            "--objects",
            &pl,
            "--output",
            "json",
        ],
        vec!["serve", "--check-config", "--target", "http://127.0.0.1:1"],
    ];
    let closed = common::closed_pipe();
    for args in commands {
        let child = apf_monitor()
            .args(&args)
            .stdout(Stdio::from(closed.try_clone().unwrap()))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (status, err) = exit_of(child, Duration::from_secs(30));
        common::assert_ended_by_sigpipe(&args.join(" "), status, &err);
    }
}

/// `simulate 2>&1 | head -3`: both outputs to the pipe, its reader gone; and a reader that goes once everything
/// is said, while the simulator serves on.
#[test]
fn simulate_ends_by_sigpipe_when_its_reader_goes() {
    let dir = tempfile::tempdir().unwrap();
    let closed = common::closed_pipe();
    let child = apf_monitor()
        .args([
            "simulate",
            "--scenario",
            "idle",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig-out",
        ])
        .arg(dir.path().join("first.kubeconfig"))
        .stdout(Stdio::from(closed.try_clone().unwrap()))
        .stderr(Stdio::from(closed.try_clone().unwrap()))
        .spawn()
        .unwrap();
    let (status, _) = exit_of(child, Duration::from_secs(30));
    common::assert_ended_by_sigpipe("simulate 2>&1 | head -0", status, &[]);

    let mut child = apf_monitor()
        .args([
            "simulate",
            "--scenario",
            "idle",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig-out",
        ])
        .arg(dir.path().join("second.kubeconfig"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its last line: everything is said.
    read_until(
        &mut child,
        |l| l.contains("apf-monitor check --kubeconfig"),
        "simulate ended before saying how to scrape",
    );
    let (status, err) = exit_of(child, Duration::from_secs(10));
    common::assert_ended_by_sigpipe("simulate | head", status, &err);
}

/// The demo with its reader gone, from the start or after its opening lines: it stops as Ctrl-C stops it (its
/// kubeconfig and tokens removed) and ends by SIGPIPE.
#[test]
fn demo_ends_by_sigpipe_when_its_reader_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = || {
        let mut c = apf_monitor();
        c.args([
            "demo",
            "--scenario",
            "idle",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "1s",
        ])
        .env("TMPDIR", tmp.path())
        .stderr(Stdio::piped());
        c
    };
    let closed = common::closed_pipe();
    let child = demo()
        .stdout(Stdio::from(closed.try_clone().unwrap()))
        .spawn()
        .unwrap();
    let (status, err) = exit_of(child, Duration::from_secs(60));
    common::assert_ended_by_sigpipe("demo | head -0", status, &err);

    let mut child = demo().stdout(Stdio::piped()).spawn().unwrap();
    read_until(
        &mut child,
        |l| l.starts_with("Every "),
        "the demo ended before its opening was said",
    );
    let (status, err) = exit_of(child, Duration::from_secs(30));
    common::assert_ended_by_sigpipe("demo | head", status, &err);
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the demo left {left:?}");
}

/// Reads the child's standard output up to the first line `last` accepts, then goes, as `head` does: the pipe's
/// read end is closed.
fn read_until(child: &mut std::process::Child, last: impl Fn(&str) -> bool, ended_early: &str) {
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while !last(&lines.next().expect(ended_early).unwrap()) {}
}
