//! APPLY_EVENT's write path, the hottest one: the event is decided straight into its log
//! record (`Engine::decide_event_record`, no owned `Entry`), logged, then applied from that
//! same record exactly as recovery applies it, with the result serialised straight from the
//! instance. An owned `Entry` is built only when a subscription wants the event.

use shards::engine::{EventCommand, Record};
use shards::Rejection;

use super::message::ReplyBody;
use super::runtime::{internal, Needs, Outcome, Shard};
use crate::util::time::now_ms;

/// Bytes. A record buffer that grew past this (a large payload) is freed after its event
/// instead of being kept for the next one.
pub(super) const RECORD_BUF_KEEP_BYTES: usize = 64 << 10;

impl Shard {
    /// decide → log → apply for one APPLY_EVENT command.
    pub(super) fn write_event(&self, cmd: &EventCommand<'_>) -> Outcome {
        let mut record = self.record_buf.take();
        record.clear();
        let decided = self
            .engine
            .borrow()
            .decide_event_record(cmd, now_ms(), &mut record);
        let outcome = match decided {
            Err(rej) => (Err(rej), Needs::NOTHING),
            Ok(Some(answer)) => self.answer_for(Some(&cmd.instance_id), &answer),
            Ok(None) => match self.log_and_apply_event(&record) {
                Ok((result, offset)) => (Ok(ReplyBody::Json(result)), Needs::durable(offset)),
                Err(rej) => (Err(rej), Needs::NOTHING),
            },
        };
        if record.capacity() <= RECORD_BUF_KEEP_BYTES {
            self.record_buf.replace(record);
        }
        outcome
    }

    /// Logs an APPLY record, applies it, arms the timer of the state it entered and publishes
    /// it; returns the result JSON and the record's offset.
    fn log_and_apply_event(&self, record: &[u8]) -> Result<(Vec<u8>, u64), Rejection> {
        let Ok(Record::Event(ev)) = Record::decode(record) else {
            return Err(internal("a decided APPLY_EVENT record does not decode"));
        };
        let offset = self.append(record)?;
        let result = {
            let mut engine = self.engine.borrow_mut();
            let result = self.result_bytes(|out| engine.apply_event_into(ev, offset, out));
            if ev.from != ev.to {
                self.timers
                    .arm_after(&mut engine, &[ev.instance_id], offset);
            }
            result
        };
        if self.subs.count() > 0 {
            let entry = ev.to_entry();
            self.subs
                .publish(self.index, &entry, offset, &self.engine.borrow());
        }
        Ok((result, offset))
    }
}
