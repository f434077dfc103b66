//! `apf-monitor report` against a real Prometheus (Debian's `prometheus`) holding a past incident: two simulated
//! 1.34 replicas run 25 simulated minutes, one of them through a storm of LISTs on workload-low; their `/metrics`
//! every 15 s, stamped with the time they were rendered three hours ago, are backfilled with the package's
//! `promtool`. The report must find the incident on the right replica and level, date the first 429 within two
//! samples of the simulator's own counters, count every rejection, order the flow schemas by their rejections, give
//! the replayed alerts' lead, say nothing of the calm replica, and write a page a browser renders. Bad input (a dead
//! or partial Prometheus, an empty window, a step too fine) gets a message and exit status 1.
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::external;
use apf_sim::{KubeVersion, Scenario, SimOptions, Simulator};
use serde_json::Value;

const STORM: &str = "duration: 3600s
flows:
  - name: agents
    flow_schema: service-accounts
    user: system:serviceaccount:monitoring:agent
    verb: list
    resource: pods
    seats: 10
    duration: 2s
    rate: [ {at: 0s, rps: 2}, {at: 600s, rps: 2}, {at: 900s, rps: 60}, {at: 1080s, rps: 60}, {at: 1100s, rps: 1} ]
  - name: operator
    flow_schema: global-default
    user: alice
    verb: get
    resource: configmaps
    namespace: default
    duration: 50ms
    rate: [ {at: 0s, rps: 3} ]
";

const SECONDS: u64 = 1500;
const SCRAPE: u64 = 15;

/// A replica's samples of the families apf-monitor reads, as OpenMetrics lines at `time` with the scrape's labels.
fn stamp(metrics: &str, instance: &str, time: u64, out: &mut String) {
    for line in metrics.lines() {
        if !(line.starts_with("apiserver_flowcontrol_")
            || line.starts_with("kubernetes_build_info"))
        {
            continue;
        }
        let labels = format!("job=\"apiserver\",cluster=\"prod\",instance=\"{instance}\"");
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        let series = match name_labels.split_once('{') {
            Some((name, rest)) => format!("{name}{{{labels},{rest}"),
            None => format!("{name_labels}{{{labels}}}"),
        };
        out.push_str(&format!("{series} {value} {time}\n"));
    }
}

fn rejected(sim: &Simulator, level: &str) -> f64 {
    sim.truth()
        .iter()
        .filter(|l| l.priority_level == level)
        .flat_map(|l| l.rejected_total.values())
        .map(|n| *n as f64)
        .sum()
}

fn report(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("report")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rfc3339(unix: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(unix)).to_string()
}

fn unix(text: &str) -> u64 {
    humantime::parse_rfc3339(text)
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn report_finds_the_incident_in_prometheus_history_and_when_the_rules_would_have_warned() {
    let scenario = Scenario::from_yaml(STORM).unwrap();
    let stormy =
        Simulator::try_new(SimOptions::new(KubeVersion::new(34, 0), scenario.clone())).unwrap();
    let calm = Simulator::try_new(SimOptions::new(
        KubeVersion::new(34, 0),
        scenario.scaled(0.05),
    ))
    .unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let base = (now - 3 * 3600) / SCRAPE * SCRAPE;
    let mut history = String::new();
    let mut first_rejection = None;
    for tick in 0..=SECONDS * 4 {
        if tick > 0 {
            stormy.step(Duration::from_millis(250));
            calm.step(Duration::from_millis(250));
        }
        let t = tick / 4;
        if first_rejection.is_none() && tick % 4 == 0 && rejected(&stormy, "workload-low") > 0.0 {
            first_rejection = Some(base + t);
        }
        if tick % (4 * SCRAPE) == 0 {
            stamp(
                &stormy.render_metrics(),
                "10.0.0.1:6443",
                base + t,
                &mut history,
            );
            stamp(
                &calm.render_metrics(),
                "10.0.0.2:6443",
                base + t,
                &mut history,
            );
        }
    }
    history.push_str("# EOF\n");
    let first_rejection = first_rejection.expect("the storm rejects requests");
    let total = rejected(&stormy, "workload-low");
    let calm_rejected: f64 = calm
        .truth()
        .iter()
        .flat_map(|l| l.rejected_total.values())
        .map(|n| *n as f64)
        .sum();
    assert_eq!(calm_rejected, 0.0, "the calm replica must not reject");

    let prom = external::prometheus_history(&history).await;
    let window = [
        "--prometheus",
        &prom.url,
        "--selector",
        "{job=\"apiserver\"}",
        "--from",
        &rfc3339(base - 60),
        "--to",
        &rfc3339(base + SECONDS + 60),
    ];
    let html = tempfile::NamedTempFile::with_suffix(".html").unwrap();
    let html_path = html.path().to_str().unwrap().to_string();
    let (code, out, err) =
        report(&[&window[..], &["--output", "json", "--html", &html_path]].concat());
    assert_eq!(code, Some(0), "{out}{err}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    // The data's own resolution.
    assert_eq!(r["step"], "15s", "{out}");
    assert_eq!(r["replicas"], 2);
    let incidents = r["incidents"].as_array().unwrap();
    assert!(!incidents.is_empty(), "{out}");
    // Quiet about the calm replica; the storm's level first.
    assert!(
        incidents
            .iter()
            .all(|i| i["apiserver"] == "10.0.0.1:6443" && i["cluster"] == "prod"),
        "{out}"
    );
    let worst = &incidents[0];
    assert_eq!(worst["priority_level"], "workload-low", "{out}");
    let found = unix(worst["first_rejection"].as_str().unwrap());
    assert!(
        found >= first_rejection && found - first_rejection <= 2 * SCRAPE,
        "first 429 at {} by the simulator, {} by the report",
        rfc3339(first_rejection),
        rfc3339(found)
    );
    // Every rejection of the level, counted once across its incidents.
    let counted: f64 = incidents
        .iter()
        .filter(|i| i["priority_level"] == "workload-low")
        .map(|i| i["rejected_total"].as_f64().unwrap())
        .sum();
    assert_eq!(counted, total, "{out}");
    let schemas = worst["flow_schemas"].as_array().unwrap();
    assert_eq!(schemas[0]["flow_schema"], "service-accounts", "{out}");
    let by_schema: Vec<f64> = schemas
        .iter()
        .map(|s| s["rejected"].as_f64().unwrap())
        .collect();
    assert!(by_schema.windows(2).all(|w| w[0] >= w[1]), "{by_schema:?}");
    assert!(worst["peak_rejected_per_second"].as_f64().unwrap() > 0.0);
    assert!(
        worst["max_waiting_requests"].as_f64().unwrap() > 0.0,
        "{out}"
    );
    assert!(worst["recovered_at"].is_string(), "{out}");
    // The replayed rules: each lead is the first 429 less its firing; the headroom warning came first.
    let alerts = worst["alerts"].as_array().unwrap();
    for a in alerts {
        if let Some(fired) = a["fired_at"].as_str() {
            assert_eq!(
                a["lead_seconds"].as_f64().unwrap(),
                found as f64 - unix(fired) as f64,
                "{a}"
            );
        }
    }
    let headroom = alerts
        .iter()
        .find(|a| a["alertname"] == "APFHeadroomLow")
        .unwrap_or_else(|| panic!("APFHeadroomLow replayed: {out}"));
    assert!(
        headroom["lead_seconds"].as_f64().unwrap() > 0.0,
        "{headroom}"
    );
    assert!(
        unix(worst["headroom_low_since"].as_str().unwrap())
            <= unix(headroom["pending_at"].as_str().unwrap()),
        "{out}"
    );
    assert!(
        alerts
            .iter()
            .any(|a| a["alertname"] == "APFRequestsRejected"),
        "{out}"
    );
    assert!(worst["remediation"].is_string(), "{out}");

    // The same store given twice (an HA pair): each replica read once, the same incidents and alerts.
    let (code, twice, err) = report(
        &[
            &window[..],
            &["--prometheus", &prom.url, "--output", "json"],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "{err}");
    let twice: Value = serde_json::from_str(&twice).unwrap();
    assert_eq!(twice["replicas"], 2);
    assert_eq!(twice["incidents"], r["incidents"]);

    // With the PriorityLevelConfigurations in force, the queues' capacity: workload-low's 128 queues of 50 (the
    // 1.33 defaults the simulated 1.34 serves).
    let objects = tempfile::NamedTempFile::new().unwrap();
    let mut plcs = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(
            std::fs::File::open(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/defaults-1.33-prioritylevelconfigurations.yaml.gz"
            ))
            .unwrap(),
        ),
        &mut plcs,
    )
    .unwrap();
    std::fs::write(objects.path(), plcs).unwrap();
    let (code, with_objects, err) = report(
        &[
            &window[..],
            &[
                "--objects",
                objects.path().to_str().unwrap(),
                "--output",
                "json",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "{err}");
    let with_objects: Value = serde_json::from_str(&with_objects).unwrap();
    assert_eq!(
        with_objects["incidents"][0]["queue_capacity_requests"], 6400.0,
        "{with_objects}"
    );
    assert_eq!(worst["queue_capacity_requests"], Value::Null);

    // The same for a person, and for a postmortem.
    let (code, table, err) = report(&window);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        table.contains("prod/10.0.0.1:6443") && table.contains("workload-low"),
        "{table}"
    );
    assert!(
        table.contains("APFHeadroomLow") && table.contains("before the first 429"),
        "{table}"
    );
    assert!(!table.contains("10.0.0.2"), "{table}");
    // Its reader gone (`report | head -0`): it ends as cat would, by SIGPIPE, without a panic.
    let closed = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("report")
        .args(window)
        .stdout(crate::common::closed_pipe())
        .output()
        .unwrap();
    crate::common::assert_ended_by_sigpipe("report", closed.status, &closed.stderr);
    let (code, markdown, _) = report(&[&window[..], &["--output", "markdown"]].concat());
    assert_eq!(code, Some(0));
    assert!(
        markdown.contains("| Replica | Priority level |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("### 1. `workload-low` on `prod/10.0.0.1:6443`"),
        "{markdown}"
    );

    // The page: self-contained, naming level, replica and cluster, with a chart a browser draws.
    let page = std::fs::read_to_string(html.path()).unwrap();
    assert!(page.contains("<svg") && page.contains("workload-low"));
    assert!(page.contains("10.0.0.1:6443") && page.contains("<code>prod</code>"));
    // The words' code spans are code on the page, not dropped backticks (the unit tests of the page give each
    // sentence that has one; this history may not need them).
    assert!(!page.contains('`'), "{page}");
    assert!(
        !page.contains("not reached") || page.contains("its <code>for</code> not reached"),
        "{page}"
    );
    for outside in [
        "<script",
        "<link",
        "src=\"http",
        "href=\"http",
        "@import",
        "url(",
    ] {
        assert!(!page.contains(outside), "{outside} in the page");
    }
    let shot = tempfile::tempdir().unwrap();
    let png = shot.path().join("report.png");
    let out = external::chromium(
        &format!("file://{html_path}"),
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1000,1400",
        ],
    )
    .await;
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "chromium drew {size} bytes: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A window with no apiserver series: said, not an empty report.
    let (code, _, err) = report(&[
        "--prometheus",
        &prom.url,
        "--selector",
        "{job=\"apiserver\"}",
        "--from",
        &rfc3339(base - 7200),
        "--to",
        &rfc3339(base - 3600),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no apiserver series"), "{err}");
    // A step too fine for the window: said, with a step that works.
    let (code, _, err) = report(&["--prometheus", &prom.url, "--from", "-30d", "--step", "1s"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("at most 50000: give --step 52s"), "{err}");
}

#[tokio::test]
async fn a_dead_or_partial_prometheus_is_an_error_that_names_it() {
    // Nothing listens here.
    let dead = format!("http://127.0.0.1:{}", external::free_port());
    let (code, _, err) = report(&["--prometheus", &dead, "--from", "-1h"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&dead), "{err}");

    // A Thanos querier with a store down answers with warnings: numbers from some stores only are not a report.
    let app = axum::Router::new().fallback(|| async {
        axum::Json(serde_json::json!({
            "status": "success",
            "data": {"resultType": "vector", "result": []},
            "warnings": ["store 10.0.0.9:10901 unreachable"]
        }))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (code, _, err) = tokio::task::spawn_blocking({
        let url = url.clone();
        move || report(&["--prometheus", &url, "--from", "-1h"])
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("partial answer") && err.contains("store 10.0.0.9:10901"),
        "{err}"
    );
}

/// A URL that answers with a web page (a dashboard, a wrong port) is said to be one, with its status and content
/// type and what to check: not a parse error at byte 0, not the page's markup.
#[test]
fn an_html_page_instead_of_prometheus_is_told_as_one() {
    for status in [200, 404] {
        let url = crate::common::html_server(status);
        let (code, _, err) = report(&["--prometheus", &url, "--from", "-1h"]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&url)
                && err.contains(&format!(
                    "HTTP {status}: an HTML page (text/html;charset=utf-8)"
                ))
                && err.contains("is this the Prometheus URL?")
                && !err.contains("at byte")
                && !err.contains("Nothing matches"),
            "{err}"
        );
    }
}

/// A Prometheus that accepts the connection and never answers: the error names that Prometheus and gives advice
/// `report` can follow (its own --timeout), not the daemon's (scrape.timeout) nor a word about an apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_prometheus_is_named_with_advice_that_works_for_report() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    for step in [&[][..], &["--step", "30s"][..]] {
        let args: Vec<String> = ["--prometheus", &url, "--from", "-1h", "--timeout", "1s"]
            .iter()
            .chain(step)
            .map(|s| s.to_string())
            .collect();
        let started = std::time::Instant::now();
        let (code, _, err) = tokio::task::spawn_blocking(move || {
            report(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap();
        assert_eq!(code, Some(1), "{step:?}: {err}");
        assert!(
            err.contains(&format!(
                "Prometheus {url}: no answer to a query within 1s: the Prometheus is slow or unreachable; give a \
                 longer --timeout"
            )),
            "{step:?}: {err}"
        );
        assert!(
            !err.contains("apiserver") && !err.contains("scrape.timeout"),
            "{step:?}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }
}
