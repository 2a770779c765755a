//! What the HA control thread and the control executor tell each other (docs/ha.md, "Inside
//! a member"). The thread decides (`Want`, with a generation that grows at each decision); the
//! executor's driver (`control::ha::driver`) carries it out on the shards and the follower and reports
//! back (`Report`). Both sides poll: neither ever waits on the other, and shards never see
//! this at all (they read the role and lease deadline in `member::ReplState`).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

/// What this member should be doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// Follow the primary at `addr` (epoch `epoch`).
    Follow { addr: String, epoch: u64 },
    /// This member won the term `epoch`: write its epoch records, then accept writes.
    Lead { epoch: u64 },
    /// No primary known: stop following and acknowledging, accept no writes.
    Fence,
}

/// What the driver has done, and the positions it last read.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The generation of the last `Want` carried out.
    pub done: u64,
    /// The follower stream runs.
    pub following: bool,
    /// Leading: the term's epoch records are durable and writes are accepted.
    pub leading: bool,
    /// Carrying out `Lead` failed (the thread resigns).
    pub lead_failed: bool,
    /// Durable heads per shard, read after `done` took effect.
    pub positions: Vec<u64>,
    /// The highest epoch in this member's logs.
    pub last_epoch: u64,
    /// Whether `positions` were read after the decision `done` was carried out.
    pub positions_fresh: bool,
    /// A shard's log is poisoned (an I/O error): this member cannot write until restarted.
    pub log_poisoned: bool,
    /// A shard's log refuses appends for lack of space (docs/wal.md "A full disk").
    pub storage_full: bool,
}

/// Whose acknowledgements count toward `replication.sync_replicas` (sync mode with failover,
/// docs/ha.md "The sync set"), shared by the HA thread, which keeps the sync key in etcd, and
/// the control executor's hub, which counts acks. One lock for both sides, so that removing a
/// member from `counting` and checking that the others hold everything answered `ok` is one
/// step the hub's quorum count cannot fall between.
///
/// Invariant: `counting` is a subset of the sync key's members in etcd. A member is added to
/// etcd first and to `counting` after; removed from `counting` first and from etcd after.
#[derive(Debug, Default)]
pub struct SyncCount {
    /// `None`: every replica counts (no failover, or async mode). `Some`: only these node ids.
    pub counting: Option<BTreeSet<String>>,
    /// Grows whenever `counting` changes: the hub recounts the quorum then.
    pub version: u64,
    /// Per shard, the offset the hub last reported to the shard as sync-acknowledged: every
    /// `ok` answered so far is at or below it.
    pub synced: Vec<u64>,
    /// Per connected replica (node id), its acknowledged positions in this term.
    pub acked: HashMap<String, Vec<u64>>,
}

impl SyncCount {
    /// Whether `node_id`'s acknowledgements count.
    pub fn counts(&self, node_id: &str) -> bool {
        self.counting.as_ref().is_none_or(|c| c.contains(node_id))
    }

    /// Sets `counting` (a new version when it changes).
    pub fn set_counting(&mut self, counting: Option<BTreeSet<String>>) {
        if self.counting != counting {
            self.counting = counting;
            self.version += 1;
        }
    }
}

/// The HA view REPLICATION_STATUS shows (`ha`).
#[derive(Debug, Clone, Default)]
pub struct View {
    /// `ha.cluster` and `ha.node_id` (fixed at start).
    pub cluster: String,
    pub node_id: String,
    pub primary: Option<String>,
    pub primary_addr: Option<String>,
    pub blocked_reason: Option<String>,
    /// Live members, the primary included.
    pub members: Vec<MemberView>,
    pub etcd_reachable: bool,
    /// The paused key exists (`HA_PAUSE`).
    pub paused: bool,
    /// The newest terms (at most `HISTORY_SHOWN`), oldest first.
    pub history: Vec<super::keys::History>,
    /// The sync key's members as last read (sync mode; empty otherwise).
    pub sync_set: Vec<String>,
}

/// How many terms `REPLICATION_STATUS.ha.history` shows.
pub const HISTORY_SHOWN: usize = 20;

/// Why a primary stepped down: the `reason` label of `svc_ha_demotions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demotion {
    /// The lease deadline passed without a renewal (etcd slow or unreachable, a pause).
    LeaseExpired = 0,
    /// The leader key is gone or another member (or an earlier process) holds it.
    LeaderKeyLost = 1,
    /// The etcd session ended (the lease is gone in etcd, or etcd was unreachable past it).
    EtcdSession = 2,
    /// The term's epoch records could not be written.
    LeadFailed = 3,
    /// Handed over by `SWITCHOVER`.
    Switchover = 4,
    /// A shard's log was poisoned by an I/O error: the lease goes at once (docs/ha.md "Who may become primary").
    WalPoisoned = 5,
    /// A shard refused writes for lack of space for longer than `ttl_ms` (docs/wal.md "A full disk").
    StorageFull = 6,
}

/// The `reason` label values, indexed by `Demotion as usize`.
pub const DEMOTION_REASONS: [&str; 7] = [
    "lease_expired",
    "leader_key_lost",
    "etcd_session_ended",
    "lead_failed",
    "switchover",
    "wal_poisoned",
    "storage_full",
];

/// One live member as the last read of etcd showed it.
#[derive(Debug, Clone, Default)]
pub struct MemberView {
    pub node_id: String,
    pub addr: String,
    pub role: String,
    /// Its durable heads summed over shards.
    pub positions_sum: u64,
    /// Entries it lacks of the primary's last known heads (summed over shards).
    pub lag_entries: u64,
}

/// The `svc_ha_*` counters (docs/ha.md, "Metrics").
#[derive(Debug, Default)]
pub struct HaStats {
    /// Terms this member won.
    pub failovers: AtomicU64,
    /// Terms this member lost while primary, by `Demotion`.
    pub demotions: [AtomicU64; DEMOTION_REASONS.len()],
    /// etcd calls that failed.
    pub etcd_errors: AtomicU64,
    /// Times the etcd watch was created again after one broke (`control::ha::watch`; shown in
    /// REPLICATION_STATUS only: docs/ha.md "Metrics" fixes the `svc_ha_*` families).
    pub watch_restarts: AtomicU64,
}

#[derive(Debug, Default)]
pub struct Shared {
    pub stats: HaStats,
    want: Mutex<(u64, Option<Want>)>,
    report: Mutex<Report>,
    view: Mutex<View>,
    /// `HA_PAUSE`, `HA_RESUME`, `PROMOTE {force}` and `SWITCHOVER` asked of the HA thread
    /// (`admin`).
    pub admin: super::admin::Requests,
    /// Why this member last stepped down (a `DEMOTION_REASONS` value), for the driver's log
    /// line.
    pub demoted_for: Mutex<&'static str>,
    /// Whose acks count (sync mode): the HA thread and the hub (`SyncCount`).
    pub sync: Mutex<SyncCount>,
    /// Starts the HA thread's next read before its poll (`control::ha::wake`): the etcd watch, a
    /// request in `admin`, a decision the driver carried out.
    pub wake: super::wake::Wake,
    /// Cluster mode: this member's group, its map copy and the requests for the thread.
    pub cluster: Option<std::sync::Arc<crate::cluster::Cluster>>,
}

impl Shared {
    /// A member's exchange (`cluster`: its cluster capability in cluster mode).
    pub fn new(cluster: Option<std::sync::Arc<crate::cluster::Cluster>>) -> Shared {
        Shared {
            cluster,
            ..Shared::default()
        }
    }

    /// The thread's decision; a new generation only when it differs from the last one.
    /// Returns the generation in force.
    pub fn decide(&self, want: Want) -> u64 {
        let Ok(mut w) = self.want.lock() else {
            return 0;
        };
        if w.1.as_ref() != Some(&want) {
            w.0 += 1;
            w.1 = Some(want);
        }
        w.0
    }

    /// The decision in force and its generation (None before the first).
    pub fn want(&self) -> (u64, Option<Want>) {
        self.want.lock().map(|w| w.clone()).unwrap_or((0, None))
    }

    pub fn report(&self) -> Report {
        self.report.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn update_report(&self, f: impl FnOnce(&mut Report)) {
        if let Ok(mut r) = self.report.lock() {
            f(&mut r);
        }
    }

    /// Runs `f` under the sync-count lock (None if it is poisoned).
    pub fn with_sync<T>(&self, f: impl FnOnce(&mut SyncCount) -> T) -> Option<T> {
        self.sync.lock().ok().map(|mut c| f(&mut c))
    }

    pub fn view(&self) -> View {
        self.view.lock().map(|v| v.clone()).unwrap_or_default()
    }

    pub fn update_view(&self, f: impl FnOnce(&mut View)) {
        if let Ok(mut v) = self.view.lock() {
            f(&mut v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_gets_a_new_generation_only_when_it_changes() {
        let s = Shared::default();
        assert_eq!(s.want(), (0, None));
        assert_eq!(s.decide(Want::Fence), 1);
        assert_eq!(s.decide(Want::Fence), 1);
        assert_eq!(s.decide(Want::Lead { epoch: 2 }), 2);
        assert_eq!(s.want(), (2, Some(Want::Lead { epoch: 2 })));
    }
}
