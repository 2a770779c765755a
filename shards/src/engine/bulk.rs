//! The selection MIGRATE_INSTANCES and DELETE_INSTANCES walk (docs/lifecycle.md): one
//! machine's instances in id order after a cursor, from the placement index, each tested
//! against the op's filters. A slice examines at most the budget the caller gives; the shard
//! runtime decides, logs and applies each selected instance, then yields between slices.

use super::find::{Condition, Matcher};
use super::indexes::GroupFilter;
use super::instance::InstanceRecord;
use super::Engine;
use crate::Rejection;

/// Which instances a bulk op touches: every filter must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    pub machine: String,
    /// Only instances in this state.
    pub state: Option<String>,
    /// `where: {"id": ..}`: only this instance.
    pub only_id: Option<String>,
    /// `where` conditions on context paths (any path, as SCAN_INSTANCES takes them).
    pub conditions: Vec<(String, Condition)>,
    /// Only instances last updated before this time (epoch ms).
    pub updated_before_ms: Option<u64>,
}

/// One slice of a bulk walk: the ids examined, and where the next slice goes on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BulkSlice {
    /// Instances of the machine examined, in id order (filters not yet applied).
    pub ids: Vec<String>,
    /// The last id examined, when instances past it remain (None: the walk is done).
    pub through: Option<String>,
}

/// A selection with its conditions compiled, for one slice.
pub struct Selector<'s> {
    pub(super) selection: &'s Selection,
    pub(super) matcher: Matcher,
}

impl<'s> Selector<'s> {
    /// `BAD_REQUEST` for a condition on a path that is not `ctx.<path>`.
    pub fn new(selection: &'s Selection) -> Result<Selector<'s>, Rejection> {
        Ok(Selector {
            selection,
            matcher: Matcher::new(&selection.conditions)?,
        })
    }

    /// Whether `record` is selected (its machine is checked by the walk, not here).
    pub(super) fn selects(&self, record: &InstanceRecord) -> bool {
        let (s, instance) = (self.selection, &record.instance);
        s.state.as_deref().is_none_or(|st| *instance.state == *st)
            && s.only_id.as_deref().is_none_or(|id| *instance.id == *id)
            && (s.updated_before_ms).is_none_or(|t| instance.updated_at_ms < t)
            && self.matcher.holds(&instance.context, &instance.id)
    }
}

impl Engine {
    /// The next at most `budget` instances of `sel.machine` (in `sel.state`, when given)
    /// after `after`, in id order. With `only_id`, that instance alone (if it is after
    /// `after`).
    pub fn bulk_slice(&self, sel: &Selection, after: Option<&str>, budget: usize) -> BulkSlice {
        let mut slice = BulkSlice::default();
        if let Some(id) = &sel.only_id {
            let past = after.is_none_or(|a| id.as_str() > a);
            let mine = self.instances.get(id);
            if past && mine.is_some_and(|r| *r.instance.machine == *sel.machine) {
                slice.ids.push(id.clone());
            }
            return slice;
        }
        let Some(filter) = self.machine_groups(&sel.machine, sel.state.as_deref()) else {
            return slice;
        };
        let (ids, more) = self.indexes.placement.page(filter, after, budget);
        slice.ids = ids.into_iter().map(str::to_owned).collect();
        if more {
            slice.through = slice.ids.last().cloned();
        }
        slice
    }

    /// The placement groups of `machine`'s instances (in `state`, when given), any timer; None
    /// when no instance can be in them (a name never interned is held by none).
    pub(super) fn machine_groups(&self, machine: &str, state: Option<&str>) -> Option<GroupFilter> {
        let machine = self.names.get_id(machine)?;
        let state = match state {
            Some(s) => Some(self.names.get_id(s)?),
            None => None,
        };
        Some(GroupFilter {
            machine: Some(machine),
            state,
            armed: None,
        })
    }

    /// How many instances of `machine` this shard holds (every version): what a bulk walk
    /// over the machine examines, for its `remaining` estimate.
    pub fn machine_instances(&self, machine: &str) -> u64 {
        (self.stats.by_state.iter())
            .filter(|((m, _), _)| **m == *machine)
            .map(|(_, n)| *n)
            .sum()
    }

    /// How many instances of `machine` this shard counts that `pick` refuses: in cluster mode,
    /// those of slots its group no longer owns (kept until the purge), which a bulk walk
    /// leaves out of its `remaining` estimate. Departed ones (`Entry::SlotsMovedOut`) are in
    /// no count already, so only the others are (a crash's leftovers, before the purge). A
    /// walk over the machine's instances.
    pub fn machine_instances_refused(&self, machine: &str, pick: impl Fn(&str) -> bool) -> u64 {
        let refused = |id: &str| !pick(id) && !self.departed.holds(id);
        match self.machine_groups(machine, None) {
            Some(filter) => self.indexes.placement.count(filter, refused),
            None => 0,
        }
    }
}
