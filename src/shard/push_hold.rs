//! Pushes held for sync acknowledgement (docs/ha.md "Subscriptions across terms": "under HA in sync mode a push leaves
//! only once its entry is sync-acknowledged"; docs/ha.md, "Subscriptions across terms").
//!
//! With failover on and `replication.mode = "sync"`, a push leaves its outbox once the entry is
//! durable (as every push) *and* `SyncState::acked` has reached it:
//! - on the primary, for an entry it decided (`Hold::Led`), that is the offset acknowledged by
//!   `sync_replicas` members of the sync set (it also releases held write replies,
//!   `pump.rs`); a write answered `SYNC_TIMEOUT` keeps its push held until then;
//! - on a follower, for an entry replicated to it (`Hold::Followed`), it is the offset the
//!   primary reports acknowledged in its heartbeats (`committed`, passed on as
//!   `ReplicaAcked` by `control::replication::follower::apply`). So a subscriber of a follower never
//!   sees an event that a failover could still take back.
//!
//! Pushes keep their order; replies do not wait behind held pushes. The end of a subscription
//! (`SubsEnded`) waits behind the held pushes before it, so a client never hears of an event
//! after the end of the subscription that carried it.
//!
//! Bound: `PUSHES_HELD_MAX` push messages per outbox. Policy when full: the push is not held
//! and the subscriptions it names end with `subscription_lagged` after what they were
//! delivered (`SubsEnded` without `diverged_at`), as a slow subscriber's do; they resume by
//! replay. Gauge: `Registry::held` (INFO `pushes_held`). Past the lease (a demotion), no push
//! this member decided leaves: every held push is dropped and their subscriptions end the same
//! way (docs/ha.md "Subscriptions across terms": a demotion ends the subscriptions whose position it may lose). A rewind of
//! the log (a follower truncated to where it agrees with a new primary) drops the held pushes
//! of the entries it removed (`rewound`); the rewind ends every subscription (`diverged`).
//!
//! A held push no longer counts in `Registry::pending` (INFO `pushes_pending`): it left the
//! outbox's queue, and counts in `held` instead.
//!
//! Standalone and async pushes pass straight through (`hold` is `No`; the pump's rule is
//! `Release::Durable`, which never looks for acknowledgement).

use std::cell::Cell;
use std::collections::VecDeque;

use super::message::ShardMessage;
use super::runtime::{Needs, Shard};
use super::subs::{Hold, SubsEnded};

/// Push messages one outbox holds for sync acknowledgement at most: each is one event for the
/// matching subscriptions of one client executor (one body, ~200 bytes), so about 1 MiB, and
/// the pushes of 4096 writes answered while replicas do not acknowledge.
pub(super) const PUSHES_HELD_MAX: usize = 4096;

/// One outbox's held pushes, `(offset, push)` in offset order, and the ends of subscriptions
/// queued behind them.
#[derive(Default)]
pub(super) struct PushHold {
    queue: VecDeque<(Needs, ShardMessage)>,
    /// Held pushes this member decided as primary (`Hold::Led`).
    led: usize,
}

impl PushHold {
    /// A durable push (or a subscription's end) leaving the outbox: what to send now, if
    /// anything (the push itself, or the end of its subscriptions when the hold is full). What
    /// waits for acknowledgement, and an end behind it, stays here until `release`.
    pub(super) fn offer(
        &mut self,
        shard: &Shard,
        n: Needs,
        msg: ShardMessage,
    ) -> Option<ShardMessage> {
        let push = match &msg {
            ShardMessage::Push(push) if push.hold != Hold::No => push,
            ShardMessage::SubsEnded(_) => return self.end_behind(msg),
            _ => return Some(msg),
        };
        let hold = push.hold;
        if self.queue.len() >= PUSHES_HELD_MAX {
            let ended = SubsEnded {
                subs: push.subs.clone(),
                shard: push.shard,
                diverged_at: None,
            };
            return self.end_behind(ShardMessage::SubsEnded(ended));
        }
        shard.subs.held.set(shard.subs.held.get() + 1);
        if hold == Hold::Led {
            self.led += 1;
        }
        self.queue.push_back((n, msg));
        None
    }

    /// A subscription's end leaves now when nothing is held, else right after what is.
    fn end_behind(&mut self, end: ShardMessage) -> Option<ShardMessage> {
        match self.queue.back() {
            None => Some(end),
            Some((n, _)) => {
                let n = *n;
                self.queue.push_back((n, end));
                None
            }
        }
    }

    /// Catches up with the rewinds since the last look (`Outbox::rewound`, taken here): run
    /// before holding or releasing more, so that only what was held before them is dropped.
    pub(super) fn after_rewinds(&mut self, shard: &Shard, rewound: &Cell<Option<u64>>) {
        if let Some(head) = rewound.take() {
            self.rewound(shard, head);
        }
    }

    /// The log was rewound to `head`: the held pushes of entries past it never happened in
    /// the history it keeps, and are dropped (their subscriptions end `diverged`,
    /// `Registry::rewound`); what was held up to `head` still waits for acknowledgement.
    fn rewound(&mut self, shard: &Shard, head: u64) {
        let before = self.queue.len();
        let mut led_dropped = 0;
        self.queue.retain(|(n, msg)| match msg {
            ShardMessage::Push(p) if !n.reached_by(head) => {
                led_dropped += usize::from(p.hold == Hold::Led);
                false
            }
            _ => true,
        });
        for (n, _) in self.queue.iter_mut() {
            *n = n.clamped(head);
        }
        let dropped = (before - self.queue.len()) as u64;
        self.led -= led_dropped;
        shard
            .subs
            .held
            .set(shard.subs.held.get().saturating_sub(dropped));
    }

    /// What may leave now that `acked` is acknowledged: what it covers, in order. Past the
    /// lease with pushes this member decided held, none: every held push is dropped and one
    /// `SubsEnded` names the subscriptions they (and the ends held behind them) were for.
    pub(super) fn release(&mut self, shard: &Shard, acked: u64) -> Vec<ShardMessage> {
        let mut out = Vec::new();
        if self.queue.is_empty() {
            return out;
        }
        if self.led > 0 && shard.member.fenced() {
            let mut subs: Vec<u64> = Vec::new();
            for (_, msg) in self.queue.drain(..) {
                match msg {
                    ShardMessage::Push(p) => {
                        subs.extend(p.subs);
                        shard.subs.held.set(shard.subs.held.get().saturating_sub(1));
                    }
                    ShardMessage::SubsEnded(e) => subs.extend(e.subs),
                    ShardMessage::Reply(_) => {}
                }
            }
            self.led = 0;
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
            if !n.reached_by(acked) {
                break;
            }
            if let Some((_, msg)) = self.queue.pop_front() {
                if let ShardMessage::Push(p) = &msg {
                    shard.subs.held.set(shard.subs.held.get().saturating_sub(1));
                    self.led -= usize::from(p.hold == Hold::Led);
                }
                out.push(msg);
            }
        }
        out
    }
}
