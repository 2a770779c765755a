//! Interned names: machine, state and event names as shared `Arc<str>`.
//!
//! Every history item and counter key names a state or an event. Interning them makes a history
//! item hold pointers instead of three fresh strings, and lets `apply` count an event without
//! allocating. The set of names is bounded by the definitions (`decide` logs only names a
//! definition declares), so the interner never needs eviction.
//!
//! Each name also has a stable small id (`NameId`, in order of first use): history items store
//! ids, four plain bytes, instead of `Arc` handles, so appending one counts no references, and
//! a read maps them back (`Interner::name`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A machine, state or event name shared by every place that holds it.
pub type Name = Arc<str>;

/// A name's id in its engine's `Interner`: ids are never reused or freed.
pub(crate) type NameId = u32;

/// A map keyed by names a definition declares (machine, state and event names, and tuples of
/// them): hashed with `NameHasher`, for the reason given there.
pub type NameMap<K, V> = HashMap<K, V, BuildHasherDefault<NameHasher>>;

/// A `NameMap` of counters (the engine's `EngineStats`). hashbrown's map rather than std's
/// (the same table) for one thing std lacks: lookups by a borrowed key (`stats::Pair`,
/// `stats::Triple`) that hashes and compares like the owned tuple, so counting an event clones
/// no `Arc` (each clone and drop is an atomic add).
pub type CountMap<K> = hashbrown::HashMap<K, u64, BuildHasherDefault<NameHasher>>;

#[derive(Debug, Clone, Default)]
pub(crate) struct Interner {
    ids: NameMap<Name, NameId>,
    /// The names by id.
    names: Vec<Name>,
}

/// A multiply-rotate hash (FxHash's construction) for maps keyed by names (`NameMap`): the
/// interner, the catalog, a machine's state and event index and the engine's counters, looked
/// up several times per applied event. SipHash's flooding resistance buys nothing here, because
/// the names are the ones definitions declare, validated and bounded at PUT_MACHINE, and only
/// an admin can store a definition. Instance ids, which any writer chooses, keep SipHash
/// (`index::InstanceMap`).
#[derive(Default)]
pub struct NameHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl NameHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Interner {
    /// The shared copy of `s`, made on first use.
    pub(crate) fn intern(&mut self, s: &str) -> Name {
        self.intern_with_id(s).0
    }

    /// The id of `s`, made on first use.
    pub(crate) fn id(&mut self, s: &str) -> NameId {
        match self.ids.get(s) {
            Some(&id) => id,
            None => self.add(s).1,
        }
    }

    /// `intern` and `id` with one lookup.
    pub(crate) fn intern_with_id(&mut self, s: &str) -> (Name, NameId) {
        match self.ids.get(s) {
            Some(&id) => (self.name(id).clone(), id),
            None => self.add(s),
        }
    }

    fn add(&mut self, s: &str) -> (Name, NameId) {
        // Names are bounded by the definitions' (a few thousand per machine): far below 2^32.
        let id = self.names.len() as NameId;
        let name: Name = Arc::from(s);
        self.ids.insert(name.clone(), id);
        self.names.push(name.clone());
        (name, id)
    }

    /// The id of `s` if it is interned.
    pub(crate) fn get_id(&self, s: &str) -> Option<NameId> {
        self.ids.get(s).copied()
    }

    /// Names interned so far; their ids are `0..len`.
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    /// Every name, by id.
    pub(crate) fn names(&self) -> &[Name] {
        &self.names
    }

    /// The name with id `id`. Ids come only from this interner (`id`, `intern_with_id`), so
    /// every id it is asked about exists.
    pub(crate) fn name(&self, id: NameId) -> &Name {
        &self.names[id as usize]
    }

    /// `name` if it is already the shared copy, else the shared copy of its text (names read
    /// from a snapshot arrive as separate allocations).
    pub(crate) fn adopt(&mut self, name: &mut Name) {
        let shared = self.intern(name);
        *name = shared;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_text_gives_the_same_allocation() {
        let mut names = Interner::default();
        let a = names.intern("paid");
        let b = names.intern(&String::from("paid"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &names.intern("new")));
        let mut c: Name = Arc::from("paid");
        names.adopt(&mut c);
        assert!(Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn ids_are_stable_and_map_back_to_the_shared_name() {
        let mut names = Interner::default();
        let paid = names.id("paid");
        let (new, new_id) = names.intern_with_id("new");
        assert_ne!(paid, new_id);
        assert_eq!(names.id("paid"), paid);
        assert_eq!(names.intern_with_id("new").1, new_id);
        assert_eq!(&**names.name(paid), "paid");
        assert!(Arc::ptr_eq(names.name(new_id), &new));
        let shared = names.intern("paid");
        assert!(Arc::ptr_eq(names.name(paid), &shared));
    }
}
