//! `apf-monitor check --review`: nothing on the default objects of any version (served by the simulator, and the
//! real 1.33 objects), each planted misconfiguration found with its object and fix, and a cluster operator's service
//! account seen in `dump_requests` landing in workload-low.
use apf_monitor::values;
use std::process::{Command, Output};
use std::time::Duration;

use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
use serde_json::Value;

fn review(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["check", "--review"])
        .args(args)
        .output()
        .unwrap()
}

fn findings(out: &Output) -> Vec<Value> {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["findings"].as_array().unwrap().clone()
}

#[test]
fn nothing_on_the_default_objects_of_any_version() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for minor in KubeVersion::MIN_MINOR..=KubeVersion::MAX_MINOR {
        // Traffic without an operator: the ramp's cert-manager, caught executing in `dump_requests` (as it is at
        // random instants), is a finding of its own (the test below), not one of the default objects.
        let url = crate::common::sim_on(&rt, minor, ScenarioSource::Idle, true);
        let out = review(&["--target", &url, "--output", "json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "1.{minor}: {:?}",
            findings(&out)
        );
        assert!(findings(&out).is_empty(), "1.{minor}");
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let out = review(&["--objects", &fs, "--objects", &pl]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.starts_with("0 findings"), "{text}");
}

/// Misconfigurations planted beside the 1.33 defaults, one per check.
const PLANTED: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: lost}
spec:
  matchingPrecedence: 3000
  priorityLevelConfiguration: {name: nowhere}
  rules:
  - subjects: [{kind: User, user: {name: bob}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: orphan}
spec: {type: Limited, limited: {nominalConcurrencyShares: 20, lendablePercent: 0, limitResponse: {type: Reject}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice-everything}
spec:
  matchingPrecedence: 2000
  priorityLevelConfiguration: {name: workload-high}
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice-configmaps}
spec:
  matchingPrecedence: 2500
  priorityLevelConfiguration: {name: global-default}
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    resourceRules: [{verbs: [get, list], apiGroups: [""], resources: [configmaps], namespaces: [default]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: admins}
spec:
  matchingPrecedence: 50
  priorityLevelConfiguration: {name: exempt}
  rules:
  - subjects: [{kind: Group, group: {name: platform-admins}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tiny}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    limitResponse: {type: Queue, queuing: {queues: 128, handSize: 2, queueLengthLimit: 50}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: batch}
spec:
  matchingPrecedence: 4000
  priorityLevelConfiguration: {name: tiny}
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: Group, group: {name: batch-jobs}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: narrow}
spec: {type: Limited, limited: {nominalConcurrencyShares: 1, lendablePercent: 0, limitResponse: {type: Reject}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: reports}
spec:
  matchingPrecedence: 4500
  priorityLevelConfiguration: {name: narrow}
  rules:
  - subjects: [{kind: User, user: {name: report-generator}}]
    resourceRules: [{verbs: [list], apiGroups: [""], resources: [pods], clusterScope: true, namespaces: ["*"]}]
"#;

#[test]
fn each_planted_misconfiguration_is_found_with_its_fix() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let planted = dir.path().join("planted.yaml");
    std::fs::write(&planted, PLANTED).unwrap();
    let planted = planted.display().to_string();
    let out = review(&[
        "--objects",
        &fs,
        "--objects",
        &pl,
        "--objects",
        &planted,
        "--output",
        "json",
    ]);
    // The exempt grant is critical.
    assert_eq!(out.status.code(), Some(2));
    let found: Vec<(String, String)> = findings(&out)
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap().to_string(),
                f["object"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("dangling_flow_schema", "FlowSchema/lost"),
        (
            "unreachable_priority_level",
            "PriorityLevelConfiguration/orphan",
        ),
        ("shadowed_flow_schema", "FlowSchema/alice-configmaps"),
        ("exempt_grant", "FlowSchema/admins"),
        (
            "flow_share_below_one_request",
            "PriorityLevelConfiguration/tiny",
        ),
        // 3 seats (1 share of 267), and a LIST on a level without queues may be 10 wide.
        (
            "level_narrower_than_a_request",
            "PriorityLevelConfiguration/narrow",
        ),
    ];
    for (check, object) in want {
        assert!(
            found.contains(&(check.to_string(), object.to_string())),
            "{check} {object} not in {found:?}"
        );
    }
    assert_eq!(found.len(), want.len(), "{found:?}");
    // The table says why and what to do.
    let out = review(&["--objects", &fs, "--objects", &pl, "--objects", &planted]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("CRITICAL exempt_grant FlowSchema/admins"),
        "{text}"
    );
    assert!(
        text.contains(
            "FlowSchema alice-everything (matchingPrecedence 2000) matches every request"
        ),
        "{text}"
    );
    assert!(text.contains("fix: use at most"), "{text}");
}

#[test]
fn a_cluster_operator_in_workload_low_is_found_from_the_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("cilium.yaml");
    std::fs::write(
        &scenario,
        "duration: 300s\nflows:\n  - name: cilium\n    flow_schema: service-accounts\n    \
         user: system:serviceaccount:kube-system-cni:cilium-operator\n    verb: list\n    resource: pods\n    \
         namespace: \"\"\n    seats: 10\n    duration: 5s\n    rate: [ {at: 0s, rps: 20} ]\n",
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = crate::common::sim_on(&rt, 34, ScenarioSource::File(scenario), true);
    // Requests must be executing when the dump is read: the clock has run a few seconds.
    let mut found = Vec::new();
    for _ in 0..50 {
        let out = review(&["--target", &url, "--output", "json"]);
        found = findings(&out);
        if !found.is_empty() {
            assert_eq!(out.status.code(), Some(1));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!(f["check"], "operator_in_shared_level");
    assert_eq!(f["object"], "FlowSchema/service-accounts");
    assert!(
        f["why"].as_str().unwrap().contains("cilium-operator"),
        "{f}"
    );
    let manifest: serde_json::Value =
        serde_saphyr::from_str(f["manifest"].as_str().unwrap()).unwrap();
    assert_eq!(manifest["kind"].as_str(), Some("FlowSchema"));
    assert_eq!(
        manifest["spec"]["priorityLevelConfiguration"]["name"].as_str(),
        Some("workload-high")
    );
    assert_eq!(
        manifest["spec"]["rules"][0]["subjects"][0]["serviceAccount"]["name"].as_str(),
        Some("cilium-operator")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_exports_findings_and_rechecks_when_the_objects_change() {
    let sim = Simulator::try_new(SimOptions::new(
        KubeVersion::new(34, 0),
        Scenario::load(&ScenarioSource::Idle).unwrap(),
    ))
    .unwrap();
    let sim_url = crate::common::serve_sim(&sim).await;
    let mut config = apf_monitor::config::Config::default();
    config.scrape.interval = values::Interval(Duration::from_secs(1));
    config.scrape.timeout = values::Interval(Duration::from_secs(1));
    config.scrape.objects_interval = values::DurationValue(Duration::from_secs(1));
    config.targets.static_targets = vec![crate::common::sim_target(&sim_url)];
    let monitor = crate::common::start_monitor(&config).await;
    let findings = |body: &str| {
        crate::common::sample_value(
            body,
            "apf_config_findings",
            &[("check", "exempt_grant"), ("severity", "critical")],
        )
    };
    let url = format!("{monitor}/metrics");
    let zero = crate::common::eventually(Duration::from_secs(30), || async {
        (findings(&crate::common::get_text(&url).await?)? == 0.0).then_some(())
    })
    .await;
    assert!(
        zero.is_some(),
        "no apf_config_findings at 0 on the default objects"
    );
    // Someone grants exempt to a group: the next listing of the objects finds it.
    let grant = serde_json::json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": "admins"},
        "spec": {"matchingPrecedence": 50, "priorityLevelConfiguration": {"name": "exempt"},
                 "rules": [{"subjects": [{"kind": "Group", "group": {"name": "platform-admins"}}],
                            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}
    });
    let created = reqwest::Client::new()
        .post(format!(
            "{sim_url}/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas"
        ))
        .header("content-type", "application/json")
        .body(grant.to_string())
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
    let one = crate::common::eventually(Duration::from_secs(30), || async {
        (findings(&crate::common::get_text(&url).await?)? == 1.0).then_some(())
    })
    .await;
    assert!(one.is_some(), "the exempt grant was not found");
    let status = crate::common::get_text(&format!("{monitor}/api/v1/status"))
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&status).unwrap();
    assert!(
        v["config_findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["object"] == "FlowSchema/admins"),
        "{status}"
    );
}
