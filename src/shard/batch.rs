//! An atomic BATCH on its shard: decide every op against a scratch view (the engine stays
//! unchanged), then log all writes as one `Entry::Batch` record (one offset, one group
//! commit), apply them in order, and queue the subscription pushes in order, all with no await
//! in between, so no other request on this shard sees half of the batch. The reply, like the
//! pushes, leaves once the record is durable.

use serde_json::Value;
use shards::engine::{Entry, Step};
use shards::{ErrorCode, Rejection};

use super::message::ReplyBody;
use super::runtime::{Outcome, Shard};
use crate::ops::batch::{aborted, engine_op, BatchItem};
use crate::util::time::now_ms;

impl Shard {
    pub(super) fn execute_batch(&self, items: &[BatchItem]) -> Outcome {
        let mut ops = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            match engine_op(item) {
                Ok(op) => ops.push(op),
                Err(error) => return (Err(aborted(index, &error)), 0),
            }
        }
        let offset = self.log.head() + 1;
        let decided = self.engine.borrow().decide_batch(&ops, now_ms(), offset);
        let steps = match decided {
            Ok(steps) => steps,
            Err(abort) => return (Err(aborted(abort.index, &abort.error)), 0),
        };
        let mut answers = Vec::with_capacity(steps.len());
        let mut entries = Vec::new();
        for step in steps {
            match step {
                Step::Answer(v) => answers.push(Some(v)),
                Step::Write(entry) => {
                    answers.push(None);
                    entries.push(entry);
                }
            }
        }
        if entries.is_empty() {
            // Reads and replays only: nothing to log, but what they saw must be durable.
            let results = answers.into_iter().flatten().collect();
            return (Ok(reply(results)), self.log.head());
        }
        let record = Entry::Batch { entries };
        let at = match self.log.append(&record.to_bytes()) {
            Ok(at) => at,
            Err(rej) => return (Err(rej), 0),
        };
        if at != offset {
            // `append` assigns head + 1; results decided above name `offset`.
            log::error!(
                "shard {}: batch logged at {at}, decided for {offset}",
                self.index
            );
        }
        let Entry::Batch { entries } = record else {
            return (Err(internal("batch record changed kind")), 0);
        };
        let mut applied = self.apply_in_order(entries, at).into_iter();
        let results = answers
            .into_iter()
            .map(|answer| answer.or_else(|| applied.next()).unwrap_or(Value::Null))
            .collect();
        (Ok(reply(results)), at)
    }

    /// Applies a batch's entries at `offset` one by one, publishing each event right after it
    /// is applied (so a push with context shows the context after that event, as for single
    /// ops); returns their results in order.
    fn apply_in_order(&self, entries: Vec<Entry>, offset: u64) -> Vec<Value> {
        let mut results = Vec::with_capacity(entries.len());
        let mut touched = Vec::new();
        for entry in entries {
            touched.extend(self.timers.touched(&entry));
            let published = self.subs.is_watched(&entry).then(|| entry.clone());
            let result = (self.engine.borrow_mut())
                .apply(entry, offset, true)
                .unwrap_or(Value::Null);
            if let Some(entry) = published {
                let engine = self.engine.borrow();
                self.subs.publish(self.index, &entry, offset, &engine);
            }
            results.push(result);
        }
        // Timers of the states the batch left its instances in (not the ones passed through).
        (self.timers).arm_after(&mut self.engine.borrow_mut(), &touched, offset);
        results
    }
}

/// `{"results":[{"status":"ok","result":R},...]}`, written straight into one buffer.
fn reply(results: Vec<Value>) -> ReplyBody {
    let mut out = Vec::with_capacity(64 + results.len() * 160);
    out.extend_from_slice(br#"{"results":["#);
    for (i, result) in results.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"status":"ok","result":"#);
        // Serialising a Value into a Vec cannot fail: no I/O, and every key is a string.
        let _ = serde_json::to_writer(&mut out, result);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    ReplyBody::Json(out)
}

fn internal(msg: &str) -> Rejection {
    Rejection::new(ErrorCode::InternalError, msg)
}
