//! High availability: only the replica holding the Lease sends direct notifications (Slack here), while every replica
//! feeds Alertmanager. Leadership is driven by hand: the Lease itself needs a cluster.
use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use apf_monitor::config::{self, AlertmanagerConfig, Config, ReceiverConfig, SlackConfig};
use apf_monitor::leader::Leadership;
use apf_monitor::sim::{Scenario, ScenarioSource};
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
                urls: vec![config::parse_target_url(&am).unwrap()],
                resend_interval: config::Interval(Duration::from_secs(1)),
            }),
            ..common::receiver("am")
        },
    ];
    let (lead, leadership) = tokio::sync::watch::channel(false);
    let _monitor =
        common::start_monitor_with(&config, Some(Leadership::from_channel(leadership))).await;

    // Not the leader: Alertmanager hears of the alert, Slack does not.
    for _ in 0..100 {
        if am_bodies
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.contains("APFHeadroomExhausted"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        am_bodies
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.contains("APFHeadroomExhausted")),
        "Alertmanager got nothing"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        slack_bodies.lock().unwrap().is_empty(),
        "a follower sent Slack messages"
    );

    // Leader now: the follower's router already counted the group as notified (the old leader sent it), so the
    // new leader sends it at its next repeat.
    lead.send(true).unwrap();
    for _ in 0..100 {
        if !slack_bodies.lock().unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the leader never sent to Slack");
}
