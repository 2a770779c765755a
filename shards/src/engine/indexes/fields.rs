//! Declared indexes: per (machine, path) an ordered set of (value, id) entries, one per
//! instance of a version that declares the path and holds a scalar there.
//!
//! Each entry is one byte string (the value and the id, order-preserving, `indexes::key`) in
//! a `PackedSet` (`indexes::packed`): pages of front-coded keys, where an entry costs its
//! varints and the bytes it does not share with the entry before it. Measured at 1M
//! instances (benches/RESULTS.md, "Issue 50: packed declared indexes"): two declared indexes
//! (`ctx.customer`, one of 100,000 values; `ctx.region`, one of 8) cost +45-50 bytes per
//! instance after the fill and +0-24 after a recovery (~14 for the sets alone), where
//! `BTreeSet<IndexKey>` cost +127-134 and +140-166.
//!
//! Bound: one entry per (instance, declared path of its version): at most
//! `INDEXES_PER_VERSION_MAX` per instance. An emptied set is dropped.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use serde_json::Value;

use super::key::{encode_value, IndexKey};
use super::packed::{PackedSet, Range};
use crate::engine::context::Context;
use crate::engine::definition::IndexPath;
use crate::engine::limits::INDEXES_PER_VERSION_MAX;
use crate::engine::names::NameId;

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct FieldIndexes {
    /// machine -> path as declared -> entries.
    sets: BTreeMap<NameId, BTreeMap<String, PackedSet>>,
}

/// The entries one instance has in the indexes of its version: one per path, None where the
/// path holds no scalar. Computed before and after a write to see what moved.
pub(crate) type Entries = [Option<IndexKey>; INDEXES_PER_VERSION_MAX];

/// `id`'s entry for `path` in `ctx`, if the path holds a scalar.
pub(crate) fn entry_of(path: &IndexPath, ctx: &Context, id: &str) -> Option<IndexKey> {
    let value = path.value(ctx)?;
    let mut bytes = Vec::with_capacity(16 + id.len());
    if !encode_value(value, &mut bytes) {
        return None;
    }
    bytes.extend_from_slice(id.as_bytes());
    Some(IndexKey::new(&bytes))
}

/// Appends `id`'s entry for `path` in `ctx` to `out`; false (nothing appended) when the path
/// holds no scalar.
fn append_entry(path: &IndexPath, ctx: &Context, id: &str, out: &mut Vec<u8>) -> bool {
    let Some(value) = path.value(ctx) else {
        return false;
    };
    if !encode_value(value, out) {
        return false;
    }
    out.extend_from_slice(id.as_bytes());
    true
}

/// Declared indexes built at once (a snapshot just loaded, a recovery's end): each set's
/// entries encoded one after another in one buffer, sorted, then packed. No allocation per
/// entry, so the build leaves no small freed blocks between the pages it keeps.
#[derive(Default)]
pub(crate) struct FieldBuild<'p> {
    sets: HashMap<(NameId, &'p str), Arena>,
}

/// One set's entries: their bytes one after another and (start, end) of each.
#[derive(Default)]
struct Arena {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl<'p> FieldBuild<'p> {
    /// Adds the entries of one instance `id` of `machine` (context `ctx`, declared `paths`).
    pub(crate) fn add(&mut self, machine: NameId, paths: &'p [IndexPath], ctx: &Context, id: &str) {
        for path in paths {
            let arena = self.sets.entry((machine, &path.declared)).or_default();
            let start = arena.bytes.len();
            if append_entry(path, ctx, id, &mut arena.bytes) {
                arena.spans.push((start, arena.bytes.len()));
            }
        }
    }

    /// The indexes, each set from its entries sorted (duplicates dropped; no empty set).
    pub(crate) fn finish(self) -> FieldIndexes {
        let mut out = FieldIndexes::default();
        let sets = (self.sets.into_iter()).filter(|(_, arena)| !arena.spans.is_empty());
        for ((machine, path), mut arena) in sets {
            let bytes = arena.bytes.as_slice();
            arena
                .spans
                .sort_unstable_by(|a, b| bytes[a.0..a.1].cmp(&bytes[b.0..b.1]));
            arena
                .spans
                .dedup_by(|a, b| bytes[a.0..a.1] == bytes[b.0..b.1]);
            let keys = (arena.spans.iter()).map(|&(start, end)| &bytes[start..end]);
            let set = PackedSet::from_sorted(keys);
            out.sets
                .entry(machine)
                .or_default()
                .insert(path.to_owned(), set);
        }
        out
    }
}

/// Every entry `id` has for `paths` (a version's declared indexes) in `ctx`.
pub(crate) fn entries_of(paths: &[IndexPath], ctx: &Context, id: &str) -> Entries {
    let mut out: Entries = Default::default();
    for (slot, path) in out.iter_mut().zip(paths) {
        *slot = entry_of(path, ctx, id);
    }
    out
}

impl FieldIndexes {
    /// Adds `entries` (of `paths`, for one instance of `machine`).
    pub(crate) fn add(&mut self, machine: NameId, paths: &[IndexPath], entries: Entries) {
        for (path, entry) in paths.iter().zip(entries) {
            if let Some(entry) = entry {
                self.set_mut(machine, &path.declared).insert(entry.bytes());
            }
        }
    }

    /// Removes `entries` (of `paths`, for one instance of `machine`).
    pub(crate) fn remove(&mut self, machine: NameId, paths: &[IndexPath], entries: &Entries) {
        for (path, entry) in paths.iter().zip(entries) {
            if let Some(entry) = entry {
                self.remove_one(machine, &path.declared, entry);
            }
        }
    }

    /// Replaces `before` by `after` where they differ (a write changed the instance's context).
    pub(crate) fn update(
        &mut self,
        machine: NameId,
        paths: &[IndexPath],
        before: Entries,
        after: Entries,
    ) {
        for ((path, old), new) in paths.iter().zip(before).zip(after) {
            if old == new {
                continue;
            }
            if let Some(new) = new {
                self.set_mut(machine, &path.declared).insert(new.bytes());
            }
            if let Some(old) = old {
                self.remove_one(machine, &path.declared, &old);
            }
        }
    }

    /// The set of `machine`'s index on `path`, made empty if missing.
    fn set_mut(&mut self, machine: NameId, path: &str) -> &mut PackedSet {
        let paths = self.sets.entry(machine).or_default();
        if !paths.contains_key(path) {
            paths.insert(path.to_owned(), PackedSet::default());
        }
        // Present: inserted just above when it was missing.
        paths.get_mut(path).expect("inserted above")
    }

    /// Removes one entry; drops a set (and a machine) left empty.
    fn remove_one(&mut self, machine: NameId, path: &str, entry: &IndexKey) {
        let Some(paths) = self.sets.get_mut(&machine) else {
            return;
        };
        if let Some(set) = paths.get_mut(path) {
            set.remove(entry.bytes());
            if set.is_empty() {
                paths.remove(path);
            }
        }
        if paths.is_empty() {
            self.sets.remove(&machine);
        }
    }

    /// Entries of `machine`'s index on `path` with keys within `low` and `high`, in key order;
    /// none when the bounds are crossed (a client's `gt 5, lt 3`).
    pub(crate) fn range<'a>(
        &'a self,
        machine: NameId,
        path: &str,
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
    ) -> Range<'a> {
        static EMPTY: PackedSet = PackedSet::EMPTY;
        let set = (self.sets.get(&machine))
            .and_then(|paths| paths.get(path))
            .filter(|_| ordered(low, high))
            .unwrap_or(&EMPTY);
        set.range(low, high)
    }

    /// (machine, path, entries) of every index (the `svc_index_entries` gauge).
    pub(crate) fn sizes(&self) -> impl Iterator<Item = (NameId, &str, usize)> {
        (self.sets.iter()).flat_map(|(machine, paths)| {
            (paths.iter()).map(|(path, set)| (*machine, path.as_str(), set.len()))
        })
    }
}

/// Whether `low..high` is a range `PackedSet::range` takes (crossed bounds hold nothing).
fn ordered(low: Bound<&[u8]>, high: Bound<&[u8]>) -> bool {
    use Bound::{Excluded, Included, Unbounded};
    match (low, high) {
        (Unbounded, _) | (_, Unbounded) => true,
        (Excluded(a), Excluded(b)) => a < b,
        (Included(a) | Excluded(a), Included(b) | Excluded(b)) => a <= b,
    }
}

/// The value a scalar condition compares with, encoded as the index orders it.
pub(crate) fn encoded(value: &Value) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    encode_value(value, &mut out).then_some(out)
}
