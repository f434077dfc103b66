//! `apf-monitor demo`, as a newcomer runs it: a simulated cluster of three replicas found from its EndpointSlices,
//! where to look, and live lines for what is not OK or changed among the levels of the hot replica and the tightest
//! level of the others, each status with the rule behind it.
use std::process::Command;

/// (replica, priority level) of a live line: `[  10s] 127.0.0.2:41231 workload-low    limit ...`.
fn replica_and_level(line: &str) -> Option<(&str, &str)> {
    let mut words = line.split_once(']')?.1.split_whitespace();
    Some((words.next()?, words.next()?))
}

#[test]
fn demo_prints_where_to_look_and_what_is_not_ok_or_changed_with_its_rule() {
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
    // Three replicas, discovered: each line names the replica it is about.
    let replicas: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("replica "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(replicas.len(), 3, "{text}");
    assert!(text.contains("(the hot one)"), "{text}");
    let seen: Vec<(&str, &str)> = text.lines().filter_map(replica_and_level).collect();
    for r in &replicas {
        assert!(
            seen.iter().any(|(replica, _)| replica == r),
            "no line for {r}:\n{text}"
        );
    }
    let hot = replicas[0];
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| replica_and_level(l) == Some((hot, "workload-low")))
        .collect();
    assert!(lines.len() >= 3, "{text}");
    // Every level of the hot replica is shown at first sight: a line, or named among the idle ones.
    let idle: Vec<&str> = text
        .lines()
        .find_map(|l| l.split_once(&format!("{hot} OK and idle: ")))
        .map(|(_, names)| names.split(" (").next().unwrap_or("").split(", ").collect())
        .unwrap_or_default();
    for level in [
        "catch-all",
        "global-default",
        "leader-election",
        "node-high",
        "system",
        "workload-high",
    ] {
        assert!(
            seen.contains(&(hot, level)) || idle.contains(&level),
            "{level} missing:\n{text}"
        );
    }
    // What stays OK is not repeated every interval (8 of them): only what is not OK, or changed.
    let ticks = text
        .lines()
        .filter(|l| l.starts_with('['))
        .filter_map(|l| l.split(']').next())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    for level in [
        "catch-all",
        "leader-election",
        "node-high",
        "system",
        "workload-high",
    ] {
        let ok_lines = text
            .lines()
            .filter(|l| replica_and_level(l) == Some((hot, level)) && l.contains("  OK"))
            .count();
        assert!(ok_lines * 2 < ticks, "{level} repeated while OK:\n{text}");
    }
    // A status names the rule behind it, and what that rule read is said under the line where it appears.
    for line in text
        .lines()
        .filter(|l| l.contains("  WARNING") || l.contains("  CRITICAL"))
    {
        let after = line
            .split("  WARNING ")
            .nth(1)
            .or_else(|| line.split("  CRITICAL ").nth(1));
        assert!(
            after.is_some_and(|r| r.starts_with("APF")),
            "no rule named: {line}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("        APF") && l.contains(": ")),
        "no rule's reading under a status:\n{text}"
    );
    assert!(
        !text.contains(" exempt "),
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
