//! A client channel's outbox: replies and subscription pushes wait here until the log is
//! durable through what they need (`Needs`), and leave in arrival order as its one pump lets
//! them (`pump.rs`: `Outbox::run`, whose release rule adds replica acknowledgement in sync
//! mode).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Instant;

use super::message::{ShardMessage, ShardResponse};
use crate::util::notify::Notify;

/// What a reply or a push waits for in its outbox before it may leave: the log durable
/// through this offset. Every shard call's answer carries one (`runtime::Outcome`): a write's
/// is its entry's offset; a read's, the offset of the state it shows (the instance's last
/// entry, or the head), so that no answer shows what a crash could take back; a refusal, or
/// an answer that shows no logged state, needs `NOTHING`. In sync mode a client write's reply
/// waits for replicas to acknowledge the same offset (`pump.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Needs(u64);

impl Needs {
    /// Leaves at once, behind what was queued before it (offset 0 precedes every entry).
    pub(super) const NOTHING: Needs = Needs(0);

    /// The log durable through `offset`.
    pub(super) const fn durable(offset: u64) -> Needs {
        Needs(offset)
    }

    /// The log offset waited for.
    pub(super) const fn offset(self) -> u64 {
        self.0
    }

    /// Whether `through` (an offset durable, or acknowledged by replicas) covers it.
    pub(super) const fn reached_by(self, through: u64) -> bool {
        self.0 <= through
    }

    /// After a rewind of the log to `head`: no later than `head` (see `Outbox::clamp_needs`).
    pub(super) fn clamped(self, head: u64) -> Needs {
        Needs(self.0.min(head))
    }
}

/// Replies and subscription pushes waiting for the log to become durable up to their offset.
///
/// Bound: replies, at most the number of requests the client executor has outstanding on this
/// shard, which its own per-connection in-flight limits bound (the client waits on the request
/// channel when that is full); pushes, the entries not yet durable times the subscriptions
/// they match (`subs::Registry::pending`, a gauge in INFO). So it cannot grow without bound.
#[derive(Default)]
pub(super) struct Outbox {
    /// `(needs, message, queued at)`: the time is set on a client write's reply only, where
    /// such replies are gated (`sync::Gate`: sync mode, or failover on).
    pub(super) queue: RefCell<VecDeque<(Needs, ShardMessage, Option<Instant>)>>,
    pub(super) wake: Notify,
    pub(super) closed: std::cell::Cell<bool>,
    /// Replicas acknowledged more, or a term ended (sync mode: `Shard::replica_acked`,
    /// `Shard::demote`).
    pub(super) acked: Notify,
    /// The lowest head the log was rewound to since the pump last looked (`clamp_needs`):
    /// the pump drops the held pushes past it (`push_hold.rs`).
    pub(super) rewound: std::cell::Cell<Option<u64>>,
}

impl Outbox {
    /// Queues a reply; `gate`, the time a client write's reply was queued (`sync::Gate`),
    /// submits it to the pump's release rule too (`pump.rs`).
    pub(super) fn push(&self, needs: Needs, resp: ShardResponse, gate: Option<Instant>) {
        let msg = ShardMessage::Reply(resp);
        self.queue.borrow_mut().push_back((needs, msg, gate));
        self.wake.notify();
    }

    /// Queues `msg` to leave once the log is durable through `needs`, after everything
    /// queued before it.
    pub(super) fn push_message(&self, needs: Needs, msg: ShardMessage) {
        self.queue.borrow_mut().push_back((needs, msg, None));
        self.wake.notify();
    }

    /// The oldest queued message if it may leave: the log is durable through its offset, or
    /// the wait for that `failed` (then everything queued leaves, a reply as the failure).
    pub(super) fn pop_released(
        &self,
        durable: u64,
        failed: bool,
    ) -> Option<(Needs, ShardMessage, Option<Instant>)> {
        let mut q = self.queue.borrow_mut();
        match q.front() {
            Some((n, _, _)) if n.reached_by(durable) || failed => q.pop_front(),
            _ => None,
        }
    }

    pub(super) fn close(&self) {
        self.closed.set(true);
        self.wake.notify();
    }

    /// After a log rewind to `head`: what waits for a later offset waited on the old log,
    /// which made everything it had durable when it closed, so it may leave now; except the
    /// pushes of entries the rewind removed, which are dropped (the log no longer has them;
    /// their subscriptions end `diverged`, `Registry::rewound`). Returns how many.
    pub(super) fn clamp_needs(&self, head: u64) -> u64 {
        let mut q = self.queue.borrow_mut();
        let before = q.len();
        q.retain(|(needs, msg, _)| needs.reached_by(head) || !matches!(msg, ShardMessage::Push(_)));
        let dropped = (before - q.len()) as u64;
        for (needs, _, _) in q.iter_mut() {
            *needs = needs.clamped(head);
        }
        drop(q);
        let lowest = self.rewound.get().map_or(head, |h| h.min(head));
        self.rewound.set(Some(lowest));
        self.wake.notify();
        dropped
    }
}
