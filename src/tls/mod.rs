//! TLS for the client port (docs/protocol.md, "Session ops"): rustls 0.23 with the `ring` provider, TLS 1.2 and
//! 1.3, optional mutual TLS. One entry point for the server, `ServerTls`: `load` builds it from
//! the `tls` config section (cheap, so a reload can build a fresh one), `accept` runs one
//! connection's handshake inside that connection's task, bounded in time.
//!
//! The client side (`client_config`) lives in `smdb_protocol::tls`, re-exported here.

pub mod pem;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncWrite};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

pub use futures_rustls::server::TlsStream;

/// Longest a client may take to complete its handshake unless `tls.handshake_timeout_ms`
/// says otherwise; a slow or silent client is then closed (it never blocks others anyway).
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The one crypto provider (ring: no C++/cmake build like aws-lc-sys), also installed as the
/// process default once so any rustls builder without an explicit provider agrees.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            let p = Arc::new(rustls::crypto::ring::default_provider());
            // Err only when another provider was installed first; ours is still used
            // explicitly by every config this crate builds.
            let _ = CryptoProvider::install_default((*p).clone());
            p
        })
        .clone()
}

/// The server side of TLS, ready to accept connections. Cloning shares the config.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    handshake_timeout: Duration,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads and checks the certificate, key and (for mutual TLS) client CA files named by the
    /// `tls` section. `None` when `tls.enabled` is false. Errors name the config key.
    pub fn load(cfg: &crate::config::Tls) -> Result<Option<ServerTls>, String> {
        if !cfg.enabled {
            return Ok(None);
        }
        let cert_path = required("tls.cert_path", &cfg.cert_path)?;
        let key_path = required("tls.key_path", &cfg.key_path)?;
        let certs = pem::certs("tls.cert_path", cert_path)?;
        let key = pem::private_key("tls.key_path", key_path)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .map_err(|e| format!("tls: {e}"))?;
        let builder = match &cfg.client_ca_path {
            None => builder.with_no_client_auth(),
            Some(ca) => builder.with_client_cert_verifier(client_verifier(ca)?),
        };
        let config = builder
            .with_single_cert(certs, key)
            .map_err(|e| format!("tls.key_path: {e} ({})", key_path.display()))?;
        Ok(Some(ServerTls {
            config: Arc::new(config),
            handshake_timeout: Duration::from_millis(cfg.handshake_timeout_ms),
        }))
    }

    /// Runs the server handshake on `stream`, giving up after the handshake timeout. Runs in
    /// the connection's own task, so a slow client delays nobody else.
    pub async fn accept<S>(&self, stream: S) -> io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let handshake = futures_rustls::TlsAcceptor::from(self.config.clone()).accept(stream);
        let limit = self.handshake_timeout;
        let expired = async move {
            glommio::timer::sleep(limit).await;
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS handshake not done within {limit:?}"),
            ))
        };
        futures_lite::future::or(handshake, expired).await
    }

    /// The rustls server config (for in-memory use, e.g. the fuzz target).
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }
}

fn required<'a>(key: &str, path: &'a Option<PathBuf>) -> Result<&'a Path, String> {
    path.as_deref()
        .ok_or_else(|| format!("{key} must be set when tls.enabled is true"))
}

/// Mutual TLS: a client must present a certificate chaining to a CA in `path`.
fn client_verifier(
    path: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let roots = pem::roots("tls.client_ca_path", path)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| format!("tls.client_ca_path: {e} ({})", path.display()))
}

/// The client side of TLS lives in the `smdb-client` crate; re-exported under the old paths.
pub use smdb_protocol::tls::{client_config, ClientTlsOptions};
