//! High availability: only the replica holding the Lease sends direct notifications (Slack here), while every replica
//! feeds Alertmanager, with leadership driven by hand. Two processes sharing the simulated cluster's Lease, and
//! what a failover sends: `failover.rs`.
use crate::common;

use apf_monitor::values;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apf_monitor::config::Config;
use apf_monitor::daemon::{LeaderState, Leadership};
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
    let (lead, leadership) = tokio::sync::watch::channel(LeaderState::default());
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

    // Leader now, with an empty log handed over (no Lease here): nothing was delivered to Slack, so the take-over
    // sends it what it is owed.
    lead.send(LeaderState {
        leading: true,
        term: 1,
        ..Default::default()
    })
    .unwrap();
    let sent = common::eventually(Duration::from_secs(10), || async {
        (!slack_bodies.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert!(sent.is_some(), "the leader never sent to Slack");
}
