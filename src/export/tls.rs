//! `web.tls`: HTTPS with a certificate and key from files, read again when either changes (cert-manager and
//! kubelet's Secret volumes replace them in place), so a rotation needs no restart. A pair that cannot be read or
//! does not match keeps the last good one, with a warning.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::Deserialize;

/// `web.tls:`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The certificate chain (PEM), the server's first.
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read web.tls.{key} {path}: {message}")]
    File {
        key: &'static str,
        path: String,
        message: String,
    },
    #[error("web.tls: the key does not fit the certificate or cannot sign: {0}")]
    Key(String),
}

/// When a file was last seen changed: its modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn load(files: &TlsFiles) -> Result<Arc<CertifiedKey>, TlsError> {
    let file_error = |key, path: &Path, message: String| TlsError::File {
        key,
        path: path.display().to_string(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert_file)
        .map_err(|e| file_error("cert_file", &files.cert_file, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error("cert_file", &files.cert_file, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_error(
            "cert_file",
            &files.cert_file,
            "no PEM certificate in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .map_err(|e| file_error("key_file", &files.key_file, e.to_string()))?;
    let provider = ring::default_provider();
    let certified =
        CertifiedKey::from_der(chain, key, &provider).map_err(|e| TlsError::Key(e.to_string()))?;
    Ok(Arc::new(certified))
}

/// The certificate in force, read again when its files change.
#[derive(Debug)]
struct Reloading {
    files: TlsFiles,
    current: Mutex<(Stamp, Stamp, Arc<CertifiedKey>)>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let stamps = (stamp(&self.files.cert_file), stamp(&self.files.key_file));
        if (stamps.0, stamps.1) != (current.0, current.1) {
            match load(&self.files) {
                Ok(key) => {
                    tracing::info!(cert_file = %self.files.cert_file.display(), "web.tls: the certificate changed and is in force");
                    *current = (stamps.0, stamps.1, key);
                }
                // Mid-rotation one file may be new and the other old: the next handshake tries again.
                Err(e) => {
                    tracing::warn!(error = %e, "web.tls: the files changed but do not load; the last good certificate stays")
                }
            }
        }
        Some(current.2.clone())
    }
}

/// The acceptor of `files`, loaded now: files that do not load are an error at start.
pub fn acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let stamps = (stamp(&files.cert_file), stamp(&files.key_file));
    let key = load(files)?;
    let resolver = Reloading {
        files: files.clone(),
        current: Mutex::new((stamps.0, stamps.1, key)),
    };
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Key(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
