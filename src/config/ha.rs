//! The `[ha]` section (docs/ha.md, "Configuration"): automatic failover on etcd. Checked once
//! at start-up with the rest of the config; a bad value exits 78 naming the key.

use std::path::PathBuf;

use serde::Deserialize;

use crate::config::ConfigError;

/// Default `ha.ttl_ms`: the leader lease (etcd grants whole seconds).
const TTL_MS_DEFAULT: u64 = 3000;
/// Default `ha.safety_margin_ms`: the primary stops acknowledging this long before its lease
/// could expire in etcd.
const SAFETY_MARGIN_MS_DEFAULT: u64 = 500;
/// Default `ha.maximum_lag_on_failover` (entries summed over shards).
const MAXIMUM_LAG_DEFAULT: u64 = 10_000;
/// Longest `ha.node_id`.
const NODE_ID_BYTES_MAX: usize = 64;
/// Longest `ha.ttl_ms`: a lease longer than a minute is no failover worth the name.
const TTL_MS_MAX: u64 = 60_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Ha {
    pub enabled: bool,
    pub etcd_endpoints: Vec<String>,
    pub etcd_ca_path: Option<PathBuf>,
    pub etcd_cert_path: Option<PathBuf>,
    pub etcd_key_path: Option<PathBuf>,
    pub etcd_username: Option<String>,
    pub etcd_password: Option<String>,
    pub cluster: String,
    pub node_id: Option<String>,
    pub advertise_addr: Option<String>,
    pub ttl_ms: u64,
    pub safety_margin_ms: u64,
    pub maximum_lag_on_failover: u64,
    pub nofailover: bool,
}

impl Default for Ha {
    fn default() -> Self {
        Ha {
            enabled: false,
            etcd_endpoints: vec!["127.0.0.1:2379".into()],
            etcd_ca_path: None,
            etcd_cert_path: None,
            etcd_key_path: None,
            etcd_username: None,
            etcd_password: None,
            cluster: "smdb".into(),
            node_id: None,
            advertise_addr: None,
            ttl_ms: TTL_MS_DEFAULT,
            safety_margin_ms: SAFETY_MARGIN_MS_DEFAULT,
            maximum_lag_on_failover: MAXIMUM_LAG_DEFAULT,
            nofailover: false,
        }
    }
}

fn err<T>(m: String) -> Result<T, ConfigError> {
    Err(ConfigError(m))
}

/// `[A-Za-z0-9._-]`, 1 to `max` bytes.
fn is_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Ha {
    /// Checks the section against the rest of the config (`bind_addr`, `replication`).
    pub fn validate(
        &self,
        bind_addr: &str,
        repl: &crate::config::Replication,
    ) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        match self.node_id.as_deref() {
            None => return err("ha.node_id is required when ha.enabled = true".into()),
            Some(id) if !is_name(id, NODE_ID_BYTES_MAX) => {
                return err(format!(
                    "ha.node_id must be 1-{NODE_ID_BYTES_MAX} of [A-Za-z0-9._-] (got {id:?})"
                ))
            }
            Some(_) => {}
        }
        if !is_name(&self.cluster, NODE_ID_BYTES_MAX) {
            return err(format!(
                "ha.cluster must be 1-{NODE_ID_BYTES_MAX} of [A-Za-z0-9._-] (got {:?})",
                self.cluster
            ));
        }
        self.validate_endpoints()?;
        if self.ttl_ms < 1000 || self.ttl_ms % 1000 != 0 || self.ttl_ms > TTL_MS_MAX {
            return err(format!(
                "ha.ttl_ms must be a multiple of 1000 in 1000..={TTL_MS_MAX} (etcd grants whole \
                 seconds; got {})",
                self.ttl_ms
            ));
        }
        if self.safety_margin_ms * 2 >= self.ttl_ms {
            return err(format!(
                "ha.safety_margin_ms must be less than half of ha.ttl_ms (got {} with ttl_ms {})",
                self.safety_margin_ms, self.ttl_ms
            ));
        }
        self.validate_tls()?;
        if self.etcd_username.is_some() != self.etcd_password.is_some() {
            return err("ha.etcd_username and ha.etcd_password go together".into());
        }
        if repl.role.is_some() {
            return err("replication.role must be unset when ha.enabled (etcd decides)".into());
        }
        if repl.upstream.is_some() {
            return err("replication.upstream must be unset when ha.enabled (etcd decides)".into());
        }
        self.validate_advertise(bind_addr)
    }

    fn validate_endpoints(&self) -> Result<(), ConfigError> {
        if self.etcd_endpoints.is_empty() {
            return err("ha.etcd_endpoints must name at least one etcd member".into());
        }
        for (i, e) in self.etcd_endpoints.iter().enumerate() {
            let rest = e
                .strip_prefix("http://")
                .or_else(|| e.strip_prefix("https://"))
                .unwrap_or(e);
            let port_ok = rest
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
            if !port_ok || rest.contains('/') {
                return err(format!(
                    "ha.etcd_endpoints[{i}]: {e:?} is not host:port or http(s)://host:port"
                ));
            }
        }
        Ok(())
    }

    fn validate_tls(&self) -> Result<(), ConfigError> {
        if self.etcd_cert_path.is_some() != self.etcd_key_path.is_some() {
            return err("ha.etcd_cert_path and ha.etcd_key_path go together".into());
        }
        let files = [
            ("ha.etcd_ca_path", &self.etcd_ca_path),
            ("ha.etcd_cert_path", &self.etcd_cert_path),
            ("ha.etcd_key_path", &self.etcd_key_path),
        ];
        for (key, path) in files {
            if let Some(p) = path {
                if let Err(e) = std::fs::metadata(p) {
                    return err(format!("{key}: {}: {e}", p.display()));
                }
            }
        }
        Ok(())
    }

    /// The advertised address must be a concrete `host:port` (default `network.bind_addr`,
    /// which then must not bind all interfaces).
    fn validate_advertise(&self, bind_addr: &str) -> Result<(), ConfigError> {
        let (key, addr) = match &self.advertise_addr {
            Some(a) => ("ha.advertise_addr", a.as_str()),
            None => ("network.bind_addr", bind_addr),
        };
        let host = addr.rsplit_once(':').map(|(h, _)| h);
        let port = addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok());
        match (host, port) {
            (Some(h), Some(_)) if !h.is_empty() => {}
            _ => return err(format!("{key}: {addr:?} is not host:port")),
        }
        if matches!(host, Some("0.0.0.0" | "[::]" | "::")) {
            return err(format!(
                "ha.advertise_addr is required when network.bind_addr binds all interfaces \
                 ({bind_addr})"
            ));
        }
        if self.advertise_addr.is_some() && port == Some(0) {
            return err("ha.advertise_addr needs a port other than 0".into());
        }
        Ok(())
    }

    /// The lease TTL in whole seconds (validated: a multiple of 1000 ms).
    pub fn ttl_secs(&self) -> i64 {
        (self.ttl_ms / 1000) as i64
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn bad(extra: &str) -> String {
        // A test of `node_id` itself replaces the valid one (TOML refuses a key twice).
        let id = match extra.starts_with("node_id") {
            true => "",
            false => "node_id = \"a\"\n",
        };
        let text = format!("[ha]\nenabled = true\n{id}{extra}");
        match Config::from_toml(&text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn defaults_are_off_and_valid() {
        let c = Config::from_toml("").unwrap();
        assert!(!c.ha.enabled);
        assert_eq!(c.ha.ttl_ms, 3000);
        assert_eq!(c.ha.cluster, "smdb");
        let on = Config::from_toml("[ha]\nenabled = true\nnode_id = \"n-1.a_b\"\n").unwrap();
        assert_eq!(on.ha.ttl_secs(), 3);
    }

    #[test]
    fn bad_values_name_their_key() {
        assert!(Config::from_toml("[ha]\nenabled = true\n")
            .unwrap_err()
            .0
            .contains("ha.node_id"));
        assert!(bad("node_id = \"a b\"").contains("ha.node_id"));
        assert!(bad(&format!("node_id = \"{}\"", "x".repeat(65))).contains("ha.node_id"));
        assert!(bad("ttl_ms = 2500").contains("ha.ttl_ms"));
        assert!(bad("ttl_ms = 0").contains("ha.ttl_ms"));
        assert!(bad("safety_margin_ms = 1500").contains("ha.safety_margin_ms"));
        assert!(bad("etcd_endpoints = []").contains("ha.etcd_endpoints"));
        assert!(bad("etcd_endpoints = [\"nohost\"]").contains("ha.etcd_endpoints[0]"));
        assert!(bad("etcd_ca_path = \"/nonexistent/ca.pem\"").contains("ha.etcd_ca_path"));
        assert!(bad("etcd_username = \"u\"").contains("ha.etcd_username"));
        assert!(bad("cluster = \"a/b\"").contains("ha.cluster"));
        assert!(bad("frobnicate = 1").contains("frobnicate"));
        let all =
            "[network]\nbind_addr = \"0.0.0.0:7401\"\n[ha]\nenabled = true\nnode_id = \"a\"\n";
        assert!(Config::from_toml(all)
            .unwrap_err()
            .0
            .contains("ha.advertise_addr"));
        let role = "[replication]\nrole = \"primary\"\n[ha]\nenabled = true\nnode_id = \"a\"\n";
        assert!(Config::from_toml(role)
            .unwrap_err()
            .0
            .contains("replication.role"));
    }
}
