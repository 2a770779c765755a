//! An atomic BATCH on its shard: decide every op against a scratch view (the engine stays
//! unchanged) straight into one `Entry::Batch` record, log it (one offset, one group commit),
//! then apply its entries in order from that same record, as recovery does, queueing the
//! subscription pushes in order, all with no await in between, so no other request on this
//! shard sees half of the batch. The reply, like the pushes, leaves once the record is durable.

use std::borrow::Cow;

use serde_json::Value;
use shards::engine::{batch_records, BatchRecord, Record};
use shards::Rejection;

use super::event::RECORD_BUF_KEEP_BYTES;
use super::message::ReplyBody;
use super::runtime::{internal, Needs, Outcome, Shard};
use crate::ops::batch::{aborted, engine_op, BatchOps};
use crate::util::time::now_ms;

/// Reply bytes reserved per op (a typical APPLY result with its context is ~200-300 bytes).
const REPLY_BYTES_PER_OP: usize = 320;

impl Shard {
    pub(super) fn execute_batch(&self, batch: &BatchOps) -> Outcome {
        let mut ops = Vec::with_capacity(batch.len());
        for (index, item) in batch.iter().enumerate() {
            match engine_op(batch, item) {
                Ok(op) => ops.push(op),
                Err(error) => return (Err(aborted(index, &error)), Needs::NOTHING),
            }
        }
        let offset = self.log.head() + 1;
        let scratch = self.batch_record.take();
        let decided = (self.engine.borrow()).decide_batch_into(&ops, now_ms(), offset, scratch);
        let decided = match decided {
            Ok(decided) => decided,
            Err(abort) => return (Err(aborted(abort.index, &abort.error)), Needs::NOTHING),
        };
        let mut reply = Reply::new(decided.answers.len());
        if decided.record.is_empty() {
            // Reads and replays only: nothing to log, but what they saw must be durable.
            for answer in &decided.answers {
                reply.push_value(answer.as_ref().unwrap_or(&Value::Null));
            }
            self.keep_batch_record(decided.record);
            return (Ok(reply.finish()), Needs::durable(self.log.head()));
        }
        let mut record = self.record_buf.take();
        record.clear();
        decided.record.finish_into(&mut record);
        let outcome = match self.append(&record) {
            Ok(at) => {
                if at != offset {
                    // `append` assigns head + 1; results decided above name `offset`.
                    log::error!(
                        "shard {}: batch logged at {at}, decided for {offset}",
                        self.index
                    );
                }
                match self.apply_in_order(&record, at, &decided.answers, &mut reply) {
                    Ok(()) => (Ok(reply.finish()), Needs::durable(at)),
                    Err(rej) => (Err(rej), Needs::NOTHING),
                }
            }
            Err(rej) => (Err(rej), Needs::NOTHING),
        };
        if record.capacity() <= RECORD_BUF_KEEP_BYTES {
            self.record_buf.replace(record);
        }
        self.keep_batch_record(decided.record);
        outcome
    }

    /// Keeps `record`'s buffers for the next batch, unless a large batch left them larger than
    /// `RECORD_BUF_KEEP_BYTES` (then the next batch starts from empty ones).
    fn keep_batch_record(&self, record: BatchRecord) {
        if record.capacity() <= RECORD_BUF_KEEP_BYTES {
            self.batch_record.replace(record);
        }
    }

    /// Applies the logged batch `record` at `offset` entry by entry, publishing each event
    /// right after it is applied (so a push with context shows the context after that event,
    /// as for single ops), and writes every op's result to `reply` in op order: its answer
    /// where it had one, else what applying its entry gave.
    fn apply_in_order(
        &self,
        record: &[u8],
        offset: u64,
        answers: &[Option<Value>],
        reply: &mut Reply,
    ) -> Result<(), Rejection> {
        let records = batch_records(record)
            .map_err(|e| internal(&format!("a decided batch record does not decode: {e}")))?;
        let mut records = records.into_iter();
        let mut touched: Vec<Cow<'_, str>> = Vec::new();
        for answer in answers {
            if let Some(answer) = answer {
                reply.push_value(answer);
                continue;
            }
            let out = reply.open();
            match records.next() {
                Some(Record::Event(ev)) => {
                    let applied = (self.engine.borrow_mut()).apply_event_into(ev, offset, out);
                    if !applied {
                        out.extend_from_slice(b"null");
                    }
                    if ev.from != ev.to {
                        touched.push(Cow::Borrowed(ev.instance_id));
                    }
                    if self.subs.count() > 0 {
                        let entry = ev.to_entry();
                        (self.subs).publish(self.index, &entry, offset, &self.engine.borrow());
                    }
                }
                Some(Record::Entry(entry)) => {
                    touched.extend(self.timers.touched(&entry).into_iter().map(Cow::Owned));
                    let published = self.subs.is_watched(&entry).then(|| entry.clone());
                    if !(self.engine.borrow_mut()).apply_into(entry, offset, out) {
                        out.extend_from_slice(b"null");
                    }
                    if let Some(entry) = published {
                        (self.subs).publish(self.index, &entry, offset, &self.engine.borrow());
                    }
                }
                None => out.extend_from_slice(b"null"),
            }
            reply.close();
        }
        // Timers of the states the batch left its instances in (not the ones passed through).
        (self.timers).arm_after(&mut self.engine.borrow_mut(), &touched, offset);
        Ok(())
    }
}

/// `{"results":[{"status":"ok","result":R},...]}`, written straight into one buffer.
struct Reply {
    out: Vec<u8>,
    first: bool,
}

impl Reply {
    fn new(ops: usize) -> Reply {
        let mut out = Vec::with_capacity(16 + ops * REPLY_BYTES_PER_OP);
        out.extend_from_slice(br#"{"results":["#);
        Reply { out, first: true }
    }

    /// Starts the next op's result; the caller writes the result JSON, then calls `close`.
    fn open(&mut self) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.extend_from_slice(br#"{"status":"ok","result":"#);
        &mut self.out
    }

    fn close(&mut self) {
        self.out.push(b'}');
    }

    fn push_value(&mut self, result: &Value) {
        // Serialising a Value into a Vec cannot fail: no I/O, and every key is a string.
        let _ = serde_json::to_writer(self.open(), result);
        self.close();
    }

    fn finish(mut self) -> ReplyBody {
        self.out.extend_from_slice(b"]}");
        ReplyBody::Json(self.out)
    }
}
