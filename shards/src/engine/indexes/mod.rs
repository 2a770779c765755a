//! The shard's ordered indexes over its instances: derived state beside the instance table
//! (`engine::index`), rebuilt from the records after a snapshot loads and kept by `apply` from
//! then on, never logged (docs/queries.md).
//!
//! * `placement`: every instance under its (machine, state, armed timer) group, by id. It
//!   answers LIST_INSTANCES in O(groups + limit × log groups) after one O(log n) seek per
//!   group, instead of a scan of the shard. The (machine, id) order is the merge of a machine's
//!   groups; the (due time, id) order of armed timers is the runtime's timer queue
//!   (`crate::timers::TimerQueue`).
//! * `fields`: the indexes definitions declare (`"indexes": ["ctx.customer"]`), by (value,
//!   id), for FIND_INSTANCES (`engine::find`).
//!
//! The engine calls in where an instance is created, changes state or context, arms or spends
//! its timer, or is deleted; the calls name the instance's group and entries before and after,
//! so an index never reads a record. An engine whose catalog declares no index pays one
//! counter test per write for `fields`.

mod fields;
mod key;
mod placement;

pub(crate) use fields::{encoded, entries_of, entry_of, Entries, FieldIndexes};
pub(crate) use key::{type_end, type_start, IndexKey, PAST_IDS};
pub(crate) use placement::{Group, GroupFilter, Placement};

use super::catalog::Catalog;
use super::definition::IndexPath;
use super::instance::{Instance, InstanceRecord};
use super::names::{Interner, NameId};

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Indexes {
    pub(crate) placement: Placement,
    pub(crate) fields: FieldIndexes,
}

impl Indexes {
    /// The indexes of `records` (a snapshot just loaded): each placement group's ids sorted
    /// and built in one pass, which packs the tree's nodes full.
    pub(crate) fn build<'a>(
        records: impl Iterator<Item = &'a InstanceRecord> + Clone,
        names: &mut Interner,
        catalog: &Catalog,
    ) -> Indexes {
        let placed = (records.clone()).map(|r| (Group::of(r, names), r.instance.id.clone()));
        let mut indexes = Indexes {
            placement: Placement::build(placed),
            fields: FieldIndexes::default(),
        };
        if catalog.has_indexes() {
            for record in records {
                let instance = &record.instance;
                if let Some(paths) = declared(catalog, instance) {
                    let entries = entries_of(paths, &instance.context, &instance.id);
                    indexes
                        .fields
                        .add(names.id(&instance.machine), paths, entries);
                }
            }
        }
        indexes
    }

    /// A new instance (`group`: its placement group).
    pub(crate) fn created(&mut self, catalog: &Catalog, group: Group, record: &InstanceRecord) {
        let instance = &record.instance;
        self.placement.insert(group, instance.id.clone());
        if let Some(paths) = declared(catalog, instance) {
            let entries = entries_of(paths, &instance.context, &instance.id);
            self.fields.add(group.machine, paths, entries);
        }
    }

    /// A deleted instance (`group`: its placement group).
    pub(crate) fn deleted(&mut self, catalog: &Catalog, group: Group, record: &InstanceRecord) {
        let instance = &record.instance;
        self.placement.remove(group, &instance.id);
        if let Some(paths) = declared(catalog, instance) {
            let entries = entries_of(paths, &instance.context, &instance.id);
            self.fields.remove(group.machine, paths, &entries);
        }
    }
}

/// The declared indexes of `instance`'s version; None when it declares none, and at once when
/// no stored version declares any (the common case costs a counter test).
pub(crate) fn declared<'c>(catalog: &'c Catalog, instance: &Instance) -> Option<&'c [IndexPath]> {
    if !catalog.has_indexes() {
        return None;
    }
    let paths = (catalog.get(&instance.machine, instance.version)?.compiled).indexes();
    (!paths.is_empty()).then_some(paths)
}

impl super::Engine {
    /// Builds the indexes from the instance table (a snapshot just loaded; docs/queries.md).
    pub(crate) fn rebuild_indexes(&mut self) {
        let records = self.instances.records();
        self.indexes = Indexes::build(records, &mut self.names, &self.catalog);
    }

    /// Whether the indexes `apply` kept equal the ones a rebuild from the records gives.
    #[cfg(test)]
    pub(crate) fn indexes_match_a_rebuild(&self) -> bool {
        let mut names = self.names.clone();
        Indexes::build(self.instances.records(), &mut names, &self.catalog) == self.indexes
    }

    /// (machine, index path as declared, entries) of every declared index that has entries.
    pub fn index_sizes(&self) -> Vec<(String, String, u64)> {
        (self.indexes.fields.sizes())
            .map(|(m, path, n)| (self.names.name(m).to_string(), path.to_owned(), n as u64))
            .collect()
    }
}

/// What an applied event may change in its instance's index entries: taken before the event
/// moves and merges (`before`), settled after (`after`).
pub(crate) struct EventWatch<'c> {
    /// The version's declared indexes, when the event carries a payload (no payload, no
    /// change of context).
    declared: Option<(&'c [IndexPath], Entries)>,
    state: NameId,
    armed: bool,
}

impl<'c> EventWatch<'c> {
    pub(crate) fn before(
        catalog: &'c Catalog,
        record: &InstanceRecord,
        item: &super::history::NewItem<'_>,
    ) -> EventWatch<'c> {
        let instance = &record.instance;
        let paths = item.payload.and(declared(catalog, instance));
        EventWatch {
            declared: paths.map(|p| (p, entries_of(p, &instance.context, &instance.id))),
            state: item.from_state,
            armed: record.timer_due_ms != 0,
        }
    }

    /// Moves the instance to its new placement group (leaving a state spends its timer, so
    /// the new group is unarmed) and updates the declared indexes' entries that changed.
    /// `state`: the id of the state the event left the instance in.
    pub(crate) fn after(
        self,
        indexes: &mut Indexes,
        names: &mut Interner,
        record: &InstanceRecord,
        state: NameId,
    ) {
        let instance = &record.instance;
        if state == self.state && self.declared.is_none() {
            return;
        }
        let machine = names.id(&instance.machine);
        if let Some((paths, before)) = self.declared {
            let after = entries_of(paths, &instance.context, &instance.id);
            indexes.fields.update(machine, paths, before, after);
        }
        if state != self.state {
            let old = Group {
                machine,
                state: self.state,
                armed: self.armed,
            };
            let new = Group {
                machine,
                state,
                armed: false,
            };
            indexes.placement.moved(old, new, &instance.id);
        }
    }
}
