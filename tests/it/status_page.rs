//! The status page at `/` in a real headless browser (Debian's `chromium`) while apf-monitor watches a simulated
//! apiserver under a storm: the DOM after load has each level with its headroom bar and trend, and the firing alert
//! with its remediation and manifest; the screenshot renders.
use crate::common;

use std::time::Duration;

use crate::common::external;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_levels_bars_and_a_firing_alert_with_its_fix_in_a_browser() {
    let scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(34, 0), scenario)).unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;
    let config = common::fast_config(&sim_url);
    let monitor = common::start_monitor(&config).await;

    // APFRequestsRejected fires at once (for: 0s) once two scrapes give a rate; the trend needs two points too.
    let firing = common::eventually(Duration::from_secs(60), || async {
        let body = common::get_text(&format!("{monitor}/api/v1/status")).await?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["alerts"]
            .as_array()?
            .iter()
            .any(|a| a["state"] == "firing" && a["labels"]["alertname"] == "APFRequestsRejected")
            .then_some(())
    })
    .await;
    assert!(firing.is_some(), "no firing APFRequestsRejected");

    let out = external::chromium(&format!("{monitor}/"), &["--dump-dom"]).await;
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium: {}\n{dom}",
        String::from_utf8_lossy(&out.stderr)
    );
    for level in ["workload-low", "global-default", "catch-all", "exempt"] {
        assert!(
            dom.contains(&format!(">{level}<")),
            "no level {level}:\n{dom}"
        );
    }
    // Headroom bars with the nominal marked, and a critical level's bar in red.
    assert!(dom.contains("class=\"bar\""), "{dom}");
    assert!(dom.contains("class=\"nominal\""), "{dom}");
    assert!(dom.contains("class=\"fill critical\""), "{dom}");
    assert!(dom.contains("<svg class=\"trend\""), "{dom}");
    // The firing alert: summary, the fix in words, and the manifest folded under it.
    assert!(dom.contains("APFRequestsRejected"), "{dom}");
    assert!(dom.contains("class=\"alert firing critical\""), "{dom}");
    assert!(dom.contains("<b>Fix:</b>"), "{dom}");
    assert!(dom.contains("<details>"), "{dom}");
    assert!(dom.contains("kind: FlowSchema"), "{dom}");

    // A phone's width and a desktop's both render.
    let dir = tempfile::tempdir().unwrap();
    for (name, size) in [("desktop.png", "1280,1400"), ("phone.png", "390,1200")] {
        let path = dir.path().join(name);
        let out = external::chromium(
            &format!("{monitor}/"),
            &[
                &format!("--screenshot={}", path.display()),
                &format!("--window-size={size}"),
            ],
        )
        .await;
        let png = std::fs::read(&path).unwrap_or_default();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 10_000,
            "{name}: {} bytes; chromium: {}",
            png.len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
