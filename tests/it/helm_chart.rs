//! The Helm chart (`charts/apf-monitor/`), rendered and linted by Helm's own engine: the helm-python-sdk wheel
//! (Helm's Go SDK behind a C ABI, `helm template` and `helm lint` without the binary), in the tests' own virtual
//! environment (tests/install-deps.sh; tests/helm/render.py drives it).
//!
//! One source of truth: the chart with its default values renders exactly the objects `kubectl kustomize deploy/`
//! does, and with values-fleet.yaml and values-tls.yaml those of deploy/fleet/ and deploy/tls/ (Helm's own labels,
//! the config's checksum and kustomize's ConfigMap hash aside; the config compared as YAML). So every check
//! tests/it/deploy.rs makes of deploy/ (least-privilege RBAC, the hardened Deployment, the probes, the rules run by
//! promtool) holds for the chart. Besides: `helm lint --strict` finds nothing, values.schema.json refuses what the
//! chart cannot use, a release of another name and namespace stays consistent, the rendered configs pass the
//! daemon's schema and loader, promtool checks the chart's PrometheusRule, and its APF objects apply to the simulator
//! with kubectl.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const RELEASE: &str = "apf-monitor";
const NAMESPACE: &str = "apf-monitor";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("charts/apf-monitor")
}

/// The Python of the tests' virtual environment, where tests/install-deps.sh put Helm's engine.
fn helm_python() -> PathBuf {
    let venv = std::env::var_os("APF_MONITOR_HELM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/apf-monitor-tests/helm-venv")
        });
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "Helm's engine is not installed at {}: run tests/install-deps.sh (it makes that virtual environment with the \
         helm-python-sdk wheel)",
        venv.display()
    );
    python
}

/// What Helm's engine made of the chart.
struct Rendered {
    objects: Vec<Value>,
    notes: String,
    lint: Value,
}

/// The chart rendered as release `release` in `namespace` with `values` files (merged in order, as `helm -f`
/// merges them); `Err`: the engine's refusal (the values schema, a template that fails).
fn helm(release: &str, namespace: &str, values: &[PathBuf]) -> Result<Rendered, String> {
    engine(&[], release, namespace, values)
}

/// [`helm`], with render.py's leading flags (`--package DIR`).
fn engine(
    flags: &[&std::ffi::OsStr],
    release: &str,
    namespace: &str,
    values: &[PathBuf],
) -> Result<Rendered, String> {
    let out = Command::new(helm_python())
        .arg(root().join("tests/helm/render.py"))
        .args(flags)
        .arg(chart())
        .args([release, namespace])
        .args(values)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tests/helm/render.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    if let Some(e) = v["error"].as_str() {
        return Err(e.to_string());
    }
    let mut objects = Vec::new();
    let manifests = v["manifests"].as_object().unwrap();
    for (template, text) in manifests {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text.as_str().unwrap())
            .unwrap_or_else(|e| panic!("{template} does not read as YAML: {e}\n{text}"));
        objects.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    Ok(Rendered {
        objects,
        notes: v["notes"].as_str().unwrap_or_default().to_string(),
        lint: v["lint"].clone(),
    })
}

fn values_file(name: &str) -> PathBuf {
    chart().join(name)
}

/// The chart's default values, fleet and TLS, each beside the kustomization it stands for.
fn variants() -> [(&'static str, Vec<PathBuf>, &'static str); 3] {
    [
        ("the default values", vec![], "deploy"),
        (
            "values-fleet.yaml",
            vec![values_file("values-fleet.yaml")],
            "deploy/fleet",
        ),
        (
            "values-tls.yaml",
            vec![values_file("values-tls.yaml")],
            "deploy/tls",
        ),
    ]
}

fn rendered(values: &[PathBuf]) -> Rendered {
    helm(RELEASE, NAMESPACE, values).unwrap_or_else(|e| panic!("the chart does not render: {e}"))
}

/// What Helm adds to every object's labels (and the selectors), and the pods' checksum of their config: not what an
/// object does.
const HELM_ONLY: [&str; 5] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
    "checksum/config",
];

fn strip_helm(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in HELM_ONLY {
                map.remove(key);
            }
            for child in map.values_mut() {
                strip_helm(child);
            }
            if map
                .get("annotations")
                .is_some_and(|a| a.as_object().is_some_and(|a| a.is_empty()))
            {
                map.remove("annotations");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_helm),
        _ => {}
    }
}

/// kustomize's hashed ConfigMap name (`apf-monitor-config-5f7b9c8d2k`) without its hash.
fn unhashed(name: &str) -> String {
    match name.rsplit_once('-') {
        Some((stem, hash))
            if stem.ends_with("-config")
                && hash.len() == 10
                && hash.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            stem.to_string()
        }
        _ => name.to_string(),
    }
}

/// Objects by "Kind namespace/name", as compared: Helm's additions stripped, ConfigMap names unhashed, the config
/// parsed (its comments and key order are not what it does). The Namespace is kustomize's alone (Helm's
/// `--create-namespace` makes it).
fn normalized(objects: &[Value]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for o in objects {
        let mut o = o.clone();
        let kind = o["kind"].as_str().unwrap_or_default().to_string();
        if kind == "Namespace" {
            continue;
        }
        strip_helm(&mut o);
        if kind == "ConfigMap" {
            let name = unhashed(o["metadata"]["name"].as_str().unwrap_or_default());
            o["metadata"]["name"] = Value::from(name);
            if let Some(data) = o["data"].as_object_mut() {
                for text in data.values_mut() {
                    let parsed: Value = serde_saphyr::from_str(text.as_str().unwrap_or_default())
                        .unwrap_or_else(|e| panic!("a config that does not read: {e}"));
                    *text = parsed;
                }
            }
        }
        if kind == "Deployment" {
            for volume in o["spec"]["template"]["spec"]["volumes"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                if let Some(name) = volume["configMap"]["name"].as_str() {
                    volume["configMap"]["name"] = Value::from(unhashed(name));
                }
            }
        }
        let key = format!(
            "{kind} {}/{}",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        );
        assert!(out.insert(key.clone(), o).is_none(), "{key} twice");
    }
    out
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap()
}

/// How the chart's objects differ from those `kubectl kustomize dir` renders, in words (none: the same).
fn differences(name: &str, objects: &[Value], dir: &str) -> Vec<String> {
    let chart = normalized(objects);
    let deploy = normalized(&crate::deploy::kustomize(dir));
    let mut out = Vec::new();
    for (key, d) in &deploy {
        match chart.get(key) {
            None => out.push(format!("{name}: {key} of {dir} is not in the chart")),
            Some(c) if c != d => out.push(format!(
                "{name}: {key} differs from {dir}'s.\nthe chart's: {}\n{dir}'s: {}",
                pretty(c),
                pretty(d)
            )),
            Some(_) => {}
        }
    }
    for key in chart.keys().filter(|k| !deploy.contains_key(*k)) {
        out.push(format!(
            "{name}: the chart makes {key}, which {dir} does not"
        ));
    }
    out
}

#[test]
fn the_chart_installs_what_deploy_installs() {
    let mut found = Vec::new();
    for (name, values, dir) in variants() {
        found.extend(differences(name, &rendered(&values).objects, dir));
    }
    assert!(found.is_empty(), "{}", found.join("\n\n"));
}

#[test]
fn helm_lint_finds_nothing_wrong() {
    for (name, values, _) in variants() {
        let lint = rendered(&values).lint;
        assert_eq!(lint["total_charts_linted"], 1, "{name}: {lint}");
        assert_eq!(lint["errors"], serde_json::json!([]), "{name}: {lint}");
        // Severity 1 is information (`icon is recommended`); 2 a warning, 3 an error.
        let findings: Vec<&Value> = lint["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_i64() != Some(1))
            .collect();
        assert!(findings.is_empty(), "{name}: {findings:#?}");
    }
}

#[test]
fn the_values_schema_refuses_what_the_chart_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "replicaCount: two\nreplicas: 3\ntls: {enabled: \"yes\"}\nflowcontrol: {apiVersion: flowcontrol.apiserver.k8s.io/v1beta1}\n",
    )
    .unwrap();
    let refused = match helm(RELEASE, NAMESPACE, &[bad]) {
        Err(e) => e,
        Ok(_) => panic!("values the chart cannot use were rendered"),
    };
    for expected in [
        "/replicaCount",
        "'replicas' not allowed",
        "/tls/enabled",
        "/flowcontrol/apiVersion",
    ] {
        assert!(refused.contains(expected), "{expected}: {refused}");
    }
}

/// A release named otherwise, in another namespace, with its own service account and Lease: every name that one
/// object gives another follows.
#[test]
fn a_release_of_another_name_and_namespace_keeps_its_objects_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        "serviceAccount: {name: watcher}\nconfig:\n  alerting:\n    leader_election: {lease_name: apm-lease}\n",
    )
    .unwrap();
    let r = helm("apm", "observability", &[values]).unwrap();
    let find = |kind: &str, name: &str| -> &Value {
        r.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let subject = serde_json::json!([{"kind": "ServiceAccount", "name": "watcher", "namespace": "observability"}]);
    for (kind, name) in [
        ("ClusterRoleBinding", "apm-apf-monitor"),
        ("ClusterRoleBinding", "apm-apf-monitor-auth-delegator"),
        ("RoleBinding", "apm-apf-monitor-discovery"),
        ("RoleBinding", "apm-apf-monitor-lease"),
    ] {
        assert_eq!(find(kind, name)["subjects"], subject, "{kind} {name}");
    }
    assert_eq!(
        find("RoleBinding", "apm-apf-monitor-discovery")["metadata"]["namespace"],
        "default"
    );
    let lease = find("Role", "apm-apf-monitor-lease");
    assert_eq!(lease["metadata"]["namespace"], "observability");
    assert_eq!(
        lease["rules"][0]["resourceNames"],
        serde_json::json!(["apm-lease"])
    );
    let schema = find("FlowSchema", "apm-apf-monitor");
    assert_eq!(
        schema["spec"]["rules"][0]["subjects"][0]["serviceAccount"],
        serde_json::json!({"name": "watcher", "namespace": "observability"})
    );
    assert_eq!(
        schema["spec"]["priorityLevelConfiguration"]["name"],
        "apm-apf-monitor"
    );
    assert!(r
        .objects
        .iter()
        .any(|o| o["kind"] == "PriorityLevelConfiguration"
            && o["metadata"]["name"] == "apm-apf-monitor"));
    let pod = &find("Deployment", "apm-apf-monitor")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "watcher");
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        "apm-apf-monitor-config"
    );
    let config: Value = serde_saphyr::from_str(
        find("ConfigMap", "apm-apf-monitor-config")["data"]["apf-monitor.yaml"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        config["alerting"]["external_url"],
        "http://apm-apf-monitor.observability.svc:9864"
    );
    assert_eq!(
        config["alerting"]["leader_election"]["lease_name"],
        "apm-lease"
    );
    assert!(
        r.notes.contains("port-forward svc/apm-apf-monitor 9864"),
        "{}",
        r.notes
    );
}

/// The fleet in three shards, as the book installs it: three releases of values-fleet.yaml in one namespace, with
/// `shard` set. Each reads its shard, holds a Lease of its own (and may touch only that one), and no object of one
/// is another's.
#[test]
fn shards_of_a_fleet_are_releases_that_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for index in 0..3 {
        let shard = dir.path().join(format!("shard-{index}.yaml"));
        std::fs::write(&shard, format!("shard: {{index: {index}, total: 3}}\n")).unwrap();
        let release = format!("apf-monitor-shard-{index}");
        let r = helm(
            &release,
            NAMESPACE,
            &[values_file("values-fleet.yaml"), shard],
        )
        .unwrap();
        let text = r
            .objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap")
            .and_then(|c| c["data"]["apf-monitor.yaml"].as_str())
            .unwrap()
            .to_string();
        let config: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(
            config["targets"]["prometheus"][0]["shard"],
            serde_json::json!({"index": index, "total": 3})
        );
        assert_eq!(
            config["targets"]["prometheus"][0]["url"],
            "http://prometheus-operated.monitoring.svc:9090"
        );
        let lease = format!("{release}-notifier");
        assert_eq!(
            config["alerting"]["leader_election"]["lease_name"],
            lease.as_str()
        );
        let role = r
            .objects
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == format!("{release}-lease"))
            .unwrap();
        assert_eq!(
            role["rules"][0]["resourceNames"],
            serde_json::json!([lease])
        );
        apf_monitor::config::Config::from_yaml(&text).unwrap_or_else(|e| panic!("{release}: {e}"));
        for o in &r.objects {
            let key = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap()
            );
            assert!(seen.insert(key.clone()), "{release} makes {key} again");
        }
    }
    // A shard by hash needs both numbers.
    let half = dir.path().join("half.yaml");
    std::fs::write(&half, "shard: {index: 1}\n").unwrap();
    let refused = helm(
        RELEASE,
        NAMESPACE,
        &[values_file("values-fleet.yaml"), half],
    )
    .err()
    .expect("a shard without its total was rendered");
    assert!(refused.contains("/shard"), "{refused}");
}

/// The chart's version and appVersion are the crate's, and the image tag deploy/ pins: a release ships the three
/// together.
#[test]
fn the_charts_version_is_the_crates() {
    let chart: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version);
    assert_eq!(chart["appVersion"], version);
    let kustomization: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("deploy/base/kustomization.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(kustomization["images"][0]["newTag"], version);
}

/// The chart as a release ships it: `helm package`d (what .helmignore leaves out is not in the archive), the archive
/// installs what deploy/ does too.
#[test]
fn the_packaged_chart_renders_what_the_directory_does() {
    let dir = tempfile::tempdir().unwrap();
    for (name, values, dir_of) in variants() {
        let packaged = engine(
            &["--package".as_ref(), dir.path().as_os_str()],
            RELEASE,
            NAMESPACE,
            &values,
        )
        .unwrap_or_else(|e| panic!("{name}: the package does not render: {e}"));
        let found = differences(&format!("{name}, packaged"), &packaged.objects, dir_of);
        assert!(found.is_empty(), "{}", found.join("\n\n"));
    }
    assert!(dir.path().join("apf-monitor-0.1.0.tgz").is_file());
}

/// The book's example of values (docs/guides/helm.md, `# my-values.yaml`), as a file.
fn book_values(dir: &Path) -> PathBuf {
    let page = std::fs::read_to_string(root().join("docs/guides/helm.md")).unwrap();
    let from = page
        .find("# my-values.yaml")
        .expect("the book's values example");
    let block = &page[from..];
    let block = &block[..block.find("```").unwrap()];
    let path = dir.join("my-values.yaml");
    std::fs::write(&path, block).unwrap();
    path
}

/// The config each variant renders (and the book's example of values), as the daemon's JSON Schema (`apf-monitor
/// config schema`) and its loader take it.
#[test]
fn the_rendered_configs_pass_the_daemons_schema_and_loader() {
    let schema: Value =
        serde_json::from_str(&crate::common::stdout_of(&["config", "schema"])).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut variants: Vec<(&str, Vec<PathBuf>)> =
        variants().into_iter().map(|(n, v, _)| (n, v)).collect();
    variants.push(("the book's my-values.yaml", vec![book_values(dir.path())]));
    for (name, values) in variants {
        let r = rendered(&values);
        let text = r
            .objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap")
            .and_then(|c| c["data"]["apf-monitor.yaml"].as_str())
            .unwrap_or_else(|| panic!("{name}: no config"))
            .to_string();
        let doc: Value = serde_saphyr::from_str(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}\n{text}");
        apf_monitor::config::Config::from_yaml(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn promtool_checks_the_charts_rules() {
    let r = rendered(&[]);
    let rule = r
        .objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_saphyr::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
    let printed = crate::deploy::promtool(&["check", "rules", "rules.yaml"], dir.path());
    assert!(printed.contains("SUCCESS: 7 rules found"), "{printed}");
}

/// files/prometheus-rules.yaml is deploy/base/prometheusrule.yaml's spec, as written (with its comments); written
/// again with APF_MONITOR_WRITE_CHART=1.
#[test]
fn the_charts_rules_are_deploys() {
    let source = std::fs::read_to_string(root().join("deploy/base/prometheusrule.yaml")).unwrap();
    let (_, spec) = source
        .split_once("\nspec:\n")
        .expect("deploy/base/prometheusrule.yaml has a spec");
    let body: String = spec
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let expected = format!(
        "# Generated from deploy/base/prometheusrule.yaml's spec by tests/it/helm_chart.rs (APF_MONITOR_WRITE_CHART=1 \
         cargo test\n# --test it helm_chart::): edit that file, not this one.\n{body}"
    );
    let path = chart().join("files/prometheus-rules.yaml");
    if std::env::var_os("APF_MONITOR_WRITE_CHART").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        committed == expected,
        "charts/apf-monitor/files/prometheus-rules.yaml is stale: APF_MONITOR_WRITE_CHART=1 cargo test --test it \
         helm_chart::"
    );
}

/// The book's table of values (docs/guides/helm.md) is values.schema.json's, every value with its type, default
/// (values.yaml's) and description; written again with APF_MONITOR_WRITE_CHART=1.
#[test]
fn the_books_values_table_is_the_schemas() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    let defaults: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let mut rows = Vec::new();
    values_rows(&schema, &defaults, "", &mut rows);
    let table = format!(
        "| Value | Type | Default | Meaning |\n|---|---|---|---|\n{}",
        rows.join("")
    );
    let path = root().join("docs/guides/helm.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let (start, end) = ("<!-- values: generated", "<!-- end of values -->");
    let from = page.find(start).expect("the values marker");
    let from = from + page[from..].find("-->\n").unwrap() + 4;
    let to = page.find(end).expect("the end of values marker");
    let written = format!("{}{table}{}", &page[..from], &page[to..]);
    if std::env::var_os("APF_MONITOR_WRITE_CHART").is_some() {
        std::fs::write(&path, &written).unwrap();
    }
    let page = std::fs::read_to_string(&path).unwrap();
    assert!(
        page == written,
        "docs/guides/helm.md's table of values is stale: APF_MONITOR_WRITE_CHART=1 cargo test --test it helm_chart::"
    );
}

/// One row per value of `schema` (a leaf, or a map with no properties of its own), depth first.
fn values_rows(schema: &Value, defaults: &Value, prefix: &str, rows: &mut Vec<String>) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    for (key, s) in properties {
        let path = format!("{prefix}{key}");
        let default = &defaults[key];
        if s["properties"].is_object() {
            values_rows(s, default, &format!("{path}."), rows);
            continue;
        }
        let kind = match &s["type"] {
            Value::Array(types) => types
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" or "),
            t => t.as_str().unwrap_or_default().to_string(),
        };
        let shown = match default {
            Value::Null => String::new(),
            Value::Object(m) if m.len() > 3 => "(see values.yaml)".into(),
            Value::Array(a) if a.len() > 2 => "(see values.yaml)".into(),
            v => format!("`{}`", serde_json::to_string(v).unwrap()),
        };
        rows.push(format!(
            "| `{path}` | {kind} | {shown} | {} |\n",
            s["description"]
                .as_str()
                .unwrap_or_default()
                .replace('|', "\\|")
        ));
    }
}

/// The chart's FlowSchema and priority level, applied with kubectl to a simulated cluster, are served back: on 1.34
/// as flowcontrol.apiserver.k8s.io/v1 (the default where the cluster serves it), on 1.27 as v1beta3
/// (`flowcontrol.apiVersion`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_apf_objects_apply_to_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let beta = dir.path().join("v1beta3.yaml");
    std::fs::write(
        &beta,
        "flowcontrol: {apiVersion: flowcontrol.apiserver.k8s.io/v1beta3}\n",
    )
    .unwrap();
    for (minor, values, api) in [(34, vec![], "v1"), (27, vec![beta], "v1beta3")] {
        let r = rendered(&values);
        let apf: Vec<&Value> = r
            .objects
            .iter()
            .filter(|o| o["kind"] == "FlowSchema" || o["kind"] == "PriorityLevelConfiguration")
            .collect();
        assert_eq!(apf.len(), 2, "{apf:#?}");
        let api_version = format!("flowcontrol.apiserver.k8s.io/{api}");
        assert!(apf.iter().all(|o| o["apiVersion"] == api_version.as_str()));
        let (_cluster, dir, kubeconfig) = crate::common::sim_cluster(apf_sim::ClusterOptions {
            replicas: 1,
            ..apf_sim::ClusterOptions::new(
                apf_sim::KubeVersion::new(minor, 0),
                apf_sim::Scenario::load(&apf_sim::ScenarioSource::Idle).unwrap(),
            )
        })
        .await;
        let file = dir.path().join("apf.yaml");
        let text: String = apf
            .iter()
            .map(|o| format!("---\n{}", serde_saphyr::to_string(o).unwrap()))
            .collect();
        std::fs::write(&file, text).unwrap();
        let file = file.display().to_string();
        let (applied_ok, applied, err) =
            crate::sim_cluster::kubectl(&kubeconfig, &["apply", "-f", &file]).await;
        assert!(applied_ok, "1.{minor}: kubectl apply: {applied}{err}");
        let (served_ok, served, err) = crate::sim_cluster::kubectl(
            &kubeconfig,
            &["get", "flowschema", "apf-monitor", "-o", "json"],
        )
        .await;
        assert!(served_ok, "1.{minor}: kubectl get: {err}");
        assert!(
            applied.contains("flowschema.flowcontrol.apiserver.k8s.io/apf-monitor created")
                && applied.contains(
                    "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/apf-monitor created"
                ),
            "1.{minor}: {applied}"
        );
        let served: Value = serde_json::from_str(&served).unwrap();
        assert_eq!(
            served["spec"]["priorityLevelConfiguration"]["name"], "apf-monitor",
            "1.{minor}"
        );
        assert_eq!(served["spec"]["matchingPrecedence"], 1000, "1.{minor}");
    }
}
