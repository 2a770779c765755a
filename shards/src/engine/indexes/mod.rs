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
mod packed;
mod placement;

pub(crate) use fields::{encoded, entries_of, entry_of, Entries, FieldBuild, FieldIndexes};
pub(crate) use key::{id_of, type_end, type_start, PAST_IDS};
pub(crate) use packed::Range;
pub(crate) use placement::{Group, GroupFilter, Placement};

use super::catalog::Catalog;
use super::definition::IndexPath;
use super::instance::{Instance, InstanceRecord};
use super::names::{Interner, NameId};

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Indexes {
    pub(crate) placement: Placement,
    pub(crate) fields: FieldIndexes,
    /// Not kept while a recovery replays the log (`Engine::defer_indexes`): built once at its
    /// end, sorted, instead of one insert per entry.
    deferred: bool,
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
            ..Indexes::default()
        };
        if catalog.has_indexes() {
            let mut build = FieldBuild::default();
            for record in records {
                let instance = &record.instance;
                if let Some(paths) = declared(catalog, instance) {
                    let machine = names.id(&instance.machine);
                    build.add(machine, paths, &instance.context, &instance.id);
                }
            }
            indexes.fields = build.finish();
            release_free_heap();
        }
        indexes
    }

    /// Whether writes keep the indexes (not while a recovery defers them).
    pub(crate) fn live(&self) -> bool {
        !self.deferred
    }

    /// A new instance (`group`: its placement group).
    pub(crate) fn created(&mut self, catalog: &Catalog, group: Group, record: &InstanceRecord) {
        if self.deferred {
            return;
        }
        let instance = &record.instance;
        self.placement.insert(group, instance.id.clone());
        if let Some(paths) = declared(catalog, instance) {
            let entries = entries_of(paths, &instance.context, &instance.id);
            self.fields.add(group.machine, paths, entries);
        }
    }

    /// An instance armed or spent its timer: it moves from `group` to `group.armed(armed)`.
    pub(crate) fn timer_set(&mut self, group: Group, armed: bool, id: &str) {
        if !self.deferred {
            self.placement.moved(group, group.armed(armed), id);
        }
    }

    /// A deleted instance (`group`: its placement group).
    pub(crate) fn deleted(&mut self, catalog: &Catalog, group: Group, record: &InstanceRecord) {
        if self.deferred {
            return;
        }
        let instance = &record.instance;
        self.placement.remove(group, &instance.id);
        if let Some(paths) = declared(catalog, instance) {
            let entries = entries_of(paths, &instance.context, &instance.id);
            self.fields.remove(group.machine, paths, &entries);
        }
    }
}

/// Hands the allocator's free pages back to the kernel. glibc keeps a freed block below the
/// top of its heap resident: the build's buffers, freed under the pages it keeps, would stay
/// (+61 bytes per instance after a 1M-instance recovery with two declared indexes,
/// benches/RESULTS.md, "Issue 50: packed declared indexes").
fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only releases memory no allocation holds.
    unsafe {
        libc::malloc_trim(0);
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
    /// Stops keeping the indexes (and drops them) until `build_indexes`: for a recovery,
    /// which then replays the log without an index insert per entry.
    pub fn defer_indexes(&mut self) {
        self.indexes = Indexes {
            deferred: true,
            ..Indexes::default()
        };
    }

    /// Builds the indexes from the instance table, each set from sorted keys (a snapshot just
    /// loaded, the end of a recovery that deferred them); writes keep them from then on.
    pub fn build_indexes(&mut self) {
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
    /// The version's declared indexes, when the event's payload may write one of their
    /// fields (`may_write`).
    declared: Option<(&'c [IndexPath], Entries)>,
    state: NameId,
    armed: bool,
}

impl<'c> EventWatch<'c> {
    pub(crate) fn before(
        indexes: &Indexes,
        catalog: &'c Catalog,
        record: &InstanceRecord,
        item: &super::history::NewItem<'_>,
    ) -> EventWatch<'c> {
        let instance = &record.instance;
        let paths = (item.payload.filter(|_| indexes.live())).and_then(|payload| {
            declared(catalog, instance).filter(|paths| may_write(payload, paths))
        });
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
        if (state == self.state && self.declared.is_none()) || indexes.deferred {
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

/// Whether merging `payload` (a JSON object's text) may change a field of `paths`: it names
/// the first segment of one (`"customer"`, a key or a value: a value only costs the check), or
/// it holds an escape, which could spell such a key otherwise. A payload that writes no
/// indexed field skips the before and after entries.
fn may_write(payload: &str, paths: &[IndexPath]) -> bool {
    payload.contains('\\')
        || paths.iter().any(|p| {
            let member = p.member();
            payload.match_indices(member).any(|(at, _)| {
                let end = at + member.len();
                payload[..at].ends_with('"') && payload[end..].starts_with('"')
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_may_write_a_field_it_names_or_could_spell() {
        let paths = [IndexPath::parse("ctx.customer.id").unwrap()];
        assert!(may_write(r#"{"customer":{"id":1}}"#, &paths));
        assert!(may_write(r#"{ "customer" : 1}"#, &paths));
        assert!(may_write(r#"{"\u0063ustomer":1}"#, &paths));
        assert!(!may_write(r#"{"n":1,"customers":2,"xcustomer":3}"#, &paths));
        assert!(!may_write(r#"{}"#, &paths));
    }
}
