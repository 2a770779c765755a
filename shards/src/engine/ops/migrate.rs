//! MIGRATE_INSTANCES, one instance at a time (docs/lifecycle.md): an instance of
//! `from_version` moves to `to_version`, its state kept when the new version has it, renamed
//! by the plan's `states`, else skipped (`no_state`). Context and history stay; the history
//! gains one `migrated` item; the timer is re-armed from the new definition (the shard arms
//! it after the entry, as after any state entry).
//!
//! The `migrated` history item is an item whose event name is empty (no definition can name
//! an event so): its payload holds the two versions, its `from_state` the state it left.

use serde_json::{json, Value};

use super::rejections::{bad_field, machine_not_found};
use crate::engine::bulk::Selector;
use crate::engine::history::NewItem;
use crate::engine::indexes::Group;
use crate::engine::{Engine, Entry};
use crate::Rejection;

/// The event name of a `migrated` history item.
pub(crate) const MIGRATED_EVENT: &str = "";

/// A validated MIGRATE_INSTANCES request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigratePlan {
    pub selection: crate::engine::bulk::Selection,
    pub from_version: u32,
    pub to_version: u32,
    /// `states`: old state name -> state of `to_version`.
    pub states: Vec<(String, String)>,
}

/// What a bulk op does with one examined instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Log and apply this entry.
    Write(Entry),
    /// Selected, but left as it is, for this reason (`skipped.<reason>` in the reply).
    Skipped(&'static str),
    /// Not selected (another version, state or context; gone).
    Unselected,
}

impl MigratePlan {
    /// The state an instance in `state` gets in the new version.
    fn target<'a>(&'a self, state: &'a str) -> &'a str {
        (self.states.iter())
            .find(|(old, _)| old == state)
            .map_or(state, |(_, new)| new.as_str())
    }
}

impl Engine {
    /// Refuses a plan whose versions are not stored or the same, or whose `states` maps a
    /// state of neither version (a typo would otherwise skip every instance silently).
    pub fn check_migration(&self, plan: &MigratePlan) -> Result<(), Rejection> {
        let machine = &plan.selection.machine;
        let from = (self.catalog.get(machine, plan.from_version))
            .ok_or_else(|| machine_not_found(machine, Some(plan.from_version)))?;
        let to = (self.catalog.get(machine, plan.to_version))
            .ok_or_else(|| machine_not_found(machine, Some(plan.to_version)))?;
        if plan.from_version == plan.to_version {
            return Err(bad_field("to_version", "must differ from `from_version`"));
        }
        for (old, new) in &plan.states {
            if !from.compiled.states().contains(old) {
                let why = format!("maps `{old}`, not a state of version {}", plan.from_version);
                return Err(bad_field("states", &why));
            }
            if !to.compiled.states().contains(new) {
                let why = format!(
                    "maps to `{new}`, not a state of version {}",
                    plan.to_version
                );
                return Err(bad_field("states", &why));
            }
        }
        Ok(())
    }

    /// What the migration does with instance `id` at `now_ms` (the plan checked).
    pub fn decide_migrate(
        &self,
        id: &str,
        plan: &MigratePlan,
        sel: &Selector,
        now_ms: u64,
    ) -> Step {
        let Some(record) = self.instances.get(id) else {
            return Step::Unselected;
        };
        let instance = &record.instance;
        let selected = *instance.machine == *plan.selection.machine
            && instance.version == plan.from_version
            && sel.selects(record);
        if !selected {
            return Step::Unselected;
        }
        let to_state = plan.target(&instance.state);
        let to = self.catalog.get(&instance.machine, plan.to_version);
        if !to.is_some_and(|to| to.compiled.states().iter().any(|s| s == to_state)) {
            return Step::Skipped("no_state");
        }
        Step::Write(Entry::Migrate {
            id: id.to_owned(),
            machine: instance.machine.to_string(),
            from_version: plan.from_version,
            to_version: plan.to_version,
            from_state: instance.state.to_string(),
            to_state: to_state.to_owned(),
            at_ms: self.entry_time(now_ms),
        })
    }

    /// Moves the instance to its new version and state; an instance that is not where the
    /// entry says is skipped and recorded as a divergence.
    pub(crate) fn apply_migrate(&mut self, entry: Entry, offset: u64) -> Option<Value> {
        let Entry::Migrate {
            id,
            machine,
            from_version,
            to_version,
            from_state,
            to_state,
            at_ms,
        } = entry
        else {
            return None; // `Engine::apply` routes only Migrate entries here.
        };
        let fits = (self.instances.get(&id)).is_some_and(|r| {
            let i = &r.instance;
            *i.machine == *machine && i.version == from_version && *i.state == *from_state
        });
        if !fits {
            let why = format!("migration of `{id}` from {machine} v{from_version} {from_state}");
            self.diverge(offset, format!("{why}, which it is not"));
            return None;
        }
        self.before_change(&id);
        let record = self.instances.get_mut(&id)?;
        let group = Group::of(record, &mut self.names);
        (self.indexes).deleted(&self.catalog, group, record);
        if std::mem::take(&mut record.timer_due_ms) != 0 {
            self.timers_armed = self.timers_armed.saturating_sub(1);
        }
        let versions = format!(r#"{{"from_version":{from_version},"to_version":{to_version}}}"#);
        let item = NewItem {
            event: self.names.id(MIGRATED_EVENT),
            from_state: self.names.id(&from_state),
            payload: Some(&versions),
            at_ms,
            wal_offset: offset,
        };
        let from = record.migrate(item, self.names.intern(&to_state), to_version);
        let group = Group::of(record, &mut self.names);
        (self.indexes).created(&self.catalog, group, record);
        let instance = &record.instance;
        if !self.departed.holds(&id) {
            self.stats
                .count_migrated(&instance.machine, &from, &instance.state);
        }
        Some(json!({
            "id": id, "migrated": true, "from_version": from_version,
            "to_version": to_version, "from_state": from_state, "to_state": to_state,
            "wal_offset": offset,
        }))
    }
}
