//! Replaying log records into the engine at start-up, in batches that overlap cache misses.
//!
//! Applying one entry waits on memory: its instance record, the context's B-tree node and the
//! history's tail are rarely in cache once there are many instances. Entries of one batch are
//! decoded first, their records' cache lines prefetched, then applied in log order; the loads
//! for a whole batch are then in flight together instead of one after another. Prefetching is
//! only a hint: entries are applied exactly as `Engine::apply_record` would one at a time.

use std::hint::black_box;

use serde_json::Value;

use super::index::prefetch;
use super::instance::InstanceRecord;
use super::{Engine, Record};

/// Records decoded and prefetched together. Enough to cover memory latency several times
/// over, small enough that the prefetched lines are still in L1/L2 when applied.
const REPLAY_BATCH_RECORDS: usize = 16;

/// Context keys per record whose text is prefetched (a merge compares against a few of them).
const CONTEXT_KEYS_PREFETCHED: usize = 4;

/// Cache lines of an `InstanceRecord` prefetched (the instance fields, history and key store).
const RECORD_LINES: usize = size_of::<InstanceRecord>().div_ceil(64);

/// Collects records (copied out of the log's read buffer) and applies them in batches.
#[derive(Default)]
pub struct Replay {
    bytes: Vec<u8>,
    /// (offset, start, end) of each pending record in `bytes`.
    pending: Vec<(u64, usize, usize)>,
    applied: u64,
}

impl Replay {
    pub fn new() -> Replay {
        Replay::default()
    }

    /// Queues the record at `offset`; applies the batch when it is full.
    pub fn push(&mut self, engine: &mut Engine, offset: u64, payload: &[u8]) -> Result<(), String> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(payload);
        self.pending.push((offset, start, self.bytes.len()));
        if self.pending.len() >= REPLAY_BATCH_RECORDS {
            self.flush(engine)?;
        }
        Ok(())
    }

    /// Applies everything queued. Call before anything else changes `engine` (a snapshot
    /// load) and at the end.
    pub fn flush(&mut self, engine: &mut Engine) -> Result<(), String> {
        let mut records = Vec::with_capacity(self.pending.len());
        for &(offset, start, end) in &self.pending {
            let record = Record::decode(&self.bytes[start..end])
                .map_err(|e| format!("log entry at offset {offset}: {e}"))?;
            records.push((offset, record));
        }
        engine.prefetch_records(&records);
        for (offset, record) in records {
            engine.apply_record(record, offset, false);
            self.applied += 1;
        }
        self.pending.clear();
        self.bytes.clear();
        Ok(())
    }

    /// Records applied so far.
    pub fn applied(&self) -> u64 {
        self.applied
    }
}

impl Engine {
    /// Starts loading what applying `records` will touch: first the instance records, then
    /// (once those lines are arriving) the context nodes and history tails they point to.
    fn prefetch_records(&self, records: &[(u64, Record<'_>)]) {
        let events = || {
            records.iter().filter_map(|(_, r)| match r {
                Record::Event(ev) => self.instances.get(ev.instance_id),
                Record::Entry(_) => None,
            })
        };
        for record in events() {
            let base = (&**record as *const InstanceRecord).cast::<u8>();
            for line in 0..RECORD_LINES {
                prefetch(base.wrapping_add(line * 64));
            }
        }
        for record in events() {
            record.history.prefetch_tail();
            // Merging a payload compares its keys with the context's, which live on the heap.
            // Reading the node is a real load, but independent of the other records' loads,
            // so they overlap.
            // A merge overwrites a string value in its own buffer, which is as cold.
            for (key, value) in record.instance.context.iter().take(CONTEXT_KEYS_PREFETCHED) {
                prefetch(black_box(key.as_ptr()));
                if let Value::String(s) = value {
                    prefetch(s.as_ptr());
                }
            }
        }
    }
}
