//! The snapshot walk: the engine's state as of one log offset `S`, serialised in bounded
//! slices while writes go on between them (docs/wal.md, "The snapshot walk").
//!
//! `begin` writes the state that is not per instance (`preamble`) at once and freezes the
//! instance table's layout (`InstanceMap::freeze`). Each `step` then visits the next buckets of
//! the table in index order and writes the instances it finds whose `wal_offset <= S`. Before
//! `apply` changes or deletes an instance, `before_change` writes it first if the walk has not
//! reached its bucket and it has not changed since `S` (serialise-before-write).
//!
//! Why the result is exactly the state at `S`. An instance's `wal_offset` is the offset of the
//! last entry that changed it, and every entry applied after `S` has an offset above `S`. So
//! `wal_offset <= S` means "unchanged since S": its current form is its form at S. Buckets
//! never move while the walk runs (the table is frozen), so "the walk has reached it" is
//! "its bucket is below the cursor". Take an instance that existed at S:
//! - if the walk reaches its bucket before any change to it, the walk writes it (unchanged);
//!   a later change finds its bucket below the cursor and writes nothing;
//! - if a change or delete comes first, `before_change` writes it (its bucket is at or above
//!   the cursor, and it is unchanged), and from then on its `wal_offset` is above S, so the
//!   walk passes over it (a deleted one is gone from the bucket).
//!
//! Either way it is written once, in its form at S. An instance created after S has a
//! `wal_offset` above S from birth (in a bucket the walk has passed, in one it has not, or in a
//! table the map started after the walk began, numbered past the walk's buckets), so it is
//! never written; a delete and re-create of one id makes a new record. The map moves no
//! entry while a walk runs (`InstanceMap::freeze`), even while its table grows.
//! Everything else the snapshot holds (definitions, counters, epochs, names) is written by
//! `begin`, before any entry after S is applied.
//!
//! Memory: the serialised bytes wait in `out` (chunks of about `CHUNK_BYTES`, so a burst of
//! writes never reallocates and copies one big buffer) until the shard's snapshot task takes
//! them for the disk, a chunk at a time. A step writes nothing while a slice's worth waits;
//! `before_change` must write (a write never waits for the walk), and when that pushes the
//! waiting bytes past `pending_max` the walk is given up (`Abandoned`), its bytes freed, and the
//! shard tries again later. Each instance is written once by a walk, so the bytes waiting never
//! pass the snapshot's own size: a `pending_max` at least that size (the shard sizes it from
//! the last snapshot or from `snapshot_projected`) is never reached, however hot the writes.

use smdb_format::limits::SNAPSHOT_ITEM_BYTES_MAX;
use smdb_format::snapshot_items::{put_item, TAG_INSTANCE};

use super::preamble::{put_end, put_preamble};
use super::record::put_record;
use crate::engine::index::InstanceMap;
use crate::engine::instance::InstanceRecord;
use crate::engine::names::Interner;
use crate::engine::Engine;

/// How much one `step` may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceBudget {
    /// Instances written, at most.
    pub records: usize,
    /// Bytes written, about (the step stops after the record that passes it).
    pub bytes: usize,
}

/// Bytes of one chunk of `Pending` (about: a chunk is closed once it passes this).
const CHUNK_BYTES: usize = 1 << 20;

/// Serialised bytes not taken yet: full chunks in order, then the one being filled.
#[derive(Clone, Default)]
struct Pending {
    full: std::collections::VecDeque<Vec<u8>>,
    open: Vec<u8>,
    /// Bytes in `full` and `open`.
    len: usize,
}

impl Pending {
    /// Appends what `write` puts into the open chunk (a new one once it is full); returns
    /// how many bytes that was.
    fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> usize {
        if self.open.len() >= CHUNK_BYTES {
            let next = Vec::with_capacity(CHUNK_BYTES + CHUNK_BYTES / 8);
            self.full.push_back(std::mem::replace(&mut self.open, next));
        }
        let before = self.open.len();
        write(&mut self.open);
        let added = self.open.len() - before;
        self.len += added;
        added
    }

    /// The oldest chunk (the open one when no chunk is full), moved to the end of `into`.
    fn take_chunk(&mut self, into: &mut Vec<u8>) {
        let chunk = match self.full.pop_front() {
            Some(c) => c,
            None => std::mem::take(&mut self.open),
        };
        self.len -= chunk.len();
        if into.is_empty() {
            *into = chunk;
        } else {
            into.extend_from_slice(&chunk);
        }
    }

    fn take_all(&mut self, into: &mut Vec<u8>) {
        while self.len > 0 {
            self.take_chunk(into);
        }
    }
}

/// Buckets a step looks at per instance it may write: a table is at least 7/16 full, so this
/// bounds the empty buckets a step passes over without cutting its records short.
const BUCKETS_PER_RECORD: usize = 4;

/// How far ahead of the cursor each part of an instance is prefetched. The records of
/// neighbouring buckets lie anywhere in the heap, and so do their parts: the record (three
/// cache lines), then, once it has arrived, what it points to (context members, history, keys),
/// then what those point to (the history's items, string values). Each is a cache and TLB miss
/// otherwise, paid one after another; staged, they overlap (benches/engine.rs
/// `snapshot_walk_1m`).
const PREFETCH_RECORD: usize = 16;
const PREFETCH_PARTS: usize = 8;
const PREFETCH_ITEMS: usize = 3;

/// Cache lines of a history's items prefetched (the walk copies them all; the hardware
/// prefetcher follows a sequential copy once started).
const HISTORY_LINES: usize = 4;

/// The staged prefetches for the visit of bucket `cursor` (see `PREFETCH_RECORD`). Reading a
/// record's fields here is a real load: the earlier stage has asked for that line.
fn prefetch_ahead(instances: &InstanceMap, cursor: usize) {
    instances.prefetch_bucket(cursor + PREFETCH_RECORD, 3);
    if let Some(r) = instances.bucket(cursor + PREFETCH_PARTS) {
        r.instance.context.prefetch_members();
        if let Some(h) = r.history.as_deref() {
            crate::engine::index::prefetch(h);
        }
        if let Some(k) = r.keys.as_deref() {
            crate::engine::index::prefetch(k);
        }
    }
    if let Some(r) = instances.bucket(cursor + PREFETCH_ITEMS) {
        r.instance.context.prefetch_values();
        if let Some(h) = r.history.as_deref() {
            h.prefetch_items(HISTORY_LINES);
        }
    }
}

/// Where a walk stands (`Engine::snapshot_step`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkProgress {
    /// More buckets to visit.
    Walking,
    /// Every instance is written and the end item follows them: take the bytes, then
    /// `snapshot_end`.
    Done {
        /// Instance items written.
        instances: u64,
        /// Of those, written by `before_change` (a write reached them first).
        by_writes: u64,
    },
    /// Given up (why); `snapshot_end` frees it.
    Abandoned(String),
    /// No walk with this id: it ended, or the engine was replaced.
    Gone,
}

#[derive(Clone)]
pub(crate) struct Walk {
    id: u64,
    /// The offset of the state written: every entry up to it is applied, none after.
    offset: u64,
    /// Next bucket to visit.
    cursor: usize,
    /// The frozen table's bucket count.
    buckets: usize,
    /// Serialised, not yet taken.
    out: Pending,
    /// Bytes serialised by this walk so far, taken or not, and of those the items before the
    /// instances.
    emitted: u64,
    preamble: u64,
    /// One item body being encoded.
    scratch: Vec<u8>,
    /// Instances in the table at `offset`.
    expected: u64,
    written: u64,
    by_writes: u64,
    pending_max: usize,
    state: WalkProgress,
}

impl std::fmt::Debug for Walk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("Walk"))
            .field("offset", &self.offset)
            .field("cursor", &self.cursor)
            .field("buckets", &self.buckets)
            .field("pending", &self.out.len)
            .field("state", &self.state)
            .finish()
    }
}

impl Walk {
    fn emit(&mut self, r: &InstanceRecord, names: &Interner) {
        self.scratch.clear();
        put_record(&mut self.scratch, r, names);
        if self.scratch.len() > SNAPSHOT_ITEM_BYTES_MAX {
            let id = &r.instance.id;
            let n = self.scratch.len();
            self.abandon(format!(
                "instance `{id}` takes {n} bytes, over the item limit"
            ));
            return;
        }
        let scratch = &self.scratch;
        let added = self
            .out
            .push_with(|out| put_item(out, TAG_INSTANCE, scratch));
        self.emitted += added as u64;
        self.written += 1;
    }

    fn abandon(&mut self, why: String) {
        self.out = Pending::default();
        self.state = WalkProgress::Abandoned(why);
    }

    /// Visits buckets from the cursor within `budget`.
    fn step(&mut self, instances: &InstanceMap, names: &Interner, budget: SliceBudget) {
        let start = self.emitted;
        let (mut records, mut looked) = (0, 0);
        let looks = budget.records.saturating_mul(BUCKETS_PER_RECORD);
        while self.cursor < self.buckets
            && records < budget.records
            && looked < looks
            && ((self.emitted - start) as usize) < budget.bytes
            && self.state == WalkProgress::Walking
        {
            prefetch_ahead(instances, self.cursor);
            if let Some(r) = instances.bucket(self.cursor) {
                if r.instance.wal_offset <= self.offset {
                    self.emit(r, names);
                    records += 1;
                }
            }
            self.cursor += 1;
            looked += 1;
        }
        if self.cursor == self.buckets && self.state == WalkProgress::Walking {
            self.finish();
        }
    }

    fn finish(&mut self) {
        if self.written != self.expected {
            let (w, e) = (self.written, self.expected);
            self.abandon(format!(
                "the walk wrote {w} of the {e} instances at its offset"
            ));
            log::error!("snapshot walk: {w} of {e} instances written: a defect, not kept");
            return;
        }
        let written = self.written;
        self.out.push_with(|out| put_end(out, written));
        self.state = WalkProgress::Done {
            instances: self.written,
            by_writes: self.by_writes,
        };
    }

    /// An instance is about to change or go: write it first when the walk still needs it.
    fn before_change(&mut self, instances: &InstanceMap, names: &Interner, id: &str) {
        if self.state != WalkProgress::Walking {
            return;
        }
        let Some(bucket) = instances.bucket_of(id).filter(|&b| b >= self.cursor) else {
            return;
        };
        let Some(r) = instances.bucket(bucket) else {
            return;
        };
        if r.instance.wal_offset > self.offset {
            return;
        }
        self.emit(r, names);
        self.by_writes += 1;
        if self.out.len > self.pending_max {
            let (n, max) = (self.out.len, self.pending_max);
            self.abandon(format!(
                "{n} serialised bytes waiting for the disk, over the limit of {max}"
            ));
        }
    }
}

impl Engine {
    /// Starts a walk of the state as of `offset`, the offset of the last entry applied (any
    /// running walk is ended first). Writes the items before the instances at once. Returns
    /// the walk's id for `snapshot_step` and `snapshot_take`; `pending_max` bounds the bytes
    /// waiting to be taken (see the module doc).
    pub fn snapshot_begin(&mut self, offset: u64, pending_max: usize) -> u64 {
        self.snapshot_end();
        self.walks += 1;
        let mut out = Pending::default();
        let mut scratch = Vec::new();
        let emitted = out.push_with(|out| put_preamble(out, self, &mut scratch)) as u64;
        self.instances.freeze();
        self.walk = Some(Box::new(Walk {
            id: self.walks,
            offset,
            cursor: 0,
            buckets: self.instances.buckets(),
            out,
            emitted,
            preamble: emitted,
            scratch,
            expected: self.instances.len() as u64,
            written: 0,
            by_writes: 0,
            pending_max,
            state: WalkProgress::Walking,
        }));
        self.walks
    }

    /// One slice of walk `id`: visits buckets within `budget` unless `pending_soft` bytes or
    /// more already wait to be taken. Returns where the walk stands.
    pub fn snapshot_step(
        &mut self,
        id: u64,
        budget: SliceBudget,
        pending_soft: usize,
    ) -> WalkProgress {
        let Some(walk) = self.walk.as_deref_mut().filter(|w| w.id == id) else {
            return WalkProgress::Gone;
        };
        if walk.out.len < pending_soft {
            walk.step(&self.instances, &self.names, budget);
        }
        walk.state.clone()
    }

    /// Moves the bytes walk `id` has serialised to the end of `into`; false when there is no
    /// such walk.
    pub fn snapshot_take(&mut self, id: u64, into: &mut Vec<u8>) -> bool {
        match self.walk.as_deref_mut().filter(|w| w.id == id) {
            Some(walk) => walk.out.take_all(into),
            None => return false,
        }
        true
    }

    /// `snapshot_take` of the oldest chunk only (about 1 MiB; all of it when less waits): what
    /// the shard hands the disk per slice, so a burst of bytes written ahead of changes is
    /// never copied whole.
    pub fn snapshot_take_chunk(&mut self, id: u64, into: &mut Vec<u8>) -> bool {
        match self.walk.as_deref_mut().filter(|w| w.id == id) {
            Some(walk) => walk.out.take_chunk(into),
            None => return false,
        }
        true
    }

    /// Bytes serialised and not yet taken (0 without a walk).
    pub fn snapshot_pending(&self) -> usize {
        self.walk.as_ref().map_or(0, |w| w.out.len)
    }

    /// The size the running walk's snapshot is heading for: the bytes it has serialised,
    /// scaled from the instances written to all of them (0 without a walk, or before it wrote
    /// any). Read after an `Abandoned` to size the next walk's `pending_max`.
    pub fn snapshot_projected(&self) -> u64 {
        let Some(w) = self.walk.as_ref().filter(|w| w.written > 0) else {
            return 0;
        };
        let per = (w.emitted - w.preamble) as f64 / w.written as f64;
        w.preamble + (per * w.expected.max(w.written) as f64) as u64
    }

    /// The offset of the running walk, if any.
    pub fn snapshot_walking(&self) -> Option<u64> {
        self.walk.as_ref().map(|w| w.offset)
    }

    /// Ends the walk, whatever its state (done, abandoned, or cancelled mid-way), and lets the
    /// instance table grow in place again.
    pub fn snapshot_end(&mut self) {
        if self.walk.take().is_some() {
            self.instances.thaw();
        }
    }

    /// `apply` is about to change or delete instance `id` (see the module doc).
    pub(crate) fn before_change(&mut self, id: &str) {
        if let Some(walk) = self.walk.as_deref_mut() {
            walk.before_change(&self.instances, &self.names, id);
        }
    }
}
