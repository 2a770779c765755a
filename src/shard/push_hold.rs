//! Pushes held for sync acknowledgement (CONTRACT §12: "under HA in sync mode a push leaves
//! only once its entry is sync-acknowledged"; docs/ha.md, "Subscriptions across terms").
//!
//! With failover on and `replication.mode = "sync"`, a push of an entry this member decided as
//! primary (`PushMsg::hold`, set by `Registry::publish`) leaves its outbox once the entry is
//! durable (as every push) *and* the offset acknowledged by `sync_replicas` replicas
//! (`SyncState::acked`, the offset that releases held write replies in `sync.rs`) has reached
//! it. A write answered `SYNC_TIMEOUT` keeps its push held until then. Pushes keep their order;
//! replies do not wait behind held pushes.
//!
//! Bound: `PUSHES_HELD_MAX` push messages per outbox. Policy when full: the push is not held
//! and the subscriptions it names end with `subscription_lagged` after what they were
//! delivered (`SubsEnded` without `diverged_at`), as a slow subscriber's do; they resume by
//! replay. Gauge: `Registry::held` (INFO `pushes_held`). Past the lease (a demotion), no held
//! push leaves: they are dropped and their subscriptions end the same way (CONTRACT §12:
//! demotion "ends subscriptions whose position it may lose").
//!
//! A held push no longer counts in `Registry::pending` (INFO `pushes_pending`): it left the
//! outbox's queue, and counts in `held` instead.
//!
//! Standalone, async and follower pushes never come here (`hold` is false, or the pump is
//! `Outbox::run`).

use std::collections::VecDeque;

use super::message::ShardMessage;
use super::runtime::Shard;
use super::subs::SubsEnded;

/// Push messages one outbox holds for sync acknowledgement at most: each is one event for the
/// matching subscriptions of one client executor (one body, ~200 bytes), so about 1 MiB, and
/// the pushes of 4096 writes answered while replicas do not acknowledge.
pub(super) const PUSHES_HELD_MAX: usize = 4096;

/// One outbox's held pushes, `(offset, push)` in offset order.
#[derive(Default)]
pub(super) struct PushHold {
    queue: VecDeque<(u64, ShardMessage)>,
}

impl PushHold {
    /// A durable push leaving the outbox: what to send now, if anything (the push itself,
    /// or the end of its subscriptions when the hold is full). A push that waits for
    /// acknowledgement stays here until `release`.
    pub(super) fn offer(
        &mut self,
        shard: &Shard,
        n: u64,
        msg: ShardMessage,
    ) -> Option<ShardMessage> {
        let ShardMessage::Push(push) = &msg else {
            return Some(msg);
        };
        if !push.hold {
            return Some(msg);
        }
        if self.queue.len() >= PUSHES_HELD_MAX {
            let ended = SubsEnded {
                subs: push.subs.clone(),
                shard: push.shard,
                diverged_at: None,
            };
            return Some(ShardMessage::SubsEnded(ended));
        }
        shard.subs.held.set(shard.subs.held.get() + 1);
        self.queue.push_back((n, msg));
        None
    }

    /// What may leave now that replicas acknowledged through `acked`: the pushes it covers, in
    /// order; past the lease, none: every held push is dropped and one `SubsEnded` names the
    /// subscriptions they were for.
    pub(super) fn release(&mut self, shard: &Shard, acked: u64) -> Vec<ShardMessage> {
        let mut out = Vec::new();
        if self.queue.is_empty() {
            return out;
        }
        if shard.member.fenced() {
            let mut subs: Vec<u64> = Vec::new();
            for (_, msg) in self.queue.drain(..) {
                if let ShardMessage::Push(p) = msg {
                    subs.extend(p.subs);
                }
                shard.subs.held.set(shard.subs.held.get().saturating_sub(1));
            }
            subs.sort_unstable();
            subs.dedup();
            let ended = SubsEnded {
                subs,
                shard: shard.index,
                diverged_at: None,
            };
            out.push(ShardMessage::SubsEnded(ended));
            return out;
        }
        while let Some((n, _)) = self.queue.front() {
            if *n > acked {
                break;
            }
            if let Some((_, msg)) = self.queue.pop_front() {
                shard.subs.held.set(shard.subs.held.get().saturating_sub(1));
                out.push(msg);
            }
        }
        out
    }
}
