//! The Grafana dashboards of `dashboards/` against a real Prometheus (Debian's `prometheus`) scraping a running
//! apf-monitor that watches a simulated apiserver under a storm, beside a second target that fails, and is sent the
//! simulator's audit events as kube-apiserver's webhook sends them: every query of every panel, with its variables
//! substituted as Grafana would, returns at least one series. A panel that shows nothing is a failure. Also: every
//! metric name the dashboards and the deploy PrometheusRule use is served on `/metrics`, every per-level series is
//! filtered by the variables whose labels it carries and by no other, and the sidecar ConfigMaps in
//! `deploy/grafana-dashboards/` carry exactly the dashboards.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::external;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every dashboard file, by name, parsed.
fn dashboards() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "dashboards/ has {files:?}");
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect()
}

/// Every panel, rows' folded panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// One query of a panel: the dashboard, the panel title, the expression and whether Grafana runs it instant.
struct Query {
    dashboard: String,
    panel: String,
    expr: String,
    instant: bool,
}

fn queries() -> Vec<Query> {
    let mut out = Vec::new();
    for (name, d) in dashboards() {
        for p in panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                if t["hide"].as_bool() == Some(true) {
                    continue;
                }
                let Some(expr) = t["expr"].as_str() else {
                    continue;
                };
                out.push(Query {
                    dashboard: name.clone(),
                    panel: p["title"].as_str().unwrap_or("").to_string(),
                    expr: expr.to_string(),
                    instant: t["instant"].as_bool() == Some(true)
                        && t["range"].as_bool() != Some(true),
                });
            }
        }
    }
    out
}

/// Grafana's substitution: a multi-value variable set to `All` becomes its allValue `.*`; a chosen value becomes
/// itself (regex-escaped, which these values need not); `$__rate_interval` is at least four scrape intervals.
fn substitute(expr: &str, vars: &[(&str, &str)]) -> String {
    let mut e = expr
        .replace("$__rate_interval", "5s")
        .replace("$__interval", "2s")
        .replace("$__range", "60s");
    for (name, value) in vars {
        e = e
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    e
}

#[test]
fn the_dashboards_are_importable_with_the_documented_variables() {
    for (name, d) in dashboards() {
        assert!(
            d["uid"].as_str().is_some_and(|u| !u.is_empty()),
            "{name}: no uid"
        );
        assert!(
            d["schemaVersion"].as_u64().unwrap_or(0) >= 36,
            "{name}: old schema"
        );
        let vars = d["templating"]["list"].as_array().unwrap();
        let var = |n: &str| vars.iter().find(|v| v["name"] == n);
        let ds = var("datasource").unwrap_or_else(|| panic!("{name}: no datasource variable"));
        assert_eq!(ds["type"], "datasource", "{name}");
        assert_eq!(ds["query"], "prometheus", "{name}");
        for v in ["cluster", "apiserver"] {
            let v = var(v).unwrap_or_else(|| panic!("{name}: no {v} variable"));
            assert_eq!(v["multi"], true, "{name}: {v}");
            assert_eq!(v["includeAll"], true, "{name}: {v}");
        }
        if name != "apf-monitor.json" {
            let pl = var("priority_level")
                .unwrap_or_else(|| panic!("{name}: no priority_level variable"));
            assert_eq!(pl["multi"], true, "{name}");
            assert_eq!(pl["includeAll"], true, "{name}");
        }
        let mut ids = BTreeSet::new();
        for p in panels(&d) {
            assert!(
                ids.insert(p["id"].as_u64().unwrap()),
                "{name}: panel id twice: {p}"
            );
            if p["type"] != "row" {
                assert_eq!(
                    p["datasource"]["uid"], "${datasource}",
                    "{name}: {}",
                    p["title"]
                );
                assert!(
                    p["targets"].as_array().is_some_and(|t| !t.is_empty()),
                    "{name}: {} has no query",
                    p["title"]
                );
            }
        }
    }
}

/// The metric names an expression uses (ours all start with `apf_`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\bapf_[a-z0-9_]+").unwrap();
    re.find_iter(text).map(|m| m.as_str().to_string()).collect()
}

/// Every metric name Prometheus has scraped from apf-monitor so far (over all its storage, not one instant).
async fn scraped_names(prom: &external::Process) -> BTreeSet<String> {
    let url = format!(
        "{}/api/v1/label/__name__/values?match[]={{job=\"apf-monitor\"}}",
        prom.url
    );
    strings(&url).await
}

/// The strings of a Prometheus API answer's `data` (label names, label values); none when it cannot be read.
async fn strings(url: &str) -> BTreeSet<String> {
    let text = common::get_text(url).await.unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Series a query returns, as Grafana asks: instant at the end, else over the range at a 1 s step.
async fn series(
    prom: &external::Process,
    q: &Query,
    expr: &str,
    start: f64,
) -> Result<usize, String> {
    let end = unix_now();
    let url = if q.instant {
        format!("{}/api/v1/query", prom.url)
    } else {
        format!("{}/api/v1/query_range", prom.url)
    };
    let mut form = vec![("query", expr.to_string())];
    if q.instant {
        form.push(("time", format!("{end:.3}")));
    } else {
        form.push(("start", format!("{start:.3}")));
        form.push(("end", format!("{end:.3}")));
        form.push(("step", "1".into()));
    }
    let text = reqwest::Client::new()
        .post(url)
        .form(&form)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let body: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    if body["status"] != "success" {
        return Err(format!("{body}"));
    }
    match &body["data"]["result"] {
        Value::Array(a) => Ok(a.len()),
        // A scalar (`time() - ...` folded, `vector(0)` is still a vector) counts as data.
        Value::Null => Ok(0),
        _ => Ok(1),
    }
}

/// kube-apiserver's audit webhook backend for one simulated replica: what it audited, posted to `url` as an
/// `EventList` every half second, until the test's runtime ends.
async fn post_audit_events(sim: Simulator, url: String) {
    let client = reqwest::Client::new();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let events = sim.drain_audit_events();
        if events.is_empty() {
            continue;
        }
        let body = format!(
            r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}]}}"#,
            events.join(",")
        );
        // A batch refused (429 while the analysis is behind) is lost, as kube-apiserver's would be after its retries.
        let _ = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
    }
}

/// The label names of the series of `name` that Prometheus scraped from apf-monitor.
async fn label_names(prom: &external::Process, name: &str) -> BTreeSet<String> {
    let url = format!(
        "{}/api/v1/labels?match[]={name}{{job=\"apf-monitor\"}}",
        prom.url
    );
    strings(&url).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_of_every_dashboard_shows_data_from_a_real_prometheus() {
    // The storm, and a controller's resyncs filling workload-high for 3 s of every 10: a saturation that recurs
    // (the storm's levels are full without a break, one episode each). One seat each: wide requests would leave
    // seats free that no narrower one may take (fair queuing never lets a head be jumped).
    let mut scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
    let mut resyncs = vec!["{at: 0s, rps: 0}".to_string()];
    for k in 0..30 {
        let start = k * 10 + 5;
        resyncs.push(format!(
            "{{at: {start}s, rps: 0}}, {{at: {start}s 1ms, rps: 400}}"
        ));
        resyncs.push(format!(
            "{{at: {}s, rps: 400}}, {{at: {}s 1ms, rps: 0}}",
            start + 3,
            start + 3
        ));
    }
    let extra = Scenario::from_yaml(&format!(
        "duration: 300s\nflows:\n  - {{name: resyncs, flow_schema: kube-controller-manager, \
         user: \"system:kube-controller-manager\", verb: list, resource: pods, seats: 1, duration: 1s, \
         rate: [{}]}}\n",
        resyncs.join(", ")
    ))
    .unwrap();
    scenario.flows.extend(extra.flows);
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(34, 0), scenario)).unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;

    let mut config = common::fast_config(&sim_url);
    // The second replica is down: its scrape errors, availability and the APFScrapeFailing path have series.
    let dead = format!("http://127.0.0.1:{}", external::free_port());
    let mut down = common::sim_target(&dead);
    down.name = Some("down".into());
    config.targets.static_targets = vec![common::sim_target(&sim_url), down];
    let mut console = common::receiver("console");
    console.console = Some(Default::default());
    config.receivers = vec![console];
    let monitor = common::start_monitor(&config).await;
    let monitor_addr = monitor.url.trim_start_matches("http://").to_string();
    // Who got the 429s (apf_user_*): the storm's requests as audit events, through the webhook.
    sim.enable_audit();
    let _audit = tokio::spawn(post_audit_events(
        sim.clone(),
        format!("{monitor}/api/v1/audit"),
    ));
    let start = unix_now();
    let prom = external::prometheus(&[("apf-monitor", monitor_addr)], "groups: []\n").await;

    // The default view (every variable at All) and a chosen replica and level.
    let views: [&[(&str, &str)]; 2] = [
        &[
            ("cluster", ".*"),
            ("apiserver", ".*"),
            ("priority_level", ".*"),
        ],
        &[
            ("cluster", ".*"),
            ("apiserver", "sim"),
            ("priority_level", "workload-low"),
        ],
    ];
    let all = queries();
    assert!(all.len() >= 20, "only {} queries", all.len());
    // Storm load fills queues and rejects at once; rates and p99 need two scrapes of the window. Polled, not
    // slept: a slow machine gets more time, a fast one finishes early.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut empty = Vec::new();
        for view in views {
            for q in &all {
                let expr = substitute(&q.expr, view);
                match series(&prom, q, &expr, start).await {
                    Ok(n) if n > 0 => {}
                    Ok(_) => empty.push(format!("{} / {}: {expr}", q.dashboard, q.panel)),
                    Err(e) => empty.push(format!("{} / {}: {expr}: {e}", q.dashboard, q.panel)),
                }
            }
        }
        if empty.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "panels without data:\n{}\nPrometheus log:\n{}",
            empty.join("\n"),
            prom.log()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Every name the dashboards and the PrometheusRule use is one apf-monitor serves. Some exist only at moments
    // (seconds_to_exhaustion only while seats in use rise): what counts is every name Prometheus scraped from
    // apf-monitor during the run, polled until they are all there or the deadline passes.
    let mut used = BTreeSet::new();
    for q in queries() {
        used.extend(metric_names(&q.expr));
    }
    let rule = std::fs::read_to_string(root().join("deploy/base/prometheusrule.yaml")).unwrap();
    used.extend(metric_names(&rule));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let served = scraped_names(&prom).await;
        let unknown: Vec<&String> = used.difference(&served).collect();
        if unknown.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "names never served on /metrics: {unknown:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Each per-level series is filtered by every variable whose label it carries (cluster too, which only a fleet's
    // series carry), as the variables promise, and by none it lacks: the audit users (apf_user_*) are the cluster's,
    // with no `apiserver`, and a filter on it would empty their panels as soon as one replica is chosen.
    let variables: BTreeMap<String, Vec<String>> = dashboards()
        .into_iter()
        .map(|(name, d)| {
            let vars = d["templating"]["list"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect();
            (name, vars)
        })
        .collect();
    let per_level =
        regex::Regex::new(r"\b(apf_(?:priority_level|flow|user)_[a-z0-9_]+)(\{[^}]*\})?").unwrap();
    let mut labels = BTreeMap::new();
    for name in &used {
        labels.insert(name.as_str(), label_names(&prom, name).await);
    }
    let mut wrong = Vec::new();
    for q in queries() {
        for c in per_level.captures_iter(&q.expr) {
            let name = &c[1];
            let selector = c.get(2).map_or("", |m| m.as_str());
            let carried = &labels[name];
            for var in ["cluster", "apiserver", "priority_level"] {
                if !variables[&q.dashboard].iter().any(|v| v == var) {
                    continue;
                }
                let filter = format!("{var}=~\"${var}\"");
                let want = var == "cluster" || carried.contains(var);
                if selector.contains(&filter) != want {
                    wrong.push(format!(
                        "{} / {}: {name}{selector} {} {filter} (its labels: {carried:?})",
                        q.dashboard,
                        q.panel,
                        if want { "lacks" } else { "must not have" }
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // The variables' own queries list the replica and the level (cluster has none here: only `All`).
    for (label, matcher) in [
        ("apiserver", "apf_priority_level_executing_seats"),
        ("priority_level", "apf_priority_level_executing_seats"),
    ] {
        let url = format!("{}/api/v1/label/{label}/values?match[]={matcher}", prom.url);
        let v: Value =
            serde_json::from_str(&reqwest::get(url).await.unwrap().text().await.unwrap()).unwrap();
        let values: Vec<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            values.contains(&if label == "apiserver" {
                "sim"
            } else {
                "workload-low"
            }),
            "{label}: {values:?}"
        );
    }
}

/// `deploy/grafana-dashboards/dashboards.yaml`, made from `dashboards/*.json`: one ConfigMap per dashboard with the
/// label Grafana's dashboard sidecar looks for (`grafana_dashboard: "1"`, the Grafana Helm chart's default).
fn sidecar_configmaps() -> String {
    let mut out = String::from(
        "# Generated from dashboards/*.json by `APF_MONITOR_BLESS=1 cargo test dashboards`: edit the JSON, not this.\n\
         # Grafana's dashboard sidecar (Grafana Helm chart, kube-prometheus-stack) loads ConfigMaps labelled\n\
         # grafana_dashboard=\"1\" from its search namespace: apply these there, or set the sidecar's searchNamespace.\n",
    );
    for (name, _) in dashboards() {
        let text = std::fs::read_to_string(root().join("dashboards").join(&name)).unwrap();
        let stem = name.trim_end_matches(".json");
        out.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: grafana-dashboard-{stem}\n  namespace: apf-monitor\n  \
             labels:\n    grafana_dashboard: \"1\"\n    app.kubernetes.io/name: apf-monitor\n  annotations:\n    \
             grafana_folder: apf-monitor\ndata:\n  {name}: |\n"
        ));
        for line in text.lines() {
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn the_sidecar_configmaps_carry_exactly_the_dashboards() {
    let path = root().join("deploy/grafana-dashboards/dashboards.yaml");
    let want = sidecar_configmaps();
    if std::env::var_os("APF_MONITOR_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not made from dashboards/*.json: run `APF_MONITOR_BLESS=1 cargo test dashboards`",
        path.display()
    );
    // What kubectl renders from the kustomization is the dashboards, parsed back.
    let kubectl = external::binary("kubectl", "kubernetes-client");
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(root().join("deploy/grafana-dashboards"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut found = 0;
    for v in serde_saphyr::from_multiple::<serde_json::Value>(&text).unwrap() {
        if v.is_null() {
            continue;
        }
        assert_eq!(
            v["metadata"]["labels"]["grafana_dashboard"].as_str(),
            Some("1")
        );
        for (key, value) in v["data"].as_object().unwrap() {
            let name = key.as_str();
            let rendered: Value = serde_json::from_str(value.as_str().unwrap()).unwrap();
            let file: Value = serde_json::from_str(
                &std::fs::read_to_string(root().join("dashboards").join(name)).unwrap(),
            )
            .unwrap();
            assert_eq!(rendered, file, "{name}");
            found += 1;
        }
    }
    assert_eq!(found, dashboards().len());
}
