//! A client channel's outbox: replies and subscription pushes wait here until the log is
//! durable through their offset, and leave in arrival order (`Outbox::run`; sync mode adds
//! replica acknowledgement, `sync.rs`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use glommio::channels::shared_channel::ConnectedSender;
use shards::Rejection;

use super::message::{ShardMessage, ShardResponse};
use super::runtime::Shard;
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
    /// `(needs, message, queued at)`: the time is set on a sync-mode write reply only.
    pub(super) queue: RefCell<VecDeque<(Needs, ShardMessage, Option<Instant>)>>,
    pub(super) wake: Notify,
    pub(super) closed: std::cell::Cell<bool>,
    /// Sync mode: replicas acknowledged more (`shard/sync.rs`).
    pub(super) acked: Notify,
    /// The lowest head the log was rewound to since the pump last looked (`clamp_needs`):
    /// the sync pump drops the held pushes past it (`push_hold.rs`).
    pub(super) rewound: std::cell::Cell<Option<u64>>,
}

impl Outbox {
    /// Queues a reply; `gate` (sync mode) also makes it wait for replica acknowledgement.
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

    pub(super) async fn run(self: Rc<Self>, shard: Rc<Shard>, tx: ConnectedSender<ShardMessage>) {
        loop {
            let front = self.queue.borrow().front().map(|(n, _, _)| *n);
            let Some(needs) = front else {
                if self.closed.get() {
                    return;
                }
                self.wake.wait().await;
                continue;
            };
            let failure = shard.log.wait_durable(needs.offset()).await.err();
            let durable = shard.log.durable();
            loop {
                let Some((n, mut msg, gate)) = self.pop_released(durable, failure.is_some()) else {
                    break;
                };
                match &mut msg {
                    ShardMessage::Reply(resp) => {
                        reply_released(
                            shard.as_ref(),
                            resp,
                            !n.reached_by(durable),
                            failure.as_ref(),
                        );
                        // Failover, async mode: `gate` marks a client write (only set with
                        // failover on); past the lease it is not acknowledged.
                        if gate.is_some() && resp.result.is_ok() && shard.member.fenced() {
                            resp.result = Err(crate::ha::fence::no_primary(&shard.member, true));
                        }
                    }
                    ShardMessage::Push(_) => {
                        shard.subs.push_left();
                        if !n.reached_by(durable) {
                            continue; // never durable: the event did not happen
                        }
                    }
                    ShardMessage::SubsEnded(_) => {}
                }
                if tx.send(msg).await.is_err() {
                    return; // the client executor is gone: nobody to answer
                }
            }
        }
    }
}

/// A reply taken from the queue: it no longer counts as queued, and one whose offset never
/// became durable (`undurable`) answers the log's `failure`.
pub(super) fn reply_released(
    shard: &Shard,
    resp: &mut ShardResponse,
    undurable: bool,
    failure: Option<&Rejection>,
) {
    shard.reply_left();
    if let (true, Some(f)) = (undurable, failure) {
        resp.result = Err(f.clone());
    }
}
