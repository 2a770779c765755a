//! Process-wide replication state shared by every executor: the role in force now (a replica
//! becomes a primary on PROMOTE), the highest epoch this member has seen, and the figures the
//! metrics scrape and REPLICATION_STATUS show. With failover on (docs/ha.md) the HA module
//! publishes the role, the epoch and the lease deadline here; shards read them at run time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

use crate::config::Role;

const STANDALONE: u8 = 0;
const PRIMARY: u8 = 1;
const REPLICA: u8 = 2;

/// `lease_until` when failover is off: never fenced.
const NO_LEASE_CHECK: u64 = u64::MAX;

/// The role and epoch, read on every write request (one relaxed load).
#[derive(Debug)]
pub struct ReplState {
    role: AtomicU8,
    epoch: AtomicU64,
    /// Failover (docs/ha.md): the primary's lease deadline, nanoseconds on CLOCK_BOOTTIME
    /// (`crate::member::clock`); past it the primary appends and acknowledges nothing. 0 when this
    /// member holds no lease; `NO_LEASE_CHECK` when failover is off.
    lease_until: AtomicU64,
    /// Where the primary is, as the HA module last saw it (refusals name it).
    primary: Mutex<Option<String>>,
    /// Times this member stepped down from primary (failover): the fronts close the client
    /// connections they had open when it moves (`front::demotion`).
    demotions: AtomicU64,
    pub stats: ReplStats,
}

impl ReplState {
    pub fn new(role: Option<Role>) -> ReplState {
        let r = match role {
            None => STANDALONE,
            Some(Role::Primary) => PRIMARY,
            Some(Role::Replica) => REPLICA,
        };
        ReplState {
            role: AtomicU8::new(r),
            epoch: AtomicU64::new(0),
            lease_until: AtomicU64::new(NO_LEASE_CHECK),
            primary: Mutex::new(None),
            demotions: AtomicU64::new(0),
            stats: ReplStats::default(),
        }
    }

    /// A member under failover: it starts as a follower without a lease (docs/ha.md).
    pub fn new_ha() -> ReplState {
        let s = ReplState::new(Some(Role::Replica));
        s.lease_until.store(0, Relaxed);
        s
    }

    /// Whether failover (the HA module) sets the role.
    pub fn ha(&self) -> bool {
        self.lease_until.load(Relaxed) != NO_LEASE_CHECK
    }

    /// True when this member must not append or acknowledge a client write now: failover is
    /// on and the lease deadline has passed (or there is none). One atomic load when failover
    /// is off.
    pub fn fenced(&self) -> bool {
        let until = self.lease_until.load(Relaxed);
        until != NO_LEASE_CHECK && crate::member::clock::boottime_ns() >= until
    }

    /// The lease deadline (CLOCK_BOOTTIME ns), 0 when none (failover on).
    pub fn lease_until(&self) -> u64 {
        self.lease_until.load(Relaxed)
    }

    /// The HA module renewed the lease (or gave it up: 0). Never used with failover off.
    pub fn set_lease_until(&self, until_ns: u64) {
        if self.ha() {
            self.lease_until
                .store(until_ns.min(NO_LEASE_CHECK - 1), Relaxed);
        }
    }

    /// Demotion: refuse writes from now on.
    pub fn become_follower(&self) {
        if self.role.swap(REPLICA, Relaxed) == PRIMARY {
            self.demotions.fetch_add(1, Relaxed);
        }
    }

    /// How many times this member has stepped down from primary.
    pub fn demotions(&self) -> u64 {
        self.demotions.load(Relaxed)
    }

    /// The primary's client address, when known (failover on).
    pub fn primary(&self) -> Option<String> {
        self.primary.lock().ok().and_then(|p| p.clone())
    }

    pub fn set_primary(&self, addr: Option<String>) {
        if let Ok(mut p) = self.primary.lock() {
            *p = addr;
        }
    }

    pub fn role(&self) -> Option<Role> {
        match self.role.load(Relaxed) {
            PRIMARY => Some(Role::Primary),
            REPLICA => Some(Role::Replica),
            _ => None,
        }
    }

    pub fn role_name(&self) -> &'static str {
        match self.role() {
            None => "standalone",
            Some(Role::Primary) => "primary",
            Some(Role::Replica) => "replica",
        }
    }

    /// The role as the op table sees it (`smdb_protocol::Role`).
    pub fn table_role(&self) -> smdb_protocol::Role {
        match self.role.load(Relaxed) {
            PRIMARY => smdb_protocol::Role::Primary,
            REPLICA => smdb_protocol::Role::Follower,
            _ => smdb_protocol::Role::Standalone,
        }
    }

    pub fn is_replica(&self) -> bool {
        self.role.load(Relaxed) == REPLICA
    }

    /// PROMOTE: from here on writes are accepted.
    pub fn become_primary(&self) {
        self.role.store(PRIMARY, Relaxed);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Relaxed)
    }

    /// Raises the highest epoch seen (never lowers it).
    pub fn see_epoch(&self, epoch: u64) {
        self.epoch.fetch_max(epoch, Relaxed);
    }
}

/// Replication figures (docs/monitoring/README.md, "Metrics"), written on the control executor, read by the scrape.
#[derive(Debug, Default)]
pub struct ReplStats {
    pub entries_sent: AtomicU64,
    pub slow_replica_disconnects: AtomicU64,
    pub truncated_entries: AtomicU64,
    /// Primary: the connected replicas by `replica_id`.
    pub replicas: Mutex<BTreeMap<String, ReplicaView>>,
    /// Replica: how far behind the primary it is.
    pub follower: Mutex<FollowerView>,
}

/// One connected replica as the primary sees it.
#[derive(Debug, Clone, Default)]
pub struct ReplicaView {
    /// The link (connection) this view belongs to: a reconnect replaces it.
    pub link: u64,
    pub addr: String,
    /// Acknowledged (durable on the replica) offset per shard.
    pub acked: Vec<u64>,
    /// Entries the primary has durable that the replica has not acknowledged.
    pub lag_entries: u64,
    /// Caught up at least once since it connected (live streaming).
    pub live: bool,
    pub connected_at_ms: u64,
}

impl ReplicaView {
    /// Spec: "last acknowledged WAL sequence": the sum of the per-shard offsets (offsets
    /// count entries per shard, so the sum counts entries, as INFO's `wal.offset` does).
    pub fn acked_sequence(&self) -> u64 {
        self.acked.iter().sum()
    }
}

/// A replica's view of its stream.
#[derive(Debug, Clone, Default)]
pub struct FollowerView {
    pub connected: bool,
    pub upstream: String,
    pub primary_epoch: u64,
    /// The primary's durable heads, from its latest heartbeat or entries.
    pub primary_heads: Vec<u64>,
    /// This member's durable heads (what it has acknowledged).
    pub positions: Vec<u64>,
    pub lag_entries: u64,
    pub lag_seconds: f64,
    pub last_error: Option<String>,
}

impl ReplStats {
    pub fn connected_replicas(&self) -> u64 {
        self.replicas.lock().map_or(0, |r| r.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promote_changes_the_role_and_epochs_only_rise() {
        let s = ReplState::new(Some(Role::Replica));
        assert!(s.is_replica());
        assert_eq!(s.role_name(), "replica");
        s.see_epoch(3);
        s.see_epoch(2);
        assert_eq!(s.epoch(), 3);
        s.become_primary();
        assert_eq!(s.role(), Some(Role::Primary));
        assert_eq!(ReplState::new(None).role_name(), "standalone");
    }
}
