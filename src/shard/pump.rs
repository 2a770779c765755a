//! The one pump of a client channel's outbox (`Outbox::run`): replies and subscription pushes
//! leave in arrival order once the log is durable through what they need (`Needs`), and a
//! reply to a client write (`sync::Gate`) once its release rule (`Release`, chosen once per
//! outbox from the member's replication mode) lets it go:
//!
//! - `Release::Durable` (standalone, async mode): at once. With failover on, past the lease
//!   an `ok` leaves as `NO_PRIMARY` (`maybe_committed: true`, docs/ha.md "Self-fencing").
//! - `Release::Replicated` (sync mode, docs/replication.md "Sync mode"; REPLICATION.md S7):
//!   once replicas acknowledged its offset (`SyncState::acked`, moved by `ReplicaAcked`), or,
//!   `sync_timeout_ms` after it was queued, as `SYNC_TIMEOUT` (`committed: true`, not
//!   retryable: the write is in the log; counted in `sync_timeouts`); past the lease as
//!   `NO_PRIMARY`. Until then it waits in `held`, and every reply queued after it waits behind
//!   it, so replies keep their order. Pushes go out once durable, except with failover on,
//!   where a push also waits for the same acknowledgement (on a follower, the one its primary
//!   reports) in the outbox's `PushHold` (`push_hold.rs`), without holding up replies.
//!
//! If the log fails, what waited for it leaves at once: a reply as the failure, a push not at
//! all (the event did not happen). The pump ends when its client executor is gone, or once its
//! outbox is closed and nothing is left to send.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::future::{or, pending};
use glommio::channels::shared_channel::ConnectedSender;
use shards::Rejection;

use super::message::{ShardMessage, ShardResponse};
use super::outbox::{Needs, Outbox};
use super::push_hold::PushHold;
use super::runtime::Shard;
use super::sync::SyncState;

/// When a durable reply to a client write may leave: the outbox's release rule, chosen once
/// per outbox from the member's replication mode (`Release::of`). Every other message leaves
/// once durable, as does a write's reply that never became durable (it answers the failure).
#[derive(Clone, Copy)]
enum Release<'a> {
    /// Standalone and async mode (`ShardSetup::sync` unset): at once, checked against the
    /// lease. No push waits for replicas here (`Registry::publish` holds none).
    Durable,
    /// Sync mode: once replicas acknowledged it, or after the sync timeout (the module docs).
    Replicated(&'a SyncState),
}

/// What becomes of a durable reply to a client write (`Release::verdict`).
#[derive(Clone, Copy)]
enum Verdict {
    /// Replicas have not acknowledged it, and its time is not up: it stays held.
    Wait,
    /// It leaves as it is.
    Leave,
    /// Past the lease (failover): an `ok` leaves as `NO_PRIMARY`.
    Fenced,
    /// Not acknowledged within the sync timeout: an `ok` leaves as `SYNC_TIMEOUT`.
    TimedOut,
}

/// What the pump sleeps on until something may leave (`Release::waits`).
struct Waits {
    /// A new message in the queue.
    news: bool,
    /// Replicas acknowledged more (or the term changed).
    acks: bool,
    /// The log durable through this.
    durable: Option<Needs>,
    /// The sync timeout of the oldest held reply.
    deadline: Option<Instant>,
}

impl<'a> Release<'a> {
    /// The rule of `shard`'s outboxes: sync mode or not (`ShardSetup::sync`, fixed at start).
    fn of(shard: &'a Shard) -> Release<'a> {
        match &shard.sync {
            None => Release::Durable,
            Some(sync) => Release::Replicated(sync),
        }
    }

    /// Whether a durable reply joins the held ones: a client write's (`gated`) waits for
    /// replicas, and any reply queued behind a held one (`behind`) waits behind it.
    fn holds(&self, gated: bool, behind: bool) -> bool {
        matches!(self, Release::Replicated(_)) && (gated || behind)
    }

    /// What becomes of the durable reply needing `n`: a client write's if `gate` says when it
    /// was queued; any other leaves as it is.
    fn verdict(&self, shard: &Shard, n: Needs, gate: Option<Instant>) -> Verdict {
        let Some(queued) = gate else {
            return Verdict::Leave;
        };
        // Failover: past the lease no write is acknowledged (docs/ha.md).
        if shard.member.fenced() {
            return Verdict::Fenced;
        }
        match self {
            Release::Durable => Verdict::Leave,
            Release::Replicated(sync) if n.reached_by(sync.acked()) => Verdict::Leave,
            Release::Replicated(sync) if queued.elapsed() < sync.timeout() => Verdict::Wait,
            Release::Replicated(_) => Verdict::TimedOut,
        }
    }

    /// The error an `ok` reply needing `n` leaves as by its `verdict`; none if it stands.
    fn overrides(&self, shard: &Shard, n: Needs, verdict: Verdict) -> Option<Rejection> {
        match (verdict, self) {
            (Verdict::Fenced, _) => Some(crate::member::fence::no_primary(&shard.member, true)),
            (Verdict::TimedOut, Release::Replicated(sync)) => Some(sync.timed_out(n.offset())),
            _ => None,
        }
    }

    /// The offset replicas acknowledged, where held pushes wait for it (sync mode).
    fn acked(&self) -> Option<u64> {
        match self {
            Release::Durable => None,
            Release::Replicated(sync) => Some(sync.acked()),
        }
    }

    /// What to sleep on with `front` first in the queue, the log durable through `durable`
    /// when the pump last looked, and the oldest held reply queued at `held_since`.
    fn waits(&self, front: Option<Needs>, durable: u64, held_since: Option<Instant>) -> Waits {
        match self {
            // Only the front's durability releases anything; new messages matter when the
            // queue is empty.
            Release::Durable => Waits {
                news: front.is_none(),
                acks: false,
                durable: front,
                deadline: None,
            },
            Release::Replicated(sync) => Waits {
                news: true,
                acks: true,
                durable: front.filter(|n| !n.reached_by(durable)),
                deadline: held_since.map(|queued| queued + sync.timeout()),
            },
        }
    }
}

/// Replies held for replica acknowledgement, in order (`Release::Replicated` only). Bound:
/// replies only, moved here from the outbox's queue, so the outbox's bound (the client's
/// requests in flight on this shard) bounds both; each leaves by `sync_timeout_ms`.
type Held = VecDeque<(Needs, ShardMessage, Option<Instant>)>;

/// The client executor is gone: the pump ends.
struct Gone;

/// What woke the pump.
enum Woke {
    Any,
    Durable(Result<(), Rejection>),
}

/// One outbox's pump: its rule, what it holds back, and the channel for what leaves.
struct Pump<'a> {
    outbox: &'a Outbox,
    shard: &'a Shard,
    tx: &'a ConnectedSender<ShardMessage>,
    rule: Release<'a>,
    held: Held,
    pushes: PushHold,
}

impl Outbox {
    /// Sends what this outbox queues, as its release rule lets it go (the module docs), until
    /// the client executor is gone or the outbox is closed and empty.
    pub(super) async fn run(self: Rc<Self>, shard: Rc<Shard>, tx: ConnectedSender<ShardMessage>) {
        let mut pump = Pump {
            outbox: &self,
            shard: &shard,
            tx: &tx,
            rule: Release::of(&shard),
            held: Held::new(),
            pushes: PushHold::default(),
        };
        let mut failure: Option<Rejection> = None;
        loop {
            let Ok(durable) = pump.release(failure.take()).await else {
                return;
            };
            if pump.done() {
                return;
            }
            if let Woke::Durable(Err(rej)) = pump.wait(durable).await {
                failure = Some(rej);
            }
        }
    }
}

impl Pump<'_> {
    /// Sends what may leave now: the held replies the rule lets go, then what the log made
    /// durable (all that is queued if the wait for it `failed`), then the held pushes
    /// acknowledged. Returns the durable offset it went by.
    async fn release(&mut self, failed: Option<Rejection>) -> Result<u64, Gone> {
        self.release_held().await?;
        let durable = self.shard.log.durable();
        self.release_durable(durable, failed).await?;
        // A reply that joined `held` just now may be acknowledged already (the ack woke the
        // pump before the log's durability did): it leaves now, not at its next wake-up.
        self.release_held().await?;
        self.pushes.after_rewinds(self.shard, &self.outbox.rewound);
        if let Some(acked) = self.rule.acked() {
            for msg in self.pushes.release(self.shard, acked) {
                self.send(msg).await?;
            }
        }
        Ok(durable)
    }

    /// Held replies, in order, while the rule lets the first go.
    async fn release_held(&mut self) -> Result<(), Gone> {
        while let Some(&(n, _, gate)) = self.held.front() {
            let verdict = self.rule.verdict(self.shard, n, gate);
            if let Verdict::Wait = verdict {
                break;
            }
            let Some((n, msg, _)) = self.held.pop_front() else {
                break;
            };
            self.leave(n, msg, verdict).await?;
        }
        Ok(())
    }

    /// Takes from the queue what is durable through `durable` (everything if `failed`): a
    /// reply leaves or joins `held` (`Release::holds`), a push or a subscription's end goes
    /// to the push hold, which sends it unless it waits for acknowledgement.
    async fn release_durable(
        &mut self,
        durable: u64,
        failed: Option<Rejection>,
    ) -> Result<(), Gone> {
        while let Some((n, msg, gate)) = self.outbox.pop_released(durable, failed.is_some()) {
            let undurable = !n.reached_by(durable);
            match msg {
                ShardMessage::Reply(mut resp) => {
                    reply_released(self.shard, &mut resp, undurable, failed.as_ref());
                    let gate = gate.filter(|_| !undurable);
                    let msg = ShardMessage::Reply(resp);
                    if self.rule.holds(gate.is_some(), !self.held.is_empty()) {
                        self.held.push_back((n, msg, gate));
                        continue;
                    }
                    let verdict = self.rule.verdict(self.shard, n, gate);
                    self.leave(n, msg, verdict).await?;
                }
                ShardMessage::Push(_) => {
                    self.shard.subs.push_left();
                    if undurable {
                        continue; // never durable: the event did not happen
                    }
                    self.offer(n, msg).await?;
                }
                // Behind the pushes held before it (`push_hold.rs`).
                ShardMessage::SubsEnded(_) => self.offer(n, msg).await?,
            }
        }
        Ok(())
    }

    /// Sends a released reply, an `ok` turned into the error its `verdict` says.
    async fn leave(&self, n: Needs, mut msg: ShardMessage, verdict: Verdict) -> Result<(), Gone> {
        if let ShardMessage::Reply(resp) = &mut msg {
            if resp.result.is_ok() {
                if let Some(rej) = self.rule.overrides(self.shard, n, verdict) {
                    resp.result = Err(rej);
                }
            }
        }
        self.send(msg).await
    }

    /// A durable push or a subscription's end, to the push hold (after the rewinds it has not
    /// seen): sent unless it waits there.
    async fn offer(&mut self, n: Needs, msg: ShardMessage) -> Result<(), Gone> {
        self.pushes.after_rewinds(self.shard, &self.outbox.rewound);
        match self.pushes.offer(self.shard, n, msg) {
            Some(now) => self.send(now).await,
            None => Ok(()),
        }
    }

    async fn send(&self, msg: ShardMessage) -> Result<(), Gone> {
        self.tx.send(msg).await.map_err(|_| Gone)
    }

    /// The outbox is closed, and nothing is queued or held but pushes (which are dropped).
    fn done(&self) -> bool {
        let queued = !self.outbox.queue.borrow().is_empty();
        !queued && self.held.is_empty() && self.outbox.closed.get()
    }

    /// Sleeps until something may leave, as the rule says (`Release::waits`); `durable` is
    /// the offset the last release went by.
    async fn wait(&self, durable: u64) -> Woke {
        let front = self.outbox.queue.borrow().front().map(|(n, _, _)| *n);
        let held_since = self.held.front().and_then(|(_, _, gate)| *gate);
        let waits = self.rule.waits(front, durable, held_since);
        let news = or(
            async {
                if waits.news {
                    self.outbox.wake.wait().await
                } else {
                    pending::<()>().await
                }
                Woke::Any
            },
            async {
                if waits.acks {
                    self.outbox.acked.wait().await
                } else {
                    pending::<()>().await
                }
                Woke::Any
            },
        );
        let timers = or(
            async {
                match waits.durable {
                    Some(n) => Woke::Durable(self.shard.log.wait_durable(n.offset()).await),
                    None => pending().await,
                }
            },
            async {
                match waits.deadline {
                    Some(at) => {
                        glommio::timer::sleep(at.saturating_duration_since(Instant::now())).await;
                        Woke::Any
                    }
                    None => pending().await,
                }
            },
        );
        or(news, timers).await
    }
}

/// A reply taken from the queue: it no longer counts as queued, and one whose offset never
/// became durable (`undurable`) answers the log's `failure`.
fn reply_released(
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
