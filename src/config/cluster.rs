//! The `[cluster]` section (docs/cluster.md, "Configuration"): several HA groups on one etcd
//! splitting the 16384 hash slots. Checked once at start-up with the rest of the config; a bad
//! value exits 78 naming the key.

use serde::Deserialize;

use crate::config::ConfigError;

/// Longest `cluster.group`.
const GROUP_BYTES_MAX: usize = 64;
/// Bounds of `cluster.move_freeze_max_ms`.
const FREEZE_MAX_MS_RANGE: std::ops::RangeInclusive<u64> = 50..=10_000;
/// Longest `cluster.move_purge_delay_ms`: one day.
const PURGE_DELAY_MS_MAX: u64 = 86_400_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    pub enabled: bool,
    /// The HA group this member belongs to (required when enabled).
    pub group: Option<String>,
    /// A move freezes its slots once the target trails by at most this many entries.
    pub move_freeze_lag_entries: u64,
    /// Longest freeze of one attempt before it is abandoned (50–10000).
    pub move_freeze_max_ms: u64,
    /// Abandoned freezes before a move aborts with `no_convergence`.
    pub move_attempts: u32,
    /// Time a move may take to come within `move_freeze_lag_entries` before it aborts.
    pub move_catchup_timeout_ms: u64,
    /// Copy rate of a move's stream; 0 is unlimited.
    pub move_bytes_per_sec: u64,
    /// How long a group's primary keeps the data of slots moved away (never served or
    /// listed) before its settling deletes it; 0 deletes at once.
    pub move_purge_delay_ms: u64,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            enabled: false,
            group: None,
            move_freeze_lag_entries: 1000,
            move_freeze_max_ms: 500,
            move_attempts: 5,
            move_catchup_timeout_ms: 300_000,
            move_bytes_per_sec: 64 << 20,
            move_purge_delay_ms: 0,
        }
    }
}

/// `[A-Za-z0-9._-]`, 1 to `max` bytes.
pub fn is_group_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= GROUP_BYTES_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Cluster {
    /// Checks the section against `[ha]`: cluster mode needs failover on.
    pub fn validate(&self, ha_enabled: bool) -> Result<(), ConfigError> {
        let err = |m: &str| Err(ConfigError(m.to_owned()));
        if !self.enabled {
            return Ok(());
        }
        if !ha_enabled {
            return err("ha.enabled must be true when cluster.enabled is true");
        }
        match &self.group {
            None => return err("cluster.group is required when cluster.enabled is true"),
            Some(g) if !is_group_name(g) => {
                return err("cluster.group must be 1-64 characters of [A-Za-z0-9._-]")
            }
            Some(_) => {}
        }
        if self.move_freeze_lag_entries == 0 {
            return err("cluster.move_freeze_lag_entries must be >= 1");
        }
        if !FREEZE_MAX_MS_RANGE.contains(&self.move_freeze_max_ms) {
            return err("cluster.move_freeze_max_ms must be in 50..=10000");
        }
        if self.move_attempts == 0 {
            return err("cluster.move_attempts must be >= 1");
        }
        if self.move_catchup_timeout_ms == 0 {
            return err("cluster.move_catchup_timeout_ms must be >= 1");
        }
        if self.move_purge_delay_ms > PURGE_DELAY_MS_MAX {
            return err("cluster.move_purge_delay_ms must be <= 86400000");
        }
        Ok(())
    }

    /// How this member maps ids to shards: by slot in cluster mode, by hash otherwise
    /// (docs/cluster.md, "Slots").
    pub fn routing(&self) -> shards::routing::Routing {
        match self.enabled {
            true => shards::routing::Routing::Slots,
            false => shards::routing::Routing::Hash,
        }
    }

    /// This member's group when cluster mode is on.
    pub fn my_group(&self) -> Option<&str> {
        match self.enabled {
            true => self.group.as_deref(),
            false => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const HA: &str = "[ha]\nenabled = true\nnode_id = \"a\"\n";

    fn bad(text: &str) -> String {
        match Config::from_toml(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn defaults_are_off_and_an_enabled_member_names_its_group() {
        let c = Config::from_toml("").unwrap();
        assert!(!c.cluster.enabled);
        assert_eq!(c.cluster.my_group(), None);
        assert_eq!(c.cluster.move_freeze_max_ms, 500);
        assert_eq!(c.cluster.move_bytes_per_sec, 67_108_864);
        assert_eq!(c.cluster.move_purge_delay_ms, 0);
        let on = Config::from_toml(&format!("{HA}[cluster]\nenabled = true\ngroup = \"g-1\"\n"))
            .unwrap();
        assert_eq!(on.cluster.my_group(), Some("g-1"));
    }

    #[test]
    fn bad_values_name_their_key() {
        let on = |extra: &str| format!("{HA}[cluster]\nenabled = true\ngroup = \"g\"\n{extra}");
        assert!(bad("[cluster]\nenabled = true\ngroup = \"g\"\n").contains("ha.enabled"));
        assert!(bad(&format!("{HA}[cluster]\nenabled = true\n")).contains("cluster.group"));
        let spaced = format!("{HA}[cluster]\nenabled = true\ngroup = \"a b\"\n");
        assert!(bad(&spaced).contains("cluster.group"));
        assert!(bad(&on("move_freeze_max_ms = 20")).contains("cluster.move_freeze_max_ms"));
        assert!(bad(&on("move_freeze_max_ms = 10001")).contains("cluster.move_freeze_max_ms"));
        assert!(bad(&on("move_attempts = 0")).contains("cluster.move_attempts"));
        assert!(bad(&on("move_freeze_lag_entries = 0")).contains("move_freeze_lag_entries"));
        assert!(bad(&on("move_purge_delay_ms = 86400001")).contains("move_purge_delay_ms"));
        assert!(bad(&on("frobnicate = 1")).contains("frobnicate"));
    }
}
