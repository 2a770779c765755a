//! What a group's primary settles from its map copy after moves (docs/cluster.md, "Moving
//! slots", steps 6-7), every `TIDY_EVERY`, so a crash or a failover at any point leaves no
//! slot stranded on two groups or none:
//! - a move of this group begun in an earlier term (of either group) is aborted;
//! - instances this member's shards stage for a move that is no longer running go live if
//!   the copy shows the slots owned here (the switch committed), else are dropped;
//! - instances of slots the copy says this group does not own are deleted (the source's
//!   clean-up after a switch), in slices of `PURGE_SLICE`, once per map epoch (a purge walks
//!   the shard's instances), logged as deletes of reason
//!   `moved` and replicated, never pushed. It runs only when the copy is at least as new as
//!   the last move this member took in, so a copy from before a switch never deletes what
//!   the switch brought. Slots given up since the last clean round wait
//!   `cluster.move_purge_delay_ms` (0: none) from the first round that sees the map epoch
//!   (a newer epoch starts the wait again); meanwhile their data is kept but neither served
//!   nor listed (`cluster::serve::Owned`). A process's first purge does not wait.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::admin::{self, MoveAsk};
use super::super::map::ClusterMap;
use super::super::view::MapCopy;
use super::super::Cluster;
use super::etcd::Figures;
use crate::mesh::router::Router;
use crate::shard::moves::{MoveCall, MoveReply};
use crate::shard::{ReplyBody, ShardCall};

/// How often a primary settles.
pub const TIDY_EVERY: Duration = Duration::from_millis(250);
/// Instances one purge call deletes at most (one shard turn).
const PURGE_SLICE: usize = 512;
/// Purge calls per shard per settling round (then the next round goes on).
const PURGE_CALLS: usize = 8;

/// What settling remembers between rounds.
#[derive(Default)]
pub struct Tidy {
    /// The highest map epoch a move this member took in was switched at.
    moved_in_epoch: u64,
    /// The map epoch at which a round found nothing left to delete: ownership changes only
    /// with the epoch, so the shards are not walked again until it moves.
    clean_at: Option<u64>,
    /// The ranges the group owned at that epoch (None before the first clean round).
    owned_when_clean: Option<Vec<(u16, u16)>>,
    /// The map epoch at which a round first found slots to delete, and when: the
    /// `move_purge_delay_ms` wait counts from it, again at each new epoch.
    pending_since: Option<(u64, Instant)>,
}

impl Tidy {
    /// One round on a primary.
    pub async fn round(&mut self, router: &Router, cluster: &Arc<Cluster>) {
        let copy = cluster.view.get();
        let Some(map) = copy.map.as_ref() else {
            return;
        };
        abort_old_terms(cluster, &copy, map).await;
        for shard in 0..router.shard_count() {
            self.settle_staged(router, shard, cluster, &copy, map).await;
        }
        let epoch = copy.map_epoch();
        if epoch >= self.moved_in_epoch && self.clean_at != Some(epoch) {
            let owned = Arc::new(map.ranges_of(&cluster.group));
            let pending = pending_slots(self.owned_when_clean.as_deref(), &owned);
            (cluster.counters.cleanup_pending).store(pending, Relaxed);
            // The wait is for slots given up since a clean round; what a process finds at
            // its start (a crash's leftovers) goes at once.
            let given_up = pending > 0 && self.owned_when_clean.is_some();
            if given_up && !self.delay_over(epoch, cluster.moves.move_purge_delay_ms) {
                return;
            }
            let mut left = 0;
            for shard in 0..router.shard_count() {
                left += purge(router, shard, &owned).await;
            }
            if left == 0 {
                self.clean_at = Some(epoch);
                self.owned_when_clean = Some(owned.to_vec());
                self.pending_since = None;
                cluster.counters.cleanup_pending.store(0, Relaxed);
            }
        }
    }

    /// Whether `delay_ms` has passed since a round first found slots to delete at map epoch
    /// `epoch` (a newer epoch starts the wait again).
    fn delay_over(&mut self, epoch: u64, delay_ms: u64) -> bool {
        if delay_ms == 0 {
            return true;
        }
        let since = match self.pending_since {
            Some((e, at)) if e == epoch => at,
            _ => {
                let now = Instant::now();
                self.pending_since = Some((epoch, now));
                now
            }
        };
        since.elapsed() >= Duration::from_millis(delay_ms)
    }

    async fn settle_staged(
        &mut self,
        router: &Router,
        shard: u32,
        cluster: &Cluster,
        copy: &MapCopy,
        map: &ClusterMap,
    ) {
        let staged = match router.call(shard, ShardCall::Move(MoveCall::Staged)).await {
            Ok(ReplyBody::Move(MoveReply::Staged(s))) => s,
            _ => return,
        };
        for s in staged {
            let id = format!("{:016x}", s.move_id);
            if map.migrations.iter().any(|m| m.id == id) {
                continue; // running
            }
            let ours = map.owner(s.lo) == Some(cluster.group.as_str())
                && map.owner(s.hi) == Some(cluster.group.as_str());
            let call = if ours {
                let map_epoch = copy.map_epoch();
                self.moved_in_epoch = self.moved_in_epoch.max(map_epoch);
                MoveCall::MoveIn {
                    move_id: s.move_id,
                    lo: s.lo,
                    hi: s.hi,
                    map_epoch,
                }
            } else {
                MoveCall::Drop { move_id: s.move_id }
            };
            if let Err(e) = router.call(shard, ShardCall::Move(call)).await {
                log::warn!("cluster: move {id}: settling shard {shard}: {}", e.message);
            }
        }
    }
}

/// CLUSTER_INFO's `cleanup_pending` while a purge has not found everything clean: the slots
/// owned at the last clean round and not now (before any clean round in this process, every
/// slot outside `owned`: a crash may have left any of them behind).
fn pending_slots(when_clean: Option<&[(u16, u16)]>, owned: &[(u16, u16)]) -> u64 {
    let has = |ranges: &[(u16, u16)], slot: u16| ranges.iter().any(|r| r.0 <= slot && slot <= r.1);
    (0..smdb_protocol::slot::SLOT_COUNT)
        .filter(|&s| !has(owned, s) && when_clean.is_none_or(|c| has(c, s)))
        .count() as u64
}

/// Deletes what `shard` holds of slots outside `owned`; what is left for the next round.
async fn purge(router: &Router, shard: u32, owned: &Arc<Vec<(u16, u16)>>) -> usize {
    for _ in 0..PURGE_CALLS {
        let call = MoveCall::Purge {
            owned: owned.clone(),
            max: PURGE_SLICE,
        };
        match router.call(shard, ShardCall::Move(call)).await {
            Ok(ReplyBody::Move(MoveReply::Purged(n))) if n < PURGE_SLICE => return 0,
            Ok(ReplyBody::Move(MoveReply::Purged(_))) => {}
            Ok(_) => return 0,
            Err(e) => {
                log::debug!("cluster: clean-up on shard {shard}: {}", e.message);
                return PURGE_SLICE; // not known to be clean: the next round tries again
            }
        }
    }
    PURGE_SLICE
}

/// Aborts the running moves of this member's group that began in an earlier term of either
/// group: none of them can switch (the switch compares both terms), and the slots must not
/// wait for their timeouts.
async fn abort_old_terms(cluster: &Cluster, copy: &MapCopy, map: &ClusterMap) {
    let term = |g: &str| {
        (copy.groups.get(g))
            .and_then(|v| v.primary.as_ref())
            .map(|p| p.create_rev)
    };
    for m in &map.migrations {
        let reason = if m.from == cluster.group && term(&m.from).is_some_and(|t| t != m.from_rev) {
            "source_failover"
        } else if m.to == cluster.group && term(&m.to).is_some_and(|t| t != m.to_rev) {
            "target_failover"
        } else {
            continue;
        };
        let ask = MoveAsk::Abort {
            id: m.id.clone(),
            reason: reason.into(),
            figures: Figures::default(),
        };
        match admin::move_txn(cluster, ask).await {
            Ok(_) => log::warn!(
                migration = m.id.as_str(), slots:? = [m.lo, m.hi], from = m.from.as_str(),
                to = m.to.as_str(), map_epoch = map.map_epoch, reason;
                "cluster: move {} aborted: it began in an earlier term ({reason})", m.id
            ),
            Err(e) => log::warn!("cluster: move {}: aborting it: {e}", m.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pending_slots;

    #[test]
    fn pending_slots_are_those_given_up_since_the_last_clean_round() {
        // g1 owned 0-8191 when clean; a move took 0-2730 away.
        assert_eq!(pending_slots(Some(&[(0, 8191)]), &[(2731, 8191)]), 2731);
        // Nothing given up: nothing pending.
        assert_eq!(pending_slots(Some(&[(0, 8191)]), &[(0, 8191)]), 0);
        // Slots taken in are not pending.
        assert_eq!(pending_slots(Some(&[(0, 8191)]), &[(0, 9000)]), 0);
        // No clean round yet in this process: every slot outside the group's.
        assert_eq!(pending_slots(None, &[(0, 8191)]), 8192);
    }
}
