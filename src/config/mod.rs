//! Server configuration (docs/protocol.md, "Configuration"): TOML, every key optional, unknown keys rejected.
//!
//! Defaults are embedded, so `smdb-server` with no `--config` serves on 127.0.0.1:7401 with
//! `./data`. Validation happens once at start-up; a bad config exits with code 78 (EX_CONFIG).

pub mod cluster;
pub mod ha;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use serde::Deserialize;

use crate::protocol::frame::FRAME_PAYLOAD_BYTES_DEFAULT;

/// The process exit code for a configuration error (sysexits.h EX_CONFIG).
pub const EXIT_CONFIG: i32 = 78;

/// Smallest accepted `network.max_frame_bytes`: every response must fit, including errors.
const FRAME_PAYLOAD_BYTES_MIN: u32 = 4096;
/// Largest shard count: a sanity bound on executors and channel pairs per process.
const SHARDS_COUNT_MAX: u32 = 256;
/// Largest `network.max_inflight_per_connection`: bounds one connection's pending responses.
const INFLIGHT_PER_CONNECTION_MAX: u32 = 65_536;
/// Largest `subscriptions.queue_max`: bounds the pushes one subscription may hold in memory.
const SUBSCRIPTION_QUEUE_MAX: u32 = 1 << 20;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub network: Network,
    pub shards: Shards,
    pub storage: Storage,
    pub metrics: Metrics,
    pub logging: Logging,
    pub auth: Auth,
    pub tls: Tls,
    pub replication: Replication,
    pub subscriptions: Subscriptions,
    pub http: Http,
    /// Automatic failover on etcd (docs/ha.md).
    pub ha: crate::config::ha::Ha,
    /// Cluster mode: HA groups splitting the hash slots (docs/cluster.md).
    pub cluster: crate::config::cluster::Cluster,
    /// Sync replication timeout (docs/protocol.md puts this key at the top level).
    pub sync_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    pub bind_addr: String,
    pub max_connections: u32,
    /// Unset: the default (16 MiB), lowered to what one log record holds when
    /// `storage.segment_bytes` is small; read it through `Config::max_frame_bytes`.
    pub max_frame_bytes: Option<u32>,
    /// A connection with no complete request for this long is closed. 0 disables.
    pub idle_timeout_secs: u64,
    /// Front executors that accept connections and route requests.
    pub acceptor_cores: u32,
    /// Each shard's executor also accepts and serves connections (one front per shard, on the
    /// shard's own core: no separate front executors). docs/architecture.md, "Placement".
    pub fronts_on_shards: bool,
    /// Requests one connection may have outstanding; the server stops reading that socket
    /// until responses drain (backpressure, not an error).
    pub max_inflight_per_connection: u32,
    /// Every connection starts with a PROXY protocol header (v1 or v2) naming the client.
    pub proxy_protocol: bool,
    /// SIGTERM: how long the server keeps serving (with `/health` at 503) before it stops
    /// accepting and drains.
    pub drain_grace_ms: u64,
    /// SIGTERM: the longest the whole drain (grace included) may take.
    pub drain_timeout_ms: u64,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            bind_addr: "127.0.0.1:7401".into(),
            max_connections: 1024,
            max_frame_bytes: None,
            idle_timeout_secs: 300,
            acceptor_cores: 1,
            fronts_on_shards: false,
            max_inflight_per_connection: 1024,
            proxy_protocol: false,
            drain_grace_ms: 0,
            drain_timeout_ms: 10_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Shards {
    /// Number of shard executors; default: cores minus one, at least 1.
    pub count: Option<u32>,
    /// CPU ids to pin shard executors to, one per shard.
    pub cores: Option<Vec<usize>>,
    /// Bytes of io_uring registered buffer memory per executor. Each executor registers it in
    /// three rings, so a non-root service needs LimitMEMLOCK >= executors x 3 x this (tuning/).
    pub io_memory_bytes: usize,
}

impl Default for Shards {
    fn default() -> Self {
        Shards {
            count: None,
            cores: None,
            io_memory_bytes: 2 << 20,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncMode {
    Always,
    Interval,
    Never,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    pub data_dir: PathBuf,
    pub segment_bytes: u64,
    pub fsync: FsyncMode,
    pub fsync_interval_ms: u64,
    /// Log bytes kept behind the newest snapshot for subscription replay and replicas.
    pub retain_bytes: u64,
    /// Directory of machine definition files loaded at start-up.
    pub definitions_dir: Option<PathBuf>,
    /// A shard writes a snapshot after this many log entries since its last one.
    pub snapshot_every_entries: u64,
    /// Bytes kept free on the data dir's filesystem for the log: snapshots stop short of them
    /// (docs/wal.md "A full disk"). Unset: one segment plus its spare.
    pub reserve_bytes: Option<u64>,
    /// Where every closed log segment is copied (docs/backup.md "The archive").
    /// Unset: no archive.
    pub archive_dir: Option<PathBuf>,
    /// Close a segment that has held entries this long, so it is archived (unset: off).
    pub archive_timeout_ms: Option<u64>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            data_dir: PathBuf::from("./data"),
            segment_bytes: 64 << 20,
            fsync: FsyncMode::Always,
            fsync_interval_ms: 10,
            retain_bytes: 256 << 20,
            definitions_dir: None,
            snapshot_every_entries: 1_000_000,
            reserve_bytes: None,
            archive_dir: None,
            archive_timeout_ms: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    pub enabled: bool,
    pub bind_addr: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            enabled: true,
            bind_addr: "127.0.0.1:9090".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Logging {
    pub format: LogFormat,
    pub level: String,
    pub slow_request_ms: u64,
}

impl Default for Logging {
    fn default() -> Self {
        Logging {
            format: LogFormat::Text,
            level: "info".into(),
            slow_request_ms: 100,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Auth {
    pub required: bool,
    /// SHA-256 hex digests of accepted bearer tokens (every scope).
    pub token_hashes: Vec<String>,
    /// Named tokens with their scopes (`[[auth.tokens]]`).
    pub tokens: Vec<NamedToken>,
}

/// One `[[auth.tokens]]` entry: a token's name, its SHA-256 hex digest and its scopes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedToken {
    pub name: String,
    pub sha256: String,
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tls {
    pub enabled: bool,
    pub cert_path: Option<PathBuf>,
    pub key_path: Option<PathBuf>,
    pub client_ca_path: Option<PathBuf>,
    /// A client that has not finished its TLS handshake by then is closed.
    pub handshake_timeout_ms: u64,
}

impl Default for Tls {
    fn default() -> Self {
        Tls {
            enabled: false,
            cert_path: None,
            key_path: None,
            client_ca_path: None,
            handshake_timeout_ms: crate::tls::TLS_HANDSHAKE_TIMEOUT.as_millis() as u64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Primary,
    Replica,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationMode {
    Async,
    Sync,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Replication {
    pub role: Option<Role>,
    pub mode: ReplicationMode,
    pub upstream: Option<String>,
    pub sync_replicas: u32,
    pub sync_timeout_ms: Option<u64>,
    pub replica_id: Option<String>,
    pub auth_token: Option<String>,
    pub token_hashes: Vec<String>,
    pub fanout_max: u32,
    pub heartbeat_ms: u64,
    pub reconnect_max_ms: u64,
    /// TLS on the replica's link to its primary: the CA that signs the primary's certificate
    /// (setting it turns TLS on), the name to check in it, and a client certificate and key
    /// for a primary that asks for one (mutual TLS).
    pub tls_ca_path: Option<PathBuf>,
    pub tls_server_name: Option<String>,
    pub tls_cert_path: Option<PathBuf>,
    pub tls_key_path: Option<PathBuf>,
}

impl Default for Replication {
    fn default() -> Self {
        Replication {
            role: None,
            mode: ReplicationMode::Async,
            upstream: None,
            sync_replicas: 1,
            sync_timeout_ms: None,
            replica_id: None,
            auth_token: None,
            token_hashes: Vec::new(),
            fanout_max: 4096,
            heartbeat_ms: 1000,
            reconnect_max_ms: 30_000,
            tls_ca_path: None,
            tls_server_name: None,
            tls_cert_path: None,
            tls_key_path: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Subscriptions {
    /// Pushes one subscription may have queued before it is ended with a lag notice.
    pub queue_max: u32,
}

impl Default for Subscriptions {
    fn default() -> Self {
        Subscriptions { queue_max: 4096 }
    }
}

/// `[http]`: the HTTP API and console listener (docs/http.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http {
    pub enabled: bool,
    pub bind_addr: String,
    /// HTTP connections open at once across fronts (event streams included); more get 503.
    pub max_connections: u32,
    /// Serve the web console at `/` (the API is served either way).
    pub console: bool,
    /// `Host` values accepted besides the bound address (DNS rebinding guard), `host` or
    /// `host:port`.
    pub allowed_hosts: Vec<String>,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            enabled: true,
            bind_addr: "127.0.0.1:7480".into(),
            max_connections: 1024,
            console: true,
            allowed_hosts: Vec::new(),
        }
    }
}

/// Longest `http.allowed_hosts` entry (a DNS name is at most 253 bytes, plus `:port`).
const ALLOWED_HOST_BYTES_MAX: usize = 260;

impl Http {
    fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        resolve_addr("http.bind_addr", &self.bind_addr)?;
        if self.max_connections == 0 {
            return Err(ConfigError("http.max_connections must be >= 1".into()));
        }
        for (i, h) in self.allowed_hosts.iter().enumerate() {
            let ok = !h.is_empty()
                && h.len() <= ALLOWED_HOST_BYTES_MAX
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b));
            if !ok {
                return Err(ConfigError(format!(
                    "http.allowed_hosts[{i}]: {:?} is not a host or host:port",
                    smdb_protocol::codes::quote(h)
                )));
            }
        }
        Ok(())
    }
}

/// A configuration problem, reported as one line.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Config {
    /// Parses TOML text and validates it.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].lines().count().max(1);
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            ConfigError(format!("{}{at}", e.message().trim()))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a config file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        Config::from_toml(&text).map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))
    }

    /// The sync replication timeout: top-level key first, then `replication.sync_timeout_ms`.
    pub fn sync_timeout_ms(&self) -> u64 {
        self.sync_timeout_ms
            .or(self.replication.sync_timeout_ms)
            .unwrap_or(5000)
    }

    /// The request frame limit in force: `network.max_frame_bytes`, else the default lowered
    /// to what one log record holds with these segments (`crate::limits`).
    pub fn max_frame_bytes(&self) -> u32 {
        self.network.max_frame_bytes.unwrap_or_else(|| {
            let record = crate::limits::record_bytes_max(self.storage.segment_bytes);
            FRAME_PAYLOAD_BYTES_DEFAULT.min(record)
        })
    }

    /// Shard count: configured, else cores minus one (at least 1).
    pub fn shard_count(&self, cpus: usize) -> u32 {
        self.shards
            .count
            .unwrap_or_else(|| (cpus.saturating_sub(1)).max(1) as u32)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        resolve_addr("network.bind_addr", &self.network.bind_addr)?;
        if self.metrics.enabled {
            resolve_addr("metrics.bind_addr", &self.metrics.bind_addr)?;
        }
        if let Some(max) = self.network.max_frame_bytes {
            if max < FRAME_PAYLOAD_BYTES_MIN {
                return err(format!(
                    "network.max_frame_bytes must be >= {FRAME_PAYLOAD_BYTES_MIN}"
                ));
            }
            crate::limits::check_max_frame_bytes(max, self.storage.segment_bytes)
                .map_err(ConfigError)?;
        }
        if self.network.max_connections == 0 {
            return err("network.max_connections must be >= 1".into());
        }
        if self.network.drain_grace_ms > self.network.drain_timeout_ms {
            return err("network.drain_grace_ms must be <= network.drain_timeout_ms".into());
        }
        if self.network.acceptor_cores == 0 {
            return err("network.acceptor_cores must be >= 1".into());
        }
        if self.network.fronts_on_shards && self.network.acceptor_cores != 1 {
            return err(
                "network.acceptor_cores counts separate front executors; with \
                 network.fronts_on_shards = true every shard serves connections itself: \
                 leave acceptor_cores unset"
                    .into(),
            );
        }
        let inflight = self.network.max_inflight_per_connection;
        if inflight == 0 || inflight > INFLIGHT_PER_CONNECTION_MAX {
            return err(format!(
                "network.max_inflight_per_connection must be in 1..={INFLIGHT_PER_CONNECTION_MAX}"
            ));
        }
        self.validate_shards()?;
        self.validate_storage()?;
        self.http.validate()?;
        let queue = self.subscriptions.queue_max;
        if queue == 0 || queue > SUBSCRIPTION_QUEUE_MAX {
            return err(format!(
                "subscriptions.queue_max must be in 1..={SUBSCRIPTION_QUEUE_MAX}"
            ));
        }
        if !matches!(
            self.logging.level.as_str(),
            "error" | "warn" | "info" | "debug" | "trace"
        ) {
            return err(format!(
                "logging.level must be one of error, warn, info, debug, trace (got {:?})",
                self.logging.level
            ));
        }
        crate::auth::Table::from_config(self).map_err(ConfigError)?;
        self.ha
            .validate(&self.network.bind_addr, &self.replication)?;
        self.cluster.validate(self.ha.enabled)?;
        if self.replication.role == Some(Role::Replica) && self.replication.upstream.is_none() {
            return err("replication.role = \"replica\" needs replication.upstream".into());
        }
        self.validate_tls()
    }

    /// With `tls.enabled`, the certificate and key files must exist and load (so a bad file
    /// exits 78 at start-up, naming the key).
    fn validate_tls(&self) -> Result<(), ConfigError> {
        if self.tls.handshake_timeout_ms == 0 {
            return Err(ConfigError("tls.handshake_timeout_ms must be >= 1".into()));
        }
        crate::tls::ServerTls::load(&self.tls)
            .map(drop)
            .map_err(ConfigError)
    }

    fn validate_shards(&self) -> Result<(), ConfigError> {
        if let Some(n) = self.shards.count {
            if n == 0 || n > SHARDS_COUNT_MAX {
                return Err(ConfigError(format!(
                    "shards.count must be in 1..={SHARDS_COUNT_MAX}"
                )));
            }
        }
        if let (Some(cores), Some(n)) = (&self.shards.cores, self.shards.count) {
            if cores.len() != n as usize {
                return Err(ConfigError(format!(
                    "shards.cores lists {} cores but shards.count is {n}",
                    cores.len()
                )));
            }
        }
        if self.shards.io_memory_bytes < (512 << 10) {
            return Err(ConfigError(
                "shards.io_memory_bytes must be >= 524288".into(),
            ));
        }
        Ok(())
    }

    fn validate_storage(&self) -> Result<(), ConfigError> {
        if self.storage.segment_bytes < (1 << 20) {
            return Err(ConfigError(
                "storage.segment_bytes must be >= 1048576".into(),
            ));
        }
        if self.storage.fsync == FsyncMode::Interval && self.storage.fsync_interval_ms == 0 {
            return Err(ConfigError("storage.fsync_interval_ms must be >= 1".into()));
        }
        if self.storage.archive_timeout_ms == Some(0) {
            return Err(ConfigError(
                "storage.archive_timeout_ms must be >= 1".into(),
            ));
        }
        if self.storage.archive_timeout_ms.is_some() && self.storage.archive_dir.is_none() {
            return Err(ConfigError(
                "storage.archive_timeout_ms needs storage.archive_dir".into(),
            ));
        }
        if self.storage.snapshot_every_entries == 0 {
            return Err(ConfigError(
                "storage.snapshot_every_entries must be >= 1".into(),
            ));
        }
        Ok(())
    }
}

/// Resolves `host:port` to the first socket address, naming the key on failure.
pub fn resolve_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| ConfigError(format!("{key}: cannot resolve {value:?} as host:port")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_gives_contract_defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.network.bind_addr, "127.0.0.1:7401");
        assert_eq!(c.network.max_connections, 1024);
        assert_eq!(c.storage.data_dir, PathBuf::from("./data"));
        assert_eq!(c.storage.fsync, FsyncMode::Always);
        assert!(c.metrics.enabled);
        assert_eq!(c.sync_timeout_ms(), 5000);
        assert_eq!(c.shard_count(2), 1);
        assert_eq!(c.shard_count(8), 7);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Config::from_toml("[network]\nbind_adr = \"x\"\n").unwrap_err();
        assert!(e.0.contains("bind_adr"), "{}", e.0);
        let e = Config::from_toml("bogus = 1\n").unwrap_err();
        assert!(e.0.contains("bogus"), "{}", e.0);
    }

    #[test]
    fn sync_timeout_accepted_at_top_level_and_under_replication() {
        assert_eq!(
            Config::from_toml("sync_timeout_ms = 7")
                .unwrap()
                .sync_timeout_ms(),
            7
        );
        let c = Config::from_toml("[replication]\nsync_timeout_ms = 9").unwrap();
        assert_eq!(c.sync_timeout_ms(), 9);
    }

    #[test]
    fn archive_keys_parse_and_the_timeout_needs_a_dir() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(
            (c.storage.archive_dir, c.storage.archive_timeout_ms),
            (None, None)
        );
        let c =
            Config::from_toml("[storage]\narchive_dir = \"/a\"\narchive_timeout_ms = 500").unwrap();
        assert_eq!(c.storage.archive_dir, Some(PathBuf::from("/a")));
        assert_eq!(c.storage.archive_timeout_ms, Some(500));
        let e = Config::from_toml("[storage]\narchive_timeout_ms = 500").unwrap_err();
        assert!(e.0.contains("storage.archive_dir"), "{}", e.0);
        let zero = "[storage]\narchive_dir = \"/a\"\narchive_timeout_ms = 0";
        let e = Config::from_toml(zero).unwrap_err();
        assert!(e.0.contains("storage.archive_timeout_ms"), "{}", e.0);
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(Config::from_toml("[logging]\nlevel = \"loud\"").is_err());
        assert!(Config::from_toml("[storage]\nfsync = \"sometimes\"").is_err());
        assert!(Config::from_toml("[shards]\ncount = 0").is_err());
        assert!(Config::from_toml("[shards]\ncount = 2\ncores = [1]").is_err());
        assert!(Config::from_toml("[replication]\nrole = \"replica\"").is_err());
    }

    #[test]
    fn http_defaults_and_bad_values_name_the_key() {
        let c = Config::from_toml("").unwrap();
        assert!(c.http.enabled && c.http.console);
        assert_eq!(c.http.bind_addr, "127.0.0.1:7480");
        assert_eq!(c.http.max_connections, 1024);
        let cases = [
            ("[http]\nbind_addr = \"nowhere\"", "http.bind_addr"),
            ("[http]\nmax_connections = 0", "http.max_connections"),
            ("[http]\nallowed_hosts = [\"a b\"]", "http.allowed_hosts[0]"),
            ("[http]\nallowed_hosts = [\"\"]", "http.allowed_hosts[0]"),
            ("[http]\nport = 1", "port"),
        ];
        for (text, key) in cases {
            let e = Config::from_toml(text).unwrap_err();
            assert!(e.0.contains(key), "{text}: {}", e.0);
        }
        let c = Config::from_toml("[http]\nenabled = false\nbind_addr = \"nowhere\"").unwrap();
        assert!(!c.http.enabled);
        let hosts = "[http]\nallowed_hosts = [\"smdb.example.com\", \"[::1]:7480\"]";
        assert_eq!(
            Config::from_toml(hosts).unwrap().http.allowed_hosts.len(),
            2
        );
    }

    #[test]
    fn tls_needs_its_files_and_names_the_key() {
        let e = Config::from_toml("[tls]\nenabled = true").unwrap_err();
        assert!(e.0.starts_with("tls.cert_path"), "{}", e.0);
        let e = Config::from_toml("[tls]\nenabled = true\ncert_path = \"/nonexistent/c.pem\"")
            .unwrap_err();
        assert!(e.0.starts_with("tls.key_path"), "{}", e.0);
        let e = Config::from_toml(
            "[tls]\nenabled = true\ncert_path = \"/nonexistent/c.pem\"\nkey_path = \"/k\"",
        )
        .unwrap_err();
        assert!(e.0.starts_with("tls.cert_path: cannot read"), "{}", e.0);
        assert!(Config::from_toml("[tls]\ncert_path = \"/nonexistent\"").is_ok());
    }
}
