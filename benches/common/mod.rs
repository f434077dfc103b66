//! What the top crate's benches share: the real capture they serve, and a loopback sender of it.

use std::io::Read;

/// The real 1.34 capture (3.4 MB; tests/fixtures, sources in SOURCES.md there).
pub fn capture() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics-v1.34.txt.gz"
    );
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    out
}

/// The capture repeated to about 100 MB: a very large cluster's scrape.
pub fn hundred_mb(one: &[u8]) -> Vec<u8> {
    one.repeat((100 << 20) / one.len() + 1)
}

/// Serves `body` at `/metrics` on a loopback port, from memory; its base URL.
pub async fn sender(body: bytes::Bytes) -> String {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let body = body.clone();
            async move { body }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local_addr: {e}"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}
