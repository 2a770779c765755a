//! A write on the shard: decide, log (one append, checked against the lease and the state's
//! divergence), apply, arm timers, publish; and the result's bytes (docs/architecture.md,
//! "The path of one APPLY_EVENT"; the APPLY_EVENT fast path is `event.rs`).

use serde_json::Value;
use shards::engine::{Command, Decision, Engine, Entry};
use shards::{ErrorCode, Rejection};

use super::message::ReplyBody;
use super::runtime::{to_json, Needs, Outcome, Shard};
use crate::util::time::now_ms;

/// Bytes. A result buffer that grew past this (a large context) is freed after its write
/// instead of being kept for the next one.
const RESULT_BUF_KEEP_BYTES: usize = 64 << 10;

impl Shard {
    /// decide → log → apply for one write command (APPLY_EVENT: `shard/event.rs`).
    pub(super) fn write(&self, cmd: &Command) -> Outcome {
        if let Some(ev) = cmd.event() {
            return self.write_event(&ev);
        }
        let decision = self.engine.borrow().decide(cmd, now_ms());
        match decision {
            Err(rej) => (Err(rej), Needs::NOTHING),
            Ok(Decision::Answer(v)) => self.answer(cmd, &v),
            Ok(Decision::Write(entry)) => {
                // The result is written straight from the engine's record (no Value).
                let written = self.log_and_apply_with(entry, |engine, entry, offset| {
                    self.result_bytes(|out| engine.apply_into(entry, offset, out))
                });
                match written {
                    Ok((bytes, offset)) => (Ok(ReplyBody::Json(bytes)), Needs::durable(offset)),
                    Err(rej) => (Err(rej), Needs::NOTHING),
                }
            }
        }
    }

    /// Logs `entry`, applies it, arms the timers of the states it entered and publishes it.
    /// Appends one record to the log, unless this shard's state has diverged from its log
    /// (`shards::engine::Divergence`): then every write is refused, naming the entry.
    /// A record this member decided (a client write, a timer fire, an epoch record): under
    /// failover, past the lease deadline nothing more is appended (docs/ha.md,
    /// "Self-fencing"); one atomic load when failover is off.
    pub(super) fn append(&self, record: &[u8]) -> Result<u64, Rejection> {
        if self.member.fenced() {
            return Err(crate::member::fence::no_primary(&self.member, false));
        }
        self.append_record(record)
    }

    /// `append` without the lease check: a replica's copy of its primary's record.
    pub(super) fn append_record(&self, record: &[u8]) -> Result<u64, Rejection> {
        if let Some(d) = self.engine.borrow().divergence() {
            return Err(Rejection::new(
                ErrorCode::WalIoError,
                format!(
                    "shard {}: the log entry at offset {} does not fit the state ({}); the \
                     shard refuses writes until the divergence is repaired",
                    self.index, d.offset, d.reason
                ),
            )
            .with("diverged_at", d.offset));
        }
        // An epoch entry starts a segment of its own, labelled with its epoch (the archive).
        if let Some(epoch) = shards::engine::Record::epoch_begun(record) {
            let follows = self.engine.borrow().last_epoch();
            return self.log.append_epoch(record, epoch, follows);
        }
        self.log.append(record)
    }

    pub(super) fn log_and_apply(&self, entry: Entry) -> Result<(Value, u64), Rejection> {
        self.log_and_apply_with(entry, |engine, entry, offset| {
            engine.apply(entry, offset, true).unwrap_or(Value::Null)
        })
    }

    /// `log_and_apply` with the engine's apply (and the shape of its result) chosen by `apply`.
    pub(super) fn log_and_apply_with<R>(
        &self,
        entry: Entry,
        apply: impl FnOnce(&mut Engine, Entry, u64) -> R,
    ) -> Result<(R, u64), Rejection> {
        let bytes = entry.to_bytes();
        let offset = self.append(&bytes)?;
        let published = self.subs.is_watched(&entry).then(|| entry.clone());
        let touched = self.timers.touched(&entry);
        let result = {
            let mut engine = self.engine.borrow_mut();
            let result = apply(&mut engine, entry, offset);
            self.timers.arm_after(&mut engine, &touched, offset);
            result
        };
        if let Some(entry) = published {
            let engine = self.engine.borrow();
            self.subs.publish(self.index, &entry, offset, &engine);
        }
        Ok((result, offset))
    }

    /// A write's result JSON, written by `write` into a reused buffer and then copied into an
    /// allocation of exactly its size: the reply is freed on the front's thread, and a
    /// fixed-size buffer per reply left holes between the instance records the shard keeps
    /// allocating (measured: 1M instances with one event each, 472 B resident per instance
    /// with a 256-byte buffer per reply, see benches/RESULTS.md). `write` returns false when
    /// the engine skipped the entry; the result is then `null`.
    pub(super) fn result_bytes(&self, write: impl FnOnce(&mut Vec<u8>) -> bool) -> Vec<u8> {
        let mut scratch = self.result_buf.take();
        scratch.clear();
        if !write(&mut scratch) {
            scratch.clear();
            scratch.extend_from_slice(b"null");
        }
        let result = scratch.to_vec();
        if scratch.capacity() <= RESULT_BUF_KEEP_BYTES {
            self.result_buf.replace(scratch);
        }
        result
    }

    /// A write command answered without a write (an idempotent retry): the answer leaves
    /// once the instance's last entry is durable.
    pub(super) fn answer(&self, cmd: &Command, answer: &Value) -> Outcome {
        let id = match cmd {
            Command::CreateInstance { id, .. } => Some(id),
            Command::ApplyEvent { instance_id, .. } => Some(instance_id),
            _ => None,
        };
        self.answer_for(id.map(String::as_str), answer)
    }

    /// An answer about instance `id`: released once the instance's last change is durable.
    pub(super) fn answer_for(&self, id: Option<&str>, answer: &Value) -> Outcome {
        let at = id.and_then(|id| self.engine.borrow().instance(id).map(|i| i.wal_offset));
        (
            Ok(ReplyBody::Json(to_json(answer))),
            Needs::durable(at.unwrap_or_else(|| self.log.head())),
        )
    }
}
