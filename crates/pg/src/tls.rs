//! TLS set-up: PEM certificate and key files into a rustls server
//! configuration (ring provider).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

/// ALPN protocol name PostgreSQL clients (libpq 17+) offer.
const POSTGRESQL_ALPN: &[u8] = b"postgresql";

/// TLS for the PostgreSQL listener.
#[derive(Clone, Debug)]
pub struct TlsSetup {
    pub server_config: Arc<ServerConfig>,
    /// The certificate chain in PEM, when known: it enables SCRAM channel
    /// binding (`SCRAM-SHA-256-PLUS`, `tls-server-end-point`).
    pub cert_chain_pem: Option<Vec<u8>>,
}

/// A certificate or key that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no PEM certificate found in {0}; expected a file with -----BEGIN CERTIFICATE-----")]
    NoCertificate(String),
    #[error("no PEM private key found in {0}; expected PKCS#8, PKCS#1 or SEC1 (-----BEGIN ... PRIVATE KEY-----)")]
    NoKey(String),
    #[error("certificate and key do not make a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

impl TlsSetup {
    /// TLS from a ready configuration, without channel binding.
    pub fn new(server_config: Arc<ServerConfig>) -> TlsSetup {
        TlsSetup {
            server_config,
            cert_chain_pem: None,
        }
    }

    /// Loads a PEM certificate chain and private key from files.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<TlsSetup, TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TlsError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        Self::build(
            &cert_pem,
            &key_pem,
            &cert.display().to_string(),
            &key.display().to_string(),
        )
    }

    /// Builds TLS from a PEM certificate chain and private key in memory.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsSetup, TlsError> {
        Self::build(cert_pem, key_pem, "the certificate", "the key")
    }

    fn build(
        cert_pem: &[u8],
        key_pem: &[u8],
        cert_name: &str,
        key_name: &str,
    ) -> Result<TlsSetup, TlsError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .filter_map(Result::ok)
            .collect();
        if certs.is_empty() {
            return Err(TlsError::NoCertificate(cert_name.to_string()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|_| TlsError::NoKey(key_name.to_string()))?;
        let mut config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![POSTGRESQL_ALPN.to_vec()];
        Ok(TlsSetup {
            server_config: Arc::new(config),
            cert_chain_pem: Some(cert_pem.to_vec()),
        })
    }
}
