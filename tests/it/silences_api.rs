//! The silences API (`POST/GET/DELETE /api/v1/silences`, Alertmanager's JSON shape) and the alerts in
//! `/api/v1/status`, against a paused simulated apiserver in a storm.
use crate::common;

use std::time::Duration;

use crate::common::get_text;
use apf_monitor::config::Config;
use apf_sim::{Scenario, ScenarioSource};

async fn status(monitor: &impl std::fmt::Display) -> serde_json::Value {
    serde_json::from_str(
        &get_text(&format!("{monitor}/api/v1/status"))
            .await
            .unwrap_or_default(),
    )
    .unwrap_or_default()
}

fn exhausted_state(status: &serde_json::Value) -> Option<String> {
    status["alerts"].as_array()?.iter().find_map(|a| {
        (a["labels"]["alertname"] == "APFHeadroomExhausted"
            && a["labels"]["priority_level"] == "workload-low")
            .then(|| a["state"].as_str().unwrap_or("").to_string())
    })
}

async fn wait_state(monitor: &impl std::fmt::Display, want: &str) -> serde_json::Value {
    for _ in 0..150 {
        let s = status(monitor).await;
        if exhausted_state(&s).as_deref() == Some(want) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "APFHeadroomExhausted never became {want}: {}",
        status(monitor).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silence_mutes_an_alert_until_it_is_expired() {
    let (_sim, sim_url) =
        common::paused_sim(33, Scenario::load(&ScenarioSource::Storm).unwrap(), 20).await;

    let mut config = Config::from_yaml("rules:\n  APFHeadroomExhausted: {for: 0s}\nscrape: {interval: 300ms, timeout: 300ms}\nanalysis: {window: 5s}\n").unwrap();
    config.targets.static_targets = vec![common::sim_target(&sim_url)];
    let monitor = common::start_monitor(&config).await;

    let s = wait_state(&monitor, "firing").await;
    let alert = s["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["alertname"] == "APFHeadroomExhausted")
        .unwrap();
    assert_eq!(alert["labels"]["severity"], "critical");
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("workload-low"),
        "{alert}"
    );

    // The status page lists it with its fix.
    let page = get_text(&format!("{monitor}/")).await.unwrap();
    assert!(
        page.contains("APFHeadroomExhausted") && page.contains("workload-low"),
        "{page}"
    );

    let client = reqwest::Client::new();
    // A bad silence is refused with the reason.
    let r = client.post(format!("{monitor}/api/v1/silences")).body(r#"{"matchers": [], "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z"}"#).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("matcher"));
    // So is a regex that does not compile, naming the matcher and the regex error.
    let r = client.post(format!("{monitor}/api/v1/silences")).body(r#"{"matchers": [{"name": "priority_level", "value": "workload-(low", "isRegex": true}], "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z"}"#).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(
        text.contains(r#"priority_level=~\"workload-(low\""#) && text.contains("unclosed group"),
        "{text}"
    );

    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let later =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(3600));
    let body = format!(
        r#"{{"matchers": [{{"name": "alertname", "value": "APFHeadroomExhausted", "isRegex": false, "isEqual": true}}, {{"name": "priority_level", "value": "workload-.*", "isRegex": true}}], "startsAt": "{now}", "endsAt": "{later}", "createdBy": "oncall", "comment": "agent rollout, fix under way"}}"#
    );
    let r = client
        .post(format!("{monitor}/api/v1/silences"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = serde_json::from_str::<serde_json::Value>(&r.text().await.unwrap()).unwrap()
        ["silenceID"]
        .as_str()
        .unwrap()
        .to_string();
    wait_state(&monitor, "silenced").await;

    let list: serde_json::Value = serde_json::from_str(
        &get_text(&format!("{monitor}/api/v1/silences"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["status"]["state"], "active");
    assert_eq!(list[0]["createdBy"], "oncall");

    let r = client
        .delete(format!("{monitor}/api/v1/silences/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_state(&monitor, "firing").await;
    let r = client
        .delete(format!("{monitor}/api/v1/silences/no-such-id"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}
