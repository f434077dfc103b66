//! The deployment (`deploy/`, `Dockerfile`): what `kubectl apply -k deploy/` installs, checked against what the code
//! needs and does: the RBAC rules against the paths and resources it reads, the PrometheusRule against the built-in
//! rules (names, severities, `for`, thresholds, run by a real promtool), the in-cluster config through the binary's
//! `serve --check-config`. kubectl renders the kustomization (Debian package `kubernetes-client`); promtool (package
//! `prometheus`) checks and unit-tests the rules. Nothing is applied anywhere.
use crate::common::external::binary;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::json;
use serde_json::Value;

use apf::defaults::default_precedence;
use apf::endpoints::{
    Dump, DUMPS_RBAC_RULE, FLOWCONTROL_GROUP, FLOW_SCHEMAS, METRICS_PATH,
    PRIORITY_LEVEL_CONFIGURATIONS,
};
use apf_monitor::alert::{default_busy_utilizations, AlertingConfig, Fires, RuleName, RuleSpec};
use apf_monitor::config::Config;
use apf_monitor::values::parse_duration;

/// The namespace every namespaced object of apf-monitor lives in.
const NAMESPACE: &str = "apf-monitor";
/// The apiserver's own Service and its EndpointSlices live here.
const DISCOVERY_NAMESPACE: &str = "default";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The objects of `deploy/` (and of `deploy/fleet/`, over them).
fn base_dir() -> PathBuf {
    deploy_dir().join("base")
}

fn deploy_dir() -> PathBuf {
    root().join("deploy")
}

/// `kubectl kustomize DIR` (the repository's `deploy/`, `deploy/fleet/`, ...), parsed.
pub(crate) fn kustomize(dir: &str) -> Vec<Value> {
    let out = Command::new(binary("kubectl", "kubernetes-client"))
        .arg("kustomize")
        .arg(root().join(dir))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&String::from_utf8(out.stdout).unwrap())
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// `kubectl kustomize deploy/`, parsed: rendered once for every test.
fn rendered() -> &'static [Value] {
    static DOCS: OnceLock<Vec<Value>> = OnceLock::new();
    DOCS.get_or_init(|| kustomize("deploy"))
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace(v: &Value) -> Option<&str> {
    v["metadata"]["namespace"].as_str()
}

fn all(k: &str) -> Vec<&'static Value> {
    rendered().iter().filter(|v| kind(v) == k).collect()
}

/// The one object of that kind.
fn one(k: &str) -> &'static Value {
    let found = all(k);
    assert_eq!(
        found.len(),
        1,
        "exactly one {k} expected, found {}",
        found.len()
    );
    found[0]
}

fn named(k: &str, n: &str) -> &'static Value {
    rendered()
        .iter()
        .find(|v| kind(v) == k && name(v) == n)
        .unwrap_or_else(|| panic!("no {k} {n} in deploy/"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn set(v: &Value) -> BTreeSet<String> {
    strings(v).into_iter().collect()
}

fn set_of(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The in-cluster config, as the daemon reads it.
fn in_cluster_config() -> Config {
    Config::load(&base_dir().join("apf-monitor.yaml")).unwrap()
}

fn deployment() -> &'static Value {
    one("Deployment")
}

fn pod_spec() -> &'static Value {
    &deployment()["spec"]["template"]["spec"]
}

fn container() -> &'static Value {
    let containers = pod_spec()["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The Deployment's service account as a FlowSchema or RoleBinding subject names it.
fn service_account() -> (String, String) {
    (
        pod_spec()["serviceAccountName"]
            .as_str()
            .unwrap()
            .to_string(),
        namespace(deployment()).unwrap().to_string(),
    )
}

#[test]
fn every_object_of_the_deployment_is_rendered() {
    // The scraper's, and the API's: the viewer, silencer and audit sender roles, the auth delegator's binding.
    assert_eq!(all("ClusterRole").len(), 4);
    assert_eq!(all("ClusterRoleBinding").len(), 2);
    for k in [
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "FlowSchema",
        "PriorityLevelConfiguration",
    ] {
        one(k);
    }
    // One for the Lease in apf-monitor's namespace, one for discovery in `default`.
    assert_eq!(all("Role").len(), 2);
    assert_eq!(all("RoleBinding").len(), 2);
    // Secrets come from the example, applied by hand: the base never ships one.
    assert!(all("Secret").is_empty(), "the base must not hold a Secret");

    assert_eq!(name(one("Namespace")), NAMESPACE);
    let cluster_scoped = [
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "FlowSchema",
        "PriorityLevelConfiguration",
    ];
    for v in rendered() {
        let ns = namespace(v);
        if cluster_scoped.contains(&kind(v)) {
            assert_eq!(ns, None, "{} {} is cluster-scoped", kind(v), name(v));
        } else if ns != Some(DISCOVERY_NAMESPACE) {
            assert_eq!(ns, Some(NAMESPACE), "{} {}", kind(v), name(v));
        }
        assert_eq!(
            v["metadata"]["labels"]["app.kubernetes.io/name"].as_str(),
            Some("apf-monitor"),
            "{} {} is labelled",
            kind(v),
            name(v)
        );
    }
    // Only the discovery Role and its binding live in `default`.
    let in_default: Vec<String> = rendered()
        .iter()
        .filter(|v| namespace(v) == Some(DISCOVERY_NAMESPACE))
        .map(|v| format!("{}/{}", kind(v), name(v)))
        .collect();
    assert_eq!(
        in_default,
        [
            "Role/apf-monitor-discovery",
            "RoleBinding/apf-monitor-discovery"
        ]
    );

    // Every binding gives a role that exists (or a built-in one) to the Deployment's service account.
    let (sa, sa_ns) = service_account();
    assert_eq!(name(one("ServiceAccount")), sa);
    for b in all("RoleBinding")
        .into_iter()
        .chain(all("ClusterRoleBinding"))
    {
        let role_kind = b["roleRef"]["kind"].as_str().unwrap();
        let role_name = b["roleRef"]["name"].as_str().unwrap();
        if role_name == "system:auth-delegator" {
            continue;
        }
        let role = named(role_kind, role_name);
        if role_kind == "Role" {
            assert_eq!(namespace(role), namespace(b), "{}", name(b));
        }
        let subjects = b["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), 1, "{}", name(b));
        assert_eq!(subjects[0]["kind"].as_str(), Some("ServiceAccount"));
        assert_eq!(subjects[0]["name"].as_str(), Some(sa.as_str()));
        assert_eq!(subjects[0]["namespace"].as_str(), Some(sa_ns.as_str()));
    }
}

/// The one glob that covers every debug dump the scraper reads: their common directory plus `/*`.
fn dumps_glob() -> String {
    let dirs: BTreeSet<&str> = [Dump::PriorityLevels, Dump::Queues, Dump::Requests]
        .iter()
        .map(|d| d.path().rsplit_once('/').unwrap().0)
        .collect();
    assert_eq!(dirs.len(), 1, "the dumps share one directory: {dirs:?}");
    format!("{}/*", dirs.first().unwrap())
}

#[test]
fn the_cluster_role_grants_exactly_what_the_scraper_reads() {
    let rules = named("ClusterRole", "apf-monitor")["rules"]
        .as_array()
        .unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");

    let glob = dumps_glob();
    let urls = &rules[0];
    assert_eq!(
        set(&urls["nonResourceURLs"]),
        set_of(&[METRICS_PATH, glob.as_str()])
    );
    assert_eq!(strings(&urls["verbs"]), ["get"]);
    // The same rule the daemon names when a dump answers 403.
    assert!(DUMPS_RBAC_RULE.contains(&glob), "{DUMPS_RBAC_RULE}");

    let objects = &rules[1];
    assert_eq!(strings(&objects["apiGroups"]), [FLOWCONTROL_GROUP]);
    assert_eq!(
        set(&objects["resources"]),
        set_of(&[FLOW_SCHEMAS, PRIORITY_LEVEL_CONFIGURATIONS])
    );
    assert_eq!(set(&objects["verbs"]), set_of(&["get", "list", "watch"]));
    assert!(objects.get("nonResourceURLs").is_none());
}

/// The API's guard asks the apiserver about each caller: the service account may review tokens and access (the
/// built-in system:auth-delegator), the silencer and audit sender roles name exactly the write endpoints, and the
/// config asks for it.
#[test]
fn the_api_is_guarded_by_rbac_the_deployment_grants() {
    let binding = named("ClusterRoleBinding", "apf-monitor-auth-delegator");
    assert_eq!(
        binding["roleRef"]["name"].as_str(),
        Some("system:auth-delegator")
    );
    let (sa, ns) = service_account();
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some(sa.as_str()));
    assert_eq!(
        binding["subjects"][0]["namespace"].as_str(),
        Some(ns.as_str())
    );

    let writes: BTreeSet<String> = ["apf-monitor-silencer", "apf-monitor-audit-sender"]
        .into_iter()
        .flat_map(|role| named("ClusterRole", role)["rules"].as_array().unwrap())
        .flat_map(|r| {
            let urls = strings(&r["nonResourceURLs"]);
            strings(&r["verbs"])
                .into_iter()
                .flat_map(move |v| urls.clone().into_iter().map(move |u| format!("{v} {u}")))
        })
        .collect();
    assert_eq!(
        writes,
        set_of(&[
            "post /api/v1/silences",
            "delete /api/v1/silences",
            "post /api/v1/silences/*",
            "delete /api/v1/silences/*",
            "post /-/reload",
            "post /api/v1/audit",
        ])
    );
    let viewer = named("ClusterRole", "apf-monitor-viewer");
    let urls = set(&viewer["rules"][0]["nonResourceURLs"]);
    for path in ["/", "/metrics", "/api/v1/status"] {
        assert!(urls.contains(path), "{path}");
    }
    assert_eq!(
        in_cluster_config().web.auth.mode,
        Some(apf_monitor::export::AuthMode::Kubernetes)
    );
}

#[test]
fn no_role_grants_a_wildcard_or_secrets() {
    for role in all("Role").into_iter().chain(all("ClusterRole")) {
        for rule in role["rules"].as_array().unwrap() {
            for key in ["verbs", "resources", "apiGroups", "resourceNames"] {
                for item in strings(&rule[key]) {
                    assert!(!item.contains('*'), "{} {key}: {item}", name(role));
                }
            }
            assert!(
                !strings(&rule["resources"]).contains(&"secrets".to_string()),
                "{} reads secrets",
                name(role)
            );
        }
    }
}

#[test]
fn the_namespaced_roles_grant_discovery_and_the_lease_only() {
    // Discovery of the replicas: list and watch the EndpointSlices (or Endpoints) of default/kubernetes.
    let discovery = named("Role", "apf-monitor-discovery");
    assert_eq!(namespace(discovery), Some(DISCOVERY_NAMESPACE));
    let rules: Vec<(Vec<String>, Vec<String>, BTreeSet<String>)> = discovery["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                strings(&r["apiGroups"]),
                strings(&r["resources"]),
                set(&r["verbs"]),
            )
        })
        .collect();
    let watch = set_of(&["list", "watch"]);
    assert_eq!(
        rules,
        [
            (
                vec!["discovery.k8s.io".to_string()],
                vec!["endpointslices".to_string()],
                watch.clone()
            ),
            (vec![String::new()], vec!["endpoints".to_string()], watch),
        ]
    );

    // The Lease: get and patch on the configured Lease only; create cannot be restricted by name.
    let config = in_cluster_config();
    let lease_name = &config.alerting.leader_election.lease_name;
    assert_eq!(config.alerting.leader_election.enabled, Some(true));
    assert_eq!(config.alerting.leader_election.namespace, None);
    let lease = named("Role", "apf-monitor-lease");
    assert_eq!(namespace(lease), Some(NAMESPACE));
    let mut verbs = BTreeSet::new();
    for r in lease["rules"].as_array().unwrap() {
        assert_eq!(strings(&r["apiGroups"]), ["coordination.k8s.io"]);
        assert_eq!(strings(&r["resources"]), ["leases"]);
        let rule_verbs = set(&r["verbs"]);
        if rule_verbs.contains("create") {
            assert_eq!(rule_verbs, set_of(&["create"]), "create stands alone");
            assert!(r.get("resourceNames").is_none());
        } else {
            assert_eq!(strings(&r["resourceNames"]), [lease_name.as_str()]);
        }
        verbs.extend(rule_verbs);
    }
    // What kube-lease-manager 0.13 calls: get, create (when missing), patch (take, renew, release); and what
    // apf-monitor adds: patch (the notification log) and watch (the Lease alone, to take it when released).
    assert_eq!(verbs, set_of(&["get", "create", "patch", "watch"]));
}

#[test]
fn the_deployment_runs_locked_down_with_probes_and_resources() {
    let spec = &deployment()["spec"];
    assert_eq!(spec["replicas"].as_u64(), Some(2));
    let pod = pod_spec();
    let c = container();
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(true));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(65532));
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    for side in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                !c["resources"][side][resource].is_null(),
                "resources.{side}.{resource}"
            );
        }
    }

    // The port the config listens on, named `http`, probed on /healthz and /readyz.
    let config = in_cluster_config();
    let ports = c["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["name"].as_str(), Some("http"));
    assert_eq!(
        ports[0]["containerPort"].as_u64(),
        Some(u64::from(config.listen.port()))
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"].as_str(), Some(path), "{probe}");
        assert_eq!(
            c[probe]["httpGet"]["port"].as_str(),
            Some("http"),
            "{probe}"
        );
    }

    // SIGTERM gives the daemon shutdown_timeout to deliver and release the Lease, inside the grace period.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert_eq!(grace, 30);
    assert!(config.shutdown_timeout.0 < Duration::from_secs(grace));

    // Spread over nodes, preferred.
    let anti =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["podAffinityTerm"]["topologyKey"].as_str(),
        Some("kubernetes.io/hostname")
    );

    // `serve --config FILE`, FILE in the ConfigMap's volume; the state file on a writable emptyDir (the root is
    // read-only).
    let args = strings(&c["args"]);
    assert_eq!(args[0], "serve");
    let config_path = Path::new(&args[args.iter().position(|a| a == "--config").unwrap() + 1]);
    let mount_of = |path: &Path| -> (String, String) {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_string(),
                    m["mountPath"].as_str().unwrap().to_string(),
                )
            })
            .max_by_key(|(_, p)| p.len())
            .unwrap_or_else(|| panic!("nothing mounted at {}", path.display()))
    };
    let volume = |n: &str| -> &Value {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"].as_str() == Some(n))
            .unwrap()
    };
    let (config_volume, config_dir) = mount_of(config_path);
    let config_map = volume(&config_volume)["configMap"]["name"]
        .as_str()
        .unwrap();
    let file = config_path.strip_prefix(&config_dir).unwrap();
    let data = named("ConfigMap", config_map)["data"][file.to_str().unwrap()]
        .as_str()
        .unwrap();
    assert_eq!(
        data,
        std::fs::read_to_string(base_dir().join("apf-monitor.yaml")).unwrap()
    );
    let state_file = config.alerting.state_file.as_ref().unwrap();
    let (state_volume, _) = mount_of(state_file);
    assert!(volume(&state_volume).get("emptyDir").is_some());
}

#[test]
fn the_service_monitor_pdb_and_network_policy_fit_the_pods() {
    let labels = &deployment()["spec"]["template"]["metadata"]["labels"];
    let matches = |selector: &Value| {
        let m = selector["matchLabels"].as_object().unwrap();
        !m.is_empty() && m.iter().all(|(k, v)| &labels[k] == v)
    };
    let port = container()["ports"][0]["containerPort"].as_u64().unwrap();

    let service = one("Service");
    assert_eq!(service["spec"]["type"].as_str(), Some("ClusterIP"));
    assert!(matches(&as_label_selector(&service["spec"]["selector"])));
    assert_eq!(service["spec"]["ports"][0]["port"].as_u64(), Some(port));
    assert_eq!(service["spec"]["ports"][0]["name"].as_str(), Some("http"));

    let monitor = one("ServiceMonitor");
    assert_eq!(
        monitor["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"].as_str(), Some("http"));
    assert_eq!(endpoint["path"].as_str(), Some(METRICS_PATH));
    // The rules and dashboards select on apf-monitor's `endpoint` label, which the operator's would rename.
    assert_eq!(endpoint["honorLabels"].as_bool(), Some(true));

    let pdb = one("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"].as_u64(), Some(1));
    assert!(matches(&pdb["spec"]["selector"]));

    // Ingress to the HTTP port only; egress to the apiservers and DNS only.
    let policy = &one("NetworkPolicy")["spec"];
    assert!(matches(&policy["podSelector"]));
    assert_eq!(set(&policy["policyTypes"]), set_of(&["Ingress", "Egress"]));
    let ports = |rules: &Value| -> BTreeSet<u64> {
        rules
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["ports"].as_array().unwrap().iter())
            .map(|p| p["port"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(ports(&policy["ingress"]), BTreeSet::from([port]));
    assert_eq!(ports(&policy["egress"]), BTreeSet::from([53, 443, 6443]));
}

/// A Service's selector is a plain map; as `matchLabels` it compares like the others.
fn as_label_selector(selector: &Value) -> Value {
    json!({"matchLabels": selector})
}

#[test]
fn apf_monitor_gets_a_priority_level_of_its_own() {
    let schema = one("FlowSchema");
    let spec = &schema["spec"];
    assert_eq!(
        schema["apiVersion"].as_str(),
        Some("flowcontrol.apiserver.k8s.io/v1")
    );
    // Matched before the default schema its requests would fall into.
    let own = spec["matchingPrecedence"].as_u64().unwrap();
    let service_accounts = u64::from(default_precedence("service-accounts").unwrap());
    assert!(own < service_accounts, "{own} >= {service_accounts}");

    let level = one("PriorityLevelConfiguration");
    assert_eq!(
        spec["priorityLevelConfiguration"]["name"].as_str(),
        Some(name(level))
    );
    let limited = &level["spec"]["limited"];
    assert_eq!(level["spec"]["type"].as_str(), Some("Limited"));
    assert_eq!(limited["lendablePercent"].as_u64(), Some(0));
    assert_eq!(limited["limitResponse"]["type"].as_str(), Some("Queue"));
    let shares = limited["nominalConcurrencyShares"].as_u64().unwrap();
    assert!((1..=10).contains(&shares), "a small level: {shares} shares");

    // Its subject is the Deployment's service account, and only that.
    let (sa, sa_ns) = service_account();
    let rules = spec["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    let subjects = rules[0]["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"].as_str(), Some("ServiceAccount"));
    assert_eq!(
        subjects[0]["serviceAccount"]["name"].as_str(),
        Some(sa.as_str())
    );
    assert_eq!(
        subjects[0]["serviceAccount"]["namespace"].as_str(),
        Some(sa_ns.as_str())
    );

    // It covers every request the RBAC rules give it allow, so none of them falls back to `service-accounts`: its
    // own roles, and the built-in system:auth-delegator's reviews. (The viewer and silencer roles are for callers.)
    let non_resource = rules[0]["nonResourceRules"].as_array().unwrap();
    let resource = rules[0]["resourceRules"].as_array().unwrap();
    let delegator: Value = serde_saphyr::from_str(
        "metadata: {name: system:auth-delegator}
rules:
         - {apiGroups: [authentication.k8s.io], resources: [tokenreviews], verbs: [create]}
         - {apiGroups: [authorization.k8s.io], resources: [subjectaccessreviews], verbs: [create]}
",
    )
    .unwrap();
    let own = all("Role")
        .into_iter()
        .chain(all("ClusterRole"))
        .filter(|r| {
            ![
                "apf-monitor-viewer",
                "apf-monitor-silencer",
                "apf-monitor-audit-sender",
            ]
            .contains(&name(r))
        })
        .chain([&delegator]);
    for role in own {
        for r in role["rules"].as_array().unwrap() {
            let verbs = set(&r["verbs"]);
            if !r["nonResourceURLs"].is_null() {
                let urls = set(&r["nonResourceURLs"]);
                assert!(
                    non_resource
                        .iter()
                        .any(|n| set(&n["nonResourceURLs"]).is_superset(&urls)
                            && set(&n["verbs"]).is_superset(&verbs)),
                    "{}: {urls:?} {verbs:?} not in the FlowSchema",
                    name(role)
                );
                continue;
            }
            let covered = resource.iter().any(|f| {
                set(&f["verbs"]).is_superset(&verbs)
                    && set(&f["apiGroups"]).is_superset(&set(&r["apiGroups"]))
                    && set(&f["resources"]).is_superset(&set(&r["resources"]))
                    && match namespace(role) {
                        None => f["clusterScope"].as_bool() == Some(true),
                        Some(ns) => strings(&f["namespaces"]).contains(&ns.to_string()),
                    }
            });
            assert!(covered, "{}: {r:?} not in the FlowSchema", name(role));
        }
    }
}

/// The PrometheusRule's alerting rules, by name.
fn prometheus_rules() -> Vec<&'static Value> {
    let rule = one("PrometheusRule");
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect()
}

#[test]
fn the_prometheus_rule_carries_the_built_in_alerts() {
    let rules = prometheus_rules();
    let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    let built_in: Vec<&str> = RuleName::ALL.iter().map(|n| n.as_str()).collect();
    assert_eq!(names, built_in);

    let runbooks = std::fs::read_to_string(root().join("docs/runbooks.md")).unwrap();
    let base = AlertingConfig::default().runbook_base_url;
    for (r, n) in rules.iter().zip(RuleName::ALL) {
        let spec = RuleSpec::of(n);
        let a = n.as_str();
        assert_eq!(
            r["labels"]["severity"].as_str(),
            Some(spec.severity.as_str()),
            "{a}"
        );
        let for_ = parse_duration(r["for"].as_str().unwrap()).unwrap();
        assert_eq!(for_, spec.for_, "{a}: for");
        for key in ["summary", "description"] {
            assert!(
                !r["annotations"][key]
                    .as_str()
                    .unwrap_or_default()
                    .is_empty(),
                "{a}: {key}"
            );
        }
        // The section of docs/runbooks.md the built-in rule links to, at the default base.
        assert_eq!(
            r["annotations"]["runbook_url"].as_str(),
            Some(format!("{base}#{}", a.to_ascii_lowercase()).as_str()),
            "{a}"
        );
        assert!(runbooks.contains(&format!("\n## {a}\n")), "{a}: no runbook");
        let expr = r["expr"].as_str().unwrap();
        // What makes a saturation recur, as the analysis decides it.
        if n == RuleName::APFSaturationRecurring {
            assert!(
                expr.contains(&format!(") >= {}\n", apf_monitor::analyze::MIN_EPISODES))
                    && expr.contains(&format!(
                        "<= {} * max by",
                        apf_monitor::analyze::OVERDUE_AFTER
                    )),
                "{expr}"
            );
        }
        if n != RuleName::APFScrapeFailing {
            assert!(expr.contains(r#"priority_level!="exempt""#), "{a}: {expr}");
        }
    }
}

/// Runs promtool in `dir`; its output on failure; what it printed.
pub(crate) fn promtool(args: &[&str], dir: &Path) -> String {
    let out = Command::new(binary("promtool", "prometheus"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The PrometheusRule's `spec` (its groups) as a Prometheus rule file.
fn rule_file(dir: &Path) {
    let spec = &one("PrometheusRule")["spec"];
    std::fs::write(
        dir.join("rules.yaml"),
        serde_saphyr::to_string(spec).unwrap(),
    )
    .unwrap();
}

#[test]
fn promtool_accepts_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    rule_file(dir.path());
    promtool(&["check", "rules", "rules.yaml"], dir.path());
}

/// One alert's life in a promtool unit test: its series hold a healthy value for two evaluations (0s, 15s), the
/// firing value from 30s to 210s, a value between the fire and clear thresholds from 225s to 330s, and a cleared
/// value from 345s.
struct Life {
    rule: RuleName,
    /// Each series (promtool's notation) with its four values: [healthy, firing, between, cleared].
    series: Vec<(String, [f64; 4])>,
    /// The alert's labels besides alertname, alertstate and severity.
    labels: String,
}

const FIRE_FROM: u64 = 30;
const HOLD_UNTIL: u64 = 330;
const CLEAR_AT: u64 = 345;

fn values([ok, fire, between, clear]: [f64; 4]) -> String {
    // 2 healthy, 13 firing (30s..210s), 8 between (225s..330s), 4 cleared (345s..390s).
    format!("{ok} {ok} {fire}x12 {between}x7 {clear}x3")
}

/// The series of one level as both apf-monitor pods export it: `pod="a"` sees `v`, `pod="b"` stays healthy, and
/// the exempt level sees the firing value all along (never alerted on).
fn level_series(metric: &str, extra: &str, v: [f64; 4]) -> Vec<(String, [f64; 4])> {
    let s = |pod: &str, level: &str| {
        format!(
            r#"{metric}{{apiserver="10.0.0.5:6443",priority_level="{level}",pod="{pod}"{extra}}}"#
        )
    };
    vec![
        (s("a", "workload-low"), v),
        (s("b", "workload-low"), [v[0]; 4]),
        (s("a", "exempt"), [v[1]; 4]),
    ]
}

/// Between the fire threshold and the clear threshold (on the firing side of the clear one).
fn between(spec: &RuleSpec, scale: f64) -> f64 {
    let (t, c) = (spec.threshold.unwrap(), spec.clear_threshold.unwrap());
    (t + c) / 2.0 * scale
}

#[test]
fn the_rules_fire_and_clear_at_the_built_in_thresholds() {
    // A queueLengthLimit other than the defaults' 50 (apf-monitor's own level has 16): the rule reads the level's.
    let queue_length_limit = 16.0;
    let level = r#"apiserver="10.0.0.5:6443",priority_level="workload-low""#;
    let lives = [
        {
            let s = RuleSpec::of(RuleName::APFHeadroomLow);
            let (t, c) = (s.threshold.unwrap(), s.clear_threshold.unwrap());
            Life {
                rule: RuleName::APFHeadroomLow,
                series: level_series(
                    "apf_priority_level_headroom_ratio",
                    "",
                    [0.9, t - 0.05, between(&s, 1.0), c + 0.05],
                ),
                labels: level.into(),
            }
        },
        Life {
            rule: RuleName::APFHeadroomExhausted,
            series: level_series("apf_priority_level_inqueue_requests", "", [0.0, 5.0, 5.0, 0.0]),
            labels: level.into(),
        },
        {
            let s = RuleSpec::of(RuleName::APFQueueNearFull);
            let (t, c) = (s.threshold.unwrap(), s.clear_threshold.unwrap());
            Life {
                rule: RuleName::APFQueueNearFull,
                series: [
                    level_series(
                        "apf_priority_level_fullest_queue_requests",
                        "",
                        [
                            0.0,
                            (t * queue_length_limit).ceil(),
                            between(&s, queue_length_limit).ceil(),
                            (c * queue_length_limit).floor() - 1.0,
                        ],
                    ),
                    level_series(
                        "apf_priority_level_queue_length_limit",
                        "",
                        [queue_length_limit; 4],
                    ),
                ]
                .concat(),
                labels: level.into(),
            }
        },
        {
            let s = RuleSpec::of(RuleName::APFExhaustionPredicted);
            let (t, c) = (s.threshold.unwrap(), s.clear_threshold.unwrap());
            Life {
                rule: RuleName::APFExhaustionPredicted,
                series: level_series(
                    "apf_priority_level_seconds_to_exhaustion",
                    "",
                    [3600.0, t - 60.0, between(&s, 1.0), c + 60.0],
                ),
                labels: level.into(),
            }
        },
        // Pressure between scrapes (the apiserver's own histogram), the headroom gauge calm: the share of the window
        // past 80 % of the limit (75 % to clear) against window_share.
        {
            let share = RuleSpec::of(RuleName::APFHeadroomLow).window_share.unwrap();
            let [clear, fire, _] = default_busy_utilizations();
            let above = |u: f64| format!(r#",utilization="{u}""#);
            // The window's last quarter (recent_time_above_ratio) shows the same pressure while it lasts.
            let (fire_share, clear_share) = (
                [0.0, share + 0.2, share / 2.0, 0.0],
                [0.0, share + 0.3, share + 0.1, share / 2.0],
            );
            Life {
                rule: RuleName::APFHeadroomLow,
                series: [
                    level_series("apf_priority_level_headroom_ratio", "", [0.9; 4]),
                    level_series(
                        "apf_priority_level_time_above_ratio",
                        &above(fire),
                        fire_share,
                    ),
                    level_series(
                        "apf_priority_level_recent_time_above_ratio",
                        &above(fire),
                        fire_share,
                    ),
                    level_series(
                        "apf_priority_level_time_above_ratio",
                        &above(clear),
                        clear_share,
                    ),
                    level_series(
                        "apf_priority_level_recent_time_above_ratio",
                        &above(clear),
                        clear_share,
                    ),
                ]
                .concat(),
                labels: level.into(),
            }
        },
        // Bursts between scrapes fill the level for a share of the window (no hysteresis: it holds while they do).
        {
            let share = RuleSpec::of(RuleName::APFExhaustionPredicted).window_share.unwrap();
            let [_, _, full] = default_busy_utilizations();
            let bursts = [0.0, share + 0.2, share + 0.2, 0.0];
            let full = format!(r#",utilization="{full}""#);
            Life {
                rule: RuleName::APFExhaustionPredicted,
                series: [
                    level_series("apf_priority_level_time_above_ratio", &full, bursts),
                    level_series("apf_priority_level_recent_time_above_ratio", &full, bursts),
                ]
                .concat(),
                labels: level.into(),
            }
        },
        // Full for a share of the lookback in episodes that recur: two or more, the last one not overdue (ended at
        // most half again the longest quiet between two ago).
        {
            let s = RuleSpec::of(RuleName::APFSaturationRecurring);
            let (t, c) = (s.threshold.unwrap(), s.clear_threshold.unwrap());
            Life {
                rule: RuleName::APFSaturationRecurring,
                series: [
                    level_series(
                        "apf_priority_level_saturated_ratio",
                        "",
                        [c / 2.0, t + 0.1, between(&s, 1.0), c / 2.0],
                    ),
                    level_series("apf_priority_level_saturation_episodes", "", [3.0; 4]),
                    level_series("apf_priority_level_seconds_since_saturation", "", [20.0; 4]),
                    level_series("apf_priority_level_saturation_gap_seconds", "", [45.0; 4]),
                ]
                .concat(),
                labels: level.into(),
            }
        },
        Life {
            rule: RuleName::APFRequestsRejected,
            series: level_series(
                "apf_priority_level_rejected_per_second",
                r#",reason="queue-full""#,
                [0.0, 1.5, 1.5, 0.0],
            ),
            labels: format!(r#"{level},reason="queue-full""#),
        },
        Life {
            rule: RuleName::APFScrapeFailing,
            series: vec![(
                r#"apf_monitor_endpoint_available{apiserver="10.0.0.5:6443",endpoint="dump_queues",pod="a"}"#
                    .into(),
                [1.0, 0.0, 0.0, 1.0],
            )],
            labels: r#"apiserver="10.0.0.5:6443",endpoint="dump_queues""#.into(),
        },
    ];
    for life in &lives {
        let spec = RuleSpec::of(life.rule);
        // A rule that clears past another threshold than it fires at must hold between the two.
        if let (Some(t), Some(c)) = (spec.threshold, spec.clear_threshold) {
            let holds_between = match spec.fires {
                Fires::Below => c >= t,
                Fires::Above => c <= t,
            };
            assert!(holds_between, "{:?}", life.rule);
        }
    }

    let mut tests: Vec<serde_json::Value> = lives
        .iter()
        .map(|life| {
            let spec = RuleSpec::of(life.rule);
            let a = life.rule.as_str();
            let firing = format!(
                r#"ALERTS{{alertname="{a}",alertstate="firing",severity="{}",{}}}"#,
                spec.severity.as_str(),
                life.labels
            );
            let query = format!(r#"ALERTS{{alertname="{a}",alertstate="firing"}}"#);
            let fires_at = FIRE_FROM + spec.for_.as_secs();
            let mut checks = vec![
                json!({"expr": query, "eval_time": format!("{}s", fires_at - 15), "exp_samples": []}),
                json!({"expr": query, "eval_time": format!("{fires_at}s"),
                       "exp_samples": [{"labels": firing, "value": 1}]}),
                json!({"expr": query, "eval_time": format!("{HOLD_UNTIL}s"),
                       "exp_samples": [{"labels": firing, "value": 1}]}),
                json!({"expr": format!(r#"ALERTS{{alertname="{a}"}}"#),
                       "eval_time": format!("{CLEAR_AT}s"), "exp_samples": []}),
            ];
            if spec.for_.is_zero() {
                checks.remove(0);
            }
            json!({
                "name": a,
                "interval": "15s",
                "input_series": life.series.iter()
                    .map(|(s, v)| json!({"series": s, "values": values(*v)}))
                    .collect::<Vec<_>>(),
                "promql_expr_test": checks,
            })
        })
        .collect();

    // A level that recovered: its window still holds the pressure from before (well past window_share at every
    // utilization), its last quarter none. Neither histogram rule fires on it.
    let window = RuleSpec::of(RuleName::APFHeadroomLow).window_share.unwrap() + 0.4;
    let recovered: Vec<serde_json::Value> = default_busy_utilizations()
        .into_iter()
        .flat_map(|u| {
            let series = |metric: &str, value: f64| {
                json!({
                    "series": format!(
                        r#"{metric}{{apiserver="10.0.0.5:6443",priority_level="workload-low",pod="a",utilization="{u}"}}"#
                    ),
                    "values": format!("{value}x24"),
                })
            };
            [
                series("apf_priority_level_time_above_ratio", window),
                series("apf_priority_level_recent_time_above_ratio", 0.0),
            ]
        })
        .chain([json!({
            "series": r#"apf_priority_level_headroom_ratio{apiserver="10.0.0.5:6443",priority_level="workload-low",pod="a"}"#,
            "values": "1x24",
        })])
        .collect();
    let quiet: Vec<serde_json::Value> = [60, 120, 300]
        .iter()
        .map(|t| {
            json!({
                "expr": r#"ALERTS{priority_level="workload-low"}"#,
                "eval_time": format!("{t}s"),
                "exp_samples": [],
            })
        })
        .collect();
    tests.push(json!({
        "name": "a recovered level: the window holds the pressure, its last quarter none",
        "interval": "15s",
        "input_series": recovered,
        "promql_expr_test": quiet.clone(),
    }));

    // Saturation that does not recur: one episode (no quiet between two to measure), or an overdue one (a level
    // that recovered): far past the threshold, no alert on the level.
    let level_series_of = |metric: &str, v: f64| {
        json!({
            "series": format!(r#"{metric}{{apiserver="10.0.0.5:6443",priority_level="workload-low",pod="a"}}"#),
            "values": format!("{v}x24"),
        })
    };
    tests.push(json!({
        "name": "one episode of saturation is not a pattern",
        "interval": "15s",
        "input_series": [
            level_series_of("apf_priority_level_saturated_ratio", 0.6),
            level_series_of("apf_priority_level_saturation_episodes", 1.0),
            level_series_of("apf_priority_level_seconds_since_saturation", 5.0),
        ],
        "promql_expr_test": quiet.clone(),
    }));
    tests.push(json!({
        "name": "a saturation whose next episode is overdue has stopped recurring",
        "interval": "15s",
        "input_series": [
            level_series_of("apf_priority_level_saturated_ratio", 0.3),
            level_series_of("apf_priority_level_saturation_episodes", 3.0),
            level_series_of("apf_priority_level_seconds_since_saturation", 70.0),
            level_series_of("apf_priority_level_saturation_gap_seconds", 45.0),
        ],
        "promql_expr_test": quiet,
    }));

    // APFScrapeFailing on /metrics: the last success stops advancing at 60s; older than 30s from 105s, firing
    // two minutes later.
    let for_ = RuleSpec::of(RuleName::APFScrapeFailing).for_.as_secs();
    let firing = r#"ALERTS{alertname="APFScrapeFailing",alertstate="firing",severity="warning",apiserver="10.0.0.6:6443"}"#;
    let query = r#"ALERTS{alertname="APFScrapeFailing",alertstate="firing"}"#;
    tests.push(json!({
        "name": "APFScrapeFailing on /metrics",
        "interval": "15s",
        "input_series": [
            {"series": r#"apf_monitor_last_scrape_success_timestamp_seconds{apiserver="10.0.0.6:6443",endpoint="metrics",pod="a"}"#,
             "values": "0+15x4 60x20"},
            {"series": r#"apf_monitor_last_scrape_success_timestamp_seconds{apiserver="10.0.0.6:6443",endpoint="metrics",pod="b"}"#,
             "values": "0+15x24"},
        ],
        "promql_expr_test": [
            {"expr": query, "eval_time": format!("{}s", 105 + for_ - 15), "exp_samples": []},
            {"expr": query, "eval_time": format!("{}s", 105 + for_), "exp_samples": [{"labels": firing, "value": 1}]},
        ],
    }));
    // ... and a replica never read since apf-monitor started: errors, no success.
    let firing = r#"ALERTS{alertname="APFScrapeFailing",alertstate="firing",severity="warning",apiserver="10.0.0.7:6443"}"#;
    tests.push(json!({
        "name": "APFScrapeFailing, never read",
        "interval": "15s",
        "input_series": [
            {"series": r#"apf_monitor_scrape_errors_total{apiserver="10.0.0.7:6443",endpoint="metrics",reason="connect",pod="a"}"#,
             "values": "0+1x20"},
        ],
        "promql_expr_test": [
            {"expr": query, "eval_time": format!("{}s", 15 + for_ - 15), "exp_samples": []},
            {"expr": query, "eval_time": format!("{}s", 15 + for_), "exp_samples": [{"labels": firing, "value": 1}]},
        ],
    }));

    let unit = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "tests": tests,
    });
    let dir = tempfile::tempdir().unwrap();
    rule_file(dir.path());
    std::fs::write(
        dir.path().join("rules_test.yaml"),
        serde_saphyr::to_string(&unit).unwrap(),
    )
    .unwrap();
    promtool(&["test", "rules", "rules_test.yaml"], dir.path());
}

#[test]
fn the_in_cluster_config_is_valid_for_the_daemon() {
    // The replicas are discovered with the pod's apiserver access; here a kubeconfig stands in for it.
    let dir = tempfile::tempdir().unwrap();
    // Checked, not contacted.
    let (apiserver, url) = crate::common::untouched_apiserver();
    let kubeconfig = crate::common::kubeconfig(dir.path(), &url);
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["serve", "--check-config", "--config"])
        .arg(base_dir().join("apf-monitor.yaml"))
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("config OK: every replica of the Service default/kubernetes"),
        "{stdout}"
    );
    crate::common::assert_untouched(&apiserver);
    // The replicas come from discovery: no static target baked in.
    assert!(in_cluster_config().targets.static_targets.is_empty());
}

#[test]
fn the_receivers_secret_example_fits_the_deployment() {
    let text = std::fs::read_to_string(deploy_dir().join("receivers-secret.example.yaml")).unwrap();
    let secret: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(kind(&secret), "Secret");
    // Mounted by the Deployment (optional: the base runs without it), not rendered by the base.
    let volume = pod_spec()["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"].as_str() == Some(name(&secret)))
        .expect("the Deployment mounts the receivers' Secret");
    assert_eq!(volume["secret"]["optional"].as_bool(), Some(true));
    let mount = container()["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .unwrap()["mountPath"]
        .as_str()
        .unwrap();

    // The receivers the comment shows are a valid config, reading their secrets from the Secret's files.
    let example: String = text
        .lines()
        .skip_while(|l| !l.starts_with("#   receivers:"))
        .take_while(|l| l.starts_with("#   "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    let config = Config::from_yaml(&example).unwrap_or_else(|e| panic!("{e}\n{example}"));
    let keys: BTreeSet<String> = secret["stringData"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.to_string())
        .collect();
    let files: Vec<PathBuf> = config
        .receivers
        .iter()
        .flat_map(|r| {
            [
                r.slack.as_ref().and_then(|s| s.webhook_url_file.clone()),
                r.email.as_ref().and_then(|e| e.password_file.clone()),
            ]
        })
        .flatten()
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in files {
        let key = f.strip_prefix(mount).unwrap().to_str().unwrap().to_string();
        assert!(keys.contains(&key), "{key} is not in the Secret");
    }
}

#[test]
fn the_dockerfile_builds_with_the_release_command_and_runs_as_non_root() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(dockerfile.contains("USER 65532"));
    assert!(dockerfile.contains("FROM gcr.io/distroless/cc-debian12:nonroot"));
    // The binary the Deployment runs is the one the image copies in.
    let command = strings(&container()["command"]);
    assert_eq!(command, ["/apf-monitor"]);
    assert!(dockerfile.contains("target/release/apf-monitor /apf-monitor"));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["/apf-monitor"]"#));
    // The README tells the same command, and CI checks the Dockerfile keeps it.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("cargo build --release --locked"));
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("cargo build --release --locked"));
}

/// No Docker engine runs where the tests do, so the image's build is checked against the workspace it builds: every
/// crate under `crates/` is a member, its manifest is in the dependency layer with a dummy library, its sources are
/// in the build context (`.dockerignore`) and copied in, and its library is touched before the real build.
#[test]
fn the_dockerfile_builds_every_crate_of_the_workspace() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let allowed: Vec<&str> = ignore.lines().filter_map(|l| l.strip_prefix('!')).collect();
    // templates/: the pages' markup, read when the crate compiles.
    for dir in ["src/", "crates/", "templates/", "Cargo.toml", "Cargo.lock"] {
        assert!(allowed.contains(&dir), ".dockerignore leaves out {dir}");
    }
    assert!(
        dockerfile.contains("COPY src src")
            && dockerfile.contains("COPY crates crates")
            && dockerfile.contains("COPY templates templates")
    );
    let mut crates: Vec<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    assert!(!crates.is_empty());
    let touch = dockerfile
        .lines()
        .find(|l| l.trim_start().starts_with("RUN touch"))
        .unwrap();
    // The top manifest's benches are not copied in (.dockerignore): their dummies must stay for both builds.
    for bench in manifest
        .split("[[bench]]")
        .skip(1)
        .filter_map(|b| b.split('"').nth(1))
    {
        assert!(
            dockerfile.contains(&format!("benches/{bench}.rs")),
            "no dummy bench {bench} for the top crate"
        );
    }
    for name in &crates {
        let dir = format!("crates/{name}");
        assert!(
            manifest.contains(&format!("\"{dir}\"")),
            "{dir} is not a workspace member"
        );
        assert!(
            dockerfile.contains(&format!("COPY {dir}/Cargo.toml {dir}/")),
            "the dependency layer lacks {dir}/Cargo.toml"
        );
        assert!(
            dockerfile.contains(&format!("{dir}/src/lib.rs")),
            "no dummy library for {dir}"
        );
        assert!(touch.contains(&format!("{dir}/src/lib.rs")), "{touch}");
        // A bench or test target a manifest names must exist in the dummy build too.
        let own = std::fs::read_to_string(root().join(&dir).join("Cargo.toml")).unwrap();
        for bench in own
            .split("[[bench]]")
            .skip(1)
            .filter_map(|b| b.split('"').nth(1))
        {
            assert!(
                dockerfile.contains(&format!("{dir}/benches/{bench}.rs")),
                "no dummy bench {bench} for {dir}"
            );
        }
    }
}

/// `kubectl kustomize deploy/fleet/`: the base over a Prometheus. It reads no apiserver, so the scrape and discovery
/// RBAC is gone (the Lease's stays); its egress reaches the Prometheus port; its memory fits a fleet; its config is
/// what `serve --check-config` accepts and reads every replica from that Prometheus.
#[test]
fn the_fleet_overlay_reads_a_prometheus_with_least_privilege() {
    let docs = kustomize("deploy/fleet");
    let of = |k: &str| docs.iter().filter(|d| kind(d) == k).collect::<Vec<_>>();
    // No apiserver read is granted: what stays is the API's guard (its reviews, and the roles for its callers).
    let bindings: Vec<&str> = of("ClusterRoleBinding").iter().map(|b| name(b)).collect();
    assert_eq!(bindings, ["apf-monitor-auth-delegator"]);
    let mut roles: Vec<&str> = of("ClusterRole").iter().map(|r| name(r)).collect();
    roles.sort();
    assert_eq!(
        roles,
        [
            "apf-monitor-audit-sender",
            "apf-monitor-silencer",
            "apf-monitor-viewer"
        ]
    );
    let roles = of("Role");
    assert_eq!(roles.len(), 1, "{roles:?}");
    assert_eq!(
        roles[0]["rules"][0]["resources"][0].as_str(),
        Some("leases"),
        "{:?}",
        roles[0]
    );
    let policy = of("NetworkPolicy")[0];
    assert!(
        policy["spec"]["egress"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"].as_u64() == Some(9090)),
        "{policy:?}"
    );
    let deployment = of("Deployment")[0];
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
            .as_str(),
        Some("384Mi")
    );
    // The ConfigMap the pods mount is the fleet's config.
    let config_map = of("ConfigMap")[0];
    let config =
        Config::from_yaml(config_map["data"]["apf-monitor.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(config.targets.prometheus.len(), 1);
    assert!(config.targets.static_targets.is_empty());
    // Its replicas elect a notifier through a Lease with the pod's apiserver access; here a kubeconfig stands in
    // for it (checked, not contacted). Without any, the check refuses as serve would.
    let dir = tempfile::tempdir().unwrap();
    let (apiserver, url) = crate::common::untouched_apiserver();
    let kubeconfig = crate::common::kubeconfig(dir.path(), &url);
    let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["serve", "--check-config", "--config"])
        .arg(deploy_dir().join("fleet/apf-monitor.yaml"))
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(
            "config OK: every replica in http://prometheus-operated.monitoring.svc:9090"
        ),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    crate::common::assert_untouched(&apiserver);
}

/// `kubectl kustomize deploy/tls/`: the base served over HTTPS with a certificate cert-manager renews.
#[test]
fn the_tls_overlay_serves_https_with_the_certificate_it_mounts() {
    let docs = kustomize("deploy/tls");
    let of = |k: &str| docs.iter().find(|d| kind(d) == k).unwrap();
    let config_text = of("ConfigMap")["data"]["apf-monitor.yaml"]
        .as_str()
        .unwrap();
    let config = Config::from_yaml(config_text).unwrap();
    let tls = config.web.tls.clone().expect("web.tls");
    // The overlay's config is the base's plus web.tls (and the https link back): nothing else drifts.
    let base = in_cluster_config();
    let mut alerting = config.alerting.clone();
    alerting.external_url = base.alerting.external_url.clone();
    assert_eq!(alerting, base.alerting);
    assert_eq!(config.web.auth, base.web.auth);
    assert_eq!(
        (
            &config.listen,
            &config.scrape,
            &config.analysis,
            &config.targets,
            &config.log
        ),
        (
            &base.listen,
            &base.scrape,
            &base.analysis,
            &base.targets,
            &base.log
        )
    );
    assert_eq!(
        (
            &config.rules,
            &config.receivers,
            &config.route,
            &config.shutdown_timeout
        ),
        (
            &base.rules,
            &base.receivers,
            &base.route,
            &base.shutdown_timeout
        )
    );

    let pod = &of("Deployment")["spec"]["template"]["spec"];
    let secret = of("Certificate")["spec"]["secretName"].as_str().unwrap();
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"].as_str() == Some(secret))
        .expect("the Certificate's Secret is a volume");
    let container = &pod["containers"][0];
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .unwrap();
    let dir = std::path::Path::new(mount["mountPath"].as_str().unwrap());
    assert_eq!(mount["readOnly"].as_bool(), Some(true));
    assert_eq!(tls.cert_file, dir.join("tls.crt"));
    assert_eq!(tls.key_file, dir.join("tls.key"));
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            container[probe]["httpGet"]["scheme"].as_str(),
            Some("HTTPS"),
            "{probe}"
        );
    }
    let endpoint = &of("ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"].as_str(), Some("https"));
    assert_eq!(
        endpoint["tlsConfig"]["ca"]["secret"]["name"].as_str(),
        Some(secret)
    );
    let names = strings(&of("Certificate")["spec"]["dnsNames"]);
    assert!(names.contains(
        &endpoint["tlsConfig"]["serverName"]
            .as_str()
            .unwrap()
            .to_string()
    ));
}

/// deploy/audit/ fits together and with the deployment: the policy audits every request once at Metadata, the
/// sender's binding names the role the deployment defines (which allows exactly the webhook), its token is its
/// service account's, and the kubeconfig points kube-apiserver at the webhook under a name the TLS certificate has.
#[test]
fn the_audit_examples_fit_the_deployment() {
    let read = |f: &str| -> Vec<Value> {
        let text = std::fs::read_to_string(deploy_dir().join("audit").join(f)).unwrap();
        serde_saphyr::from_multiple::<Value>(&text)
            .unwrap()
            .into_iter()
            .filter(|v| !v.is_null())
            .collect()
    };
    let policy = &read("policy.yaml")[0];
    assert_eq!(policy["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(kind(policy), "Policy");
    assert_eq!(
        set(&policy["omitStages"]),
        set_of(&["RequestReceived", "ResponseStarted"])
    );
    let rules = policy["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["level"], "Metadata");

    let sender = read("sender.yaml");
    let of = |k: &str| sender.iter().find(|d| kind(d) == k).unwrap();
    let sa = of("ServiceAccount");
    let binding = of("ClusterRoleBinding");
    let role = named("ClusterRole", binding["roleRef"]["name"].as_str().unwrap());
    assert_eq!(
        set(&role["rules"][0]["nonResourceURLs"]),
        set_of(&["/api/v1/audit"])
    );
    assert_eq!(set(&role["rules"][0]["verbs"]), set_of(&["post"]));
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0]["namespace"],
        sa["metadata"]["namespace"]
    );
    assert_eq!(
        of("Secret")["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        sa["metadata"]["name"]
    );

    let kubeconfig = &read("webhook-kubeconfig.yaml")[0];
    let cluster = &kubeconfig["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().unwrap();
    assert!(
        server.starts_with("https://") && server.ends_with("/api/v1/audit"),
        "{server}"
    );
    let tls: Vec<Value> = serde_saphyr::from_multiple(
        &std::fs::read_to_string(deploy_dir().join("tls/certificate.yaml")).unwrap(),
    )
    .unwrap();
    let certificate = tls.iter().find(|d| kind(d) == "Certificate").unwrap();
    assert!(set(&certificate["spec"]["dnsNames"])
        .contains(cluster["tls-server-name"].as_str().unwrap()));
}
