//! `apf-monitor demo`, as a newcomer runs it: it says where to look and prints a live line per priority level.
use std::process::Command;

#[test]
fn demo_prints_where_to_look_and_a_line_per_level_under_load() {
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "1s",
            "--duration",
            "8s",
            "--scenario",
            "storm",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("apf-monitor metrics:  http://127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("status page:"), "{text}");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("] workload-low "))
        .collect();
    assert!(lines.len() >= 3, "{text}");
    for level in [
        "catch-all",
        "global-default",
        "leader-election",
        "node-high",
        "system",
        "workload-high",
    ] {
        assert!(
            text.contains(&format!("] {level} ")),
            "{level} missing:\n{text}"
        );
    }
    assert!(
        !text.contains("] exempt "),
        "exempt has no limit to summarise"
    );
    // Under the storm, seats are in use in workload-low by the end.
    let last = lines.last().unwrap();
    let in_use: f64 = last
        .split("in use")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(in_use > 0.0, "{last}");
}

#[test]
fn demo_rejects_a_bad_version_or_scenario_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["demo", "--kubernetes-version", "1.12", "--duration", "1s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kubernetes-version"));
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args([
            "demo",
            "--scenario",
            "/nonexistent/scenario.yaml",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/scenario.yaml"));
}
