//! Replication on the shard (docs/replication.md, the storage side; design: REPLICATION.md S4-S6).
//! The network side (`src/control/replication/`) reaches a shard only through these calls:
//!
//! - `LogPosition`: head, durable and oldest offsets, the epoch history and a `LogHandle`
//!   the sender reads the log through from its own executor.
//! - `ReplicaAppend` (replica): the primary's records at their exact offsets, appended
//!   unchanged and applied as recovery applies them (never decided), published to
//!   subscriptions; timers are armed in the engine but not fired. Answered once durable.
//! - `BeginEpoch` (primary): a term begins; its epoch entry goes through the normal log path.
//! - `Promote` (replica becoming primary): start firing timers.
//! - `Truncate` / `InstallSnapshot` (replica): rewind the log (`Durability::rewind`: drop
//!   what follows the point where it agrees with the primary's, or replace it with the
//!   primary's snapshot, received as a stream: `install.rs`), then rebuild the engine from the
//!   log exactly as at start-up.
//!   Subscriptions stay registered, but each that went past the new head ends with a
//!   `diverged` lag notice (`Registry::rewound`); timers are re-armed from the rebuilt state.
//!
//! A replica mirrors its primary's layout, so every record lands at the primary's offset on
//! the same shard, and the epoch history (kept by the engine from epoch entries) is the same
//! wherever the logs agree.

use std::cell::Cell;
use std::rc::Rc;

use serde_json::json;
use shards::engine::{Entry, Record};
use shards::{ErrorCode, Rejection};

use super::durability::Rewind;
use super::message::ReplyBody;
use super::runtime::{Needs, Outcome, Shard};

/// Replication state a shard keeps beside its engine.
#[derive(Default)]
pub(super) struct ReplState {
    /// The highest epoch named by a `ReplicaAppend` or `BeginEpoch` since start; the log's
    /// own history (`Engine::last_epoch`) covers what came before.
    epoch_seen: Cell<u64>,
}

impl Shard {
    /// `ShardCall::LogPosition`.
    pub(super) fn position(&self) -> ReplyBody {
        let engine = self.engine.borrow();
        let wal = self.log.wal();
        ReplyBody::Position {
            head: wal.head_offset(),
            durable: wal.durable_offset(),
            oldest: wal.oldest_offset(),
            last_epoch: engine.last_epoch(),
            epochs: engine.epochs().to_vec(),
            handle: wal.handle(),
        }
    }

    /// The highest epoch this shard has seen, in its log or in a call.
    fn max_epoch_seen(&self) -> u64 {
        (self.engine.borrow().last_epoch()).max(self.repl.epoch_seen.get())
    }

    /// `ShardCall::ReplicaAppend`: `entries[k]` is the primary's record at `first + k`.
    pub(super) fn replica_append(&self, epoch: u64, first: u64, entries: Vec<Vec<u8>>) -> Outcome {
        let head = self.log.head();
        if first != head + 1 {
            let msg = format!(
                "replicated entries must start at offset {}; got {first}",
                head + 1
            );
            let rej = Rejection::new(ErrorCode::BadRequest, msg).with("expected", head + 1);
            return (Err(rej), Needs::NOTHING);
        }
        let seen = self.max_epoch_seen();
        if epoch < seen {
            return (Err(stale_epoch(epoch, seen)), Needs::NOTHING);
        }
        // Every record must decode before any is logged: a bad one refuses the whole call.
        let mut records = Vec::with_capacity(entries.len());
        for (k, bytes) in entries.iter().enumerate() {
            match Record::decode(bytes) {
                Ok(record) => records.push(record),
                Err(e) => {
                    let offset = first + k as u64;
                    let msg = format!("replicated entry at offset {offset} does not decode: {e}");
                    return (
                        Err(Rejection::new(ErrorCode::BadRequest, msg)),
                        Needs::NOTHING,
                    );
                }
            }
        }
        self.repl.epoch_seen.set(epoch);
        let (mut through, mut last_at_ms) = (head, 0);
        for (bytes, record) in entries.iter().zip(records) {
            let offset = match self.append_record(bytes) {
                Ok(offset) => offset,
                // Those before are logged and applied: the reply waits for them, then fails.
                Err(rej) => return (Err(rej), Needs::durable(through)),
            };
            if offset != through + 1 {
                // Impossible: nothing else appends between these synchronous steps.
                let msg = format!(
                    "replicated entry logged at {offset}, expected {}",
                    through + 1
                );
                log::error!("shard {}: {msg}", self.index);
                let rej = Rejection::new(ErrorCode::InternalError, msg);
                return (Err(rej), Needs::durable(through));
            }
            if let Some(at_ms) = record_at_ms(&record) {
                last_at_ms = at_ms;
            }
            self.apply_replicated(record, offset);
            through = offset;
        }
        (
            Ok(ReplyBody::Replicated {
                through,
                last_at_ms,
            }),
            Needs::durable(through),
        )
    }

    /// Applies one logged record as recovery does, then arms timers (in the engine only,
    /// unless this shard fires them) and publishes its events to subscriptions.
    fn apply_replicated(&self, record: Record<'_>, offset: u64) {
        let entries = match record {
            Record::Event(ev) => {
                // The common case, kept borrowed: no entry is built unless someone listens.
                let published = (self.subs.count() > 0).then(|| ev.to_entry());
                let moved = (ev.from != ev.to).then(|| ev.instance_id.to_owned());
                let mut engine = self.engine.borrow_mut();
                engine.apply_record(Record::Event(ev), offset, false);
                if let Some(id) = moved {
                    self.timers.arm_after(&mut engine, &[id], offset);
                }
                drop(engine);
                if let Some(entry) = published {
                    let engine = self.engine.borrow();
                    (self.subs).publish_replicated(self.index, &entry, offset, &engine);
                }
                return;
            }
            Record::Entry(Entry::Batch { entries }) => entries,
            Record::Entry(entry) => vec![entry],
        };
        // As for a local atomic batch: each entry applied and published in order, then the
        // timers of the states the record left its instances in.
        let mut touched = Vec::new();
        for entry in entries {
            touched.extend(self.timers.touched(&entry));
            let published = self.subs.is_watched(&entry).then(|| entry.clone());
            self.engine.borrow_mut().apply(entry, offset, false);
            if let Some(entry) = published {
                let engine = self.engine.borrow();
                (self.subs).publish_replicated(self.index, &entry, offset, &engine);
            }
        }
        (self.timers).arm_after(&mut self.engine.borrow_mut(), &touched, offset);
    }

    /// `ShardCall::BeginEpoch`: logs the epoch entry of a new term.
    pub(super) fn begin_epoch(&self, epoch: u64) -> Outcome {
        let seen = self.max_epoch_seen();
        if epoch <= seen {
            return (Err(stale_epoch(epoch, seen)), Needs::NOTHING);
        }
        match self.log_and_apply(Entry::Epoch { epoch }) {
            Ok((_, offset)) => {
                self.repl.epoch_seen.set(epoch);
                let body = json!({ "offset": offset }).to_string().into_bytes();
                (Ok(ReplyBody::Json(body)), Needs::durable(offset))
            }
            Err(rej) => (Err(rej), Needs::NOTHING),
        }
    }

    /// `ShardCall::Demote` (failover): timers stop firing; write replies held for replica
    /// acknowledgement are released as `NO_PRIMARY` by the outboxes (the lease is gone).
    pub(super) fn demote(&self) -> Outcome {
        self.timers.demote();
        if let Some(sync) = &self.sync {
            sync.new_term();
        }
        for outbox in self.subs.outboxes() {
            outbox.acked.notify();
        }
        (Ok(ReplyBody::Json(b"{}".to_vec())), Needs::NOTHING)
    }

    /// `ShardCall::Promote`: this shard starts firing timers (from state; overdue ones fire at
    /// once).
    pub(super) fn promote(&self) -> Outcome {
        self.cancel_snapshot_now();
        self.timers.promote(&mut self.engine.borrow_mut());
        if let Some(sync) = &self.sync {
            sync.new_term();
        }
        (Ok(ReplyBody::Json(b"{}".to_vec())), Needs::NOTHING)
    }
}

impl Shard {
    /// `ShardCall::Truncate`: drops the log after `after` and rebuilds the state from it.
    pub(super) async fn truncate(self: &Rc<Self>, after: u64) -> Outcome {
        if after >= self.log.head() {
            return (Ok(ReplyBody::Truncated { removed: 0 }), Needs::NOTHING);
        }
        match self.rewind(Rewind::TruncateAfter(after)).await {
            Ok(removed) => {
                log::warn!(
                    "shard {}: truncated {removed} log entries after offset {}",
                    self.index,
                    self.log.head()
                );
                (Ok(ReplyBody::Truncated { removed }), Needs::NOTHING)
            }
            Err(rej) => (Err(rej), Needs::NOTHING),
        }
    }

    /// Rewinds the log (`Durability::rewind`) and swaps in the engine rebuilt from it; returns
    /// the entries dropped. A running snapshot walk is cancelled first (its file deleted) and
    /// none starts until this ends. The caller's requests wait; others see the old state until
    /// the swap.
    pub(super) async fn rewind(&self, what: Rewind) -> Result<u64, Rejection> {
        self.snapshots.hold(true);
        self.cancel_snapshot().await;
        let rewound = self.log.rewind(what).await;
        self.snapshots.hold(false);
        let (removed, mut engine) = rewound?;
        let head = self.log.head();
        self.timers.rebuild(&mut engine);
        *self.engine.borrow_mut() = engine;
        self.snapshot_from(head);
        for outbox in self.subs.outboxes() {
            for _ in 0..outbox.clamp_needs(head) {
                self.subs.push_left();
            }
        }
        if let Some(sync) = &self.sync {
            sync.rewound(head);
        }
        let epoch = self.engine.borrow().epoch_of(head);
        self.subs.rewound(self.index, epoch, head);
        Ok(removed)
    }
}

/// The `at_ms` of a record: its own, or its batch's last entry's; none for an epoch entry, a
/// slot move's import, its drop or the source's slots-moved-out.
fn record_at_ms(record: &Record<'_>) -> Option<u64> {
    fn of(entry: &Entry) -> Option<u64> {
        match entry {
            Entry::PutMachine { at_ms, .. }
            | Entry::Create { at_ms, .. }
            | Entry::Apply { at_ms, .. }
            | Entry::Delete { at_ms, .. }
            | Entry::Migrate { at_ms, .. } => Some(*at_ms),
            Entry::Batch { entries } => entries.iter().rev().find_map(of),
            // As `shards::engine::entry_time_of`: of a slot move, only the switch has a time.
            Entry::MoveIn { at_ms, .. } => Some(*at_ms),
            Entry::Epoch { .. }
            | Entry::Import { .. }
            | Entry::DropStaged { .. }
            | Entry::SlotsMovedOut { .. } => None,
        }
    }
    match record {
        Record::Event(ev) => Some(ev.at_ms),
        Record::Entry(entry) => of(entry),
    }
}

fn stale_epoch(epoch: u64, seen: u64) -> Rejection {
    Rejection::new(
        ErrorCode::StaleEpoch,
        format!("epoch {epoch} is older than epoch {seen}, which this member has seen"),
    )
    .with("epoch", epoch)
    .with("seen_epoch", seen)
}
