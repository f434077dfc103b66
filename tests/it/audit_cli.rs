//! `apf-monitor audit`: an audit log as kube-apiserver writes it (one Event a line at level Metadata, a live file and
//! a rotated gzipped one, earlier stages, a malformed line) classified on the real default objects of 1.33; every
//! count checked against the events written, event for event.
use std::io::Write;
use std::process::{Command, Output};

use serde_json::{json, Value};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("audit")
        .args(args)
        .output()
        .unwrap()
}

/// An Event as kube-apiserver's log backend writes it at level Metadata (k8s.io/apiserver `pkg/apis/audit/v1`).
fn event(stage: &str, user: &str, groups: &[&str], request: &Value, code: u16, at: &str) -> Value {
    let mut e = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": format!("{user}-{at}"),
        "stage": stage,
        "requestURI": request["uri"],
        "verb": request["verb"],
        "user": {"username": user, "groups": groups},
        "sourceIPs": ["10.0.3.7"],
        "userAgent": request["agent"],
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
        "annotations": {"authorization.k8s.io/decision": "allow"},
    });
    if let Some(o) = request.get("objectRef") {
        e["objectRef"] = o.clone();
    }
    if stage == "ResponseComplete" {
        e["responseStatus"] = if code == 429 {
            json!({"metadata": {}, "status": "Failure", "message": "Too many requests, please try again later.",
                   "reason": "TooManyRequests", "details": {"retryAfterSeconds": 1}, "code": 429})
        } else {
            json!({"metadata": {}, "code": code})
        };
        if let Some(wait) = request.get("wait") {
            e["annotations"]["apiserver.latency.k8s.io/apf-queue-wait"] = wait.clone();
        }
    }
    e
}

#[test]
fn who_got_the_429s_event_for_event() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let agent = "system:serviceaccount:monitoring:agent";
    let sa_groups = [
        "system:serviceaccounts",
        "system:serviceaccounts:monitoring",
        "system:authenticated",
    ];
    let list_pods = json!({"uri": "/api/v1/pods?limit=500", "verb": "list", "agent": "agent/1.4 (linux/amd64)",
                           "objectRef": {"resource": "pods", "apiVersion": "v1"}, "wait": "2.5s"});
    let node_get = json!({"uri": "/api/v1/namespaces/default/configmaps/x", "verb": "get", "agent": "kubelet/v1.33.1",
                          "objectRef": {"resource": "configmaps", "namespace": "default", "name": "x", "apiVersion": "v1"}});
    let healthz =
        json!({"uri": "/healthz?verbose", "verb": "get", "agent": "kube-probe/1.33", "wait": "0s"});
    let scale = json!({"uri": "/apis/apps/v1/namespaces/ci/deployments/web/scale", "verb": "update",
                       "agent": "kubectl/v1.33.1", "wait": "12.345678ms",
                       "objectRef": {"resource": "deployments", "namespace": "ci", "name": "web", "apiGroup": "apps",
                                     "apiVersion": "v1", "subresource": "scale"}});

    let mut live = Vec::new();
    let mut rotated = Vec::new();
    let (mut agent_429, mut agent_all) = (0, 0);
    for i in 0..120u32 {
        let at = format!("2026-11-24T10:{:02}:{:02}.000100Z", i / 60, i % 60);
        let code = if i % 3 == 0 { 429 } else { 200 };
        let lines = if i < 60 { &mut rotated } else { &mut live };
        lines.push(event(
            "RequestReceived",
            agent,
            &sa_groups,
            &list_pods,
            0,
            &at,
        ));
        lines.push(event(
            "ResponseComplete",
            agent,
            &sa_groups,
            &list_pods,
            code,
            &at,
        ));
        agent_all += 1;
        agent_429 += u64::from(code == 429);
        lines.push(event(
            "ResponseComplete",
            "system:node:node-1",
            &["system:nodes", "system:authenticated"],
            &node_get,
            200,
            &at,
        ));
        lines.push(event(
            "ResponseComplete",
            "system:anonymous",
            &["system:unauthenticated"],
            &healthz,
            200,
            &at,
        ));
    }
    // An admin impersonating a CI service account: APF classifies the impersonated user.
    let mut imp = event(
        "ResponseComplete",
        "admin",
        &["system:masters", "system:authenticated"],
        &scale,
        429,
        "2026-11-24T10:01:30.000000Z",
    );
    imp["impersonatedUser"] = json!({"username": "system:serviceaccount:ci:runner"});
    live.push(imp);

    let live_path = dir.path().join("audit.log");
    let mut text: Vec<String> = live.iter().map(Value::to_string).collect();
    text.insert(3, "{\"kind\":\"Event\",\"stage\":".into()); // line 4: cut short
    std::fs::write(&live_path, text.join("\n") + "\n").unwrap();
    let rotated_path = dir.path().join("audit-2026-11-24T10-01-00.000.log.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&rotated_path).unwrap(),
        flate2::Compression::fast(),
    );
    for e in &rotated {
        writeln!(gz, "{e}").unwrap();
    }
    gz.finish().unwrap();

    let (live_s, rotated_s) = (
        live_path.display().to_string(),
        rotated_path.display().to_string(),
    );
    let objects = ["--objects", fs.as_str(), "--objects", pl.as_str()];
    let files = ["--file", rotated_s.as_str(), live_s.as_str()];
    let out = run(&[&files[..], &objects, &["--output", "json", "--top", "0"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let user = |name: &str| -> &Value {
        v["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["user"] == name)
            .unwrap_or_else(|| panic!("{name} in {v:#}"))
    };
    // Worst first: the agent.
    assert_eq!(v["users"][0]["user"], agent);
    let a = user(agent);
    assert_eq!(a["flow_schema"], "service-accounts");
    assert_eq!(a["priority_level"], "workload-low");
    assert_eq!(a["requests"], agent_all);
    assert_eq!(a["rejected"], agent_429);
    assert_eq!(a["queue_wait_p50_seconds"], 2.5);
    assert_eq!(a["first_rejection"], "2026-11-24T10:00:00.000100Z");
    assert_eq!(a["last_rejection"], "2026-11-24T10:01:57.000100Z");
    assert_eq!(a["user_agents"], json!(["agent/1.4 (linux/amd64)"]));
    let node = user("system:node:node-1");
    assert_eq!(
        (&node["flow_schema"], &node["priority_level"]),
        (&json!("system-nodes"), &json!("system"))
    );
    let probe = user("system:anonymous");
    assert_eq!(
        (&probe["flow_schema"], &probe["priority_level"]),
        (&json!("probes"), &json!("exempt"))
    );
    let runner = user("system:serviceaccount:ci:runner");
    assert_eq!(runner["flow_schema"], "service-accounts");
    assert_eq!(runner["impersonated_by"], json!(["admin"]));
    assert_eq!(runner["queue_wait_p99_seconds"], 0.012345678);
    // Every completed request counted once; earlier stages and the cut line accounted for.
    assert_eq!(v["requests"], 3 * 120 + 1);
    assert_eq!(v["rejected"], agent_429 + 1);
    assert_eq!(v["skipped_events"], 120);
    assert_eq!(v["malformed_lines"], 1);
    assert_eq!(v["malformed"][0]["line"], 4);
    assert_eq!(v["malformed"][0]["file"], live_s.as_str());
    let flow = &v["flows"][0];
    assert_eq!(
        (&flow["flow_schema"], &flow["flow_distinguisher"]),
        (&json!("service-accounts"), &json!(agent))
    );

    // The period: the live file's minute only.
    let out = run(&[
        &files[..],
        &objects,
        &[
            "--output",
            "json",
            "--since",
            "2026-11-24T10:01:00Z",
            "--until",
            "2026-11-24T10:02:00Z",
        ],
    ]
    .concat());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"], 3 * 60 + 1);
    assert_eq!(v["outside_period"], 3 * 60);

    // The table, worst first, with the malformed line's place.
    let out = run(&[&files[..], &objects, &["--top", "2"]].concat());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.starts_with("361 requests, 41 answered 429"),
        "{table}"
    );
    assert!(table.contains(&format!("{live_s}:4:")), "{table}");
    let first_row = table
        .lines()
        .skip_while(|l| !l.starts_with("USER "))
        .nth(1)
        .unwrap();
    assert!(
        first_row.starts_with(agent) && first_row.contains(" 40 "),
        "{first_row}"
    );
    assert!(
        table.contains("(2 more users: --top 0 lists every one)"),
        "{table}"
    );

    // An export piped in: standard input, named so in the malformed line's place.
    let mut child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["audit", "-f", "-", "--output", "json"])
        .args(objects)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&live_path).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"], 3 * 60 + 1);
    assert_eq!(v["malformed"][0]["file"], "stdin");

    // Bad input: a file that is not there, no objects without a cluster.
    let out = run(&["--file", "/nonexistent/audit.log", "--objects", fs.as_str()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--file /nonexistent/audit.log"), "{err}");
}

/// A file that is not an audit log (a /metrics capture, an empty file) is refused: exit 1, saying no line is an
/// audit Event and what to give; a log whose Events are all of earlier stages is an audit log (exit 0, the hint
/// about its level and stages).
#[test]
fn a_file_without_one_audit_event_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let objects = ["--objects", fs.as_str(), "--objects", pl.as_str()];
    let metrics = dir.path().join("metrics.txt");
    std::fs::write(&metrics, crate::common::capture("1.35")).unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "").unwrap();
    for (file, says) in [
        (&metrics, "no line is an audit Event ("),
        (&empty, "empty: no audit Event"),
    ] {
        let out = run(&[&["--file", file.to_str().unwrap()][..], &objects].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("{}: {says}", file.display()))
                && err.contains("--audit-log-format=json"),
            "{err}"
        );
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    let request = json!({"uri": "/api/v1/pods", "verb": "list", "agent": "kubectl/v1.33.0"});
    let received = event(
        "RequestReceived",
        "alice",
        &["system:authenticated"],
        &request,
        0,
        "2026-11-24T10:00:00.000000Z",
    );
    let earlier = dir.path().join("earlier.log");
    std::fs::write(&earlier, format!("{received}\n")).unwrap();
    let out = run(&[&["--file", earlier.to_str().unwrap()][..], &objects].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("No request completed in these events"),
        "{text}"
    );
}

/// The groups an event records are the ones APF matched: OpenShift's Prometheus, a service account authenticated
/// through a proxy, is recorded with only `system:authenticated` and listed under global-default (where APF put
/// it), not under service-accounts as its name alone would say. A service account recorded with its
/// service-account groups stays in service-accounts.
#[test]
fn a_service_account_recorded_with_only_system_authenticated_is_global_default() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let prometheus = "system:serviceaccount:openshift-monitoring:prometheus-k8s";
    let agent = "system:serviceaccount:monitoring:agent";
    let metrics = json!({"uri": "/metrics", "verb": "get", "agent": "Prometheus/2.55.1"});
    let mut lines = Vec::new();
    for i in 0..4u32 {
        let at = format!("2026-11-24T10:00:{:02}.000100Z", i * 15);
        let code = if i == 0 { 429 } else { 200 };
        lines.push(event(
            "ResponseComplete",
            prometheus,
            &["system:authenticated"],
            &metrics,
            code,
            &at,
        ));
        lines.push(event(
            "ResponseComplete",
            agent,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:monitoring",
                "system:authenticated",
            ],
            &metrics,
            200,
            &at,
        ));
    }
    let log = dir.path().join("audit.log");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&log, text.join("\n") + "\n").unwrap();
    let log = log.display().to_string();
    let args = [
        "--file",
        log.as_str(),
        "--objects",
        fs.as_str(),
        "--objects",
        pl.as_str(),
    ];

    let out = run(&[&args[..], &["--output", "json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let users = v["users"].as_array().unwrap();
    let rows = |name: &str| -> Vec<&Value> { users.iter().filter(|u| u["user"] == name).collect() };
    let p = rows(prometheus);
    assert_eq!(p.len(), 1, "{v:#}");
    assert_eq!(
        (&p[0]["flow_schema"], &p[0]["priority_level"]),
        (&json!("global-default"), &json!("global-default"))
    );
    assert_eq!(
        (&p[0]["requests"], &p[0]["rejected"]),
        (&json!(4), &json!(1))
    );
    let a = rows(agent);
    assert_eq!(a.len(), 1, "{v:#}");
    assert_eq!(
        (&a[0]["flow_schema"], &a[0]["priority_level"]),
        (&json!("service-accounts"), &json!("workload-low"))
    );

    // The table says so too.
    let out = run(&args);
    let table = String::from_utf8(out.stdout).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with(prometheus))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains(" global-default ") && !row.contains("service-accounts"),
        "{row}"
    );
}
