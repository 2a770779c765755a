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
//! A snapshot walk (`engine::snapshot::walk`) visits the table by bucket index across many
//! slices, so while it runs the table's layout must not change: the map is `frozen`. hashbrown
//! moves records only when it resizes or rehashes in place, and it does either only on an
//! insert into a table with no growth left (`capacity() == len()`); a frozen map puts such an
//! insert into a second table (`overflow`) instead, and `thaw` moves those records back when
//! the walk ends (one rehash, the one the insert would have made). Removals and inserts into
//! free buckets move nothing.

use std::hash::BuildHasher;
use std::sync::OnceLock;

use hashbrown::HashTable;

use super::instance::InstanceRecord;

/// id -> record.
#[derive(Clone, Default)]
pub(crate) struct InstanceMap {
    table: HashTable<Slot>,
    /// Records inserted while `frozen` when `table` had no growth left; empty otherwise.
    overflow: HashTable<Slot>,
    /// A walk visits `table` by bucket index: its layout must not change (module doc).
    frozen: bool,
    /// Ids come from clients: SipHash with a secret key keeps them from choosing collisions.
    hasher: IndexHasher,
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
            table: HashTable::with_capacity(n),
            overflow: HashTable::new(),
            frozen: false,
            hasher: IndexHasher::default(),
        }
    }

    /// The hash of `id` (one SipHash): computed once where one id is looked up several times
    /// (`get_hashed`, `prefetch_hashed`).
    pub(crate) fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    pub(crate) fn get(&self, id: &str) -> Option<&InstanceRecord> {
        self.get_hashed(self.hash(id), id)
    }

    /// `get` with `hash` = `self.hash(id)`.
    pub(crate) fn get_hashed(&self, hash: u64, id: &str) -> Option<&InstanceRecord> {
        let eq = has_id(id);
        match self.table.find(hash, eq) {
            Some(s) => Some(s),
            None if self.overflow.is_empty() => None,
            None => self.overflow.find(hash, eq),
        }
        .map(|s| &*s.record)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut InstanceRecord> {
        let hash = self.hash(id);
        let eq = has_id(id);
        if self.overflow.is_empty() {
            return self.table.find_mut(hash, eq).map(|s| &mut *s.record);
        }
        match self.table.find_mut(hash, eq) {
            Some(s) => Some(&mut *s.record),
            None => self.overflow.find_mut(hash, eq).map(|s| &mut *s.record),
        }
    }

    /// Starts loading the first `lines` cache lines of the record most likely under `hash`
    /// (`self.hash(id)`), without waiting for any of it: the first bucket whose hash tag
    /// matches, not compared (a wrong guess, 1 in 128 probes, only loads a line for nothing).
    pub(crate) fn prefetch_hashed(&self, hash: u64, lines: usize) {
        if let Some(slot) = self.table.find(hash, |_| true) {
            let base = (&*slot.record as *const InstanceRecord).cast::<u8>();
            for line in 0..lines {
                prefetch(base.wrapping_add(line * 64));
            }
        }
    }

    /// Inserts `record` under its id (one probe) and returns it in place; gives it back when
    /// the id is already present. A frozen map whose table has no growth left inserts into
    /// `overflow` (module doc).
    pub(crate) fn insert(
        &mut self,
        record: Box<InstanceRecord>,
    ) -> Result<&mut InstanceRecord, Box<InstanceRecord>> {
        let hash = self.hash(&record.instance.id);
        let id = record.instance.id.as_str();
        let eq = has_id(id);
        if !self.overflow.is_empty() && self.overflow.find(hash, eq).is_some() {
            return Err(record);
        }
        let full = self.table.capacity() == self.table.len();
        let table = match self.frozen && full {
            true if self.table.find(hash, eq).is_some() => return Err(record),
            true => &mut self.overflow,
            false => &mut self.table,
        };
        match table.entry(hash, eq, |s| s.hash) {
            hashbrown::hash_table::Entry::Occupied(_) => Err(record),
            hashbrown::hash_table::Entry::Vacant(v) => {
                Ok(&mut *v.insert(Slot { hash, record }).into_mut().record)
            }
        }
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<Box<InstanceRecord>> {
        let hash = self.hash(id);
        let eq = has_id(id);
        if let Ok(entry) = self.table.find_entry(hash, eq) {
            return Some(entry.remove().0.record);
        }
        match self.overflow.find_entry(hash, eq) {
            Ok(entry) => Some(entry.remove().0.record),
            Err(_) => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len() + self.overflow.len()
    }

    /// Every record, in no particular order.
    pub(crate) fn records(&self) -> impl Iterator<Item = &InstanceRecord> {
        (self.table.iter().chain(self.overflow.iter())).map(|s| &*s.record)
    }

    /// Fixes the table's layout for a walk by bucket index (module doc).
    pub(crate) fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Ends `freeze`: the records inserted meanwhile into `overflow` move into the table.
    pub(crate) fn thaw(&mut self) {
        self.frozen = false;
        if self.overflow.is_empty() {
            return;
        }
        let rehash = |s: &Slot| s.hash;
        self.table.reserve(self.overflow.len(), rehash);
        for slot in self.overflow.drain() {
            self.table.insert_unique(slot.hash, slot, rehash);
        }
        self.overflow = HashTable::new();
    }

    /// The table's home bucket for `hash` (hashbrown probes from `hash & (buckets - 1)`): a
    /// replay sorted by it reads the table, and records loaded from a snapshot, in order.
    pub(crate) fn home_bucket(&self, hash: u64) -> u64 {
        hash & (self.table.num_buckets() as u64).saturating_sub(1)
    }

    /// Buckets of the table (a frozen table keeps this number); `bucket` takes `0..this`.
    pub(crate) fn buckets(&self) -> usize {
        self.table.num_buckets()
    }

    /// The record in bucket `index` of the table, if the bucket holds one.
    pub(crate) fn bucket(&self, index: usize) -> Option<&InstanceRecord> {
        self.table.get_bucket(index).map(|s| &*s.record)
    }

    /// The bucket of the table holding `id` (None when it is absent or in `overflow`).
    pub(crate) fn bucket_of(&self, id: &str) -> Option<usize> {
        let hash = self.hash(id);
        (self.table).find_bucket_index(hash, |s| s.record.instance.id.as_str() == id)
    }

    /// `prefetch_hashed` for the record in bucket `index`, if any.
    pub(crate) fn prefetch_bucket(&self, index: usize, lines: usize) {
        if let Some(slot) = self.table.get_bucket(index) {
            let base = (&*slot.record as *const InstanceRecord).cast::<u8>();
            for line in 0..lines {
                prefetch(base.wrapping_add(line * 64));
            }
        }
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
mod tests {
    use super::*;

    #[test]
    fn one_key_gives_one_hash_in_every_table() {
        let a = InstanceMap::with_capacity(4);
        let b = InstanceMap::with_capacity(1000);
        assert_eq!(a.hash("order-1"), b.hash("order-1"));
        assert_ne!(a.hash("order-1"), a.hash("order-2"));
        // A second key is refused once tables use the first.
        assert!(!set_index_key(1, 2) || a.hash("x") == InstanceMap::default().hash("x"));
        assert!(b.home_bucket(a.hash("order-1")) < b.buckets() as u64);
    }

    #[test]
    fn prefetch_of_any_address_is_harmless() {
        prefetch(std::ptr::null::<u8>());
        prefetch(usize::MAX as *const u64);
    }
}
