//! Sync replication on a primary's shard (docs/replication.md, "Sync mode"; REPLICATION.md S7).
//!
//! A client write's reply leaves only once the log is durable through its offset AND the
//! replicas have acknowledged it (`ReplicaAcked { through }`, sent by the control executor
//! whenever the offset acknowledged by `sync_replicas` replicas advances), or once
//! `sync_timeout_ms` has passed since it was queued: then it becomes `SYNC_TIMEOUT`
//! (`committed: true`, not retryable: the write is in the log) and `sync_timeouts` counts it.
//!
//! Only replies to client writes (an op or BATCH that appended entries) wait. Reads and every
//! other reply do not wait for replicas, but replies stay in order per outbox: a reply queued
//! after a waiting write waits behind it. Pushes go out as soon as their entry is durable,
//! except with failover on, where a push waits for the same acknowledgement (on a follower,
//! the one its primary reports: `push_hold.rs`), without holding up replies, and a replay
//! delivers only what it covers (`replay.rs`). Standalone and async primaries never come here: `serve_client`
//! picks `Outbox::run_sync` only when `ShardSetup::sync` is set, and `receive` checks the
//! option once per request.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::future::{or, pending};
use glommio::channels::shared_channel::ConnectedSender;
use shards::{ErrorCode, Rejection};

use super::message::{ReplyBody, ShardCall, ShardMessage};
use super::push_hold::PushHold;
use super::runtime::{Needs, Outbox, Outcome, Shard};
use crate::config::{Replication, ReplicationMode, Role};
use crate::util::waiters::Waiters;

/// Default `replication.sync_timeout_ms` (docs/replication.md).
const SYNC_TIMEOUT_MS_DEFAULT: u64 = 5000;

/// Sync-mode settings of a primary's shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncSetup {
    /// How long a write waits for replica acknowledgement (`replication.sync_timeout_ms`).
    pub timeout: Duration,
    /// `replication.sync_replicas`, named in the `SYNC_TIMEOUT` message.
    pub replicas: u32,
}

impl SyncSetup {
    /// Some for `replication.role = "primary"` (or any member under failover, `ha`: each may
    /// become primary) with `replication.mode = "sync"`.
    pub fn from_config(r: &Replication, ha: bool) -> Option<SyncSetup> {
        let may_lead = r.role == Some(Role::Primary) || ha;
        (may_lead && r.mode == ReplicationMode::Sync).then(|| SyncSetup {
            timeout: Duration::from_millis(r.sync_timeout_ms.unwrap_or(SYNC_TIMEOUT_MS_DEFAULT)),
            replicas: r.sync_replicas,
        })
    }
}

/// The shard's sync-mode state.
pub(super) struct SyncState {
    setup: SyncSetup,
    /// Highest offset acknowledged by enough replicas.
    acked: Cell<u64>,
    /// Write replies turned into `SYNC_TIMEOUT` (`ShardStats::sync_timeouts`).
    timeouts: Cell<u64>,
    /// Replay reads waiting for `acked` to reach what they would deliver (`replay.rs`); woken
    /// when it moves and when a term begins or ends.
    replay_waiters: Waiters,
}

impl SyncState {
    pub fn new(setup: SyncSetup) -> SyncState {
        SyncState {
            setup,
            acked: Cell::new(0),
            timeouts: Cell::new(0),
            replay_waiters: Waiters::default(),
        }
    }

    pub fn timeouts(&self) -> u64 {
        self.timeouts.get()
    }

    /// The log was rewound to `head`: what the acknowledged offset said of entries past it was
    /// said of entries this log no longer has.
    pub(super) fn rewound(&self, head: u64) {
        self.acked.set(self.acked.get().min(head));
    }

    /// A term begins or ends (failover): acknowledgements of the last term no longer count.
    pub fn new_term(&self) {
        self.acked.set(0);
        self.replay_waiters.notify_all();
    }

    /// The offset acknowledged by enough replicas, once it reaches `offset`, `stop()` holds or
    /// `limit` has passed, whichever comes first (a replay read, `replay.rs`).
    pub(super) async fn acked_within(
        &self,
        offset: u64,
        limit: Duration,
        stop: impl Fn() -> bool + Unpin,
    ) -> u64 {
        if self.acked.get() < offset && !stop() {
            let reached = self
                .replay_waiters
                .until(|| self.acked.get() >= offset || stop());
            or(reached, glommio::timer::sleep(limit)).await;
        }
        self.acked.get()
    }

    fn timed_out(&self, offset: u64) -> Rejection {
        let msg = format!(
            "write committed locally; not acknowledged by {} replica(s) within {} ms",
            self.setup.replicas,
            self.setup.timeout.as_millis()
        );
        Rejection::new(ErrorCode::SyncTimeout, msg)
            .with("committed", true)
            .with("wal_offset", offset)
    }
}

/// The release gate of a client write (docs/ha.md, "Sync mode: what ok means"), on a shard
/// in sync mode or under failover: every successful answer to a client write waits for the
/// acknowledgement of its `needs` (and is checked against the lease when it is released),
/// whether it appended an entry (a first reply) or repeated the result of one already in the
/// log (an idempotent resend, whose `needs` is the instance's last entry): a resend of a
/// write answered `SYNC_TIMEOUT` waits, or answers `SYNC_TIMEOUT` again, and is never `ok`
/// while no replica holds the entry. A refusal (`Needs::NOTHING`) is acknowledged at once.
pub(super) struct Gate {
    /// The log's head before the call ran.
    before: u64,
}

impl Gate {
    /// Some for a client write on a shard that gates writes (sync mode, or failover on).
    pub(super) fn before(shard: &Shard, call: &ShardCall) -> Option<Gate> {
        let gates = shard.sync.is_some() || shard.ha;
        (gates && client_write(call)).then(|| Gate {
            before: shard.log.head(),
        })
    }

    /// The time the reply is queued when it must wait: it answered, or it appended.
    pub(super) fn after(self, shard: &Shard, outcome: &Outcome) -> Option<Instant> {
        let answered = outcome.0.is_ok() || shard.log.head() > self.before;
        answered.then(Instant::now)
    }
}

/// Whether `call` is a client write: an op the op table says writes, or a BATCH holding one.
fn client_write(call: &ShardCall) -> bool {
    match call {
        ShardCall::Op { op, .. } => op.op().facts().writes(),
        ShardCall::Versioned { op, .. } => op.op().facts().writes(),
        ShardCall::Batch(ops) => ops.iter().any(|item| item.op.op().facts().writes()),
        _ => false,
    }
}

impl Shard {
    /// `ShardCall::ReplicaAcked`: replicas hold everything through `through`.
    pub(super) fn replica_acked(&self, through: u64) -> Outcome {
        if let Some(sync) = &self.sync {
            if through > sync.acked.get() {
                sync.acked.set(through);
                for outbox in self.subs.outboxes() {
                    outbox.acked.notify();
                }
                sync.replay_waiters.notify_all();
            }
        }
        (Ok(ReplyBody::Json(b"{}".to_vec())), Needs::NOTHING)
    }
}

/// What woke the sync pump.
enum Woke {
    Any,
    Durable(Result<(), Rejection>),
}

/// Replies held for replica acknowledgement, in order. Bound: replies only, moved here from
/// the outbox's queue, so the outbox's bound (the client's requests in flight on this shard)
/// bounds both; each leaves by `sync_timeout_ms`.
type Held = VecDeque<(Needs, ShardMessage, Option<Instant>)>;

/// The client executor is gone: the pump ends.
struct Gone;

/// Where `release_durable` puts what must wait, and the channel for what leaves.
struct Release<'a> {
    held: &'a mut Held,
    pushes: &'a mut PushHold,
    tx: &'a ConnectedSender<ShardMessage>,
}

impl Outbox {
    /// The pump of a sync-mode shard: `Outbox::run`, plus a queue of replies held for replica
    /// acknowledgement (see the module docs).
    pub(super) async fn run_sync(
        self: Rc<Self>,
        shard: Rc<Shard>,
        tx: ConnectedSender<ShardMessage>,
    ) {
        let Some(sync) = shard.sync.as_ref() else {
            return self.run(shard.clone(), tx).await;
        };
        let mut held = Held::new();
        let mut pushes = PushHold::default();
        let mut failure: Option<Rejection> = None;
        loop {
            if release_held(&shard, sync, &mut held, &tx).await.is_err() {
                return;
            }
            let durable = shard.log.durable();
            let failed = failure.take();
            let mut out = Release {
                held: &mut held,
                pushes: &mut pushes,
                tx: &tx,
            };
            if self
                .release_durable(&shard, durable, failed, &mut out)
                .await
                .is_err()
            {
                return;
            }
            pushes.after_rewinds(&shard, &self.rewound);
            for msg in pushes.release(&shard, sync.acked.get()) {
                if tx.send(msg).await.is_err() {
                    return;
                }
            }
            let waiting_for = self.queue.borrow().front().map(|(n, _, _)| *n);
            if waiting_for.is_none() && held.is_empty() && self.closed.get() {
                return;
            }
            let deadline = held
                .front()
                .and_then(|(_, _, g)| *g)
                .map(|q| q + sync.setup.timeout);
            let wait_durable = waiting_for.filter(|n| !n.reached_by(durable));
            if let Woke::Durable(Err(rej)) = self.wait_next(&shard, wait_durable, deadline).await {
                failure = Some(rej);
            }
        }
    }

    /// Moves durable messages from the queue, as `run` releases them: a client write's reply
    /// (and every reply behind a held one) joins `held`, a push that waits for
    /// acknowledgement `pushes`, the rest leave.
    async fn release_durable(
        &self,
        shard: &Shard,
        durable: u64,
        failed: Option<Rejection>,
        out: &mut Release<'_>,
    ) -> Result<(), Gone> {
        let (held, tx) = (&mut *out.held, out.tx);
        loop {
            let Some((n, mut msg, gate)) = self.pop_released(durable, failed.is_some()) else {
                return Ok(());
            };
            match &mut msg {
                ShardMessage::Reply(resp) => {
                    super::outbox::reply_released(
                        shard,
                        resp,
                        !n.reached_by(durable),
                        failed.as_ref(),
                    );
                    let gate = gate.filter(|_| n.reached_by(durable));
                    if gate.is_some() || !held.is_empty() {
                        held.push_back((n, msg, gate));
                        continue;
                    }
                }
                ShardMessage::Push(_) => {
                    shard.subs.push_left();
                    if !n.reached_by(durable) {
                        continue; // never durable: the event did not happen
                    }
                }
                // Behind the pushes held before it (`push_hold.rs`).
                ShardMessage::SubsEnded(_) => {}
            }
            if !matches!(msg, ShardMessage::Reply(_)) {
                out.pushes.after_rewinds(shard, &self.rewound);
                if let Some(now) = out.pushes.offer(shard, n, msg) {
                    tx.send(now).await.map_err(|_| Gone)?;
                }
                continue;
            }
            tx.send(msg).await.map_err(|_| Gone)?;
        }
    }

    /// Sleeps until something may leave: a new message, more acks, the log durable through
    /// `durable_through`, or the first held reply's `deadline`.
    async fn wait_next(
        &self,
        shard: &Shard,
        durable_through: Option<Needs>,
        deadline: Option<Instant>,
    ) -> Woke {
        let news = or(
            async {
                self.wake.wait().await;
                Woke::Any
            },
            async {
                self.acked.wait().await;
                Woke::Any
            },
        );
        let timers = or(
            async {
                match durable_through {
                    Some(n) => Woke::Durable(shard.log.wait_durable(n.offset()).await),
                    None => pending().await,
                }
            },
            async {
                match deadline {
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

/// Held replies, in order: acknowledged, timed out (`SYNC_TIMEOUT`), fenced (failover:
/// `NO_PRIMARY`), or not waiting for replicas.
async fn release_held(
    shard: &Shard,
    sync: &SyncState,
    held: &mut Held,
    tx: &ConnectedSender<ShardMessage>,
) -> Result<(), Gone> {
    while let Some(&(n, _, gate)) = held.front() {
        // Failover: past the lease no write is acknowledged (docs/ha.md).
        let fenced = gate.is_some() && shard.member.fenced();
        let timed_out = match gate {
            Some(queued) if !n.reached_by(sync.acked.get()) && !fenced => {
                if queued.elapsed() < sync.setup.timeout {
                    break;
                }
                true
            }
            _ => false,
        };
        let Some((n, mut msg, _)) = held.pop_front() else {
            break;
        };
        if let ShardMessage::Reply(resp) = &mut msg {
            if resp.result.is_ok() && fenced {
                resp.result = Err(crate::ha::fence::no_primary(&shard.member, true));
            } else if resp.result.is_ok() && timed_out {
                resp.result = Err(sync.timed_out(n.offset()));
                sync.timeouts.set(sync.timeouts.get() + 1);
            }
        }
        tx.send(msg).await.map_err(|_| Gone)?;
    }
    Ok(())
}
