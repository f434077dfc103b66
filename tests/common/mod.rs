//! Helpers shared by the integration tests.
#![allow(dead_code)]
pub mod external;

use std::io::Read;
use std::time::Duration;

/// A real `/metrics` capture from `tests/fixtures` (gzipped there; see tests/fixtures/SOURCES.md).
pub fn capture(version: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/metrics-v{version}.txt.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap();
    out
}

pub fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The value of one sample in a Prometheus text body: `name{labels...}` with the labels in any order.
pub fn sample_value(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let rest = line.strip_prefix(name)?;
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return None;
            }
            let (label_part, value) = match rest.strip_prefix('{') {
                Some(r) => r.rsplit_once("} ")?,
                None => ("", rest.trim()),
            };
            let all = labels
                .iter()
                .all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\"")));
            all.then(|| value.trim().split(' ').next()?.parse().ok())
                .flatten()
        })
}

/// Polls `f` until it returns Some or `patience` runs out: surfaces are asserted with patience, not sleeps.
pub async fn eventually<T, F, Fut>(patience: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn get_text(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    client.get(url).send().await.ok()?.text().await.ok()
}
