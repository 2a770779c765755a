//! TLS and mutual TLS for RCP1 clients and the server's PEM files (docs/security.md): rustls
//! with the ring provider, TLS 1.2 and 1.3.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// How a client connects over TLS.
#[derive(Debug, Clone, Default)]
pub struct ClientTlsOptions {
    /// PEM file of the CA(s) to trust; `None`: the system bundle (`SSL_CERT_FILE`, else the
    /// usual Debian/Red Hat paths).
    pub ca: Option<PathBuf>,
    /// Client certificate chain and key (PEM), for servers with mutual TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Name to verify the server's certificate against; default: the host part of the address.
    pub server_name: Option<String>,
}

/// System CA bundles tried, in order, when no CA file is given.
const SYSTEM_CA_FILES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The crypto provider of every config this crate builds (ring: no C/C++ toolchain needed).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client config for `opts` (TLS 1.2 and 1.3). Errors name the flag (`--ca`, `--cert`,
/// `--key`).
pub fn client_config(opts: &ClientTlsOptions) -> Result<Arc<ClientConfig>, String> {
    let roots = match &opts.ca {
        Some(ca) => roots("--ca", ca)?,
        None => system_roots()?,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots);
    let config = match (&opts.cert, &opts.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(certs("--cert", cert)?, private_key("--key", key)?)
            .map_err(|e| format!("--key: {e} ({})", key.display()))?,
        _ => return Err("--cert and --key go together".into()),
    };
    Ok(Arc::new(config))
}

/// The name to verify: `opts.server_name`, else the host part of `addr` (`[v6]:port` gives
/// `v6`).
pub fn server_name(opts: &ClientTlsOptions, addr: &str) -> String {
    if let Some(n) = &opts.server_name {
        return n.clone();
    }
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

fn system_roots() -> Result<RootCertStore, String> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let path = from_env
        .into_iter()
        .chain(SYSTEM_CA_FILES.iter().map(PathBuf::from))
        .find(|p| p.is_file())
        .ok_or("no --ca given and no system CA bundle found")?;
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(certs("SSL_CERT_FILE", &path)?);
    Ok(store)
}

/// Reads a file, naming `key` and the path on failure.
fn read(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))
}

/// Every certificate in a PEM file, in file order; at least one.
pub fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| format!("{key}: bad PEM in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{key}: no certificate in {}", path.display()));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => format!("{key}: no private key in {}", path.display()),
        e => format!("{key}: bad PEM in {}: {e}", path.display()),
    })
}

/// A root store holding every certificate of a PEM file (a CA bundle).
pub fn roots(key: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certs(key, path)? {
        store
            .add(cert)
            .map_err(|e| format!("{key}: unusable CA certificate in {}: {e}", path.display()))?;
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_part() {
        let o = ClientTlsOptions::default();
        assert_eq!(server_name(&o, "localhost:7401"), "localhost");
        assert_eq!(server_name(&o, "127.0.0.1:7401"), "127.0.0.1");
        assert_eq!(server_name(&o, "[::1]:7401"), "::1");
        assert_eq!(server_name(&o, "db.example"), "db.example");
    }
}
