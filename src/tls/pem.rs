//! PEM files to rustls types, with errors that name the config key (or command-line flag) the
//! path came from, e.g. `tls.key_path: no private key in /x.pem`.

use std::path::Path;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

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
