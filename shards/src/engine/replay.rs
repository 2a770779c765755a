//! Replaying log records into the engine at start-up, grouped by instance.
//!
//! Applying one entry mostly waits on memory: its instance record, the context's nodes and the
//! history's tail are rarely in cache once there are many instances. Entries of different
//! instances commute (each changes only its own instance, and the counters are sums), so
//! replay collects a window of records, orders it by instance (log order within an instance;
//! instances in the order of their buckets in the table, `InstanceMap::home_bucket`)
//! and applies each instance's entries back to back: an instance is loaded once per window
//! instead of once per entry. While one instance is applied, the instances a few records
//! ahead are prefetched in two steps (their records, then what the records point to).
//!
//! A machine entry (read by every instance) or a format-1 JSON entry (whose instance is not
//! known without decoding it) is a barrier: the window before it is applied first, then it
//! alone. A record that does not decode stops the replay, naming the first bad offset in log
//! order, exactly as applying one record at a time would.

use std::hint::black_box;

use serde_json::Value;

use super::entry::record_instance_id;
use super::index::prefetch;
use super::instance::InstanceRecord;
use super::{Engine, Record};

/// Records per window. The larger the window, the more entries of one instance it holds and
/// the fewer times that instance is loaded. On a 1.09M-entry log over 40k instances (about 10k
/// busy at a time), recovery took 1.22 s with 16k-record windows, 1.05 s with 64k and 0.85-0.90 s
/// with 256k. A window costs 24 bytes per record (`Pending`) plus the records themselves.
const WINDOW_RECORDS: usize = 1 << 18;

/// Bytes of records per window: with `WINDOW_RECORDS`, bounds the memory replay holds (32 MiB
/// plus 6 MiB of `Pending`, per shard, at start-up only) whatever the records' size.
const WINDOW_BYTES: usize = 32 << 20;

/// How far ahead, in records of the window's order, a record's bytes are prefetched, then its
/// instance's record, then the context and history that record points to (each step reads
/// what the one before loaded).
const PREFETCH_BYTES_AHEAD: usize = 24;
const PREFETCH_RECORD_AHEAD: usize = 16;
const PREFETCH_DATA_AHEAD: usize = 8;

/// Bytes of a record prefetched (all of a typical APPLY record).
const RECORD_BYTES_PREFETCHED: u32 = 256;

/// Context members per instance whose name and string value are prefetched (a merge compares
/// against a few names and overwrites a value in place).
const CONTEXT_KEYS_PREFETCHED: usize = 4;

/// Cache lines of an `InstanceRecord` prefetched (the instance fields, history and key store).
const RECORD_LINES: usize = size_of::<InstanceRecord>().div_ceil(64);

const _: () = assert!(PREFETCH_BYTES_AHEAD > PREFETCH_RECORD_AHEAD);
const _: () = assert!(PREFETCH_RECORD_AHEAD > PREFETCH_DATA_AHEAD);
const _: () = assert!(WINDOW_BYTES < u32::MAX as usize / 2);

/// One queued record.
#[derive(Clone, Copy)]
struct Pending {
    /// The instance's home bucket in the table (high half) and the top of its hash (low half;
    /// a collision of both only puts two instances in one group). Sorted by this and then the
    /// offset, the window groups each instance's records in log order, in table order.
    key: u64,
    /// The instance id's table hash (`InstanceMap::hash`), computed once for the sort and
    /// reused by the prefetches' lookups.
    hash: u64,
    offset: u64,
    /// Where the record is in `Replay::bytes` (< `WINDOW_BYTES` + one record).
    start: u32,
    end: u32,
}

/// Collects records (copied out of the log's read buffer) and applies them window by window.
#[derive(Default)]
pub struct Replay {
    bytes: Vec<u8>,
    /// The window's records, in log order until `flush` sorts them.
    pending: Vec<Pending>,
    applied: u64,
}

impl Replay {
    pub fn new() -> Replay {
        Replay::default()
    }

    /// Queues the record at `offset`; applies the window when it is full, or at once when the
    /// record is a barrier.
    pub fn push(&mut self, engine: &mut Engine, offset: u64, payload: &[u8]) -> Result<(), String> {
        let Some(id) = record_instance_id(payload) else {
            self.flush(engine)?;
            let record = Record::decode(payload).map_err(|e| bad(offset, e))?;
            engine.apply_record(record, offset, false);
            self.applied += 1;
            return Ok(());
        };
        if self.pending.capacity() == 0 {
            // Whole windows at once rather than by doubling (which copies the window each
            // time); pages the log never fills are never touched.
            self.pending.reserve(WINDOW_RECORDS);
            self.bytes.reserve(WINDOW_BYTES);
        }
        // The instance's home bucket in the table: sorted by it, a window reads the table (and
        // the records a snapshot load allocated in bucket order) front to back.
        let hash = engine.instances.hash(id);
        let bucket = engine.instances.home_bucket(hash).min(u64::from(u32::MAX));
        let key = bucket << 32 | hash >> 32;
        let start = self.bytes.len();
        self.bytes.extend_from_slice(payload);
        // The window is flushed once it holds `WINDOW_BYTES`, and a log record holds at most
        // 64 MiB (`wal::limits::RECORD_PAYLOAD_BYTES_MAX`), so positions fit 32 bits.
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(self.bytes.len())) else {
            return Err(bad(offset, "replay window position beyond 4 GiB"));
        };
        self.pending.push(Pending {
            key,
            hash,
            offset,
            start,
            end,
        });
        if self.pending.len() >= WINDOW_RECORDS || self.bytes.len() >= WINDOW_BYTES {
            self.flush(engine)?;
        }
        Ok(())
    }

    /// Applies everything queued. Call before anything else changes `engine` (a snapshot
    /// load) and at the end.
    pub fn flush(&mut self, engine: &mut Engine) -> Result<(), String> {
        self.pending.sort_unstable_by_key(|p| (p.key, p.offset));
        let result = self.apply_window(engine);
        self.pending.clear();
        self.bytes.clear();
        result
    }

    /// Records applied so far.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    fn bytes_of(&self, p: &Pending) -> &[u8] {
        &self.bytes[p.start as usize..p.end as usize]
    }

    /// The table hash and instance id of the `k`th record when it starts a group (its hash differs from the
    /// record before it); prefetching once per group is enough.
    fn group_start(&self, k: usize) -> Option<(u64, &str)> {
        let p = self.pending.get(k)?;
        let prev = self.pending.get(k.checked_sub(1)?)?;
        if p.key == prev.key {
            return None;
        }
        record_instance_id(self.bytes_of(p)).map(|id| (p.hash, id))
    }

    /// Applies the sorted window. Four steps run at once, each some records ahead of the
    /// next: load a record's bytes, look up its instance and load the instance record, load
    /// the context and history the record points to, apply.
    fn apply_window(&mut self, engine: &mut Engine) -> Result<(), String> {
        for k in 0..self.pending.len() {
            if let Some(p) = self.pending.get(k + PREFETCH_BYTES_AHEAD) {
                let end = p.end.min(p.start + RECORD_BYTES_PREFETCHED);
                for at in (p.start..end).step_by(64) {
                    prefetch(self.bytes.as_ptr().wrapping_add(at as usize));
                }
            }
            if let Some((hash, id)) = self.group_start(k + PREFETCH_RECORD_AHEAD) {
                engine.prefetch_record(hash, id);
            }
            if let Some((hash, id)) = self.group_start(k + PREFETCH_DATA_AHEAD) {
                engine.prefetch_record_data(hash, id);
            }
            let p = self.pending[k];
            let Ok(record) = Record::decode(self.bytes_of(&p)) else {
                return Err(self.first_bad());
            };
            engine.apply_record(record, p.offset, false);
            self.applied += 1;
        }
        Ok(())
    }

    /// The error of the first queued record, in log order, that does not decode.
    fn first_bad(&self) -> String {
        let failed = (self.pending.iter())
            .filter_map(|p| {
                Record::decode(self.bytes_of(p))
                    .err()
                    .map(|e| (p.offset, e))
            })
            .min_by_key(|(offset, _)| *offset);
        match failed {
            Some((offset, e)) => bad(offset, e),
            // Only called after a queued record failed to decode, and decoding is deterministic.
            None => "a log entry failed to decode once and not again".into(),
        }
    }
}

fn bad(offset: u64, e: impl std::fmt::Display) -> String {
    format!("log entry at offset {offset}: {e}")
}

impl Engine {
    /// Starts loading the record of instance `id`, whose table hash is `hash` (the lookup
    /// itself waits for its bucket).
    fn prefetch_record(&self, hash: u64, id: &str) {
        if let Some(record) = self.instances.get_hashed(hash, id) {
            let base = (record as *const InstanceRecord).cast::<u8>();
            for line in 0..RECORD_LINES {
                prefetch(base.wrapping_add(line * 64));
            }
        }
    }

    /// Starts loading what applying an event to `id` touches beyond its record: the history
    /// tail and the context's first members. Reads the record, so `prefetch_record` should
    /// have been called a while before.
    fn prefetch_record_data(&self, hash: u64, id: &str) {
        let Some(record) = self.instances.get_hashed(hash, id) else {
            return;
        };
        // The history's own buffers are one more pointer away: the box is what can be
        // started here without waiting.
        if let Some(history) = &record.history {
            prefetch(&**history);
        }
        for (key, value) in record.instance.context.iter().take(CONTEXT_KEYS_PREFETCHED) {
            prefetch(black_box(key.as_ptr()));
            if let Value::String(s) = value {
                prefetch(s.as_ptr());
            }
        }
    }
}
