//! TLS for `simulate --tls`: a CA made at start (rcgen), a serving certificate per replica signed by it with the
//! names kube-apiserver's certificate carries (`kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
//! `kubernetes.default.svc.cluster.local`, and the replica's own IP), and a listener that hands axum the
//! connections once their handshake is done.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The DNS names of the `kubernetes` Service that every apiserver certificate carries (kubeadm's defaults).
pub const SERVICE_NAMES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];
/// A client that has not finished its handshake by then is dropped, so it holds no task for long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the certificates or the TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot configure TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The cluster's CA: it signs every replica's certificate; clients trust its PEM.
pub struct Pki {
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    pub fn new() -> Result<Self, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "apf-monitor-sim-ca");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params.self_signed(&ca_key)?;
        Ok(Pki { ca, ca_key })
    }

    /// The CA certificate, PEM: what a kubeconfig's certificate-authority-data and a scraper's ca_file hold.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A serving configuration for the replica at `ip`: its own key and a certificate for the Service names and
    /// `ip`. HTTP/1.1 only (ALPN), the one protocol the simulator serves; Go and rustls clients accept that.
    pub fn server_config(&self, ip: IpAddr) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(
            SERVICE_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )?;
        params.subject_alt_names.push(SanType::IpAddress(ip));
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.ca, &self.ca_key)?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        // ring explicitly: the process may not have installed a default provider.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Accepts TCP connections and hands over those whose TLS handshake succeeded. Handshakes run in their own tasks,
/// so a slow or broken client never holds up the others.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let tls = TlsAcceptor::from(config);
        let acceptor = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        tracing::debug!(error = %e, "simulated apiserver: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let tls = tls.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "simulated apiserver: TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "simulated apiserver: TLS handshake timed out")
                        }
                    }
                });
            }
        });
        Ok(TlsListener {
            ready,
            local,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor ended (it only does when aborted): no connection will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_trusting_the_ca_connects_by_ip_and_by_service_name() {
        let pki = Pki::new().unwrap();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let tcp = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let listener = TlsListener::new(tcp, pki.server_config(ip).unwrap()).unwrap();
        let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let ca = reqwest::Certificate::from_pem(pki.ca_pem().as_bytes()).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(ca.clone())
            .tls_built_in_root_certs(false)
            .build()
            .unwrap();
        let body = client
            .get(format!("https://{addr}/healthz"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "ok");
        for name in SERVICE_NAMES {
            let client = reqwest::Client::builder()
                .add_root_certificate(ca.clone())
                .tls_built_in_root_certs(false)
                .resolve(name, addr)
                .build()
                .unwrap();
            let resp = client
                .get(format!("https://{name}:{}/healthz", addr.port()))
                .send()
                .await;
            assert!(resp.is_ok(), "{name}: {resp:?}");
        }
        // A client that does not trust the CA is refused.
        assert!(reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .build()
            .unwrap()
            .get(format!("https://{addr}/healthz"))
            .send()
            .await
            .is_err());
        server.abort();
    }
}
