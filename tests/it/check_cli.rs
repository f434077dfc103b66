//! `apf-monitor check`: the report and the Nagios-style exit status, on files, stdin and live targets.
use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

fn check(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("check")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn write_temp(dir: &tempfile::TempDir, name: &str, body: &[u8]) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

#[test]
fn a_healthy_capture_is_ok() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_temp(&dir, "metrics-1.35.txt", &common::capture("1.35"));
    let out = check(&["--file", &file], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("workload-low")
            && text.contains("v1.35.0")
            && text.trim_end().ends_with("OK"),
        "{text}"
    );
}

/// `check` under a pseudo-terminal (util-linux `script`, in every Debian), with `NO_COLOR` set or not.
fn check_on_a_terminal(file: &str, no_colour: bool) -> String {
    check_args_on_a_terminal(&format!("--file {file}"), no_colour)
}

/// `check ARGS` under a pseudo-terminal: what it writes to standard output and standard error, both the terminal.
fn check_args_on_a_terminal(args: &str, no_colour: bool) -> String {
    let command = format!("{} check {args}", env!("CARGO_BIN_EXE_apf-monitor"));
    let mut script = Command::new("script");
    script
        .args(["-qec", &command, "/dev/null"])
        .env_remove("NO_COLOR");
    if no_colour {
        script.env("NO_COLOR", "1");
    }
    let out = script.stdin(Stdio::null()).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_table_has_bars_and_colour_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_temp(&dir, "m.txt", &common::capture("1.35"));
    let piped = String::from_utf8_lossy(&check(&["--file", &file], None).stdout).into_owned();
    assert!(!piped.contains('\x1b') && !piped.contains('█'), "{piped}");
    let tty = check_on_a_terminal(&file, false);
    assert!(tty.contains("SEATS IN USE") && tty.contains('░'), "{tty}");
    assert!(tty.contains("\x1b[32mok\x1b[0m"), "{tty}");
    let no_colour = check_on_a_terminal(&file, true);
    assert!(no_colour.contains("SEATS IN USE"), "{no_colour}");
    assert!(!no_colour.contains('\x1b'), "{no_colour}");
}

/// The log is coloured on a terminal only, and never with `NO_COLOR`: `serve` for two seconds under a
/// pseudo-terminal, then with its standard error a pipe.
#[test]
fn the_log_has_colour_on_a_terminal_only() {
    let serve = format!(
        "timeout 2 {} serve --target http://127.0.0.1:1 --listen 127.0.0.1:0",
        env!("CARGO_BIN_EXE_apf-monitor")
    );
    let on_a_terminal = |no_colour: bool| {
        let mut script = Command::new("script");
        script
            .args(["-qec", &serve, "/dev/null"])
            .env_remove("NO_COLOR");
        if no_colour {
            script.env("NO_COLOR", "1");
        }
        let out = script.stdin(Stdio::null()).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tty = on_a_terminal(false);
    assert!(
        tty.contains("apf-monitor serving") && tty.contains('\x1b'),
        "{tty}"
    );
    let no_colour = on_a_terminal(true);
    assert!(no_colour.contains("apf-monitor serving"), "{no_colour}");
    assert!(!no_colour.contains('\x1b'), "{no_colour}");
    let piped = Command::new("timeout")
        .args(["2", env!("CARGO_BIN_EXE_apf-monitor"), "serve"])
        .args(["--target", "http://127.0.0.1:1", "--listen", "127.0.0.1:0"])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&piped.stderr);
    assert!(
        log.contains("apf-monitor serving") && !log.contains('\x1b'),
        "{log}"
    );
}

#[test]
fn json_output_has_the_status_shape() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_temp(&dir, "m.txt", &common::capture("1.29"));
    let out = check(&["--file", &file, "--output", "json"], None);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let level = v["apiservers"][0]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["priority_level"] == "workload-low")
        .unwrap();
    assert_eq!(level["limit_seats"], 54.0);
    assert_eq!(level["nominal_limit_seats"], 245.0);
    assert_eq!(level["headroom_seats"], 53.0);
    assert_eq!(level["status"], "ok");
    for key in [
        "executing_seats",
        "headroom_ratio",
        "inqueue_requests",
        "queue_capacity_requests",
        "fullest_queue_requests",
        "rejected_per_second",
        "seconds_to_exhaustion",
        "top_flows",
    ] {
        assert!(level.get(key).is_some(), "missing {key}");
    }
    assert!(v["alerts"].is_array());
    assert_eq!(v["apiservers"][0]["kubernetes_version"], "v1.29.5");
}

#[test]
fn low_headroom_is_a_warning_and_exhaustion_with_queueing_is_critical() {
    let dir = tempfile::tempdir().unwrap();
    let low = b"apiserver_flowcontrol_current_limit_seats{priority_level=\"workload-low\"} 100\n\
        apiserver_flowcontrol_current_executing_seats{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 90\n\
        apiserver_flowcontrol_current_inqueue_requests{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 0\n";
    let out = check(&["--file", &write_temp(&dir, "low.txt", low)], None);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let full = b"apiserver_flowcontrol_current_limit_seats{priority_level=\"workload-low\"} 100\n\
        apiserver_flowcontrol_current_executing_seats{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 100\n\
        apiserver_flowcontrol_current_inqueue_requests{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 12\n";
    let out = check(&["--file", &write_temp(&dir, "full.txt", full)], None);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn requests_waiting_are_critical_with_or_without_dumps() {
    // 64 requests wait in workload-low and 3 seats are free by the gauge: APF queues a request only when no seat
    // fits it, so the level is out of seats for them.
    let dir = tempfile::tempdir().unwrap();
    let waiting = b"apiserver_flowcontrol_current_limit_seats{priority_level=\"workload-low\"} 100\n\
        apiserver_flowcontrol_current_executing_seats{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 97\n\
        apiserver_flowcontrol_current_inqueue_requests{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 64\n";
    let out = check(&["--file", &write_temp(&dir, "waiting.txt", waiting)], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("CRITICAL APFHeadroomExhausted workload-low"),
        "{text}"
    );

    // The same replica live, with its debug dumps (the 2023 layouts of the Kubernetes docs) read too: the waiting
    // requests are 1 seat wide and 3 seats are free by the gauge, and it is still CRITICAL.
    let waiting_seats = [
        waiting.as_slice(),
        b"apiserver_flowcontrol_current_inqueue_seats{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 64\n",
    ]
    .concat();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dump = |name: &str| common::fixture_text(&format!("k8swebsite-2023-dump_{name}.txt"));
    let (levels, queues, requests) = (dump("priority_levels"), dump("queues"), dump("requests"));
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || async move { waiting_seats }),
        )
        .route(
            "/debug/api_priority_and_fairness/dump_priority_levels",
            axum::routing::get(move || async move { levels }),
        )
        .route(
            "/debug/api_priority_and_fairness/dump_queues",
            axum::routing::get(move || async move { queues }),
        )
        .route(
            "/debug/api_priority_and_fairness/dump_requests",
            axum::routing::get(move || async move { requests }),
        );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, app).await });
    let out = check(&["--target", &format!("http://{addr}")], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("CRITICAL APFHeadroomExhausted workload-low")
            && text.contains("flow service-accounts/system:serviceaccount:default:loadtest"),
        "the dumps were read and the level is exhausted: {text}"
    );
}

#[test]
fn the_eks_guide_paste_is_critical_with_limit_245_and_headroom_100() {
    let paste = common::fixture_text("snippet-eks-guide-apf-paste.txt");
    let out = check(&["--file", "-", "--output", "json"], Some(paste.as_bytes()));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let server = &v["apiservers"][0];
    let level = &server["levels"][0];
    assert_eq!(level["priority_level"], "workload-low");
    assert_eq!(
        level["limit_seats"], 245.0,
        "a series pasted twice is one series"
    );
    assert_eq!(level["headroom_seats"], 100.0);
    assert_eq!(level["inqueue_requests"], 10.0);
    assert_eq!(level["status"], "critical");
    assert_eq!(level["rejected_total"]["time-out"], 100.0);
    let errors: Vec<&str> = server["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert_eq!(
        errors,
        ["1 series appeared more than once: each was counted once, with its last value"],
        "the % prompts are not unreadable lines"
    );
    let alerts: Vec<&str> = v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["labels"]["alertname"].as_str())
        .collect();
    assert!(alerts.contains(&"APFHeadroomExhausted"), "{alerts:?}");

    let out = check(&["--file", "-"], Some(paste.as_bytes()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("rejected since the replica started: time-out 100 (one scrape: no rate)"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("CRITICAL"), "{text}");
}

#[test]
fn no_apf_metrics_or_unreadable_input_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    // Kubernetes 1.18 ran with APF off.
    let out = check(
        &[
            "--file",
            &write_temp(&dir, "m118.txt", &common::capture("1.18")),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    let out = check(&["--file", "/nonexistent/metrics.txt"], None);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/metrics.txt"));
    let out = check(
        &[
            "--file",
            &write_temp(&dir, "garbage.txt", b"<html>login</html>\n\xff\xfe\n"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn a_kubectl_paste_on_stdin_is_read() {
    let paste = common::fixture_text("snippet-eks-1.24-request_concurrency_limit.txt");
    let out = check(&["--file", "-"], Some(paste.as_bytes()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("workload-low") && text.contains("245"),
        "{text}"
    );
    assert!(
        !text.contains("error"),
        "the shell prompt line of a paste is not an error: {text}"
    );
}

#[test]
fn an_unreachable_target_is_unknown() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = check(&["--target", &format!("http://127.0.0.1:{port}")], None);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cannot connect"), "{text}");
    // The replica-wide alert has no level: its line has no empty word before the colon.
    assert!(
        text.contains(&format!(
            "WARNING APFScrapeFailing: 127.0.0.1:{port}: /metrics cannot be scraped"
        )),
        "{text}"
    );
    assert!(!text.contains(" : "), "{text}");
}

/// A URL without its scheme is refused for what is missing, on the command line and in the config alike.
#[test]
fn a_url_without_a_scheme_is_told_to_start_with_http() {
    for flag in ["--target", "--prometheus"] {
        let out = check(&[flag, "127.0.0.1:8001"], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("URL \"127.0.0.1:8001\" must start with http:// or https://")
                && !err.contains("relative URL"),
            "{flag}: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    for section in ["static", "prometheus"] {
        let config = write_temp(
            &dir,
            "apf-monitor.yaml",
            format!("targets:\n  {section}:\n    - url: 127.0.0.1:8001\n").as_bytes(),
        );
        let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["serve", "--check-config", "--config", &config])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "targets.{section}[0].url: URL \"127.0.0.1:8001\" must start with http:// or https:// at line 3"
            )),
            "{err}"
        );
    }
}

/// A URL that answers with a web page (a wrong port, a dashboard's URL) is told as such, with its status, its
/// content type and what to check, never pasted as markup; `--prometheus` says it once, in the source's row.
#[test]
fn an_html_page_is_told_as_one_and_said_once() {
    for status in [404, 200] {
        let url = common::html_server(status);
        let out = check(&["--target", &url], None);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{text}");
        assert!(
            text.contains(&format!(
                "error: metrics: {}HTTP {status}: an HTML page (text/html;charset=utf-8): is this the \
                 apiserver's URL?",
                if status == 200 {
                    "cannot read the response: "
                } else {
                    ""
                }
            )),
            "{text}"
        );
        assert!(
            !text.contains("Nothing matches") && !text.contains("<html"),
            "{text}"
        );

        let out = check(&["--prometheus", &url], None);
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(3), "{text}{err}");
        assert!(
            text.contains(&format!(
                "HTTP {status}: an HTML page (text/html;charset=utf-8)"
            )) && text.contains("is this the Prometheus URL?")
                && !text.contains("Nothing matches")
                && !text.contains("at byte"),
            "{text}"
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.trim_start().starts_with("error: prometheus:"))
                .count(),
            1,
            "{text}"
        );
        assert!(!err.contains("HTML"), "said again on stderr: {err}");
    }
}

#[test]
fn a_live_target_under_a_storm_is_critical_and_idle_is_ok() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (source, expected) in [(ScenarioSource::Idle, 0), (ScenarioSource::Storm, 2)] {
        let scenario = Scenario::load(&source).unwrap();
        let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(33, 0), scenario)).unwrap();
        for _ in 0..300 {
            sim.step(Duration::from_millis(100));
        }
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        rt.spawn(apf_sim::serve(listener, sim));
        let out = check(&["--target", &format!("http://{addr}")], None);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(expected), "{text}");
        if expected == 2 {
            // The queues come from dump_queues and the flows behind them from dump_requests.
            assert!(text.contains("flow service-accounts/"), "{text}");
            // The same rules as the daemon, with the concrete fix.
            assert!(
                text.contains("CRITICAL APFHeadroomExhausted workload-low"),
                "{text}"
            );
            assert!(text.contains("fix: "), "{text}");
            // The fix was checked against the cluster's own FlowSchemas with kube-apiserver's matching.
            assert!(
                text.contains(
                    "checked with kube-apiserver's matching on the cluster's FlowSchemas"
                ),
                "{text}"
            );
        }
    }
}
