//! TLS for the host side (`--tls-cert`, `--tls-key`): rustls on ring, the
//! crypto the rest of hintgate already builds.
//!
//! Each handshake runs in its connection's own task, within
//! [`HANDSHAKE_TIMEOUT`], and counts as a connection that has not
//! authenticated (`listener`), so a client that opens connections and says
//! nothing holds neither the listener nor anyone else's handshake.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::HttpError;

/// How long a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A certificate chain and its key, ready to serve.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// From a PEM certificate chain (leaf first) and a PEM private key.
    ///
    /// # Errors
    ///
    /// [`HttpError::Tls`] naming what is wrong with them.
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Result<Self, HttpError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<_, _>>()
            .map_err(|err| HttpError::Tls(format!("the certificate file: {err}")))?;
        if certs.is_empty() {
            return Err(HttpError::Tls(
                "the certificate file holds no certificate".to_owned(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|err| HttpError::Tls(format!("the key file: {err}")))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|err| HttpError::Tls(err.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|err| HttpError::Tls(format!("the certificate and key: {err}")))?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

impl Tls {
    /// What handshakes a connection.
    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}
