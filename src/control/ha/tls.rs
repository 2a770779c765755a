//! How the HA thread reaches etcd: endpoint URLs and TLS (`ha.etcd_*`, docs/ha.md).

use etcd_client::{Certificate, Identity, TlsOptions};

use super::error::HaError;
use crate::config::ha::Ha;

/// `ha.etcd_endpoints` as URLs: a bare `host:port` gets `https://` when TLS is configured,
/// else `http://`.
pub fn endpoints(cfg: &Ha) -> Vec<String> {
    let scheme = match cfg.etcd_ca_path.is_some() || cfg.etcd_cert_path.is_some() {
        true => "https://",
        false => "http://",
    };
    cfg.etcd_endpoints
        .iter()
        .map(
            |e| match e.starts_with("http://") || e.starts_with("https://") {
                true => e.clone(),
                false => format!("{scheme}{e}"),
            },
        )
        .collect()
}

/// TLS options when `ha.etcd_ca_path` or a client certificate is set.
pub fn options(cfg: &Ha) -> Result<Option<TlsOptions>, HaError> {
    if cfg.etcd_ca_path.is_none() && cfg.etcd_cert_path.is_none() {
        return Ok(None);
    }
    let read = |key: &'static str, p: &std::path::Path| {
        std::fs::read(p).map_err(|source| HaError::ReadFile {
            key,
            path: p.to_path_buf(),
            source,
        })
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &cfg.etcd_ca_path {
        tls = tls.ca_certificate(Certificate::from_pem(read("ha.etcd_ca_path", ca)?));
    }
    if let (Some(cert), Some(key)) = (&cfg.etcd_cert_path, &cfg.etcd_key_path) {
        let cert = read("ha.etcd_cert_path", cert)?;
        let key = read("ha.etcd_key_path", key)?;
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(Some(tls))
}

#[cfg(test)]
mod tests {
    #[test]
    fn bare_endpoints_get_a_scheme() {
        let mut cfg = super::Ha {
            etcd_endpoints: vec!["127.0.0.1:2379".into(), "https://e:1".into()],
            ..Default::default()
        };
        assert_eq!(
            super::endpoints(&cfg),
            ["http://127.0.0.1:2379", "https://e:1"]
        );
        cfg.etcd_ca_path = Some("/ca.pem".into());
        assert_eq!(super::endpoints(&cfg)[0], "https://127.0.0.1:2379");
    }
}
