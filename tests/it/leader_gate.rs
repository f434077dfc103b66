//! High availability: only the replica holding the Lease sends direct notifications (Slack here), while every replica
//! feeds Alertmanager: with leadership driven by hand, and with two processes sharing the simulated cluster's Lease.
use crate::common;

use apf_monitor::values;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apf_monitor::config::Config;
use apf_monitor::daemon::Leadership;
use apf_monitor::notify::{AlertmanagerConfig, ReceiverConfig, SlackConfig};
use apf_sim::{Scenario, ScenarioSource};
use axum::routing::post;

async fn recorder(path: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let b = bodies.clone();
    let app = axum::Router::new().route(
        path,
        post(move |body: String| {
            let b = b.clone();
            async move {
                b.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_sends_slack_while_alertmanager_hears_from_every_replica() {
    let (_sim, sim_url) =
        common::paused_sim(34, Scenario::load(&ScenarioSource::Storm).unwrap(), 20).await;
    let (slack, slack_bodies) = recorder("/slack").await;
    let (am, am_bodies) = recorder("/api/v2/alerts").await;

    let mut config = Config::from_yaml(
        "scrape: {interval: 300ms, timeout: 300ms}\nanalysis: {window: 5s}\nrules:\n  APFHeadroomExhausted: {for: 0s}\nroute: {group_wait: 0s, group_interval: 1s, repeat_interval: 2s}\n",
    )
    .unwrap();
    config.targets.static_targets = vec![common::sim_target(&sim_url)];
    config.receivers = vec![
        ReceiverConfig {
            slack: Some(SlackConfig {
                webhook_url: Some(format!("{slack}/slack")),
                webhook_url_file: None,
                channel: None,
            }),
            ..common::receiver("slack")
        },
        ReceiverConfig {
            alertmanager: Some(AlertmanagerConfig {
                urls: vec![values::parse_target_url(&am).unwrap()],
                resend_interval: values::Interval(Duration::from_secs(1)),
            }),
            ..common::receiver("am")
        },
    ];
    let (lead, leadership) = tokio::sync::watch::channel(false);
    let _monitor =
        common::start_monitor_with(&config, Some(Leadership::from_channel(leadership))).await;

    // Not the leader: Alertmanager hears of the alert, Slack does not.
    let heard = common::eventually(Duration::from_secs(10), || async {
        am_bodies
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.contains("APFHeadroomExhausted"))
            .then_some(())
    })
    .await;
    assert!(heard.is_some(), "Alertmanager got nothing");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        slack_bodies.lock().unwrap().is_empty(),
        "a follower sent Slack messages"
    );

    // Leader now: nothing was booked as sent to Slack while following, so the next flush sends it what it is owed.
    lead.send(true).unwrap();
    let sent = common::eventually(Duration::from_secs(10), || async {
        (!slack_bodies.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert!(sent.is_some(), "the leader never sent to Slack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_one_notifies_and_the_other_takes_over_when_it_stops() {
    use std::process::{Command, Stdio};

    use apf_sim::{ClusterOptions, KubeVersion};

    let (cluster, dir, kubeconfig) = common::sim_cluster(ClusterOptions::new(
        KubeVersion::new(34, 0),
        Scenario::load(&ScenarioSource::Storm).unwrap(),
    ))
    .await;
    let api = cluster.replica_urls()[0].clone();
    let (hook, payloads) = recorder("/hook").await;
    // Which process sent a notification: its external URL.
    let from = |who: &str| {
        payloads
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b.contains(&format!("\"externalURL\":\"http://{who}\"")))
            .count()
    };
    // A process serving on a port of its own, and its URL.
    let start = |who: &str| {
        let port = common::external::free_port();
        let config = dir.path().join(format!("{who}.yaml"));
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nscrape: {{interval: 500ms, timeout: 500ms, objects_interval: 0s}}\n\
                 analysis: {{window: 10s}}\ntargets: {{kubernetes: {{kubeconfig: \"{kubeconfig}\"}}}}\n\
                 rules:\n  APFHeadroomExhausted: {{for: 0s, keep_firing_for: 10m}}\n\
                 receivers:\n  - {{name: hook, webhook: {{url: \"{hook}/hook\"}}}}\n\
                 route: {{group_wait: 1s, group_interval: 2s, repeat_interval: 1h}}\n\
                 alerting: {{external_url: \"http://{who}\", leader_election: {{enabled: true, namespace: default, \
                 lease_duration: 4s}}}}\n",
                kubeconfig = kubeconfig.display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join(format!("{who}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["serve", "--config"])
            .arg(&config)
            .env("HOSTNAME", format!("apf-{who}"))
            .env_remove("KUBECONFIG")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        (child, format!("http://127.0.0.1:{port}"))
    };
    let log = |who: &str| {
        std::fs::read_to_string(dir.path().join(format!("{who}.log"))).unwrap_or_default()
    };

    // a takes the Lease and notifies.
    let (a, _) = start("a");
    let notified = common::eventually(Duration::from_secs(60), || async {
        (from("a") > 0).then_some(())
    })
    .await;
    assert!(notified.is_some(), "a never notified:\n{}", log("a"));
    assert!(common::lease_holder(&api)
        .await
        .is_some_and(|h| h.starts_with("apf-a-")));

    // b runs beside it, its alert firing too, and sends nothing: not at the group's first flush, nor at the next.
    let (b, b_url) = start("b");
    let firing = common::eventually(Duration::from_secs(60), || async {
        let text = common::get_text(&format!("{b_url}/api/v1/status")).await?;
        let status: serde_json::Value = serde_json::from_str(&text).ok()?;
        status["alerts"]
            .as_array()?
            .iter()
            .any(|a| a["state"] == "firing" && a["labels"]["alertname"] == "APFHeadroomExhausted")
            .then_some(())
    })
    .await;
    assert!(firing.is_some(), "b's alert never fired:\n{}", log("b"));
    // group_wait 1s, group_interval 2s: a notification would have gone by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        from("b"),
        0,
        "only the Lease holder notifies:\n{}",
        log("b")
    );

    // a stops: it releases the Lease, b takes it within the lease duration and sends what b's receivers are owed.
    let code = common::terminate(a).await;
    assert_eq!(code, Some(0), "{}", log("a"));
    let stopped = tokio::time::Instant::now();
    let held = common::eventually(Duration::from_secs(10), || async {
        common::lease_holder(&api)
            .await
            .filter(|h| h.starts_with("apf-b-"))
    })
    .await;
    assert!(held.is_some(), "b did not take the Lease:\n{}", log("b"));
    assert!(
        stopped.elapsed() <= Duration::from_secs(5),
        "b took over {:?} after a stopped (lease duration 4s)",
        stopped.elapsed()
    );
    let notified = common::eventually(Duration::from_secs(10), || async {
        (from("b") > 0).then_some(())
    })
    .await;
    assert!(notified.is_some(), "b never notified:\n{}", log("b"));

    let code = common::terminate(b).await;
    assert_eq!(code, Some(0), "{}", log("b"));
    cluster.stop().await;
}
