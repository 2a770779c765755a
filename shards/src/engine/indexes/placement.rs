//! The placement index: instance ids by (machine, state, armed timer) group, each group an
//! ordered set. LIST_INSTANCES merges the groups its filter selects (`page`).
//!
//! Why per-group B-tree sets of ids: the key is the id alone (a 24-byte `SmallStr`, inline up
//! to 22 bytes), so an entry costs 24 bytes in a full node and ~35 in a node filled by random
//! inserts (std's B-tree fills ~69% then), with no pointer back into the instance table: a
//! comparison never leaves the node, where an index of record handles would load a record per
//! comparison (a cache miss each at millions of instances). The group is the set's address in
//! a small ordered map, not part of every key. Measured figures: docs/queries.md.
//!
//! Bound: one entry per instance of the shard; groups are at most (machines × states × 2),
//! all declared by definitions; an emptied group is dropped.

use std::cmp::Reverse;
use std::collections::{btree_set, BTreeMap, BTreeSet, BinaryHeap};
use std::iter::Peekable;
use std::ops::Bound;

use super::super::instance::InstanceRecord;
use super::super::names::{Interner, NameId};
use super::super::small_str::SmallStr;

/// An instance's group: its machine, its state and whether its timer is armed (the
/// `has_timer` filter of LIST_INSTANCES). Ordered machine first, so one machine's groups are
/// one range of the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Group {
    pub(crate) machine: NameId,
    pub(crate) state: NameId,
    pub(crate) armed: bool,
}

impl Group {
    /// `record`'s group (its names are interned: every record's are).
    pub(crate) fn of(record: &InstanceRecord, names: &mut Interner) -> Group {
        let instance = &record.instance;
        Group {
            machine: names.id(&instance.machine),
            state: names.id(&instance.state),
            armed: record.timer_due_ms != 0,
        }
    }

    /// The group of an instance of `machine` in `state` without an armed timer.
    pub(crate) fn unarmed(machine: NameId, state: NameId) -> Group {
        Group {
            machine,
            state,
            armed: false,
        }
    }

    /// This group with its armed flag set to `armed`.
    pub(crate) fn armed(self, armed: bool) -> Group {
        Group { armed, ..self }
    }
}

/// Which groups a LIST_INSTANCES page reads: None matches any.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GroupFilter {
    pub(crate) machine: Option<NameId>,
    pub(crate) state: Option<NameId>,
    pub(crate) armed: Option<bool>,
}

impl GroupFilter {
    fn matches(&self, g: &Group) -> bool {
        self.machine.is_none_or(|m| m == g.machine)
            && self.state.is_none_or(|s| s == g.state)
            && self.armed.is_none_or(|a| a == g.armed)
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Placement {
    groups: BTreeMap<Group, BTreeSet<SmallStr>>,
}

impl Placement {
    /// The index of `placed` (each instance once), every group's set built from sorted ids.
    pub(crate) fn build(placed: impl Iterator<Item = (Group, SmallStr)>) -> Placement {
        let mut all: Vec<(Group, SmallStr)> = placed.collect();
        all.sort_unstable();
        let mut groups = BTreeMap::new();
        let mut sorted = all.into_iter().peekable();
        while let Some((group, first)) = sorted.next() {
            let mut ids = vec![first];
            while let Some((_, id)) = sorted.next_if(|(g, _)| *g == group) {
                ids.push(id);
            }
            groups.insert(group, ids.into_iter().collect::<BTreeSet<SmallStr>>());
        }
        Placement { groups }
    }

    pub(crate) fn insert(&mut self, group: Group, id: SmallStr) {
        self.groups.entry(group).or_default().insert(id);
    }

    /// Removes `id` from `group`; returns the id as the index held it (None when absent).
    pub(crate) fn remove(&mut self, group: Group, id: &str) -> Option<SmallStr> {
        let set = self.groups.get_mut(&group)?;
        let taken = set.take(id);
        if set.is_empty() {
            self.groups.remove(&group);
        }
        taken
    }

    /// Moves `id` from group `from` to group `to` (nothing when they are equal).
    pub(crate) fn moved(&mut self, from: Group, to: Group, id: &str) {
        if from == to {
            return;
        }
        let id = self.remove(from, id).unwrap_or_else(|| id.into());
        self.insert(to, id);
    }

    /// Entries in every group.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.groups.values().map(BTreeSet::len).sum()
    }

    /// How many ids of the groups `filter` selects `pick` accepts (a walk over them all).
    pub(crate) fn count(&self, filter: GroupFilter, pick: impl Fn(&str) -> bool) -> u64 {
        (self.selected(filter))
            .flat_map(BTreeSet::iter)
            .filter(|id| pick(id.as_str()))
            .count() as u64
    }

    /// The ids in the groups `filter` selects that sort after `after` (byte order): the first
    /// `limit`, ascending, and whether more exist. One seek per selected group, then a merge
    /// of `limit + 1` steps.
    pub(crate) fn page(
        &self,
        filter: GroupFilter,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<&str>, bool) {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut heads: Vec<Peekable<btree_set::Range<'_, SmallStr>>> = self
            .selected(filter)
            .map(|set| set.range::<str, _>((from, Bound::Unbounded)).peekable())
            .collect();
        let mut heap: BinaryHeap<Reverse<(&str, usize)>> = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, it)| it.peek().copied().map(|id| Reverse((id.as_str(), i))))
            .collect();
        let keep = limit.saturating_add(1);
        let mut ids = Vec::with_capacity(keep.min(1024));
        while ids.len() < keep {
            let Some(Reverse((id, i))) = heap.pop() else {
                break;
            };
            ids.push(id);
            heads[i].next();
            if let Some(next) = heads[i].peek().copied() {
                heap.push(Reverse((next.as_str(), i)));
            }
        }
        let more = ids.len() > limit;
        ids.truncate(limit);
        (ids, more)
    }

    /// The sets of the groups `filter` selects: one machine's range when it names a machine.
    fn selected(&self, filter: GroupFilter) -> impl Iterator<Item = &BTreeSet<SmallStr>> {
        let range = match filter.machine {
            Some(machine) => {
                let low = Group {
                    machine,
                    state: NameId::MIN,
                    armed: false,
                };
                let high = Group {
                    machine,
                    state: NameId::MAX,
                    armed: true,
                };
                self.groups.range(low..=high)
            }
            None => self.groups.range(..),
        };
        range
            .filter(move |(g, _)| filter.matches(g))
            .map(|(_, set)| set)
    }
}

#[cfg(test)]
mod tests;
