//! TLS for the host side (`--tls-cert`, `--tls-key`): rustls on ring, the
//! crypto the rest of hintgate already builds.
//!
//! Handshakes run in tasks of their own, at most [`HANDSHAKES`] at once and
//! each within [`HANDSHAKE_TIMEOUT`], so a client that opens a connection
//! and says nothing holds neither the listener nor anyone else's handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::HttpError;

/// The most TLS handshakes in progress at once.
pub const HANDSHAKES: usize = 256;

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

/// A listener whose connections have finished their TLS handshake.
pub(crate) struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts on `tcp`, handshaking with `tls` in tasks of their own.
    pub(crate) fn new(tcp: TcpListener, tls: Tls) -> std::io::Result<Self> {
        let addr = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let slots = Arc::new(Semaphore::new(HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::debug!("accept failed: {err}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let _ = stream.set_nodelay(true);
                let (acceptor, tx) = (tls.acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(err)) => tracing::debug!("a TLS handshake failed: {err}"),
                        Err(_) => tracing::debug!("a TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { addr, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended: nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
