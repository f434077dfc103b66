//! README's simulated cluster watched the way README shows it, with the files it ships: `apf-monitor simulate
//! --kubernetes-version 1.29 --scenario storm --replicas 3 --tls --require-token`, `apf-monitor serve --config
//! config/apf-monitor.example.yaml` in the same folder (every replica discovered through the kubeconfig simulate
//! wrote), and a real Prometheus started with `prometheus --config.file config/prometheus-simulate.yaml`, which
//! scrapes every replica over the simulator's TLS with its token, and apf-monitor. Then `report` on that young
//! Prometheus, with the default step: the data's own resolution, the scrape interval, not a tenth of the samples it
//! holds spread over ten minutes.
use std::path::Path;
use std::process::Command;

use crate::common::{self, external, until, Running};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_config_and_the_prometheus_config_watch_the_simulated_cluster_and_report_reads_it(
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // README's ports (8001, 9864) may be taken on a shared machine: free ones, as --listen sets them.
    let (sim_port, monitor_port) = (external::free_port(), external::free_port());

    let simulate = Running::start(
        &[
            "simulate",
            "--kubernetes-version",
            "1.29",
            "--scenario",
            "storm",
            "--replicas",
            "3",
            "--tls",
            "--require-token",
            "--listen",
            &format!("127.0.0.1:{sim_port}"),
        ],
        dir.path(),
        "simulate",
    );
    until(
        "simulate's kubeconfig",
        30,
        || simulate.log(),
        || async {
            simulate
                .log()
                .contains("scrape every replica:")
                .then_some(())
        },
    )
    .await;
    let replicas: Vec<String> = (2..=4).map(|i| format!("127.0.0.{i}:{sim_port}")).collect();

    // The example as it is, from the folder simulate ran in.
    let example = root.join("config/apf-monitor.example.yaml");
    let listen = format!("127.0.0.1:{monitor_port}");
    let serve = Running::start(
        &[
            "serve",
            "--config",
            example.to_str().unwrap(),
            "--listen",
            &listen,
        ],
        dir.path(),
        "serve",
    );
    let logs = || format!("serve:\n{}\nsimulate:\n{}", serve.log(), simulate.log());
    until("every replica's headroom from serve", 60, logs, || async {
        let body = common::get_text(&format!("http://{listen}/metrics")).await?;
        replicas
            .iter()
            .all(|r| {
                common::sample_value(
                    &body,
                    "apf_priority_level_headroom_seats",
                    &[
                        ("apiserver", r.as_str()),
                        ("priority_level", "workload-low"),
                    ],
                )
                .is_some()
            })
            .then_some(())
    })
    .await;

    // The shipped Prometheus config, beside the files simulate wrote as in the repository (its paths are relative
    // to it), with the ports of this run.
    let shipped = std::fs::read_to_string(root.join("config/prometheus-simulate.yaml")).unwrap();
    assert_eq!(shipped.matches(":8001'").count(), 3, "{shipped}");
    assert_eq!(shipped.matches("'127.0.0.1:9864'").count(), 1, "{shipped}");
    let config = shipped
        .replace(":8001'", &format!(":{sim_port}'"))
        .replace("'127.0.0.1:9864'", &format!("'{listen}'"));
    std::fs::create_dir(dir.path().join("config")).unwrap();
    let config_file = dir.path().join("config/prometheus-simulate.yaml");
    std::fs::write(&config_file, config).unwrap();
    let prom = external::prometheus_file(&config_file).await;
    let logs = || format!("Prometheus:\n{}\n{}", prom.log(), logs());

    // Every replica scraped (TLS verified, token accepted), and apf-monitor.
    until(
        "Prometheus to scrape the three replicas and apf-monitor",
        60,
        logs,
        || async {
            let apiservers = external::prom_query(&prom, r#"up{job="apiserver"} == 1"#).await;
            let monitor = external::prom_query(&prom, r#"up{job="apf-monitor"} == 1"#).await;
            (apiservers.len() == 3 && monitor.len() == 1).then_some(())
        },
    )
    .await;
    let instances: Vec<String> = external::prom_query(
        &prom,
        r#"count by (instance) (apiserver_flowcontrol_current_limit_seats{job="apiserver"})"#,
    )
    .await
    .iter()
    .filter_map(|s| s["metric"]["instance"].as_str().map(str::to_string))
    .collect();
    for r in &replicas {
        assert!(instances.contains(r), "{r} not stored: {instances:?}");
    }

    // The storm rejects at once on the hot replica; once Prometheus holds that, `report` with the default step
    // finds it, read at the scrape interval of the shipped config.
    let hot = &replicas[0];
    let rejected = format!(
        r#"increase(apiserver_flowcontrol_rejected_requests_total{{job="apiserver",instance="{hot}"}}[1m]) > 0"#
    );
    until(
        "rejections on the hot replica in Prometheus",
        60,
        logs,
        || async { (!external::prom_query(&prom, &rejected).await.is_empty()).then_some(()) },
    )
    .await;
    let report = until("an incident in the report", 60, logs, || async {
        let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args([
                "report",
                "--prometheus",
                &prom.url,
                "--from",
                "-10m",
                "--output",
                "json",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "report on a young Prometheus: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["step"], "5s", "{report:#}");
        assert_eq!(report["replicas"], 3, "{report:#}");
        report["incidents"]
            .as_array()?
            .iter()
            .any(|i| i["apiserver"] == hot.as_str() && i["priority_level"] == "workload-low")
            .then_some(report)
    })
    .await;
    assert!(
        report["incidents"][0]["rejected_total"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0,
        "{report:#}"
    );
}
