//! Every replica discovered through the kube crate's apiserver access, against the simulated cluster (a real
//! API: EndpointSlices listed and watched, TLS with the cluster's CA, a bearer token): `serve --kubeconfig F`
//! exports one series set per replica, follows a replica that leaves, and refuses one whose certificate another CA
//! signed; `check` on a 1.25 cluster (flowcontrol v1beta2 only, `assuredConcurrencyShares`) reached through an exec
//! credential plugin.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use apf_sim::{generate_token, Cluster, ClusterOptions, KubeVersion, Scenario, ScenarioSource};

use crate::common::{external, get_text, sample_value};

async fn cluster(minor: u32, replicas: usize, scenario: ScenarioSource) -> Cluster {
    Cluster::start(ClusterOptions {
        replicas,
        tls: true,
        token: Some(generate_token()),
        ..ClusterOptions::new(
            KubeVersion::new(minor, 0),
            Scenario::load(&scenario).unwrap(),
        )
    })
    .await
    .unwrap()
}

/// `IP:port` of each replica: the `apiserver` label discovery gives them.
fn addresses(cluster: &Cluster) -> BTreeSet<String> {
    cluster
        .replicas()
        .iter()
        .map(|(_, addr)| addr.to_string())
        .collect()
}

/// The `apiserver` labels of the derived series.
fn exported(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("apf_priority_level_limit_seats{"))
        .filter_map(|l| {
            let rest = l.split("apiserver=\"").nth(1)?;
            Some(rest.split('"').next()?.to_string())
        })
        .collect()
}

async fn until<T>(what: &str, secs: u64, log: &Path, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out waiting for {what}; the daemon's log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_discovers_every_replica_follows_them_and_refuses_a_foreign_certificate() {
    let cluster = cluster(33, 3, ScenarioSource::Storm).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.kubeconfig(&kubeconfig).unwrap();
    let listen = format!("127.0.0.1:{}", external::free_port());
    let log = dir.path().join("serve.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args([
            "serve",
            "--interval",
            "1s",
            "--listen",
            &listen,
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap();
    let metrics = || async { get_text(&format!("http://{listen}/metrics")).await };

    // One series set per replica, named by its address, and nothing else.
    let replicas = addresses(&cluster);
    assert_eq!(replicas.len(), 3);
    until("a series set per replica", 60, &log, async || {
        let m = metrics().await?;
        (exported(&m) == replicas).then_some(())
    })
    .await;
    let m = metrics().await.unwrap();
    assert_eq!(
        sample_value(&m, "apf_monitor_discovered_replicas", &[]),
        Some(3.0)
    );
    assert_eq!(
        sample_value(&m, "apf_monitor_replicas_mixed", &[]),
        Some(0.0)
    );

    // A replica leaves: the watch sees it, its series go.
    let (gone_index, gone) = cluster.replicas()[1];
    cluster.remove_replica(gone_index).await.unwrap();
    let gone = gone.to_string();
    until("the removed replica's series gone", 60, &log, async || {
        let m = metrics().await?;
        let label = format!("apiserver=\"{gone}\"");
        (!m.lines().any(|l| l.contains(&label))).then_some(())
    })
    .await;

    // An impostor joins the endpoints with a certificate of another CA: refused, its error says why, and none of
    // its numbers are exported.
    let impostor_index = cluster
        .add_replica_with_foreign_certificate()
        .await
        .unwrap();
    let impostor = cluster
        .replicas()
        .into_iter()
        .find(|(i, _)| *i == impostor_index)
        .map(|(_, addr)| addr.to_string())
        .unwrap();
    let status = until("the impostor refused", 60, &log, async || {
        let text = get_text(&format!("http://{listen}/api/v1/status")).await?;
        let status: serde_json::Value = serde_json::from_str(&text).ok()?;
        let replica = status["apiservers"]
            .as_array()?
            .iter()
            .find(|a| a["apiserver"] == impostor.as_str())?
            .clone();
        (!replica["errors"].as_array()?.is_empty()).then_some(replica)
    })
    .await;
    let errors = status["errors"].to_string();
    assert!(
        errors.contains("certificate") || errors.contains("UnknownIssuer"),
        "{errors}"
    );
    assert!(status["levels"].as_array().is_some_and(|l| l.is_empty()));
    let m = metrics().await.unwrap();
    assert!(
        !exported(&m).contains(&impostor),
        "nothing of it is exported"
    );
    assert!(
        sample_value(
            &m,
            "apf_monitor_scrape_errors_total",
            &[
                ("apiserver", impostor.as_str()),
                ("endpoint", "metrics"),
                ("reason", "connect")
            ]
        )
        .unwrap_or(0.0)
            >= 1.0
    );

    let code = crate::common::terminate(child).await;
    assert_eq!(code, Some(0));
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_a_1_25_cluster_through_an_exec_credential_plugin() {
    let cluster = cluster(25, 2, ScenarioSource::Idle).await;
    let dir = tempfile::tempdir().unwrap();
    // The kubeconfig the cluster writes, its token replaced by a credential plugin that prints it (as `aws eks
    // get-token` or kubelogin do).
    let token = cluster.token().unwrap().to_string();
    let plugin = dir.path().join("get-token");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\ncat <<'EOF'\n{{\"apiVersion\": \"client.authentication.k8s.io/v1\", \"kind\": \"ExecCredential\", \
             \"status\": {{\"token\": \"{token}\"}}}}\nEOF\n"
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut kubeconfig: serde_json::Value =
        serde_saphyr::from_str(&cluster.kubeconfig_yaml()).unwrap();
    kubeconfig["users"][0]["user"] = serde_saphyr::from_str(&format!(
        "exec: {{apiVersion: client.authentication.k8s.io/v1, command: \"{}\", interactiveMode: Never}}",
        plugin.display()
    ))
    .unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_saphyr::to_string(&kubeconfig).unwrap()).unwrap();

    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["check", "--output", "json", "--kubeconfig"])
            .arg(&path)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let names: BTreeSet<String> = report["apiservers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["apiserver"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, addresses(&cluster));
    for a in report["apiservers"].as_array().unwrap() {
        assert_eq!(a["kubernetes_version"], "v1.25.0", "{a}");
        let low = a["levels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["priority_level"] == "workload-low")
            .unwrap();
        // queues x queueLengthLimit from the v1beta2 PriorityLevelConfiguration: 128 x 50.
        assert_eq!(low["queue_capacity_requests"], 6400.0, "{low}");
    }
    cluster.stop().await;
}
