//! The engine proper: the state of one shard and the decide/apply split.
//!
//! `decide` and `apply` only dispatch here; each op family lives in `ops/` (PUT_MACHINE,
//! CREATE_INSTANCE, APPLY_EVENT, DELETE_INSTANCE). Reads are small and sit at the end.

use serde_json::Value;

use super::catalog::Catalog;
use super::index::InstanceMap;
use super::indexes::Indexes;
use super::instance::InstanceView;
use super::names::{CountMap, Interner, Name};
use super::ops::rejections;
use super::{Command, Entry, Instance, Record};
use crate::Rejection;

/// What `decide` concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Log this entry, then `apply` it; the response is what `apply` returns.
    Write(Entry),
    /// Nothing to log; this is the complete `result` object (idempotent replay, identical
    /// PUT_MACHINE).
    Answer(Value),
}

/// One page of LIST_INSTANCES from this shard, ordered by id.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage {
    pub instances: Vec<Value>,
    /// True when more matching instances exist after the last one returned.
    pub more: bool,
}

/// Counters maintained by `apply`, read by the metrics path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStats {
    /// machine -> events applied (moved or not).
    pub events_applied: CountMap<Name>,
    /// (machine, from, to) -> transitions that changed state.
    pub transitions: CountMap<(Name, Name, Name)>,
    /// (machine, state) -> current instances in that state (entries stay at 0 once seen).
    pub by_state: CountMap<(Name, Name)>,
    /// machine -> events applied by a timer (`Entry::Apply { timer: true }`).
    pub timers_fired: CountMap<Name>,
    /// machine -> instances migrated to another version (`Entry::Migrate`).
    pub migrated: CountMap<Name>,
    /// machine -> instances deleted by the definition's retention.
    pub expired: CountMap<Name>,
}

#[derive(Debug, Default, Clone)]
pub struct Engine {
    pub(super) catalog: Catalog,
    /// The primary index: id -> instance record.
    pub(super) instances: InstanceMap,
    /// Ordered indexes over the instances, derived from them (`engine::indexes`).
    pub(super) indexes: Indexes,
    pub(super) stats: EngineStats,
    /// Machine, state and event names shared by history items and counters.
    pub(super) names: Interner,
    /// Instances whose `timer_due_ms` is set (`engine::timers`).
    pub(super) timers_armed: u64,
    /// Replication epochs: `(epoch, offset of its epoch entry)`, ascending (`engine::epochs`).
    pub(super) epochs: Vec<(u64, u64)>,
    /// Per slot range, the offset of the latest `MoveIn` that brought instances of it here
    /// (`engine::moves::MovedIn`): a replay leaves out their events from before it.
    pub(super) moved_in: super::moves::MovedIn,
    /// The first applied entry that did not fit the state (`engine::divergence`).
    pub(super) divergence: Option<super::divergence::Divergence>,
    /// The snapshot walk running, if any (`engine::snapshot::walk`).
    pub(super) walk: Option<Box<super::snapshot::Walk>>,
    /// Walks begun: the id of the last one.
    pub(super) walks: u64,
    /// The highest entry time applied (`engine::clock`): new entries are stamped no earlier.
    pub(super) last_at_ms: u64,
    /// Slot moves' imports not moved in yet (`engine::moves`); not in snapshots.
    pub(super) staging: super::moves::Staging,
    /// Slots moved out whose instances wait for the purge (`engine::departed`); not in
    /// snapshots.
    pub(super) departed: super::departed::Departed,
}

impl Engine {
    pub fn new() -> Self {
        Engine::default()
    }

    /// Reads state and returns what to log, an answer that needs no log write, or a rejection.
    /// Never mutates; `now_ms`, or the last applied entry's time if later (`engine::clock`),
    /// becomes the entry's timestamp.
    pub fn decide(&self, cmd: &Command, now_ms: u64) -> Result<Decision, Rejection> {
        let now_ms = self.entry_time(now_ms);
        match cmd {
            Command::PutMachine { .. } => self.decide_put_machine(cmd, now_ms),
            Command::CreateInstance { id, .. } => self.decide_create(self.view(id), cmd, now_ms),
            Command::ApplyEvent { instance_id, .. } => match cmd.event() {
                Some(ev) => self.decide_apply_event(self.view(instance_id), &ev, now_ms),
                None => Err(rejections::misrouted("APPLY_EVENT")),
            },
            Command::DeleteInstance { id } => self.decide_delete(self.view(id), cmd, now_ms),
        }
    }

    /// What `decide` reads about instance `id`.
    pub(crate) fn view(&self, id: &str) -> Option<InstanceView<'_>> {
        self.instances.get(id).map(InstanceView::of)
    }

    /// Mutates state from a logged entry at WAL `offset`. Returns the response `result` when
    /// `want_result`. An entry that does not fit the current state is skipped, returns None
    /// and is recorded as the engine's divergence (`engine::divergence`).
    pub fn apply(&mut self, entry: Entry, offset: u64, want_result: bool) -> Option<Value> {
        self.note_entry_time(&entry);
        let result = match entry {
            Entry::PutMachine { .. } => self.apply_put_machine(entry, offset),
            Entry::Create { .. } => self.apply_create(entry, offset, want_result),
            Entry::Apply { .. } => {
                let event = entry.as_event()?;
                self.apply_event(event, offset, want_result)
            }
            Entry::Delete { .. } => self.apply_delete(entry, offset),
            Entry::Migrate { .. } => self.apply_migrate(entry, offset),
            Entry::Batch { entries } => Some(self.apply_batch(entries, offset, want_result)),
            Entry::Epoch { epoch } => Some(self.apply_epoch(epoch, offset)),
            Entry::Import { .. } | Entry::MoveIn { .. } | Entry::DropStaged { .. } => {
                self.apply_move(entry, offset)
            }
            Entry::SlotsMovedOut { lo, hi, .. } => Some(self.apply_slots_moved_out(lo, hi, offset)),
        };
        result.filter(|_| want_result)
    }

    /// `apply` with the response `result` written as JSON to `out`: an event's result is
    /// serialised straight from the instance (no `Value` built), other entries' results as
    /// `apply` gives them. False when the entry was skipped (`apply` returns None).
    pub fn apply_into(&mut self, entry: Entry, offset: u64, out: &mut Vec<u8>) -> bool {
        if let Entry::Apply { .. } = entry {
            return match entry.as_event() {
                Some(event) => self.apply_event_into(event, offset, out),
                None => false,
            };
        }
        match self.apply(entry, offset, true) {
            Some(result) => {
                // Serialising a Value into a Vec cannot fail (no I/O, string keys only).
                let _ = serde_json::to_writer(&mut *out, &result);
                true
            }
            None => false,
        }
    }

    /// `apply` for a decoded log record; a borrowed event is applied without copying it.
    pub fn apply_record(
        &mut self,
        record: Record<'_>,
        offset: u64,
        want_result: bool,
    ) -> Option<Value> {
        match record {
            Record::Event(event) => self
                .apply_event(event, offset, want_result)
                .filter(|_| want_result),
            Record::Entry(entry) => self.apply(entry, offset, want_result),
        }
    }

    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.get(id).map(|record| &record.instance)
    }

    /// The GET_INSTANCE result.
    pub fn instance_json(&self, id: &str) -> Option<Value> {
        let record = self.instances.get(id)?;
        let mut json = record.instance.to_json();
        if let (Some(timer), Some(map)) = (self.timer_json(record), json.as_object_mut()) {
            map.insert("timer".into(), timer);
        }
        Some(json)
    }

    /// `instance_json` written to `out` (no `Value` built); returns the instance's `wal_offset`
    /// (the log position of the state it shows), None for an unknown id.
    pub fn write_instance_json(&self, id: &str, out: &mut Vec<u8>) -> Option<u64> {
        let record = self.instances.get(id)?;
        let timer = self.timer_json(record);
        record.instance.write_json(timer.as_ref(), out);
        Some(record.instance.wal_offset)
    }

    /// The GET_HISTORY result: events with seq >= `from` (1-based; 0 acts as 1), at most
    /// `limit` of them.
    pub fn history(&self, id: &str, from: u64, limit: usize) -> Result<Value, Rejection> {
        let record = self
            .instances
            .get(id)
            .ok_or_else(|| rejections::instance_not_found(id))?;
        Ok(record.history_json(&self.names, from, limit))
    }

    /// The GET_MACHINE result for `version`, or for the latest version when None.
    pub fn machine(&self, name: &str, version: Option<u32>) -> Result<Value, Rejection> {
        let found = match version {
            Some(v) => self.catalog.get(name, v).map(|stored| (v, stored)),
            None => self.catalog.latest(name),
        };
        match found {
            Some((v, stored)) => Ok(stored.to_json(name, v)),
            None => Err(rejections::machine_not_found(name, version)),
        }
    }

    /// Every machine name with its versions ascending, sorted by name.
    pub fn machines(&self) -> Vec<(String, Vec<u32>)> {
        self.catalog.list()
    }

    /// One `Entry::PutMachine` per stored version, to copy definitions to another engine.
    pub fn machine_entries(&self) -> Vec<Entry> {
        self.catalog.entries()
    }

    /// Number of machine versions stored.
    pub fn machine_count(&self) -> usize {
        self.catalog.count()
    }

    /// Live instances, those of slots moved out (waiting for the purge) left out.
    pub fn instance_count(&self) -> usize {
        self.instances.len().saturating_sub(self.departed_held())
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }
}
