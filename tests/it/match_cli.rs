//! `apf-monitor match`: the FlowSchema, priority level and flow distinguisher of a table of requests, on the real
//! default objects of 1.33 (a `kubectl get -o yaml` transcription of kube-apiserver's bootstrap objects) and on the
//! objects a simulated 1.34 and 1.20 cluster serves. The expected answers are kube-apiserver's, worked out by hand
//! from those objects and its matching rules (precedence, then name; first match wins).
use std::process::{Command, Output};

use apf_sim::ScenarioSource;
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .arg("match")
        .args(args)
        .output()
        .unwrap()
}

/// (flow schema, priority level, flow distinguisher) of a request.
fn matched(source: &[&str], request: &[&str]) -> (String, String, String) {
    let out = run(&[source, request, &["--output", "json"]].concat());
    assert!(
        out.status.success(),
        "{request:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = |k: &str| v[k].as_str().unwrap().to_string();
    (
        s("flow_schema"),
        s("priority_level"),
        s("flow_distinguisher"),
    )
}

/// (flow schema, priority level, flow distinguisher).
type Expected = (&'static str, &'static str, &'static str);

const NODE: &[&str] = &["--user", "system:node:node-1", "--group", "system:nodes"];
const KCM: &[&str] = &["--user", "system:kube-controller-manager"];
const KUBE_SYSTEM_SA: &[&str] = &["--user", "system:serviceaccount:kube-system:foo"];
const AGENT: &[&str] = &["--user", "system:serviceaccount:monitoring:agent"];

fn req(who: &[&str], what: &[&str]) -> Vec<String> {
    who.iter().chain(what).map(|s| s.to_string()).collect()
}

#[test]
fn the_default_objects_of_1_33() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let source = ["-f", fs.as_str(), "-f", pl.as_str()];
    let update_status = [
        "--verb",
        "update",
        "--resource",
        "nodes",
        "--subresource",
        "status",
    ];
    let list_pods = ["--verb", "list", "--resource", "pods"];
    let leases = [
        "--verb",
        "update",
        "--api-group",
        "coordination.k8s.io",
        "--resource",
        "leases",
        "--namespace",
        "kube-system",
    ];
    let cases: Vec<(Vec<String>, Expected)> = vec![
        (
            req(NODE, &update_status),
            ("system-node-high", "node-high", "system:node:node-1"),
        ),
        (
            req(NODE, &list_pods),
            ("system-nodes", "system", "system:node:node-1"),
        ),
        // ByNamespace, cluster scope: the flow is the empty namespace.
        (
            req(KCM, &list_pods),
            ("kube-controller-manager", "workload-high", ""),
        ),
        (
            req(
                KCM,
                &[
                    "--verb",
                    "update",
                    "--resource",
                    "endpoints",
                    "--namespace",
                    "default",
                ],
            ),
            (
                "endpoint-controller",
                "workload-high",
                "system:kube-controller-manager",
            ),
        ),
        (
            req(KCM, &leases),
            (
                "system-leader-election",
                "leader-election",
                "system:kube-controller-manager",
            ),
        ),
        // A kube-system service account: `list` is not a leader-election verb, `get` is.
        (
            req(
                KUBE_SYSTEM_SA,
                &[
                    "--verb",
                    "list",
                    "--resource",
                    "configmaps",
                    "--namespace",
                    "kube-system",
                ],
            ),
            (
                "kube-system-service-accounts",
                "workload-high",
                "kube-system",
            ),
        ),
        (
            req(
                KUBE_SYSTEM_SA,
                &[
                    "--verb",
                    "get",
                    "--resource",
                    "configmaps",
                    "--namespace",
                    "kube-system",
                ],
            ),
            (
                "workload-leader-election",
                "leader-election",
                "system:serviceaccount:kube-system:foo",
            ),
        ),
        (
            req(AGENT, &list_pods),
            (
                "service-accounts",
                "workload-low",
                "system:serviceaccount:monitoring:agent",
            ),
        ),
        // A service account's own /metrics scrape lands in workload-low too.
        (
            req(AGENT, &["--non-resource-url", "/metrics"]),
            (
                "service-accounts",
                "workload-low",
                "system:serviceaccount:monitoring:agent",
            ),
        ),
        // Exempt levels have no queues: no distinguisher.
        (
            req(
                &["--user", "system:anonymous"],
                &["--non-resource-url", "/healthz"],
            ),
            ("probes", "exempt", ""),
        ),
        (
            req(
                &["--user", "system:anonymous"],
                &["--non-resource-url", "/api"],
            ),
            ("global-default", "global-default", "system:anonymous"),
        ),
        // An OIDC user with groups of its own.
        (
            req(
                &["--user", "alice@example.com", "--group", "devs"],
                &[
                    "--verb",
                    "get",
                    "--resource",
                    "configmaps",
                    "--namespace",
                    "default",
                ],
            ),
            ("global-default", "global-default", "alice@example.com"),
        ),
        (
            req(
                &["--user", "admin", "--group", "system:masters"],
                &["--verb", "delete", "--resource", "pods", "--namespace", "x"],
            ),
            ("exempt", "exempt", ""),
        ),
    ];
    for (request, (schema, level, flow)) in cases {
        let request: Vec<&str> = request.iter().map(String::as_str).collect();
        assert_eq!(
            matched(&source, &request),
            (schema.to_string(), level.to_string(), flow.to_string()),
            "{request:?}"
        );
    }
    // The table names the same, and says why a flow is empty.
    let out = run(&[&source[..], KCM, &list_pods].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("flow schema     kube-controller-manager (matchingPrecedence 800)"),
        "{text}"
    );
    let out = run(&[
        &source[..],
        &[
            "--user",
            "system:anonymous",
            "--non-resource-url",
            "/healthz",
        ],
    ]
    .concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the schema has no distinguisher"), "{text}");
}

#[test]
fn a_higher_precedence_schema_of_ones_own_and_a_dangling_one() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    // The isolation apf-monitor's remediation proposes: the agent's LISTs in a level of their own, ahead of
    // service-accounts; and a schema whose level is missing (kube-apiserver skips it).
    let own = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: agent}\n\
        spec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 5\n    limitResponse:\n      type: Queue\n      queuing: {queues: 16, handSize: 4, queueLengthLimit: 50}\n---\n\
        apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: agent}\nspec:\n  matchingPrecedence: 8999\n  \
        priorityLevelConfiguration: {name: agent}\n  distinguisherMethod: {type: ByUser}\n  rules:\n  - subjects: [{kind: ServiceAccount, serviceAccount: {namespace: monitoring, name: agent}}]\n    \
        resourceRules: [{verbs: [list], apiGroups: [\"\"], resources: [pods], clusterScope: true, namespaces: [\"*\"]}]\n---\n\
        apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: lost}\nspec:\n  matchingPrecedence: 10\n  \
        priorityLevelConfiguration: {name: nowhere}\n  rules:\n  - subjects: [{kind: Group, group: {name: \"*\"}}]\n    nonResourceRules: [{verbs: [\"*\"], nonResourceURLs: [\"*\"]}]\n";
    let own_path = dir.path().join("own.yaml");
    std::fs::write(&own_path, own).unwrap();
    let own_path = own_path.display().to_string();
    let source = [
        "-f",
        fs.as_str(),
        "-f",
        pl.as_str(),
        "-f",
        own_path.as_str(),
    ];
    assert_eq!(
        matched(
            &source,
            &req(AGENT, &["--verb", "list", "--resource", "pods"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
        ),
        (
            "agent".into(),
            "agent".into(),
            "system:serviceaccount:monitoring:agent".into()
        )
    );
    // Its watches are not in the new schema: still service-accounts.
    assert_eq!(
        matched(
            &source,
            &req(AGENT, &["--verb", "watch", "--resource", "pods"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
        )
        .0,
        "service-accounts"
    );
    let out = run(&[
        &source[..],
        &["--user", "bob", "--non-resource-url", "/version"],
    ]
    .concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("skipped         lost (priority level missing"),
        "{text}"
    );
    assert!(text.contains("flow schema     global-default"), "{text}");
}

#[test]
fn bad_requests_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let err = |args: &[&str]| {
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(err(&["-f", &fs, "--user", "a", "--resource", "pods"]).contains("--verb is needed"));
    // The help says so too: the default verb is a non-resource request's only.
    let help = String::from_utf8_lossy(&run(&["--help"]).stdout).into_owned();
    let verb = help
        .split("--verb <VERB>")
        .nth(1)
        .and_then(|h| h.split("\n      --").next())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        verb.contains("needed with --resource")
            && verb.contains("With --non-resource-url, the HTTP method (default get)"),
        "{verb}"
    );
    assert!(
        err(&["-f", &fs, "--user", "a", "--non-resource-url", "healthz"])
            .contains("a path starts with /")
    );
    assert!(err(&["-f", &fs, "--user", "a", "--non-resource-url", "/x"])
        .contains("and the PriorityLevelConfigurations"));
}

#[test]
fn the_objects_a_cluster_serves_in_other_versions() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // 1.34 removed endpoint-controller and workload-leader-election.
    let url = crate::common::sim_on(&rt, 34, ScenarioSource::Idle, false);
    let source = ["--target", url.as_str()];
    let r = req(
        KCM,
        &[
            "--verb",
            "update",
            "--resource",
            "endpoints",
            "--namespace",
            "default",
        ],
    );
    assert_eq!(
        matched(&source, &r.iter().map(String::as_str).collect::<Vec<_>>()),
        (
            "kube-controller-manager".into(),
            "workload-high".into(),
            "default".into()
        )
    );
    let r = req(
        KUBE_SYSTEM_SA,
        &[
            "--verb",
            "get",
            "--resource",
            "configmaps",
            "--namespace",
            "kube-system",
        ],
    );
    assert_eq!(
        matched(&source, &r.iter().map(String::as_str).collect::<Vec<_>>()),
        (
            "kube-system-service-accounts".into(),
            "workload-high".into(),
            "kube-system".into()
        )
    );
    // 1.20 had no node-high: a node's status update lands in system (read through v1beta1).
    let url = crate::common::sim_on(&rt, 20, ScenarioSource::Idle, false);
    let source = ["--target", url.as_str()];
    let r = req(
        NODE,
        &[
            "--verb",
            "update",
            "--resource",
            "nodes",
            "--subresource",
            "status",
        ],
    );
    assert_eq!(
        matched(&source, &r.iter().map(String::as_str).collect::<Vec<_>>()),
        (
            "system-nodes".into(),
            "system".into(),
            "system:node:node-1".into()
        )
    );
}

/// A verb kube-apiserver never gives a request is refused, naming it and the verbs there are; a resource that is
/// not a plural, lower-case name is matched as written, with a warning that says so.
#[test]
fn an_unknown_verb_is_refused_and_a_singular_resource_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let source = ["-f", fs.as_str(), "-f", pl.as_str()];
    let out = run(&[
        &source[..],
        AGENT,
        &["--verb", "frobnicate", "--resource", "pods"],
    ]
    .concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--verb frobnicate") && err.contains("deletecollection"),
        "{err}"
    );
    let out = run(&[
        &source[..],
        AGENT,
        &["--verb", "post", "--non-resource-url", "/healthz"],
    ]
    .concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&[
        &source[..],
        AGENT,
        &["--verb", "list", "--non-resource-url", "/healthz"],
    ]
    .concat());
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP method"));

    let out = run(&[&source[..], AGENT, &["--verb", "list", "--resource", "pod"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning: --resource pod") && err.contains("did you mean pods?"),
        "{err}"
    );
    let out = run(&[
        &source[..],
        AGENT,
        &["--verb", "list", "--resource", "pods"],
    ]
    .concat());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}

/// A request kube-apiserver could not have classified is refused, naming the flag and the rule: an empty user or
/// group, a namespace that is not a DNS-1123 label. The usage line says what is required and what is optional.
#[test]
fn names_kube_apiserver_could_not_have_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::common::fixture_file(&dir, "defaults-1.33-flowschemas.yaml");
    let pl = crate::common::fixture_file(&dir, "defaults-1.33-prioritylevelconfigurations.yaml");
    let source = ["-f", fs.as_str(), "-f", pl.as_str()];
    let list = ["--verb", "list", "--resource", "pods"];
    for (args, says) in [
        (vec!["--user", ""], "invalid value '' for '--user <NAME>': empty: "),
        (
            vec!["--user", "alice", "--group", ""],
            "invalid value '' for '--group <NAME>': empty: ",
        ),
        (
            vec!["--user", "alice", "--namespace", "NOT VALID!!"],
            "invalid value 'NOT VALID!!' for '--namespace <NAME>': not a namespace: a lowercase RFC 1123 label",
        ),
        (
            vec!["--user", "alice", "--namespace", &"n".repeat(64)],
            "no more than 63 characters",
        ),
    ] {
        let out = run(&[&source[..], &list, &args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = run(&[
        &source[..],
        &list,
        &["--user", "alice", "--namespace", "team-a"],
    ]
    .concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Files given, the user forgotten: the usage line does not make --file look required.
    let out = run(&source);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Usage: apf-monitor match --user NAME [--group NAME]... (--verb VERB --resource RESOURCE \
             [--namespace NAME] | --non-resource-url PATH) [-f FILE]... [OPTIONS]"
        ),
        "{err}"
    );
}
