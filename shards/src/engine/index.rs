//! The instance index: id -> record, laid out so that replaying a log stays in cache.
//!
//! The table holds only a pointer per bucket (plus hashbrown's control byte): the id lives in
//! the boxed record (`Instance::id`, inline when short), so the table is ~9 bytes per bucket,
//! 19-38 bytes per instance depending on load. A lookup compares the id in the record it
//! finds, which is the record it was going to read anyway; hashbrown's per-bucket hash tags
//! make comparing against a wrong record rare (1 in 128 probes). An atomic batch prefetches the
//! records of all its ops before deciding them (`prefetch_hashed`), which overlaps the cache
//! misses that would otherwise be paid one after another.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::instance::InstanceRecord;

/// id -> record.
#[derive(Clone, Default)]
pub(crate) struct InstanceMap {
    table: HashTable<Box<InstanceRecord>>,
    /// Ids come from clients: SipHash with a per-process key keeps them from choosing
    /// collisions.
    hasher: RandomState,
}

impl InstanceMap {
    pub(crate) fn with_capacity(n: usize) -> Self {
        InstanceMap {
            table: HashTable::with_capacity(n),
            hasher: RandomState::new(),
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
        (self.table)
            .find(hash, |r| r.instance.id.as_str() == id)
            .map(|r| &**r)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut InstanceRecord> {
        let hash = self.hash(id);
        (self.table)
            .find_mut(hash, |r| r.instance.id.as_str() == id)
            .map(|r| &mut **r)
    }

    /// Starts loading the first `lines` cache lines of the record most likely under `hash`
    /// (`self.hash(id)`), without waiting for any of it: the first bucket whose hash tag
    /// matches, not compared (a wrong guess, 1 in 128 probes, only loads a line for nothing).
    pub(crate) fn prefetch_hashed(&self, hash: u64, lines: usize) {
        if let Some(record) = self.table.find(hash, |_| true) {
            let base = (&**record as *const InstanceRecord).cast::<u8>();
            for line in 0..lines {
                prefetch(base.wrapping_add(line * 64));
            }
        }
    }

    /// Inserts `record` under its id (one probe) and returns it in place; gives it back when
    /// the id is already present.
    pub(crate) fn insert(
        &mut self,
        record: Box<InstanceRecord>,
    ) -> Result<&mut InstanceRecord, Box<InstanceRecord>> {
        let hash = self.hash(&record.instance.id);
        let hasher = &self.hasher;
        let id = record.instance.id.as_str();
        match (self.table).entry(
            hash,
            |r| r.instance.id.as_str() == id,
            |r| hasher.hash_one(r.instance.id.as_str()),
        ) {
            hashbrown::hash_table::Entry::Occupied(_) => Err(record),
            hashbrown::hash_table::Entry::Vacant(slot) => Ok(&mut **slot.insert(record).into_mut()),
        }
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<Box<InstanceRecord>> {
        let hash = self.hash(id);
        match self
            .table
            .find_entry(hash, |r| r.instance.id.as_str() == id)
        {
            Ok(entry) => Some(entry.remove().0),
            Err(_) => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Every record, in no particular order.
    pub(crate) fn records(&self) -> impl Iterator<Item = &InstanceRecord> {
        self.table.iter().map(|r| &**r)
    }
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
    fn prefetch_of_any_address_is_harmless() {
        prefetch(std::ptr::null::<u8>());
        prefetch(usize::MAX as *const u64);
    }
}
