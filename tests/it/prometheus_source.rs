//! The Prometheus source: a real Prometheus (Debian's `prometheus`) scrapes three simulated apiservers of two
//! versions, labelled with two clusters; apf-monitor reads them through Prometheus' HTTP API.
//! - `check --prometheus` reports, per cluster and replica, exactly the limits and seats each simulator serves,
//!   worst first, with the worst exit status.
//! - `serve --prometheus` exports them with a `cluster` label, rejection rates from the first round, alerts that
//!   carry the cluster to a webhook; a Prometheus that is down or answers errors is counted and shown while the
//!   daemon goes on, and a replica Prometheus no longer holds leaves the export.
use crate::common;

use apf_monitor::values;
use std::process::Command;
use std::time::Duration;

use crate::common::external;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
use serde_json::Value;

fn sim(minor: u32, scenario: ScenarioSource) -> Simulator {
    Simulator::try_new(SimOptions::new(
        KubeVersion::new(minor, 0),
        Scenario::load(&scenario).unwrap(),
    ))
    .unwrap()
}

/// A 10 s analysis window, so that a Prometheus a few seconds old holds a whole window.
fn window_config() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "analysis:\n  window: 10s\n").unwrap();
    file
}

fn check(args: &[&str]) -> (Option<i32>, String) {
    let config = window_config();
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("check")
        .arg("--config")
        .arg(config.path())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A real Prometheus scraping `a` as cluster a and `b` as cluster b, once it holds a window (10 s) of each.
async fn fleet_prometheus(a: &[&str], b: &[&str]) -> external::Process {
    let host = |u: &&str| format!("'{}'", u.trim_start_matches("http://"));
    let list = |urls: &[&str]| urls.iter().map(host).collect::<Vec<_>>().join(", ");
    let scrape_configs = format!(
        "  - job_name: apiserver\n    static_configs:\n      - targets: [{}]\n        labels: {{cluster: a}}\n      \
         - targets: [{}]\n        labels: {{cluster: b}}\n",
        list(a),
        list(b)
    );
    let prom = external::prometheus_with(&scrape_configs, "groups: []\n").await;
    let count = a.len() + b.len();
    let ready = common::eventually(Duration::from_secs(60), || async {
        let up =
            external::prom_query(&prom, r#"count_over_time(up{job="apiserver"}[1m]) >= 12"#).await;
        (up.len() == count).then_some(())
    })
    .await;
    assert!(
        ready.is_some(),
        "Prometheus did not scrape the replicas:\n{}",
        prom.log()
    );
    prom
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_a_fleet_through_prometheus() {
    // Cluster a: one 1.34 replica under a storm. Cluster b: two idle 1.29 replicas.
    let (storm, idle1, idle2) = (
        sim(34, ScenarioSource::Storm),
        sim(29, ScenarioSource::Idle),
        sim(29, ScenarioSource::Idle),
    );
    let _clock = storm.spawn_clock(Duration::from_millis(100));
    let urls = [
        common::serve_sim(&storm).await,
        common::serve_sim(&idle1).await,
        common::serve_sim(&idle2).await,
    ];
    let host = |u: &str| u.trim_start_matches("http://").to_string();
    let prom = fleet_prometheus(&[&urls[0]], &[&urls[1], &urls[2]]).await;

    let (code, out) = check(&["--prometheus", &prom.url, "--output", "json"]);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    // The storm makes cluster a critical: the worst status, and its replica first.
    assert_eq!(code, Some(2), "{out}");
    let apiservers = report["apiservers"].as_array().unwrap();
    assert_eq!(apiservers.len(), 3, "{out}");
    assert_eq!(apiservers[0]["cluster"], "a", "{out}");
    assert_eq!(apiservers[0]["apiserver"], host(&urls[0]));
    let clusters: Vec<&str> = apiservers
        .iter()
        .map(|a| a["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(
        clusters.iter().filter(|c| **c == "b").count(),
        2,
        "{clusters:?}"
    );
    // Exactly what each simulator serves: limit, seats in use, headroom.
    for (a, sim) in [(&apiservers[1], &idle1), (&apiservers[2], &idle2)] {
        let truth = sim.truth();
        for level in a["levels"].as_array().unwrap() {
            let name = level["priority_level"].as_str().unwrap();
            let Some(t) = truth.iter().find(|t| t.priority_level == name) else {
                continue;
            };
            if t.exempt {
                continue;
            }
            assert_eq!(
                level["limit_seats"].as_f64(),
                Some(f64::from(t.current_limit_seats)),
                "{name}"
            );
            assert_eq!(
                level["executing_seats"].as_f64(),
                Some(f64::from(t.executing_seats)),
                "{name}"
            );
        }
        assert_eq!(a["kubernetes_version"], "v1.29.0");
    }
    // The storm's rejections come as rates from Prometheus' own counters, at the first round.
    let wl = apiservers[0]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["priority_level"] == "workload-low")
        .unwrap();
    let rejected: f64 = wl["rejected_per_second"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_f64)
        .sum();
    assert!(rejected > 0.0, "{wl}");

    // The table names the cluster of each replica.
    let (_, table) = check(&["--prometheus", &prom.url]);
    assert!(
        table.contains(&format!(
            "apiserver {} (v1.34.0) in cluster a",
            host(&urls[0])
        )),
        "{table}"
    );
    // Another cluster label: none of these series has it, so no replica names a cluster.
    let (_, out) = check(&[
        "--prometheus",
        &prom.url,
        "--cluster-label",
        "region",
        "--output",
        "json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let apiservers = report["apiservers"].as_array().unwrap();
    assert_eq!(apiservers.len(), 3, "{out}");
    assert!(
        apiservers.iter().all(|a| a.get("cluster").is_none()),
        "{out}"
    );
    // A selector that matches nothing, and a Prometheus that is not there: clear errors, UNKNOWN.
    let (code, out) = check(&[
        "--prometheus",
        &prom.url,
        "--selector",
        r#"{job="nothing"}"#,
    ]);
    assert_eq!(code, Some(3), "{out}");
    let dead = format!("http://127.0.0.1:{}", external::free_port());
    let (code, out) = check(&["--prometheus", &dead]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("prometheus: cannot connect"), "{out}");
    // A fleet with one source down: the other is still reported; the dead one is a row of its own.
    let (code, out) = check(&[
        "--prometheus",
        &prom.url,
        "--prometheus",
        &dead,
        "--output",
        "json",
    ]);
    assert_eq!(code, Some(2), "{out}");
    // The JSON on standard output, the warning about the dead source after it on standard error.
    let report: Value = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("{out}"));
    assert!(out.contains("WARN"), "{out}");
    let rows = report["apiservers"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{out}");
    assert!(
        rows.iter().any(|r| r["apiserver"] == host(&dead).as_str()
            && r["errors"][0]
                .as_str()
                .unwrap_or_default()
                .starts_with("prometheus: cannot connect")),
        "{out}"
    );
}

/// A stand-in Prometheus' answer to one query (its form-encoded body): `metric` at 10 for every family, and at the
/// current time for the freshness query (`timestamp(...)`), as a store holding fresh samples answers.
pub(crate) fn stub_answer(form: &str, metric: &str) -> String {
    let value = if form.contains("timestamp") {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default()
    } else {
        10.0
    };
    format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{metric},"value":[1,"{value}"]}}]}}}}"#
    )
}

/// A simulator served until the handle is aborted (a replica that goes away).
async fn serve_stoppable(sim: &Simulator) -> (String, tokio::task::AbortHandle) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(apf_sim::serve(listener, sim.clone()));
    (format!("http://{addr}"), task.abort_handle())
}

type Bodies = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;

/// A webhook consumer recording the JSON bodies it gets.
async fn webhook() -> (String, Bodies) {
    let bodies: Bodies = Default::default();
    let b = bodies.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let b = b.clone();
            async move {
                if let Ok(v) = serde_json::from_str(&body) {
                    b.lock().unwrap().push(v);
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), bodies)
}

/// A Prometheus API that answers nothing for a minute (a querier stuck on a slow store).
async fn slow_prometheus() -> String {
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::post(|| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            "late"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.3:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A Prometheus API that answers every query with an execution error (an overloaded querier).
async fn failing_prometheus() -> String {
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::post(|| async {
            (
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                r#"{"status":"error","errorType":"execution","error":"query timed out in expression evaluation"}"#,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_a_fleet_read_through_prometheus() {
    use apf_monitor::alert::{RuleConfig, RuleName};
    use apf_monitor::config;
    use apf_monitor::notify::{ReceiverConfig, WebhookConfig};
    use apf_monitor::targets::PrometheusTarget;
    use apf_monitor::values::Interval;
    // Cluster a: a 1.34 replica under a storm (rejections). Cluster b: two 1.29 replicas, paused after 20 s of the
    // storm (their numbers hold still, so they can be compared exactly), one of which goes away later.
    let storm = sim(34, ScenarioSource::Storm);
    let _clock = storm.spawn_clock(Duration::from_millis(100));
    let (b1, b1_url) =
        common::paused_sim(29, Scenario::load(&ScenarioSource::Storm).unwrap(), 20).await;
    let b2 = sim(29, ScenarioSource::Idle);
    let storm_url = common::serve_sim(&storm).await;
    let (b2_url, b2_server) = serve_stoppable(&b2).await;
    let host = |u: &str| u.trim_start_matches("http://").to_string();
    let prom = fleet_prometheus(&[&storm_url], &[&b1_url, &b2_url]).await;

    let (hook_url, hook) = webhook().await;
    let mut config = config::Config::default();
    config.scrape.interval = Interval(Duration::from_secs(1));
    config.scrape.timeout = Interval(Duration::from_secs(1));
    config.analysis.window = Interval(Duration::from_secs(10));
    let dead = format!("http://127.0.0.1:{}", external::free_port());
    config.targets.prometheus = vec![
        PrometheusTarget::from_url(values::parse_target_url(&prom.url).unwrap()),
        PrometheusTarget {
            name: Some("dead".into()),
            ..PrometheusTarget::from_url(values::parse_target_url(&dead).unwrap())
        },
        PrometheusTarget {
            name: Some("slow".into()),
            ..PrometheusTarget::from_url(
                values::parse_target_url(&slow_prometheus().await).unwrap(),
            )
        },
        PrometheusTarget {
            name: Some("failing".into()),
            ..PrometheusTarget::from_url(
                values::parse_target_url(&failing_prometheus().await).unwrap(),
            )
        },
    ];
    config.rules.insert(
        RuleName::APFRequestsRejected,
        RuleConfig {
            for_: Some(values::DurationValue(Duration::ZERO)),
            ..Default::default()
        },
    );
    config.route.group_wait = values::DurationValue(Duration::from_millis(500));
    config.receivers = vec![ReceiverConfig {
        webhook: Some(WebhookConfig {
            url: Some(hook_url),
            url_file: None,
            bearer_token_file: None,
            max_alerts: 0,
        }),
        ..common::receiver("hook")
    }];
    let monitor = common::start_monitor(&config).await;

    // The first rounds already have the storm's rejection rate, from the counters one window back.
    let metrics_url = format!("{monitor}/metrics");
    let body = common::eventually(Duration::from_secs(30), || async {
        let body = common::get_text(&metrics_url).await?;
        common::sample_value(
            &body,
            "apf_priority_level_rejected_per_second",
            &[("cluster", "a"), ("priority_level", "workload-low")],
        )?;
        common::sample_value(&body, "apf_priority_level_limit_seats", &[("cluster", "b")])?;
        Some(body)
    })
    .await
    .unwrap_or_else(|| panic!("no fleet in the export:\n{}", prom.log()));

    // Cluster b: exactly what each simulator serves (neither moves: one paused, one idle without a clock).
    for (sim, url) in [(&b1, &b1_url), (&b2, &b2_url)] {
        let truth = sim.truth();
        let mut compared = 0;
        for t in truth.iter().filter(|t| !t.exempt) {
            let labels = [
                ("cluster", "b"),
                ("apiserver", &*host(url)),
                ("priority_level", t.priority_level.as_str()),
            ];
            let v = |name: &str| common::sample_value(&body, name, &labels);
            let (limit, used) = (
                f64::from(t.current_limit_seats),
                f64::from(t.executing_seats),
            );
            let level = &t.priority_level;
            assert_eq!(
                v("apf_priority_level_limit_seats"),
                Some(limit),
                "{url} {level}"
            );
            assert_eq!(
                v("apf_priority_level_executing_seats"),
                Some(used),
                "{url} {level}"
            );
            assert_eq!(
                v("apf_priority_level_headroom_seats"),
                Some(limit - used),
                "{url} {level}"
            );
            compared += 1;
        }
        assert!(compared >= 5, "{truth:?}");
    }
    assert!(
        body.contains(&format!(
            "apf_monitor_apiserver_info{{cluster=\"b\",apiserver=\"{}\",kubernetes_version=\"v1.29.0\"}}",
            host(&b2_url)
        )),
        "{body}"
    );

    // Cluster a: the rejection rate Prometheus' counters give, within 20 % of what the simulator rejects. The storm's
    // LISTs that wait out their 15 s come on top of the queue-full ones after a while, and Prometheus' rate follows a
    // window behind: measured 10 s at a time until the two agree.
    let rejected = |sim: &Simulator| -> u64 {
        sim.truth()
            .iter()
            .filter(|t| t.priority_level == "workload-low")
            .flat_map(|t| t.rejected_total.values())
            .sum()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (before, t0) = (rejected(&storm), std::time::Instant::now());
        tokio::time::sleep(Duration::from_secs(10)).await;
        let simulated = (rejected(&storm) - before) as f64 / t0.elapsed().as_secs_f64();
        let body = common::get_text(&metrics_url).await.unwrap_or_default();
        let exported: f64 = body
            .lines()
            .filter(|l| {
                l.starts_with("apf_priority_level_rejected_per_second{")
                    && l.contains("cluster=\"a\"")
                    && l.contains("priority_level=\"workload-low\"")
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        assert!(simulated > 1.0, "the storm rejects nothing: {simulated}");
        if (exported - simulated).abs() <= 0.2 * simulated {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "exported {exported}/s, simulated {simulated}/s"
        );
    }
    let body = common::get_text(&metrics_url).await.unwrap_or_default();

    // The alert on the loaded replica reaches the webhook with its cluster.
    let alert = common::eventually(Duration::from_secs(30), || async {
        hook.lock().unwrap().iter().find_map(|b| {
            b["alerts"]
                .as_array()?
                .iter()
                .find(|a| a["labels"]["alertname"] == "APFRequestsRejected")
                .cloned()
        })
    })
    .await
    .expect("no APFRequestsRejected at the webhook");
    assert_eq!(alert["labels"]["cluster"], "a", "{alert}");
    assert_eq!(
        alert["labels"]["apiserver"],
        host(&storm_url).as_str(),
        "{alert}"
    );

    // The dead and the failing Prometheus: counted by reason, shown as rows of their own, and the rest goes on.
    let errors = |body: &str, source: &str, reason: &str| {
        common::sample_value(
            body,
            "apf_monitor_scrape_errors_total",
            &[
                ("apiserver", source),
                ("endpoint", "prometheus"),
                ("reason", reason),
            ],
        )
        .unwrap_or(0.0)
    };
    assert!(errors(&body, "dead", "connect") >= 1.0, "{body}");
    assert!(errors(&body, "failing", "query") >= 1.0, "{body}");
    assert!(errors(&body, "slow", "timeout") >= 1.0, "{body}");
    // What each source held: the fleet's three replicas; nothing from the dead one.
    let held = |source: &str, state: &str| {
        common::sample_value(
            &body,
            "apf_monitor_source_replicas",
            &[("apiserver", source), ("state", state)],
        )
    };
    let fleet = host(&prom.url);
    assert_eq!(held(&fleet, "read"), Some(3.0), "{body}");
    assert_eq!(held(&fleet, "stale"), Some(0.0), "{body}");
    assert_eq!(held("dead", "read"), Some(0.0), "{body}");
    let status: Value = serde_json::from_str(
        &common::get_text(&format!("{monitor}/api/v1/status"))
            .await
            .unwrap_or_default(),
    )
    .unwrap();
    let row = |name: &str| {
        status["apiservers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["apiserver"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row {name}: {status}"))
    };
    assert!(
        row("dead")["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("prometheus: cannot connect"),
        "{status}"
    );
    assert!(
        row("failing")["errors"][0]
            .as_str()
            .unwrap()
            .contains("query timed out"),
        "{status}"
    );
    assert!(
        row("slow")["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("prometheus: no response within 1s"),
        "{status}"
    );
    assert_eq!(
        status["apiservers"].as_array().unwrap().len(),
        6,
        "{status}"
    );

    // The status page groups the fleet by cluster, the storm's first, and says why flows are absent.
    let page = common::get_text(&format!("{monitor}/"))
        .await
        .unwrap_or_default();
    let at = |needle: &str| {
        page.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {page}"))
    };
    assert!(at("cluster a <small>1 replica · critical") < at("cluster b <small>2 replicas"));
    assert!(page.contains("no flows, no fullest queue"), "{page}");

    // A replica gone: Prometheus marks its series stale, and it leaves the export (not shown as current).
    b2_server.abort();
    let b2_host = host(&b2_url);
    let gone = common::eventually(Duration::from_secs(30), || async {
        let body = common::get_text(&metrics_url).await?;
        (!body.contains(&b2_host)).then_some(())
    })
    .await;
    assert!(gone.is_some(), "{b2_host} is still exported");
    let body = common::get_text(&metrics_url).await.unwrap_or_default();
    assert!(
        body.contains(&host(&b1_url)),
        "the other replica of cluster b went too"
    );
    monitor.daemon.stop().await.unwrap();
}

/// The source's credentials: the bearer token from its file (re-read when it rotates) and the extra headers go with
/// every query; a refused token is counted, and the daemon goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_source_sends_its_token_and_headers() {
    use apf_monitor::config;
    use apf_monitor::targets::PrometheusTarget;
    use apf_monitor::values::Interval;
    use std::sync::{Arc, Mutex};
    // The stand-in accepts only the current token, and records what each query carried.
    let accepted = Arc::new(Mutex::new(String::from("Bearer first")));
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let (a, s) = (accepted.clone(), seen.clone());
    let app = axum::Router::new().route(
        "/tenant/api/v1/query",
        axum::routing::post(move |headers: axum::http::HeaderMap, form: String| {
            let (a, s) = (a.clone(), s.clone());
            async move {
                let get = |k: &str| {
                    headers
                        .get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string()
                };
                let (auth, tenant) = (get("authorization"), get("x-scope-orgid"));
                s.lock().unwrap().push((auth.clone(), tenant));
                if auth != *a.lock().unwrap() {
                    return (axum::http::StatusCode::UNAUTHORIZED, "bad token".to_string());
                }
                (
                    axum::http::StatusCode::OK,
                    stub_answer(
                        &form,
                        r#"{"cluster":"x","instance":"10.0.0.5:6443","priority_level":"workload-low"}"#,
                    ),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.3:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "first\n").unwrap();
    let mut config = config::Config::default();
    config.scrape.interval = Interval(Duration::from_millis(500));
    config.scrape.timeout = Interval(Duration::from_millis(500));
    config.analysis.window = Interval(Duration::from_secs(5));
    config.targets.prometheus = vec![PrometheusTarget {
        name: Some("mimir".into()),
        bearer_token_file: Some(token.clone()),
        headers: [("X-Scope-OrgID".to_string(), "team-a".to_string())].into(),
        ..PrometheusTarget::from_url(
            values::parse_target_url(&format!("http://{addr}/tenant")).unwrap(),
        )
    }];
    let monitor = common::start_monitor(&config).await;
    let metrics_url = format!("{monitor}/metrics");
    let read = common::eventually(Duration::from_secs(20), || async {
        let body = common::get_text(&metrics_url).await?;
        common::sample_value(&body, "apf_priority_level_limit_seats", &[("cluster", "x")])
    })
    .await;
    assert_eq!(read, Some(10.0));
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|(auth, tenant)| auth == "Bearer first" && tenant == "team-a"),
        "{:?}",
        seen.lock().unwrap()
    );

    // The token rotates in the store first: refused until the file changes, counted as 4xx, then read again.
    *accepted.lock().unwrap() = "Bearer second".into();
    let refused = common::eventually(Duration::from_secs(20), || async {
        let body = common::get_text(&metrics_url).await?;
        common::sample_value(
            &body,
            "apf_monitor_scrape_errors_total",
            &[
                ("apiserver", "mimir"),
                ("endpoint", "prometheus"),
                ("reason", "http_4xx"),
            ],
        )
        .filter(|n| *n >= 1.0)
    })
    .await;
    assert!(refused.is_some(), "the refused token is not counted");
    std::fs::write(&token, "second\n").unwrap();
    let rotated = common::eventually(Duration::from_secs(20), || async {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(auth, _)| auth == "Bearer second")
            .then_some(())
    })
    .await;
    assert!(rotated.is_some(), "the new token was never sent");
    let status = common::get_text(&format!("{monitor}/api/v1/status"))
        .await
        .unwrap_or_default();
    assert!(status.contains("10.0.0.5:6443"), "{status}");
    monitor.daemon.stop().await.unwrap();
}

/// A stand-in Prometheus holding one replica, `instance` in `cluster`, whatever the query.
async fn one_replica_prometheus(cluster: &str, instance: &str) -> String {
    let metric = format!(
        r#"{{"cluster":"{cluster}","instance":"{instance}","priority_level":"workload-low"}}"#
    );
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::post(move |form: String| {
            let metric = metric.clone();
            async move { stub_answer(&form, &metric) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A reload moves the daemon from one Prometheus source to another: the first one's replicas go, the second one's
/// come, in the same process; a reload with a bad source is refused and the running one goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_prometheus_sources() {
    let a = one_replica_prometheus("x", "10.0.0.1:6443").await;
    let b = one_replica_prometheus("y", "10.0.0.2:6443").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("apf-monitor.yaml");
    let write = |url: &str, selector: &str| {
        std::fs::write(
            &file,
            format!(
                "scrape: {{interval: 500ms, timeout: 500ms}}\nanalysis: {{window: 5s}}\n\
                 targets:\n  prometheus:\n    - url: {url}\n      selector: '{selector}'\n"
            ),
        )
        .unwrap();
    };
    write(&a, "{}");
    let path = file.clone();
    let loader: apf_monitor::daemon::Loader =
        std::sync::Arc::new(move || Ok(apf_monitor::config::Config::load(&path)?));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let daemon = apf_monitor::daemon::Daemon::start_with(loader, listener, None)
        .await
        .unwrap();
    let exported = |cluster: &'static str| {
        let url = url.clone();
        async move {
            let body = common::get_text(&url).await.unwrap_or_default();
            common::sample_value(
                &body,
                "apf_priority_level_limit_seats",
                &[("cluster", cluster)],
            )
        }
    };
    assert!(
        common::eventually(Duration::from_secs(20), || exported("x"))
            .await
            .is_some(),
        "source a is not read"
    );
    write(&b, "{}");
    daemon.reload().await.unwrap();
    let swapped = common::eventually(Duration::from_secs(20), || async {
        (exported("x").await.is_none() && exported("y").await.is_some()).then_some(())
    })
    .await;
    assert!(swapped.is_some(), "the reload did not swap the sources");
    write(&b, "job=apiserver");
    let refused = daemon.reload().await.unwrap_err();
    assert!(refused.contains("in braces"), "{refused}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(exported("y").await.is_some(), "the running source stopped");
    daemon.stop().await.unwrap();
}

/// A replica whose samples stopped (still answered within the store's lookback, no staleness marker) is left out:
/// its last numbers are not shown as current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_samples_stopped_is_not_shown() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::post(
            move |form: String| async move {
                // The newest sample of `gone` is 4 minutes old (inside the store's 5-minute lookback, past the
                // default max_sample_age of 3); `live` was scraped a second ago.
                let (gone, live) = if form.contains("timestamp") {
                    (now - 240.0, now - 1.0)
                } else {
                    (10.0, 10.0)
                };
                format!(
                    r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{"instance":"gone:6443","priority_level":"workload-low"}},"value":[1,"{gone}"]}},{{"metric":{{"instance":"live:6443","priority_level":"workload-low"}},"value":[1,"{live}"]}}]}}}}"#
                )
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://{addr}");
    let (code, out) =
        tokio::task::spawn_blocking(move || check(&["--prometheus", &url, "--output", "json"]))
            .await
            .unwrap();
    // The JSON on standard output; the warning naming what was left out after it, on standard error.
    assert!(out.contains("1 replica(s) left out"), "{out}");
    let report: Value = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("{out}"));
    let names: Vec<&str> = report["apiservers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["apiserver"].as_str())
        .collect();
    assert_eq!(names, ["live:6443"], "{out}");
    assert_ne!(code, Some(3), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advise_reads_a_fleet_through_prometheus_and_prices_the_audited_users() {
    let storm = sim(34, ScenarioSource::Storm);
    let _clock = storm.spawn_clock(Duration::from_millis(100));
    let url = common::serve_sim(&storm).await;
    let prom = fleet_prometheus(&[&url], &[]).await;

    // The agent's requests as kube-apiserver audits them: 20 served in 2.5 s (0.5 s of it queued), 10 rejected.
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now();
    let at = |ago_ms: u64| {
        humantime::format_rfc3339_micros(now - Duration::from_millis(ago_ms)).to_string()
    };
    let mut log = String::new();
    for i in 0..30u64 {
        let (code, wait) = if i < 20 { (200, "500ms") } else { (429, "15s") };
        log.push_str(&format!(
            r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"e{i}","stage":"ResponseComplete","requestURI":"/api/v1/pods","verb":"list","user":{{"username":"system:serviceaccount:monitoring:agent","groups":["system:serviceaccounts","system:serviceaccounts:monitoring","system:authenticated"]}},"userAgent":"agent/1.4 (linux/amd64) kubernetes/abc","objectRef":{{"resource":"pods","apiVersion":"v1"}},"responseStatus":{{"code":{code}}},"requestReceivedTimestamp":"{}","stageTimestamp":"{}","annotations":{{"apiserver.latency.k8s.io/apf-queue-wait":"{wait}"}}}}"#,
            at(4000 + i * 10),
            at(1500 + i * 10),
        ));
        log.push('\n');
    }
    let audit = dir.path().join("audit.log");
    std::fs::write(&audit, log).unwrap();
    let fs = common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");

    let config = window_config();
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["advise", "--config"])
        .arg(config.path())
        .args(["--prometheus", &prom.url, "--audit"])
        .arg(&audit)
        .args([
            "--objects",
            &fs,
            "--objects",
            &pl,
            "--user",
            "agent",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let read: Value = serde_json::from_str(&stdout).unwrap();
    let agent = &read["clients"][0];
    assert_eq!(agent["cluster"], "a", "{agent}");
    assert_eq!(agent["priority_level"], "workload-low", "{agent}");
    assert_eq!(
        agent["flow"],
        Value::Null,
        "no dumps through a Prometheus: {agent}"
    );
    // Its own time, less the queue wait: 2.5 s - 0.5 s.
    assert_eq!(agent["seconds_per_request"], 2.0, "{agent}");
    // 30 requests over the 10 s window.
    assert_eq!(agent["observed_requests_per_second"], 3.0, "{agent}");
    // Its seats from the flow schema's work estimates, its share the whole limit (the only audited user).
    let seats = agent["seats_per_request"].as_f64().unwrap();
    assert!(seats > 1.0, "the storm's LISTs are wide: {agent}");
    let share = agent["fair_share_seats"].as_f64().unwrap();
    assert_eq!(agent["limit_seats"].as_f64(), Some(share), "{agent}");
    let sustainable = agent["sustainable_requests_per_second"].as_f64().unwrap();
    assert!(
        (sustainable - share / (seats * 2.0)).abs() < 0.01 * sustainable + 0.01,
        "{agent}"
    );
    // 3 requests/s, far under what its share sustains: a ceiling, not a setting.
    let advice = agent["advice"].as_str().unwrap();
    assert!(
        advice.contains("client-go: stays within its share up to QPS="),
        "{agent}"
    );
    assert!(!advice.contains(" set "), "{agent}");
    // The only replica of its cluster: all of the audited rate is its, and the advice says where it comes from.
    assert!(
        advice.contains("100 % of them here by this replica's share"),
        "{agent}"
    );
    assert_eq!(read["recommendations"][0]["change"], false, "{read}");
}

/// Shards of one source (`targets.prometheus[].shard`): three hash shards over six clusters read every cluster
/// exactly once between them, each the clusters its hash names; a regex shard reads the clusters it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_of_one_source_read_every_cluster_exactly_once() {
    use apf_monitor::scrape::prometheus::shard::Shard;

    let sims: Vec<Simulator> = (0..6).map(|_| sim(34, ScenarioSource::Idle)).collect();
    let mut urls = Vec::new();
    for s in &sims {
        urls.push(common::serve_sim(s).await);
    }
    let clusters: Vec<String> = (0..6).map(|i| format!("eu-{i}")).collect();
    let scrape_configs = format!(
        "  - job_name: apiserver\n    static_configs:\n{}",
        urls.iter()
            .zip(&clusters)
            .map(|(u, c)| format!(
                "      - targets: ['{}']\n        labels: {{cluster: {c}}}\n",
                u.trim_start_matches("http://")
            ))
            .collect::<String>()
    );
    let prom = external::prometheus_with(&scrape_configs, "groups: []\n").await;
    let ready = common::eventually(Duration::from_secs(60), || async {
        let up =
            external::prom_query(&prom, r#"count_over_time(up{job="apiserver"}[1m]) >= 12"#).await;
        (up.len() == 6).then_some(())
    })
    .await;
    assert!(
        ready.is_some(),
        "Prometheus did not scrape the replicas:\n{}",
        prom.log()
    );

    // The clusters `check` reads with this shard.
    let read = |shard: &str| {
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            config.path(),
            format!(
                "analysis: {{window: 10s}}\ntargets:\n  prometheus:\n    - {{url: \"{}\", shard: {shard}}}\n",
                prom.url
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["check", "--output", "json", "--config"])
            .arg(config.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let report: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
        let mut read: Vec<String> = report["apiservers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["cluster"].as_str().map(str::to_string))
            .collect();
        read.sort();
        read
    };
    let mut all = Vec::new();
    for index in 0..3u64 {
        let mine = read(&format!("{{index: {index}, total: 3}}"));
        let expected: Vec<String> = clusters
            .iter()
            .filter(|c| Shard::Hash { index, total: 3 }.holds(c))
            .cloned()
            .collect();
        assert_eq!(mine, expected, "shard {index} of 3");
        all.extend(mine);
    }
    all.sort();
    assert_eq!(all, clusters, "every cluster read by exactly one shard");
    assert_eq!(read("{clusters: \"eu-[0-2]\"}"), ["eu-0", "eu-1", "eu-2"]);
}
