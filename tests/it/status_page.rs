//! The status page at `/` in a real headless browser (Debian's `chromium`) while apf-monitor watches a simulated
//! apiserver under a storm: the DOM after load has each level with its headroom bar and trend, and the firing alert
//! with its remediation and manifest; with several alerts firing the first screen holds the levels and the alerts'
//! long texts are folded; the screenshot renders.
use crate::common;

use std::time::Duration;

use crate::common::external;
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

/// Alerts firing when the first screen is measured.
const FIRING: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_levels_bars_and_a_firing_alert_with_its_fix_in_a_browser() {
    let scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(34, 0), scenario)).unwrap();
    let _clock = sim.spawn_clock(Duration::from_millis(100));
    let sim_url = common::serve_sim(&sim).await;
    let config = common::fast_config(&sim_url);
    let monitor = common::start_monitor(&config).await;

    // APFRequestsRejected fires at once (for: 0s) once two scrapes give a rate; the trend needs two points too. Its
    // fix names the flow to isolate (with a manifest) once a request dump showed the flows: on a busy machine the
    // first round may come before that.
    // The first screen is measured with several alerts firing: the levels must not be pushed below them.
    let firing = common::eventually(Duration::from_secs(60), || async {
        let body = common::get_text(&format!("{monitor}/api/v1/status")).await?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let alerts = v["alerts"].as_array()?;
        let rejected = alerts.iter().any(|a| {
            a["state"] == "firing"
                && a["labels"]["alertname"] == "APFRequestsRejected"
                && a["annotations"]["remediation_manifest"].is_string()
        });
        let firing = alerts.iter().filter(|a| a["state"] == "firing").count();
        (rejected && firing >= FIRING).then_some(())
    })
    .await;
    assert!(
        firing.is_some(),
        "no firing APFRequestsRejected among {FIRING} firing alerts"
    );

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
    // The firing alert: summary, and folded under it the fix in words and the manifest.
    assert!(dom.contains("APFRequestsRejected"), "{dom}");
    assert!(dom.contains("class=\"alert firing critical\""), "{dom}");
    assert!(dom.contains("<b>Fix:</b>"), "{dom}");
    assert!(dom.contains("<details>"), "{dom}");
    assert!(dom.contains("kind: FlowSchema"), "{dom}");

    // The first screen of a desktop (800 px high) holds the first replica's levels, under the header that counts
    // the alerts and links to them; the alerts come after, their lines in view and their long texts folded.
    let page = common::get_text(&format!("{monitor}/")).await.unwrap();
    let screen = layout(&page, "1280,800").await;
    let viewport = screen["viewport"].as_f64().unwrap();
    assert!(viewport > 0.0 && viewport <= 800.0, "{screen}");
    let table = screen["firstTable"].as_f64().expect("a replica's table");
    assert!(
        table < viewport,
        "the levels start below the first screen: {screen}"
    );
    assert!(screen["alertsTop"].as_f64().unwrap() > table, "{screen}");
    assert_eq!(screen["jumpToAlerts"], true, "{screen}");
    let folds = screen["folds"].as_array().unwrap();
    assert!(!folds.is_empty(), "{screen}");
    for fold in folds {
        assert_eq!(fold["open"], false, "{screen}");
        assert_eq!(
            fold["shown"], 0,
            "a long text is displayed unfolded: {screen}"
        );
        assert!(fold["lines"].as_u64().unwrap() > 0, "{screen}");
    }
    // The fix and the manifest are there, folded.
    assert!(
        folds.iter().any(|f| f["texts"].as_u64().unwrap() >= 2),
        "{screen}"
    );

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

/// What the browser lays out, measured in the browser: the page's own HTML with a script appended that writes the
/// measures into the DOM, served from loopback and read back with `--dump-dom`.
async fn layout(page_html: &str, window: &str) -> serde_json::Value {
    const MEASURE: &str = r#"<script>
(function () {
  var out = {pageOverflow: document.documentElement.scrollWidth - window.innerWidth, rows: [], tables: [], audit: []};
  document.querySelectorAll('.replicas').forEach(function (grid) {
    var right = grid.getBoundingClientRect().right, rows = {};
    grid.querySelectorAll(':scope > .replica').forEach(function (r) {
      var b = r.getBoundingClientRect(), top = Math.round(b.top);
      rows[top] = Math.max(rows[top] || 0, b.right);
    });
    Object.keys(rows).forEach(function (t) { out.rows.push(right - rows[t]); });
  });
  document.querySelectorAll('.replica .scroll').forEach(function (s) {
    out.tables.push(s.scrollWidth - s.clientWidth);
  });
  document.querySelectorAll('section.audit').forEach(function (s) {
    out.audit.push(s.scrollWidth - s.clientWidth);
  });
  // The first screen: where the first replica's levels start, against the window's height.
  var table = document.querySelector('.replica table'), alerts = document.getElementById('alerts');
  out.viewport = window.innerHeight;
  out.firstTable = table ? table.getBoundingClientRect().top : null;
  out.alertsTop = alerts ? alerts.getBoundingClientRect().top : null;
  out.jumpToAlerts = !!document.querySelector("header a[href='#alerts']");
  // Each alert group's long texts: inside a closed <details>, rendered nowhere until it is opened (then they are);
  // its lines in view.
  var visible = function (t) { return t.checkVisibility() && t.getBoundingClientRect().height > 0; };
  out.folds = [];
  document.querySelectorAll('.alert').forEach(function (a) {
    var d = a.querySelector('details'), texts = a.querySelectorAll('.remediation, pre');
    var count = function () { return Array.prototype.filter.call(texts, visible).length; };
    var fold = {open: d ? d.open : null, texts: texts.length, shown: count()};
    if (d) { d.open = true; fold.shownOpen = count(); d.open = false; }
    fold.lines = Array.prototype.filter.call(a.querySelectorAll('li .summary'), visible).length;
    out.folds.push(fold);
  });
  var pre = document.createElement('pre');
  pre.id = 'layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;
    let html = page_html.replace("</body>", &format!("{MEASURE}</body>"));
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let out = external::chromium(
        &format!("http://{addr}/"),
        &["--dump-dom", &format!("--window-size={window}")],
    )
    .await;
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom
        .split("<pre id=\"layout\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("no measures in the DOM: {dom}"));
    serde_json::from_str(&json.replace("&quot;", "\"")).unwrap()
}

/// Three replicas: at 1,400 px no row of replicas ends in a blank half (the last one fills its row); on a phone
/// (390 px) nothing is wider than the screen, and no replica's table (nor who got 429s, with a long service account
/// name) needs a sideways scroll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_fills_its_rows_on_a_desktop_and_fits_a_phone() {
    let mut config = None;
    let mut sims = Vec::new();
    for seed in 1..=3 {
        let scenario = Scenario::load(&ScenarioSource::Ramp).unwrap();
        let sim = Simulator::try_new(SimOptions {
            seed,
            ..SimOptions::new(KubeVersion::new(34, 0), scenario)
        })
        .unwrap();
        let url = common::serve_sim(&sim).await;
        let c = config.get_or_insert_with(|| common::fast_config(&url));
        let target = apf_monitor::targets::StaticTarget {
            name: Some(format!("replica-{seed}")),
            ..common::sim_target(&url)
        };
        if seed == 1 {
            c.targets.static_targets = vec![target];
        } else {
            c.targets.static_targets.push(target);
        }
        sims.push(sim);
    }
    let monitor = common::start_monitor(&config.unwrap()).await;
    // Who got 429s: kube-apiserver's webhook batch with a long service account and user agent.
    let long =
        "system:serviceaccount:observability-platform-agents:kube-state-metrics-shard-collector";
    let event = format!(
        r#"{{"kind":"Event","stage":"ResponseComplete","verb":"list","user":{{"username":"{long}"}},"userAgent":"kube-state-metrics/v2.13.0 (linux/amd64) kubernetes/0123456789abcdef","objectRef":{{"resource":"pods"}},"responseStatus":{{"code":429}},"stageTimestamp":"2026-11-25T07:00:00.000000Z"}}"#
    );
    let batch = format!(r#"{{"kind":"EventList","items":[{event},{event}]}}"#);
    let page = common::eventually(Duration::from_secs(30), || async {
        // Until the objects are read the requests wait; posting again only adds to them.
        let _ = reqwest::Client::new()
            .post(format!("{monitor}/api/v1/audit"))
            .body(batch.clone())
            .send()
            .await;
        let page = common::get_text(&format!("{monitor}/")).await?;
        (page.matches("class=\"replica\"").count() == 3
            && page.contains("workload-low")
            && page.contains(long))
        .then_some(page)
    })
    .await
    .expect("three replicas on the page");

    let desktop = layout(&page, "1400,1300").await;
    let rows = desktop["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{desktop}");
    for gap in rows {
        assert!(
            gap.as_f64().unwrap().abs() < 2.0,
            "a row ends short: {desktop}"
        );
    }
    let phone = layout(&page, "390,1400").await;
    assert!(phone["pageOverflow"].as_f64().unwrap() <= 0.0, "{phone}");
    let tables = phone["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 3, "{phone}");
    for overflow in tables.iter().chain(phone["audit"].as_array().unwrap()) {
        assert!(
            overflow.as_f64().unwrap() <= 0.0,
            "a table scrolls sideways: {phone}"
        );
    }
    assert_eq!(phone["audit"].as_array().unwrap().len(), 1, "{phone}");
}
