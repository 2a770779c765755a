//! The instance index: id -> record, laid out so that replaying a log stays in cache.
//!
//! The table holds a pointer and the id's hash per bucket (plus hashbrown's control byte): the
//! id lives in the boxed record (`Instance::id`, inline when short), so the table is ~17 bytes
//! per bucket, 19-39 bytes per instance depending on load. The hash is kept so that growing
//! the table rehashes from the table alone: without it every record is read once per doubling,
//! a cache and TLB miss each (a 4.8 s stall of the shard at 7.3M instances, benches/RESULTS.md
//! session 25). A lookup compares the id in the record it
//! finds, which is the record it was going to read anyway; hashbrown's per-bucket hash tags
//! make comparing against a wrong record rare (1 in 128 probes). An atomic batch prefetches the
//! records of all its ops before deciding them (`prefetch_hashed`), which overlaps the cache
//! misses that would otherwise be paid one after another.
//!
//! The table grows without stopping the shard. hashbrown grows a full table by rehashing
//! every entry at once, which at 7.3M instances stopped the shard for 143 ms (benches/RESULTS.md
//! session 27). Here an insert into a full table starts a new table of twice its capacity and
//! goes into it; every later insert, removal and mutable lookup then moves a few entries
//! (`MOVE_PER_OP`, scanning at most `SCAN_PER_OP` buckets) from the oldest table into the newest,
//! as Redis's incremental rehash does, and a table that is empty is dropped. A lookup probes the
//! newest table first, then the older ones (two tables while growing, one otherwise). The new
//! table has room for every entry of the old one and as many inserts again, and each insert moves
//! at least one entry, so the old table is empty before the new one fills.
//!
//! A snapshot walk (`engine::snapshot::walk`) visits the tables by bucket index across many
//! slices (`bucket`: the tables' buckets numbered one after another, oldest first), so while it
//! runs no entry may move: the map is `frozen`. A frozen map moves nothing and drops no table;
//! an insert goes into the newest table while it has room, and into a new table after it when it
//! has none. Either way the buckets the walk numbered keep their entries, and the entries
//! inserted meanwhile (after the walk's offset) are at numbers past them or in buckets that were
//! empty. `thaw` lets the moves resume. Removals and inserts into free buckets move nothing.

use std::hash::BuildHasher;
use std::sync::OnceLock;

use hashbrown::HashTable;

use super::instance::InstanceRecord;

/// Entries moved from the oldest table into the newest per insert, removal or mutable lookup
/// while the table grows (module doc): at least 1, so the old table empties before the new one
/// fills. 8 moves cost a write well under a microsecond and empty a 7.3M-entry table in under
/// a million writes.
const MOVE_PER_OP: usize = 8;

/// Buckets looked at per op while moving, moved or empty (a sparse old table costs a bounded
/// scan per op, not a run to the next entry).
const SCAN_PER_OP: usize = 4 * MOVE_PER_OP;

const _: () = assert!(MOVE_PER_OP >= 1 && SCAN_PER_OP >= MOVE_PER_OP);

/// id -> record.
#[derive(Clone)]
pub(crate) struct InstanceMap {
    /// Oldest first; the last takes inserts. One table, or more while growing (module doc).
    /// Never empty.
    tables: Vec<HashTable<Slot>>,
    /// The next bucket of `tables[0]` to move from while growing.
    moved_to: usize,
    /// A walk visits the tables by bucket index: no entry may move (module doc).
    frozen: bool,
    /// Ids come from clients: SipHash with a secret key keeps them from choosing collisions.
    hasher: IndexHasher,
}

impl Default for InstanceMap {
    fn default() -> Self {
        InstanceMap::with_capacity(0)
    }
}

/// One bucket's entry: a record and its id's hash (`InstanceMap::hash`).
#[derive(Clone)]
struct Slot {
    hash: u64,
    record: Box<InstanceRecord>,
}

/// The instance table's hash: SipHash-2-4 under a secret 128-bit key. The key is the data
/// dir's (`set_index_key`, from `smdb.meta`), the same in every process on that data dir, so a
/// table rebuilt from a snapshot (written in bucket order, `snapshot::walk`) is filled in bucket
/// order and a replay sorted by bucket (`replay`) reads it in order: sequential memory instead
/// of a cache and TLB miss per instance. Without a data dir (tools, tests) a random key per
/// process. Never shown to clients.
#[derive(Clone, Copy, Debug)]
pub struct IndexHasher {
    k0: u64,
    k1: u64,
}

impl BuildHasher for IndexHasher {
    // std's keyed SipHash is deprecated in favour of RandomState, which cannot take a key;
    // it stays in std (stable API), and its output never changes across Rust versions.
    #[allow(deprecated)]
    type Hasher = std::hash::SipHasher;

    #[allow(deprecated)]
    fn build_hasher(&self) -> Self::Hasher {
        std::hash::SipHasher::new_with_keys(self.k0, self.k1)
    }
}

impl Default for IndexHasher {
    fn default() -> Self {
        *INDEX_KEY.get_or_init(|| {
            let random = std::collections::hash_map::RandomState::new();
            IndexHasher {
                k0: random.hash_one(0u64),
                k1: random.hash_one(1u64),
            }
        })
    }
}

/// The key every instance table of this process uses.
static INDEX_KEY: OnceLock<IndexHasher> = OnceLock::new();

/// Sets the instance tables' key for this process (the data dir's, before any shard builds
/// an engine). False when a key was already in use (then tables keep that one).
pub fn set_index_key(k0: u64, k1: u64) -> bool {
    INDEX_KEY.set(IndexHasher { k0, k1 }).is_ok()
}

impl InstanceMap {
    pub(crate) fn with_capacity(n: usize) -> Self {
        InstanceMap {
            tables: vec![HashTable::with_capacity(n)],
            moved_to: 0,
            frozen: false,
            hasher: IndexHasher::default(),
        }
    }

    /// The hash of `id` (one SipHash): computed once where one id is looked up several times
    /// (`get_hashed`, `prefetch_hashed`).
    pub(crate) fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    /// The table inserts go to (the newest).
    fn newest(&self) -> &HashTable<Slot> {
        // `tables` is never empty: built with one, and `move_some` drops only an older one.
        &self.tables[self.tables.len() - 1]
    }

    pub(crate) fn get(&self, id: &str) -> Option<&InstanceRecord> {
        self.get_hashed(self.hash(id), id)
    }

    /// `get` with `hash` = `self.hash(id)`.
    pub(crate) fn get_hashed(&self, hash: u64, id: &str) -> Option<&InstanceRecord> {
        let eq = has_id(id);
        self.tables
            .iter()
            .rev()
            .find_map(|t| t.find(hash, eq))
            .map(|s| &*s.record)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut InstanceRecord> {
        self.move_some();
        let hash = self.hash(id);
        let eq = has_id(id);
        self.tables
            .iter_mut()
            .rev()
            .find_map(|t| t.find_mut(hash, eq))
            .map(|s| &mut *s.record)
    }

    /// Starts loading the first `lines` cache lines of the record most likely under `hash`
    /// (`self.hash(id)`), without waiting for any of it: the first bucket whose hash tag
    /// matches, not compared (a wrong guess, 1 in 128 probes, only loads a line for nothing).
    pub(crate) fn prefetch_hashed(&self, hash: u64, lines: usize) {
        if let Some(slot) = self
            .tables
            .iter()
            .rev()
            .find_map(|t| t.find(hash, |_| true))
        {
            prefetch_record(slot, lines);
        }
    }

    /// Inserts `record` under its id (one probe per table) and returns it in place; gives it
    /// back when the id is already present. An insert into a full newest table starts a new
    /// one (module doc).
    pub(crate) fn insert(
        &mut self,
        record: Box<InstanceRecord>,
    ) -> Result<&mut InstanceRecord, Box<InstanceRecord>> {
        self.move_some();
        let hash = self.hash(&record.instance.id);
        let eq = has_id(record.instance.id.as_str());
        let older = self.tables.len() - 1;
        if self.tables[..older]
            .iter()
            .any(|t| t.find(hash, eq).is_some())
        {
            return Err(record);
        }
        let newest = &self.tables[older];
        if newest.capacity() == newest.len() && newest.capacity() > 0 {
            if newest.find(hash, eq).is_some() {
                return Err(record);
            }
            // Room for every entry of every table and as many inserts again (module doc).
            let grown = self.len().saturating_mul(2).max(4);
            self.tables.push(HashTable::with_capacity(grown));
        }
        let last = self.tables.len() - 1;
        match self.tables[last].entry(hash, eq, |s| s.hash) {
            hashbrown::hash_table::Entry::Occupied(_) => Err(record),
            hashbrown::hash_table::Entry::Vacant(v) => {
                Ok(&mut *v.insert(Slot { hash, record }).into_mut().record)
            }
        }
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<Box<InstanceRecord>> {
        self.move_some();
        let hash = self.hash(id);
        let eq = has_id(id);
        self.tables
            .iter_mut()
            .rev()
            .find_map(|t| t.find_entry(hash, eq).ok())
            .map(|entry| entry.remove().0.record)
    }

    /// While growing and not frozen: moves up to `MOVE_PER_OP` entries from the oldest table
    /// into the newest, looking at up to `SCAN_PER_OP` buckets, and drops the oldest table once
    /// it is empty.
    fn move_some(&mut self) {
        if self.frozen || self.tables.len() < 2 {
            return;
        }
        let (mut moved, mut scanned) = (0, 0);
        while moved < MOVE_PER_OP && scanned < SCAN_PER_OP {
            let Some((oldest, rest)) = self.tables.split_first_mut() else {
                return;
            };
            if oldest.is_empty() {
                self.tables.remove(0);
                self.moved_to = 0;
                if self.tables.len() < 2 {
                    return;
                }
                continue;
            }
            let Some(newest) = rest.last_mut() else {
                return;
            };
            if self.moved_to >= oldest.num_buckets() {
                self.moved_to = 0;
            }
            if let Ok(entry) = oldest.get_bucket_entry(self.moved_to) {
                let slot = entry.remove().0;
                // The newest table has room (module doc), so this never rehashes it; were it
                // full, hashbrown would grow it in one go, which is correct, only slower.
                newest.insert_unique(slot.hash, slot, |s| s.hash);
                moved += 1;
            }
            self.moved_to += 1;
            scanned += 1;
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tables.iter().map(HashTable::len).sum()
    }

    /// Every record, in no particular order.
    pub(crate) fn records(&self) -> impl Iterator<Item = &InstanceRecord> + Clone {
        self.tables
            .iter()
            .flat_map(|t| t.iter())
            .map(|s| &*s.record)
    }

    /// Holds every entry in its bucket for a walk by bucket index (module doc).
    pub(crate) fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Ends `freeze`: the moves of a growth resume with the next write.
    pub(crate) fn thaw(&mut self) {
        self.frozen = false;
    }

    /// True while entries wait to move into the newest table.
    #[cfg(test)]
    pub(crate) fn growing(&self) -> bool {
        self.tables.len() > 1
    }

    /// The newest table's home bucket for `hash` (hashbrown probes from `hash & (buckets -
    /// 1)`): a replay sorted by it reads the table, and records loaded from a snapshot, in
    /// order.
    pub(crate) fn home_bucket(&self, hash: u64) -> u64 {
        hash & (self.newest().num_buckets() as u64).saturating_sub(1)
    }

    /// Buckets of all tables, numbered oldest table first; `bucket` takes `0..this`. A frozen
    /// map keeps every number it had (module doc); it may add numbers past them.
    pub(crate) fn buckets(&self) -> usize {
        self.tables.iter().map(HashTable::num_buckets).sum()
    }

    /// The table and its bucket for bucket number `index`.
    fn locate(&self, mut index: usize) -> Option<(&HashTable<Slot>, usize)> {
        if let [only] = self.tables.as_slice() {
            return Some((only, index));
        }
        for t in &self.tables {
            if index < t.num_buckets() {
                return Some((t, index));
            }
            index -= t.num_buckets();
        }
        None
    }

    /// The record in bucket number `index`, if the bucket holds one.
    pub(crate) fn bucket(&self, index: usize) -> Option<&InstanceRecord> {
        let (t, i) = self.locate(index)?;
        t.get_bucket(i).map(|s| &*s.record)
    }

    /// The bucket number holding `id` (None when it is absent).
    pub(crate) fn bucket_of(&self, id: &str) -> Option<usize> {
        let hash = self.hash(id);
        let mut first = 0;
        for t in &self.tables {
            if let Some(i) = t.find_bucket_index(hash, has_id(id)) {
                return Some(first + i);
            }
            first += t.num_buckets();
        }
        None
    }

    /// `prefetch_hashed` for the record in bucket number `index`, if any.
    pub(crate) fn prefetch_bucket(&self, index: usize, lines: usize) {
        if let Some(slot) = self.locate(index).and_then(|(t, i)| t.get_bucket(i)) {
            prefetch_record(slot, lines);
        }
    }
}

/// Starts loading the first `lines` cache lines of `slot`'s record.
fn prefetch_record(slot: &Slot, lines: usize) {
    let base = (&*slot.record as *const InstanceRecord).cast::<u8>();
    for line in 0..lines {
        prefetch(base.wrapping_add(line * 64));
    }
}

/// Matches the table entry holding `id`.
fn has_id(id: &str) -> impl Fn(&Slot) -> bool + Copy + '_ {
    move |s| s.record.instance.id.as_str() == id
}

impl std::fmt::Debug for InstanceMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.records()).finish()
    }
}

/// Asks the CPU to start loading the cache line at `p`. Only a hint: it never faults and
/// never changes what any later read returns.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is defined for any address, valid or not; it reads nothing into the
    // program's state and cannot fault. SSE is part of the x86_64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests;
