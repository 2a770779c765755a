//! Slots this shard's group gave up in a move, while their instances wait for the purge
//! (docs/cluster.md "Moving slots", step 6).
//!
//! `Entry::SlotsMovedOut` marks slots `lo..=hi` departed: one walk of the instance table takes
//! each live instance of those slots out of the counters (`by_state`, and the instance count
//! INFO and the metrics read), and `Departed` remembers the range and how many instances it
//! still holds. The instances stay in the table (the purge deletes them later, as deletes of
//! reason `moved`), but from then on every change to one leaves the counters alone: a delete
//! only lowers `held`, and an event or a migration (none is expected: the front answers
//! `MOVED`) does not count. When `held` falls to zero the ranges are forgotten, so a shard
//! with nothing departed pays one branch per change. `Entry::MoveIn` of slots brought back
//! first drops what is left of the old copy there (the import is the whole new copy), then
//! clears the mark, so the new instances count as usual.
//!
//! Not in snapshots: the shard takes none while anything is departed (`Engine::has_departed`),
//! as while anything is staged, so a recovery replays the entry from the log.

use serde_json::{json, Value};

use super::index::prefetch;
use super::instance::InstanceRecord;
use super::Engine;
use crate::routing::slot_of;

/// How many records ahead the walk of `Entry::SlotsMovedOut` starts loading one: its first
/// two cache lines (the id is at byte 0, machine and state follow). At 1M instances with a
/// third departing (test `departed_walk_at_a_million_instances`, release, a busy 2-core
/// host) the walk took 356 ms without it, 212 ms with 16 ahead and one line, 149 ms with 32
/// and two lines, 262 ms with 64 (noisier then).
const WALK_PREFETCH_AHEAD: usize = 32;

/// Departed slot ranges and the instances they still hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Departed {
    /// Sorted, disjoint ranges; empty whenever `held` is zero.
    ranges: Vec<(u16, u16)>,
    /// Live instances of `ranges`: in the instance table, in no count.
    held: u64,
}

impl Departed {
    /// Whether instance `id` lies in a departed slot (a branch while nothing is departed).
    pub(crate) fn holds(&self, id: &str) -> bool {
        !self.ranges.is_empty() && self.covers(slot_of(id))
    }

    fn covers(&self, slot: u16) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }

    /// An instance appeared in a departed slot (none is expected: ownership is checked before).
    pub(crate) fn arrived(&mut self) {
        self.held += 1;
    }

    /// An instance of a departed slot left the table.
    pub(crate) fn left(&mut self) {
        self.held = self.held.saturating_sub(1);
        if self.held == 0 {
            self.ranges.clear();
        }
    }

    /// Adds `lo..=hi` to the ranges, keeping them sorted and merged.
    fn add(&mut self, lo: u16, hi: u16) {
        self.ranges.push((lo, hi));
        self.ranges.sort_unstable();
        let mut merged: Vec<(u16, u16)> = Vec::with_capacity(self.ranges.len());
        for &(lo, hi) in &self.ranges {
            match merged.last_mut() {
                Some(last) if u32::from(lo) <= u32::from(last.1) + 1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        self.ranges = merged;
    }

    /// Takes `lo..=hi` out of the ranges.
    fn cut(&mut self, lo: u16, hi: u16) {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        for &(a, b) in &self.ranges {
            if b < lo || a > hi {
                out.push((a, b));
                continue;
            }
            if a < lo {
                out.push((a, lo - 1));
            }
            if b > hi {
                out.push((hi + 1, b));
            }
        }
        self.ranges = out;
    }

    fn overlaps(&self, lo: u16, hi: u16) -> bool {
        self.ranges.iter().any(|&(a, b)| a <= hi && lo <= b)
    }
}

impl Engine {
    /// True while the shard holds instances of slots moved out (the shard takes no snapshot).
    pub fn has_departed(&self) -> bool {
        self.departed.held > 0
    }

    /// Instances of slots moved out still in the table.
    pub(crate) fn departed_held(&self) -> usize {
        usize::try_from(self.departed.held).unwrap_or(usize::MAX)
    }

    /// The departed ranges (sorted) and the instances they hold.
    pub fn departed(&self) -> (Vec<(u16, u16)>, u64) {
        (self.departed.ranges.clone(), self.departed.held)
    }

    /// Applies `Entry::SlotsMovedOut` of `lo..=hi`: one walk of the table takes each live
    /// instance of those slots (not departed already) out of the counters.
    pub(crate) fn apply_slots_moved_out(&mut self, lo: u16, hi: u16, offset: u64) -> Value {
        let departed = &mut self.departed;
        let mut taken = 0u64;
        // Records lie wherever they were allocated: loading them a few ahead overlaps the
        // cache misses that would otherwise come one after another.
        let mut ahead = self.instances.records().skip(WALK_PREFETCH_AHEAD);
        for record in self.instances.records() {
            if let Some(next) = ahead.next() {
                let base = (next as *const InstanceRecord).cast::<u8>();
                prefetch(base);
                prefetch(base.wrapping_add(64));
            }
            let id = record.instance.id.as_str();
            let slot = slot_of(id);
            if slot < lo || slot > hi || departed.covers(slot) {
                continue;
            }
            let instance = &record.instance;
            self.stats
                .count_delete(&instance.machine, &instance.state, false);
            taken += 1;
        }
        if taken > 0 {
            departed.held += taken;
            departed.add(lo, hi);
        }
        json!({"slots": [lo, hi], "departed": taken, "wal_offset": offset})
    }

    /// Before `Entry::MoveIn` of `lo..=hi`: what is left of an old copy of those slots (moved
    /// out, not purged yet) is dropped, and the slots are no longer departed.
    pub(crate) fn forget_departed(&mut self, lo: u16, hi: u16) {
        if !self.departed.overlaps(lo, hi) {
            return;
        }
        let old: Vec<String> = (self.ids_in_slots(lo, hi).into_iter())
            .filter(|id| self.departed.holds(id))
            .collect();
        for id in old {
            // Departed: `remove_instance` lowers `held` and leaves the counters alone.
            self.remove_instance(&id, false);
        }
        self.departed.cut(lo, hi);
        if self.departed.ranges.is_empty() {
            self.departed.held = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Departed;

    #[test]
    fn ranges_merge_and_cut() {
        let mut d = Departed::default();
        d.add(10, 20);
        d.add(21, 30);
        d.add(100, 200);
        assert_eq!(d.ranges, vec![(10, 30), (100, 200)]);
        d.cut(15, 150);
        assert_eq!(d.ranges, vec![(10, 14), (151, 200)]);
        d.cut(0, 16383);
        assert!(d.ranges.is_empty());
        d.add(0, 0);
        d.add(16383, 16383);
        assert!(d.covers(0) && d.covers(16383) && !d.covers(1));
    }
}
