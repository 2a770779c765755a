//! Gathering one scrape on the control executor: the fronts' counters (read from their
//! atomics), each shard's `ShardStats` (asked for over the router, so the shard builds them on
//! its own core), and process facts, into `control::metrics::gather::Scrape`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use shards::Rejection;

use crate::cluster::Cluster;
use crate::config::Role;
use crate::control::ha::shared::{Shared, DEMOTION_REASONS};
use crate::member::clock::boottime_ns;
use crate::member::ReplState;
use crate::mesh::router::Router;
use crate::metrics::cluster::ClusterFigures;
use crate::metrics::front::{FrontStats, FrontTotals};
use crate::metrics::ha::HaFigures;
use crate::metrics::scrape::{ReplicaPosition, ReplicationStats, Scrape};
use crate::metrics::shard::ShardStats;
use crate::metrics::subs::SubsStats;
use crate::shard::{ReplyBody, ShardCall};

/// Where a scrape's figures come from besides the shards, built by `boot::run`.
pub struct Sources {
    /// One per front executor; each front is the only writer of its own.
    pub fronts: Vec<Arc<FrontStats>>,
    /// Subscription counters, one per front executor.
    pub subs: Vec<Arc<SubsStats>>,
    /// `network.max_connections`, exposed as `svc_connections_limit`.
    pub connections_limit: u64,
    /// The replication role and figures: replication metrics are emitted only when a role is
    /// set (a promoted replica shows the primary's).
    pub replication: Arc<crate::member::ReplState>,
    pub started: Instant,
    /// Set at the first SIGTERM: `/health` answers 503 from then on.
    pub draining: Arc<crate::member::Draining>,
    /// Failover (docs/ha.md): the HA thread's figures and `ha.maximum_lag_on_failover`;
    /// None when `ha.enabled` is false.
    pub ha: Option<HaSource>,
    /// Cluster mode (docs/cluster.md, "Metrics"): the map copy and the answer counters; None
    /// without `[cluster]`, and then no `svc_cluster_*` family is shown.
    pub cluster: Option<Arc<Cluster>>,
}

/// What the failover metrics and health checks read.
pub struct HaSource {
    pub shared: Arc<crate::control::ha::shared::Shared>,
    /// `ha.maximum_lag_on_failover`: `/health/replica` is 503 beyond it.
    pub maximum_lag: u64,
}

/// Asks every shard for its figures (all requests sent before the first reply is awaited).
pub async fn shard_stats(router: &Router) -> Result<Vec<ShardStats>, Rejection> {
    let mut slots = Vec::with_capacity(router.shard_count() as usize);
    for shard in 0..router.shard_count() {
        slots.push(router.start(shard, ShardCall::Stats).await);
    }
    let mut out = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot.wait().await? {
            ReplyBody::Stats(s) => out.push(*s),
            _ => {
                return Err(Rejection::new(
                    shards::ErrorCode::InternalError,
                    "unexpected reply to Stats",
                ))
            }
        }
    }
    Ok(out)
}

/// Gathers one scrape.
pub async fn gather(setup: &Sources, router: &Router) -> Result<Scrape, Rejection> {
    let shards = shard_stats(router).await?;
    let replication = replication_stats(&setup.replication, &shards);
    Ok(Scrape {
        fronts: FrontTotals::sum(&setup.fronts),
        shards,
        connections_limit: setup.connections_limit,
        uptime_seconds: setup.started.elapsed().as_secs_f64(),
        memory_used_bytes: resident_bytes().unwrap_or(0),
        subscriptions_active: sum(&setup.subs, |s| &s.active),
        events_broadcast: sum(&setup.subs, |s| &s.broadcast),
        pushes_queued: (0..router.shard_count() as usize)
            .map(|i| {
                let at = |s: &SubsStats| s.queued.get(i).map_or(0, |c| c.load(Relaxed));
                setup.subs.iter().map(|s| at(s)).sum()
            })
            .collect(),
        replication,
        ha: (setup.ha.as_ref()).map(|h| ha_figures(&h.shared, &setup.replication)),
        cluster: setup.cluster.as_deref().map(cluster_figures),
    })
}

/// The replication figures for the role in force now.
fn replication_stats(
    state: &crate::member::ReplState,
    shards: &[ShardStats],
) -> Option<ReplicationStats> {
    let s = &state.stats;
    match ReplicationStats::for_role(state.role())? {
        ReplicationStats::Primary(mut p) => {
            p.entries_sent = s.entries_sent.load(Relaxed);
            p.slow_replica_disconnects = s.slow_replica_disconnects.load(Relaxed);
            p.sync_timeouts = shards.iter().map(|sh| sh.sync_timeouts).sum();
            if let Ok(r) = s.replicas.lock() {
                p.connected_replicas = r.len() as u64;
                p.replicas = r
                    .iter()
                    .map(|(id, v)| ReplicaPosition {
                        replica_id: id.clone(),
                        lag_entries: v.lag_entries,
                        last_acked_sequence: v.acked_sequence(),
                    })
                    .collect();
            }
            p.truncated_entries = s.truncated_entries.load(Relaxed);
            Some(ReplicationStats::Primary(p))
        }
        ReplicationStats::Replica(mut p) => {
            if let Ok(f) = s.follower.lock() {
                p.lag_entries = f.lag_entries;
                p.lag_seconds = f.lag_seconds;
            }
            p.truncated_entries = s.truncated_entries.load(Relaxed);
            Some(ReplicationStats::Replica(p))
        }
    }
}

fn sum(subs: &[Arc<SubsStats>], field: fn(&SubsStats) -> &AtomicU64) -> u64 {
    subs.iter().map(|s| field(s).load(Relaxed)).sum()
}

/// Resident set size of this process.
pub fn resident_bytes() -> Option<u64> {
    resident_bytes_of("self")
}

/// Resident set size of process `pid` (`"self"` or a number): field 2 of /proc/<pid>/statm
/// (pages) x page size, the figure /proc/<pid>/status calls VmRSS.
pub fn resident_bytes_of(pid: &str) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it returns -1 on error, rejected below.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().map(|p| p * pages)
}

/// The failover figures now. `is_primary` means what `/health/primary` means for the role:
/// primary with a lease that has not run out.
pub fn ha_figures(shared: &Shared, state: &ReplState) -> HaFigures {
    let until = state.lease_until();
    let now = boottime_ns();
    HaFigures {
        is_primary: state.role() == Some(Role::Primary) && !state.fenced(),
        epoch: state.epoch(),
        lease_remaining_seconds: until.saturating_sub(now) as f64 / 1e9,
        failovers: shared.stats.failovers.load(Relaxed),
        demotions: DEMOTION_REASONS
            .iter()
            .zip(&shared.stats.demotions)
            .map(|(r, n)| (*r, n.load(Relaxed)))
            .collect(),
        etcd_errors: shared.stats.etcd_errors.load(Relaxed),
    }
}

/// The cluster figures now, by this member's copy and its answer counters. The move
/// families stay at their defaults until slot moves exist.
pub fn cluster_figures(cluster: &Cluster) -> ClusterFigures {
    let copy = cluster.view.get();
    let (moved, tryagain) = cluster.counters.read();
    let (mut migrating_out, mut migrating_in) = (0, 0);
    for m in copy.map.iter().flat_map(|map| map.migrations.iter()) {
        let slots = u64::from(m.hi.saturating_sub(m.lo)) + 1;
        if m.from == cluster.group {
            migrating_out += slots;
        }
        if m.to == cluster.group {
            migrating_in += slots;
        }
    }
    ClusterFigures {
        map_epoch: copy.map_epoch(),
        slots_owned: copy
            .map
            .as_ref()
            .map_or(0, |m| u64::from(m.slots_owned(&cluster.group))),
        state_ok: copy.state_ok(),
        migrating_out,
        migrating_in,
        moved,
        tryagain,
        migration_entries_out: cluster.counters.entries_out.load(Relaxed),
        migration_entries_in: cluster.counters.entries_in.load(Relaxed),
        migrations_done: cluster.counters.done.load(Relaxed),
        migrations_aborted: cluster.counters.aborted.load(Relaxed),
        slot_freeze: cluster.counters.freezes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_from_proc() {
        let rss = resident_bytes().expect("statm readable");
        assert!(rss > 1 << 20, "a test process holds more than 1 MiB: {rss}");
    }

    #[test]
    fn cluster_figures_come_from_the_copy_and_the_counters() {
        use crate::cluster::map::{ClusterMap, Migration};
        use crate::cluster::view::{MapCopy, MapState};
        let cluster = Cluster {
            name: "c".into(),
            group: "a".into(),
            node_id: "n1".into(),
            http_addr: None,
            maximum_lag: 0,
            keys: crate::cluster::keys::ClusterKeys::new("c"),
            view: Default::default(),
            counters: Default::default(),
            moves: Default::default(),
            max_frame_bytes: 1 << 20,
            sync_mode: false,
            link: None,
            requests: Default::default(),
            wake: Arc::default(),
        };
        let none = cluster_figures(&cluster);
        assert_eq!(
            (none.map_epoch, none.slots_owned, none.state_ok),
            (0, 0, false)
        );
        let mut map = ClusterMap::create(&["a".into(), "b".into()]).unwrap();
        let moving = |lo, hi, from: &str, to: &str| Migration {
            id: "0000000000000001".into(),
            lo,
            hi,
            from: from.into(),
            to: to.into(),
            from_rev: 1,
            to_rev: 1,
            from_epoch: 1,
            to_epoch: 1,
            started_at_ms: 0,
        };
        map.migrations = vec![moving(0, 9, "a", "b"), moving(9000, 9000, "b", "a")];
        let copy = MapCopy {
            state: MapState::Valid,
            map: Some(map),
            map_rev: 3,
            groups: Default::default(),
            migrations: Vec::new(),
        };
        cluster.view.publish(copy);
        cluster.counters.count_moved();
        let f = cluster_figures(&cluster);
        assert_eq!((f.map_epoch, f.slots_owned, f.state_ok), (1, 8192, false));
        assert_eq!((f.migrating_out, f.migrating_in, f.moved), (10, 1, 1));
    }

    #[test]
    fn replication_figures_exist_only_with_a_role() {
        assert_eq!(ReplicationStats::for_role(None), None);
        assert!(matches!(
            ReplicationStats::for_role(Some(Role::Primary)),
            Some(ReplicationStats::Primary(_))
        ));
        assert!(matches!(
            ReplicationStats::for_role(Some(Role::Replica)),
            Some(ReplicationStats::Replica(_))
        ));
    }
}
