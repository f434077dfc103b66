//! The HTTP server of the API, with its limits: at most [`MAX_CONNECTIONS`] connections at once (the next ones wait
//! in the kernel's backlog), request headers read within [`HEADER_READ_TIMEOUT`] (a client that sends them byte by
//! byte is cut off), bodies of at most [`MAX_BODY`], and TLS handshakes within [`HANDSHAKE_TIMEOUT`]. With
//! `web.tls` it speaks HTTPS only, its certificate re-read when the files change ([`super::tls`]). A stop lets open
//! requests finish.
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Time to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to finish a TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request body (a silence is a few hundred bytes).
pub const MAX_BODY: usize = 64 * 1024;

/// Serves `app` on `listener` (over TLS with `tls`) until `stop` is cancelled, then waits for the open requests.
pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    stop: CancellationToken,
) {
    let app = app.layer(axum::extract::DefaultBodyLimit::max(MAX_BODY));
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.cancelled() => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let app = app.clone();
        let tls = tls.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let _permit = permit;
            match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => connection(stream, app, stop).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => connection(tcp, app, stop).await,
            }
        });
    }
    connections.close();
    connections.wait().await;
}

async fn connection<S>(stream: S, app: Router, stop: CancellationToken)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let service = TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
        }
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
