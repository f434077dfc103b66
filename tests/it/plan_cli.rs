//! `apf-monitor plan`: limits before and after `--set`, against the reference tables of kube-apiserver's defaults
//! (the numbers below are the project's APF reference, worked out by hand from the objects, not by our code), from
//! the three file forms and from a simulated cluster's objects.
use crate::common;

use std::process::{Command, Output};

use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions};
use serde_json::Value;

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("plan")
        .args(args)
        .output()
        .unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = plan(&[args, &["--output", "json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (nominal, lower, upper) of `level`, `before` or `after`.
fn limits(report: &Value, level: &str, when: &str) -> (u64, u64, u64) {
    let row = report["priority_levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["priority_level"] == level)
        .unwrap_or_else(|| panic!("no {level} in {report}"));
    let l = &row[when];
    (
        l["nominal_limit_seats"].as_u64().unwrap(),
        l["lower_limit_seats"].as_u64().unwrap(),
        l["upper_limit_seats"].as_u64().unwrap(),
    )
}

/// The default levels of 1.26 to 1.36 at 600 seats: (name, nominal, lower, upper).
const DEFAULTS_126: [(&str, u64, u64, u64); 8] = [
    ("exempt", 0, 0, 600),
    ("catch-all", 13, 13, 613),
    ("system", 74, 50, 674),
    ("node-high", 98, 73, 698),
    ("leader-election", 25, 25, 625),
    ("workload-high", 98, 49, 698),
    ("workload-low", 245, 24, 845),
    ("global-default", 49, 24, 649),
];

fn assert_defaults_126(report: &Value, when: &str) {
    for (name, nominal, lower, upper) in DEFAULTS_126 {
        assert_eq!(
            limits(report, name, when),
            (nominal, lower, upper),
            "{name} {when}"
        );
    }
}

#[test]
fn the_defaults_of_1_33_and_more_shares_for_workload_low() {
    let dir = tempfile::tempdir().unwrap();
    let file = common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let r = json(&["-f", &file, "--set", "workload-low.shares=150"]);
    assert_eq!(r["server_concurrency"], 600);
    assert_eq!(
        (
            r["shares_sum_before"].as_u64(),
            r["shares_sum_after"].as_u64()
        ),
        (Some(245), Some(295))
    );
    assert_defaults_126(&r, "before");
    // Σ shares 295: nominal = ceil(600 × shares / 295); lower = nominal − round(nominal × lendable%); upper =
    // nominal + 600 (no borrowing limit).
    let after = [
        ("exempt", 0, 0, 600),
        ("catch-all", 11, 11, 611),
        ("system", 62, 42, 662),
        ("node-high", 82, 61, 682),
        ("leader-election", 21, 21, 621),
        ("workload-high", 82, 41, 682),
        ("workload-low", 306, 31, 906),
        ("global-default", 41, 20, 641),
    ];
    for (name, nominal, lower, upper) in after {
        assert_eq!(limits(&r, name, "after"), (nominal, lower, upper), "{name}");
    }
    // The table says the same, changed rows marked, and where 600 came from.
    let out = plan(&["-f", &file, "--set", "workload-low.shares=150"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("kube-apiserver's default"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("* workload-low")
            && l.contains("100 → 150")
            && l.contains("245 → 306")),
        "{table}"
    );
}

#[test]
fn manifests_carry_the_change_and_read_back_as_the_new_limits() {
    let dir = tempfile::tempdir().unwrap();
    let file = common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let out = plan(&[
        "-f",
        &file,
        "--set",
        "workload-low.shares=150",
        "--set",
        "global-default.queueLengthLimit=100",
        "--output",
        "manifests",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    assert_eq!(docs.len(), 2, "{text}");
    for d in &docs {
        assert_eq!(
            d["apiVersion"].as_str(),
            Some("flowcontrol.apiserver.k8s.io/v1")
        );
        assert_eq!(d["kind"].as_str(), Some("PriorityLevelConfiguration"));
        // kube-apiserver would put its own spec back on a default object that keeps "true".
        assert_eq!(
            d["metadata"]["annotations"]["apf.kubernetes.io/autoupdate-spec"].as_str(),
            Some("false")
        );
    }
    let wl = docs
        .iter()
        .find(|d| d["metadata"]["name"].as_str() == Some("workload-low"))
        .unwrap();
    assert_eq!(
        wl["spec"]["limited"]["nominalConcurrencyShares"].as_u64(),
        Some(150)
    );
    assert_eq!(wl["spec"]["limited"]["lendablePercent"].as_u64(), Some(90));
    let gd = docs
        .iter()
        .find(|d| d["metadata"]["name"].as_str() == Some("global-default"))
        .unwrap();
    assert_eq!(
        gd["spec"]["limited"]["limitResponse"]["queuing"]["queueLengthLimit"].as_u64(),
        Some(100)
    );
    // The list, then the manifests applied over it (the later file wins): the new limits are the ones in force.
    let manifests = dir.path().join("changed.yaml");
    std::fs::write(&manifests, &text).unwrap();
    let r = json(&["-f", &file, "-f", &manifests.display().to_string()]);
    assert_eq!(limits(&r, "workload-low", "before"), (306, 31, 906));
}

#[test]
fn manifests_and_the_apis_json_are_read_too() {
    let dir = tempfile::tempdir().unwrap();
    // Several YAML documents, one of them a FlowSchema (skipped).
    let manifests = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata:\n  name: a\n\
        spec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 10\n    limitResponse:\n      type: Reject\n---\n\
        apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata:\n  name: a\nspec:\n  priorityLevelConfiguration:\n    name: a\n---\n\
        apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata:\n  name: b\n\
        spec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 30\n    lendablePercent: 50\n    limitResponse:\n      type: Queue\n      queuing: {queues: 8, handSize: 2, queueLengthLimit: 10}\n";
    let path = dir.path().join("m.yaml");
    std::fs::write(&path, manifests).unwrap();
    let r = json(&[
        "-f",
        &path.display().to_string(),
        "--server-concurrency",
        "100",
    ]);
    assert_eq!(r["priority_levels"].as_array().unwrap().len(), 2);
    // 100 × 10/40 = 25; 100 × 30/40 = 75, lending half.
    assert_eq!(limits(&r, "a", "before"), (25, 25, 125));
    assert_eq!(limits(&r, "b", "before"), (75, 37, 175));
    assert_eq!(r["server_concurrency_source"], "--server-concurrency");

    // The API's own JSON (a PriorityLevelConfigurationList whose items have no kind), from stdin.
    let json_list = serde_json::json!({
        "kind": "PriorityLevelConfigurationList",
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "items": [{"metadata": {"name": "only"}, "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 7, "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}}]
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["plan", "-f", "-", "--output", "yaml"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        json_list.to_string().as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let y: serde_json::Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    assert_eq!(
        y["priority_levels"][0]["before"]["nominal_limit_seats"].as_u64(),
        Some(600)
    );
}

#[test]
fn bad_input_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    // 1 for what the input says; 2 for a malformed command line (clap's usage error).
    let err_code = |args: &[&str], code: i32| {
        let out = plan(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = |args: &[&str]| err_code(args, 1);
    assert!(err(&["-f", &file, "--set", "workload-lo.shares=1"])
        .contains("no priority level workload-lo; the levels are"));
    assert!(err(&["-f", &file, "--set", "catch-all.queues=4"]).contains("has no queues"));
    assert!(
        err_code(&["-f", &file, "--set", "workload-low=4"], 2).contains("expected LEVEL.FIELD=N")
    );
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "kind: ConfigMap\n").unwrap();
    assert!(err(&["-f", &empty.display().to_string()])
        .contains("no FlowSchema or PriorityLevelConfiguration in it"));
    assert!(err(&["-f", &file, "--output", "manifests"]).contains("nothing changes"));
}

/// A simulated replica of `minor` with `server_concurrency` seats, served on loopback.
fn sim(rt: &tokio::runtime::Runtime, minor: u32, server_concurrency: u32) -> String {
    let mut options = SimOptions::new(
        KubeVersion::new(minor, 0),
        Scenario::load(&ScenarioSource::Idle).unwrap(),
    );
    options.server_concurrency = server_concurrency;
    common::sim_with_on(rt, options, false)
}

#[test]
fn the_clusters_objects_and_its_server_concurrency() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // 1.20: no node-high, no lending (lower = upper = nominal), shares in assuredConcurrencyShares.
    let url = sim(&rt, 20, 600);
    let r = json(&["--target", &url]);
    for (name, nominal) in [
        ("catch-all", 15),
        ("system", 88),
        ("leader-election", 30),
        ("workload-high", 118),
        ("workload-low", 293),
        ("global-default", 59),
    ] {
        assert_eq!(
            limits(&r, name, "before"),
            (nominal, nominal, nominal),
            "{name}"
        );
    }
    assert_eq!(r["server_concurrency"], 600);
    assert!(
        r["server_concurrency_source"]
            .as_str()
            .unwrap()
            .starts_with("inferred from the nominal limits"),
        "{r}"
    );
    // 1.26: the same table as 1.33, from the cluster's v1beta3 objects.
    let url = sim(&rt, 26, 600);
    assert_defaults_126(&json(&["--target", &url]), "before");
    // A control plane scaled up (EKS raises the server concurrency): inferred from what the replica serves.
    let url = sim(&rt, 33, 2000);
    let r = json(&["--target", &url, "--set", "workload-low.shares=150"]);
    assert_eq!(r["server_concurrency"], 2000, "{r}");
    // ceil(2000 × 100/245) = 817 before; ceil(2000 × 150/295) = 1017 after.
    assert_eq!(limits(&r, "workload-low", "before").0, 817);
    assert_eq!(limits(&r, "workload-low", "after").0, 1017);
    // A flag that disagrees with the cluster is used, and the table says what the cluster implies.
    let r = json(&["--target", &url, "--server-concurrency", "600"]);
    assert_eq!(r["server_concurrency"], 600);
    assert!(
        r["server_concurrency_source"]
            .as_str()
            .unwrap()
            .contains("imply 2000"),
        "{r}"
    );
    drop(rt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_finds_the_replicas_and_reads_their_objects() {
    let (_cluster, _dir, kubeconfig) = common::sim_cluster(apf_sim::ClusterOptions::new(
        KubeVersion::new(34, 0),
        Scenario::load(&ScenarioSource::Idle).unwrap(),
    ))
    .await;
    let kubeconfig = kubeconfig.display().to_string();
    let r = tokio::task::spawn_blocking(move || json(&["--kubeconfig", &kubeconfig]))
        .await
        .unwrap();
    assert_defaults_126(&r, "before");
    assert!(
        r["server_concurrency_source"]
            .as_str()
            .unwrap()
            .starts_with("inferred from the nominal limits"),
        "{r}"
    );
}

/// `--load` refuses what it cannot do, before watching anything: each error names the flag and what to do.
#[test]
fn plan_load_refuses_what_it_cannot_do() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--load", "--target", "http://127.0.0.1:9"],
            "nothing changes",
        ),
        (
            &[
                "--load",
                "--target",
                "http://127.0.0.1:9",
                "--set",
                "workload-low.shares=150",
                "--output",
                "manifests",
            ],
            "run it without --load",
        ),
        (
            &[
                "--load",
                "--file",
                "x.yaml",
                "--set",
                "workload-low.shares=150",
            ],
            "--file does not go with it",
        ),
        (
            &[
                "--prometheus",
                "http://127.0.0.1:9",
                "--set",
                "workload-low.shares=150",
            ],
            "--prometheus goes with --load",
        ),
    ];
    for (args, says) in cases {
        let out = plan(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
