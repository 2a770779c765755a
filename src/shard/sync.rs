//! Sync replication on a primary's shard (docs/replication.md, "Sync mode"; REPLICATION.md S7):
//! the offset replicas acknowledged, and which replies wait for it.
//!
//! The control executor sends `ReplicaAcked { through }` whenever the offset acknowledged by
//! `sync_replicas` replicas advances (`SyncState::acked`). A client write's reply (an op or
//! BATCH that appended entries, or answered a resend of one: `Gate`) leaves only once the log
//! is durable through its offset AND that offset is acknowledged, or once `sync_timeout_ms`
//! has passed since it was queued: then it becomes `SYNC_TIMEOUT` (`committed: true`, not
//! retryable: the write is in the log) and `sync_timeouts` counts it. The outbox's pump
//! applies that rule (`pump.rs`, `Release::Replicated`), and keeps replies in order: a reply
//! queued after a waiting write waits behind it. Reads and every other reply do not wait for
//! replicas. With failover on, pushes wait for the same acknowledgement (on a follower, the
//! one its primary reports: `push_hold.rs`), without holding up replies, and a replay
//! delivers only what it covers (`replay.rs`). Standalone and async primaries have no
//! `SyncState` (`ShardSetup::sync` unset): their outboxes release at durability
//! (`Release::Durable`), and `Gate` gates their writes only with failover on.

use std::cell::Cell;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use shards::{ErrorCode, Rejection};

use super::message::{ReplyBody, ShardCall};
use super::runtime::{Needs, Outcome, Shard};
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

    /// The highest offset acknowledged by enough replicas (in this term).
    pub(super) fn acked(&self) -> u64 {
        self.acked.get()
    }

    /// How long a write's reply waits for replica acknowledgement.
    pub(super) fn timeout(&self) -> Duration {
        self.setup.timeout
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

    /// A write's reply at `offset` becomes `SYNC_TIMEOUT`: the rejection, counted.
    pub(super) fn timed_out(&self, offset: u64) -> Rejection {
        self.timeouts.set(self.timeouts.get() + 1);
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
/// while no replica holds the entry. A refusal (`Needs::NOTHING`) is acknowledged at once. A
/// move's step (`ShardCall::Move`, sent by the member itself) waits only when it appended: a
/// settling round that found nothing to purge must not hold the control executor's channel
/// behind it for `sync_timeout_ms` (on a primary whose replicas are not back yet, every
/// `LogPosition` after it, REPLICATION_STATUS's among them, waited that long).
pub(super) struct Gate {
    /// The log's head before the call ran.
    before: u64,
    /// A move's step: gated only if it appended.
    internal: bool,
}

impl Gate {
    /// Some for a client write on a shard that gates writes (sync mode, or failover on).
    pub(super) fn before(shard: &Shard, call: &ShardCall) -> Option<Gate> {
        let gates = shard.sync.is_some() || shard.ha;
        (gates && client_write(call)).then(|| Gate {
            before: shard.log.head(),
            internal: matches!(call, ShardCall::Move(_)),
        })
    }

    /// The time the reply is queued when it must wait: it answered (a client's write), or it
    /// appended.
    pub(super) fn after(self, shard: &Shard, outcome: &Outcome) -> Option<Instant> {
        let appended = shard.log.head() > self.before;
        let answered = outcome.0.is_ok() && !self.internal;
        (answered || appended).then(Instant::now)
    }
}

/// Whether `call` is a client write: an op the op table says writes, or a BATCH holding one.
fn client_write(call: &ShardCall) -> bool {
    match call {
        ShardCall::Op { op, .. } => op.op().facts().writes(),
        ShardCall::Versioned { op, .. } => op.op().facts().writes(),
        ShardCall::Batch(ops) => ops.iter().any(|item| item.op.op().facts().writes()),
        ShardCall::Bulk(part) => !part.dry_run,
        ShardCall::Move(step) => step.writes(),
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
