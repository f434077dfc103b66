//! The simulated cluster as real Kubernetes clients see it: the real kubectl (/usr/bin/kubectl) lists flowcontrol
//! objects and EndpointSlices and reads the version through the kubeconfig the cluster writes, over plain HTTP and
//! over TLS with a bearer token; kube-rs watches the `kubernetes` EndpointSlice and Endpoints while a replica goes
//! away; kube-lease-manager hands a Lease from one holder to another through two different replicas; and the fix
//! `check --output manifests` proposes, applied with kubectl, stops the rejections of the level it relieves.
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common;
use apf_sim::{generate_token, Cluster, ClusterOptions, KubeVersion, Scenario, ScenarioSource};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use serde_json::Value;

const SERVICE_SELECTOR: &str = "kubernetes.io/service-name=kubernetes";

fn options(replicas: usize) -> ClusterOptions {
    ClusterOptions {
        replicas,
        ..ClusterOptions::new(
            KubeVersion::new(34, 0),
            Scenario::load(&ScenarioSource::Idle).unwrap(),
        )
    }
}

/// A port free on every loopback address the test's replicas take: they then share one EndpointSlice.
fn shared_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs kubectl with the kubeconfig (and its own discovery cache); returns its exit status, stdout and stderr.
pub(crate) async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let kubectl = crate::common::external::binary("kubectl", "kubernetes-client");
    let cache = kubeconfig.with_extension("cache");
    let mut command = Command::new(&kubectl);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--request-timeout=20s")
        .args(args)
        .env_remove("KUBECONFIG");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot run kubectl: {e}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What a new user types, each answering with exit status 0 and the cluster's objects.
async fn kubectl_works_against(cluster: &Cluster, kubeconfig: &Path) {
    let (ok, out, err) = kubectl(
        kubeconfig,
        &["get", "flowschemas,prioritylevelconfigurations"],
    )
    .await;
    assert!(
        ok,
        "kubectl get flowschemas,prioritylevelconfigurations: {err}"
    );
    for name in [
        "flowschema.flowcontrol.apiserver.k8s.io/catch-all",
        "flowschema.flowcontrol.apiserver.k8s.io/service-accounts",
        "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/workload-low",
    ] {
        assert!(out.contains(name), "{name} missing:\n{out}");
    }
    // The columns kube-apiserver prints for these kinds (server-side Table), not only NAME and AGE.
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(
        row("flowschema.flowcontrol.apiserver.k8s.io/service-accounts")[1..4],
        ["workload-low", "9000", "ByUser"],
        "{out}"
    );
    assert_eq!(
        row("prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/workload-low")[1..6],
        ["Limited", "100", "128", "6", "50"],
        "{out}"
    );

    let (ok, out, err) = kubectl(kubeconfig, &["get", "endpointslices", "-n", "default"]).await;
    assert!(ok && out.contains("kubernetes"), "{out}{err}");
    let (ok, out, err) = kubectl(
        kubeconfig,
        &[
            "get",
            "endpointslices",
            "-n",
            "default",
            "-l",
            SERVICE_SELECTOR,
            "-o",
            "json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let mut addresses: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["addresses"][0].as_str().map(str::to_string))
        .collect();
    addresses.sort();
    let mut want: Vec<String> = cluster
        .replicas()
        .iter()
        .map(|(_, a)| a.ip().to_string())
        .collect();
    want.sort();
    assert_eq!(addresses, want);

    let (ok, out, err) = kubectl(kubeconfig, &["version", "-o", "json"]).await;
    assert!(ok, "kubectl version: {err}");
    let version: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(version["serverVersion"]["gitVersion"], "v1.34.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_a_plain_cluster_through_its_kubeconfig() {
    let (cluster, _dir, kubeconfig) = common::sim_cluster(options(3)).await;
    let urls = cluster.replica_urls();
    assert!(urls[0].starts_with("http://127.0.0.2:"), "{urls:?}");
    assert!(urls[2].starts_with("http://127.0.0.4:"), "{urls:?}");
    kubectl_works_against(&cluster, &kubeconfig).await;
    // Every replica answers for the cluster: the same list from the last one.
    let (ok, out, err) = kubectl(
        &kubeconfig,
        &[
            "--server",
            &urls[2],
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let endpoints: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(endpoints["kind"], "Endpoints");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_a_tls_cluster_with_a_token_and_is_refused_without_it() {
    let (cluster, _dir, kubeconfig) = common::sim_cluster(ClusterOptions {
        tls: true,
        token: Some(generate_token()),
        ..options(2)
    })
    .await;
    assert!(cluster.replica_urls()[1].starts_with("https://127.0.0.3:"));
    kubectl_works_against(&cluster, &kubeconfig).await;
    let (ok, _, err) = kubectl(&kubeconfig, &["--token", "not-the-token", "get", "leases"]).await;
    assert!(!ok, "a wrong token must be refused");
    assert!(
        err.contains("Unauthorized") || err.contains("must be logged in"),
        "{err}"
    );
    cluster.stop().await;
}

async fn kube_client(kubeconfig: &Path, server: Option<&str>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    if let Some(url) = server {
        config.cluster_url = url.parse().unwrap();
    }
    kube::Client::try_from(config).unwrap()
}

/// The next event of a watch, within 10 s.
async fn next_event<K, S>(events: &mut S) -> WatchEvent<K>
where
    S: futures_util::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .expect("no watch event within 10 s")
        .expect("the watch failed")
        .expect("the watch ended")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_a_replica_leave_the_endpoint_slice() {
    let (cluster, _dir, kubeconfig) = common::sim_cluster(ClusterOptions {
        tls: true,
        token: Some(generate_token()),
        first_address: "127.0.0.12".parse().unwrap(),
        listen_port: shared_port(),
        ..options(3)
    })
    .await;
    let client = kube_client(&kubeconfig, None).await;

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let list = slices
        .list(&ListParams::default().labels(SERVICE_SELECTOR))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "one port, one slice");
    assert_eq!(
        list.items[0].endpoints.as_deref().unwrap_or_default().len(),
        3
    );
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut slice_events = slices
        .watch(
            &WatchParams::default().labels(SERVICE_SELECTOR).timeout(30),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let endpoints: Api<Endpoints> = Api::namespaced(client, "default");
    let eps_rv = endpoints
        .get("kubernetes")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut endpoints_events = endpoints
        .watch(
            &WatchParams::default()
                .fields("metadata.name=kubernetes")
                .timeout(30),
            &eps_rv,
        )
        .await
        .unwrap()
        .boxed();

    // The watches are on replica 0; replica 1 goes away.
    cluster.remove_replica(1).await.unwrap();
    let gone = "127.0.0.13".to_string();
    match next_event(&mut slice_events).await {
        WatchEvent::Modified(slice) => {
            let addresses: Vec<&String> = slice
                .endpoints
                .iter()
                .flatten()
                .flat_map(|e| e.addresses.iter())
                .collect();
            assert_eq!(addresses.len(), 2, "{addresses:?}");
            assert!(!addresses.contains(&&gone));
            let new_rv: u64 = slice.metadata.resource_version.unwrap().parse().unwrap();
            assert!(new_rv > rv.parse::<u64>().unwrap());
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    match next_event(&mut endpoints_events).await {
        WatchEvent::Modified(eps) => {
            let ips: Vec<String> = eps
                .subsets
                .unwrap_or_default()
                .iter()
                .flat_map(|s| s.addresses.clone().unwrap_or_default())
                .map(|a| a.ip)
                .collect();
            assert_eq!(ips, ["127.0.0.12", "127.0.0.14"]);
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    // A replica added comes back into the slice, on the next address.
    let index = cluster.add_replica().await.unwrap();
    assert_eq!(index, 3);
    match next_event(&mut slice_events).await {
        WatchEvent::Modified(slice) => {
            let addresses: Vec<&String> = slice
                .endpoints
                .iter()
                .flatten()
                .flat_map(|e| e.addresses.iter())
                .collect();
            assert!(
                addresses.contains(&&"127.0.0.15".to_string()),
                "{addresses:?}"
            );
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_lease_manager_hands_the_lease_over_across_replicas() {
    let (cluster, _dir, kubeconfig) = common::sim_cluster(ClusterOptions {
        tls: true,
        token: Some(generate_token()),
        ..options(2)
    })
    .await;
    let urls = cluster.replica_urls();
    // Each manager talks to its own replica: the Lease lives in the cluster's one store.
    let client_a = kube_client(&kubeconfig, Some(&urls[0])).await;
    let client_b = kube_client(&kubeconfig, Some(&urls[1])).await;
    let build = |client: kube::Client, identity: &str| {
        kube_lease_manager::LeaseManagerBuilder::new(client, "apf-monitor-test")
            .with_namespace("default")
            .with_identity(identity)
            .with_duration(3)
            .with_grace(1)
            .build()
    };

    let (mut a_leads, a_task) = build(client_a.clone(), "a").await.unwrap().watch().await;
    tokio::time::timeout(Duration::from_secs(15), a_leads.wait_for(|l| *l))
        .await
        .expect("a never took the Lease")
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(client_a, "default");
    let held = leases.get("apf-monitor-test").await.unwrap();
    assert_eq!(
        held.spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        Some("a")
    );
    let rv_held: u64 = held.metadata.resource_version.unwrap().parse().unwrap();

    let (mut b_leads, b_task) = build(client_b, "b").await.unwrap().watch().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !*b_leads.borrow(),
        "b must not lead while a holds the Lease"
    );

    // a gives the Lease up (closing its state channel releases it); b takes over once a's term has run out.
    drop(a_leads);
    tokio::time::timeout(Duration::from_secs(10), a_task)
        .await
        .expect("a did not release the Lease")
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(15), b_leads.wait_for(|l| *l))
        .await
        .expect("b never took the Lease over")
        .unwrap();
    let taken = leases.get("apf-monitor-test").await.unwrap();
    let spec = taken.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert!(spec.lease_transitions.unwrap_or(0) >= 2, "{spec:?}");
    let rv_taken: u64 = taken.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv_taken > rv_held);

    drop(b_leads);
    let _ = tokio::time::timeout(Duration::from_secs(10), b_task).await;
    cluster.stop().await;
}

/// `simulate --scenario` means what `demo --scenario` means: the load of one replica, which the cluster receives
/// once per replica. Three replicas under a steady 100 requests/s: the hot one receives 1.5 times it (150/s; as the
/// whole cluster's load split, it received 50/s), read from its own `apiserver_request_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_gives_each_replica_the_scenario_as_demo_does() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("steady.yaml");
    std::fs::write(
        &scenario,
        "duration: 600s\nflows:\n  - {name: kubelet, flow_schema: system-nodes, user: 'system:node:n1', groups: \
         [system:nodes], verb: get, resource: pods, seats: 1, duration: 5ms, rate: [{at: 0s, rps: 100}]}\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["simulate", "--replicas", "3", "--scenario"])
        .arg(&scenario)
        .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(dir.path().join("kubeconfig"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rx = common::stdout_lines(&mut child);
    let mut replicas = Vec::new();
    while replicas.len() < 3 {
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        if let Some(rest) = line.trim().strip_prefix("replica ") {
            replicas.push(rest.to_string());
        }
    }
    assert!(
        replicas[0].contains("1.50 times the scenario"),
        "{replicas:?}"
    );
    assert!(
        replicas[2].contains("0.50 times the scenario"),
        "{replicas:?}"
    );
    let metrics = format!("{}/metrics", replicas[0].split_whitespace().nth(1).unwrap());
    let requests = || async {
        let body = common::get_text(&metrics).await.unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let (before, start) = (requests().await, std::time::Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rate = (requests().await - before) / start.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        (120.0..=180.0).contains(&rate),
        "the hot replica received {rate:.0}/s: {replicas:?}"
    );
}

/// The rejections of `level` in a replica's `/metrics`, by every reason.
async fn rejected(replica: &str, level: &str) -> f64 {
    let body = common::get_text(&format!("{replica}/metrics"))
        .await
        .unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_rejected_requests_total{"))
        .filter(|l| l.contains(&format!("priority_level=\"{level}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The demo's closing act, as a user does it: the alerts propose isolating the agent that floods workload-low,
/// `check --output manifests` prints the manifest, kubectl applies it (validated against the OpenAPI the simulator
/// serves: no --validate=false), every replica puts it in force, and workload-low stops rejecting while the agent
/// queues alone in its new level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proposed_fix_applied_with_kubectl_stops_the_rejections() {
    let scenario = Scenario::from_yaml(common::AGENT_FLOOD).unwrap();
    let (cluster, dir, kubeconfig) = common::sim_cluster(ClusterOptions {
        replicas: 2,
        listen_port: 0,
        clock_tick: Some(Duration::from_millis(20)),
        ..ClusterOptions::new(KubeVersion::new(34, 0), scenario)
    })
    .await;
    let replicas = cluster.replica_urls();
    for r in &replicas {
        let rejecting = common::eventually(Duration::from_secs(60), || async {
            (rejected(r, "workload-low").await > 0.0).then_some(())
        })
        .await;
        assert!(rejecting.is_some(), "{r}: workload-low never rejected");
    }

    let output = common::proposed_manifests(&kubeconfig).await;
    let manifests = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        manifests.contains("name: isolate-monitoring-agent")
            && manifests.contains("kind: FlowSchema"),
        "{manifests}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let file = dir.path().join("fix.yaml");
    std::fs::write(&file, &manifests).unwrap();
    let (ok, out, err) = kubectl(&kubeconfig, &["apply", "-f", file.to_str().unwrap()]).await;
    assert!(ok, "kubectl apply: {out}{err}");
    assert!(
        out.contains("flowschema.flowcontrol.apiserver.k8s.io/isolate-monitoring-agent created"),
        "{out}"
    );
    let (ok, out, err) = kubectl(
        &kubeconfig,
        &[
            "get",
            "prioritylevelconfiguration",
            "isolate-monitoring-agent",
        ],
    )
    .await;
    assert!(ok && out.contains("isolate-monitoring-agent"), "{out}{err}");

    // What waited in workload-low is served or times out within the 15 s wait limit; after that it rejects nothing:
    // within a minute, ten seconds pass in which no replica's workload-low rejects.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let before: Vec<f64> =
            futures_util::future::join_all(replicas.iter().map(|r| rejected(r, "workload-low")))
                .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after: Vec<f64> =
            futures_util::future::join_all(replicas.iter().map(|r| rejected(r, "workload-low")))
                .await;
        if after == before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "workload-low still rejects: {before:?} then {after:?} on {replicas:?}"
        );
    }
    for r in &replicas {
        assert!(
            rejected(r, "isolate-monitoring-agent").await > 0.0,
            "{r}: the agent's excess is turned away in its own level"
        );
    }

    // Deleted again, the agent is back in workload-low, which rejects again.
    let (ok, _, err) = kubectl(&kubeconfig, &["delete", "-f", file.to_str().unwrap()]).await;
    assert!(ok, "kubectl delete: {err}");
    let hot = &replicas[0];
    let before = rejected(hot, "workload-low").await;
    let again = common::eventually(Duration::from_secs(60), || async {
        (rejected(hot, "workload-low").await > before).then_some(())
    })
    .await;
    assert!(
        again.is_some(),
        "workload-low rejects again once the fix is gone"
    );
    cluster.stop().await;
}

/// kubectl without `--validate=false`: it finds the OpenAPI v3 documents, leaves field validation to the server
/// (`fieldValidation=Strict`), which refuses an unknown field by its path; `explain` reads the same schemas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_validates_with_the_openapi_the_cluster_serves() {
    let (_cluster, dir, kubeconfig) = common::sim_cluster(options(1)).await;
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: bad}\nspec:\n  \
         priorityLevelConfiguration: {name: workload-low}\n  colour: red\n",
    )
    .unwrap();
    let (ok, _, err) = kubectl(&kubeconfig, &["apply", "-f", bad.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        err.contains("strict decoding error: unknown field \"spec.colour\""),
        "{err}"
    );
    // kubectl create too, and the request that reaches the server says so (kubectl -v=6 logs each one).
    let (ok, _, err) = kubectl(
        &kubeconfig,
        &["create", "-f", bad.to_str().unwrap(), "-v=6"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.lines().any(|l| l.contains("POST")
            && l.contains("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas?")
            && l.contains("fieldValidation=Strict")),
        "{err}"
    );
    assert!(err.contains("unknown field \"spec.colour\""), "{err}");
    // explain reads the v3 documents, and the v2 one in protobuf (gnostic's OpenAPIv2.proto) when asked for it.
    let (ok, out, err) = kubectl(&kubeconfig, &["explain", "flowschemas.spec"]).await;
    assert!(ok, "{err}");
    for field in [
        "distinguisherMethod",
        "matchingPrecedence",
        "priorityLevelConfiguration",
        "rules",
    ] {
        assert!(out.contains(field), "{field}: {out}");
    }
    for output in ["plaintext", "plaintext-openapiv2"] {
        let (ok, out, err) = kubectl(
            &kubeconfig,
            &[
                "explain",
                "prioritylevelconfigurations.spec.limited",
                "--output",
                output,
            ],
        )
        .await;
        assert!(ok, "{output}: {err}");
        for field in [
            "nominalConcurrencyShares",
            "lendablePercent",
            "limitResponse",
        ] {
            assert!(out.contains(field), "{output}, {field}: {out}");
        }
    }
    let (ok, out, err) = kubectl(
        &kubeconfig,
        &["explain", "leases.spec", "--output", "plaintext-openapiv2"],
    )
    .await;
    assert!(ok && out.contains("holderIdentity"), "{out}{err}");
    // Invalid values are refused with the field and the rule, as kube-apiserver's validation words them.
    std::fs::write(
        &bad,
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: bad}\n\
         spec: {type: Limited, limited: {limitResponse: {type: Queue, queuing: {queues: 4, handSize: 8}}}}\n",
    )
    .unwrap();
    let (ok, _, err) = kubectl(&kubeconfig, &["apply", "-f", bad.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        err.contains("handSize: Invalid value: 8: should not be greater than queues (4)"),
        "{err}"
    );
}
