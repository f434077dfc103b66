//! `apf-monitor simulate` as a person runs it, twice in one directory: the second is refused while the first runs,
//! instead of overwriting its kubeconfig.
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
