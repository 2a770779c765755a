//! Slot moves, the engine's side (docs/cluster.md "Moving slots").
//!
//! The source exports each instance of the moving slots as an image (`export_image`: the
//! snapshot form of its record as JSON). The target logs each image as an `Entry::Import`,
//! which stages it out of sight: a staged record is in no instance table, counter, index,
//! timer queue, listing, find, scan or snapshot. `Entry::MoveIn` then makes every staged
//! record of the move live at once, as creates would (counters by state, indexes), keeping its
//! history, keys and state-entry times; `Entry::DropStaged` forgets them. The source's cleanup
//! of the moved instances is a delete with `DeleteReason::Moved` (`ops::delete_instance`).
//!
//! Staging is not snapshotted: the shard starts no snapshot while anything is staged
//! (`Engine::has_staged`), so a recovery always replays the imports from the log. Replay
//! applies the move entries as barriers (`replay`: `record_instance_id` knows no id for them).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::indexes::Group;
use super::instance::{InstanceRecord, UNKNOWN};
use super::{Engine, Entry};
use crate::routing::slot_of;

/// A move staged on this engine (`Engine::staged_moves`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedMove {
    pub move_id: u64,
    pub lo: u16,
    pub hi: u16,
    /// Instances staged (tombstoned ones not counted).
    pub instances: usize,
}

/// The staged instances of one move, by id.
#[derive(Debug, Clone)]
struct Staged {
    lo: u16,
    hi: u16,
    records: HashMap<String, Box<InstanceRecord>>,
}

/// Per slot range, the offset of the latest `MoveIn` entry that brought instances of those
/// slots to this engine: sorted, disjoint `(lo, hi, offset)`, at most one range per slot (a
/// later move-in overwrites what it covers), so a few entries per move, none per instance. In
/// snapshots (both formats), so it survives a restart as the log it describes does.
///
/// What it is for (docs/cluster.md, "Subscriptions"): a slot that left this group and came
/// back has its instances' old events in this log, from before they left; a replay must not
/// show them again, so that resuming at the new owner from offset 0 gives every event since
/// the switch and no earlier one. Every live instance of such a slot came in at that move-in
/// or was created after it, so "an event of the slot before the slot's latest move-in" is
/// "an event from before the instance's latest import".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MovedIn(Vec<(u16, u16, u64)>);

impl MovedIn {
    /// Slots `lo..=hi` moved in at `offset`.
    fn mark(&mut self, lo: u16, hi: u16, offset: u64) {
        let mut kept = Vec::with_capacity(self.0.len() + 2);
        for &(a, b, at) in &self.0 {
            if b < lo || a > hi {
                kept.push((a, b, at));
                continue;
            }
            if a < lo {
                kept.push((a, lo - 1, at));
            }
            if b > hi {
                kept.push((hi + 1, b, at));
            }
        }
        kept.push((lo, hi, offset));
        kept.sort_unstable();
        self.0 = kept;
    }

    /// The offset of the latest move-in of `slot` (None: never moved in here).
    fn of(&self, slot: u16) -> Option<u64> {
        let i = self.0.partition_point(|r| r.1 < slot);
        (self.0.get(i)).filter(|r| r.0 <= slot).map(|r| r.2)
    }

    pub(crate) fn ranges(&self) -> &[(u16, u16, u64)] {
        &self.0
    }

    /// From a snapshot: None unless sorted, disjoint ranges of valid slots.
    pub(crate) fn from_ranges(ranges: Vec<(u16, u16, u64)>) -> Option<MovedIn> {
        let ordered = (ranges.iter()).all(|r| r.0 <= r.1 && r.1 < crate::routing::SLOT_COUNT)
            && ranges.windows(2).all(|w| w[0].1 < w[1].0);
        ordered.then_some(MovedIn(ranges))
    }
}

/// Every move staged on the engine, by move id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Staging {
    moves: BTreeMap<u64, Staged>,
}

impl Engine {
    /// The full record of live instance `id` as compact JSON, self-contained (names as
    /// strings): the snapshot's per-record form (instance, history with payloads, idempotency
    /// keys, `created`, `entered_at_ms`, `entered_offset`). What `Entry::Import` carries.
    pub fn export_image(&self, id: &str) -> Option<String> {
        let record = self.instances.get(id)?;
        // Serialising to a String cannot fail: no I/O, and every map key is a string.
        serde_json::to_string(&record.snapshot_form(&self.names)).ok()
    }

    /// The ids of the live instances whose slot is in `lo..=hi`, sorted.
    pub fn ids_in_slots(&self, lo: u16, hi: u16) -> Vec<String> {
        let mut ids: Vec<String> = (self.instances.records())
            .map(|r| r.instance.id.as_str())
            .filter(|id| (lo..=hi).contains(&slot_of(id)))
            .map(str::to_owned)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Up to `max` ids of live instances whose slot lies outside the sorted, disjoint `owned`
    /// ranges, in table order: one walk that stops at the `max`-th (the purge's slices after a
    /// move, `shard::moves`). The instances of a slot are spread evenly over the table, so a
    /// slice walks about `max` times the table's share of them, not the whole table; only the
    /// last slice of a purge (fewer than `max` left) walks to the end.
    pub fn ids_outside(&self, owned: &[(u16, u16)], max: usize) -> Vec<String> {
        let foreign = |slot: u16| {
            let i = owned.partition_point(|&(_, hi)| hi < slot);
            owned.get(i).is_none_or(|&(lo, _)| slot < lo)
        };
        (self.instances.records())
            .map(|r| r.instance.id.as_str())
            .filter(|id| foreign(slot_of(id)))
            .take(max)
            .map(str::to_owned)
            .collect()
    }

    /// True while any move has staged entries (imports not yet moved in or dropped).
    pub fn has_staged(&self) -> bool {
        !self.staging.moves.is_empty()
    }

    /// The moves staged, by move id.
    pub fn staged_moves(&self) -> Vec<StagedMove> {
        (self.staging.moves.iter())
            .map(|(&move_id, staged)| StagedMove {
                move_id,
                lo: staged.lo,
                hi: staged.hi,
                instances: staged.records.len(),
            })
            .collect()
    }

    /// Whether an entry at `offset` about instance `id` lies before the latest move-in of the
    /// instance's slot here: a replay leaves it out (`MovedIn`). A branch while nothing was
    /// ever moved in.
    pub fn before_move_in(&self, id: &str, offset: u64) -> bool {
        if self.moved_in.0.is_empty() {
            return false;
        }
        self.moved_in.of(slot_of(id)).is_some_and(|at| offset < at)
    }

    /// The move staging `slot`, if any (a look at each staged move; none when none is).
    pub fn staged_covers(&self, slot: u16) -> Option<u64> {
        (self.staging.moves.iter())
            .find(|(_, staged)| (staged.lo..=staged.hi).contains(&slot))
            .map(|(&move_id, _)| move_id)
    }

    /// The ids staged by `move_id`, sorted (empty for an unknown move).
    pub fn staged_ids(&self, move_id: u64) -> Vec<String> {
        let mut ids: Vec<String> = (self.staging.moves.get(&move_id))
            .map(|staged| staged.records.keys().cloned().collect())
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// Applies a slot move's entry (`Import`, `MoveIn`, `DropStaged`) at `offset`.
    pub(crate) fn apply_move(&mut self, entry: Entry, offset: u64) -> Option<Value> {
        match entry {
            Entry::Import {
                move_id,
                lo,
                hi,
                id,
                image,
                ..
            } => {
                let staged = (self.staging.moves.entry(move_id)).or_insert_with(|| Staged {
                    lo,
                    hi,
                    records: HashMap::new(),
                });
                let Some(image) = image else {
                    staged.records.remove(&id);
                    return Some(json!({"move_id": move_id, "id": id, "staged": false}));
                };
                self.stage(move_id, id, &image, offset)
            }
            Entry::MoveIn {
                move_id, lo, hi, ..
            } => {
                self.forget_departed(lo, hi);
                Some(self.move_in(move_id, offset))
            }
            Entry::DropStaged { move_id, .. } => {
                let dropped = (self.staging.moves.remove(&move_id)).map_or(0, |s| s.records.len());
                Some(json!({"move_id": move_id, "dropped": dropped, "wal_offset": offset}))
            }
            _ => None, // `Engine::apply` routes only the move entries here.
        }
    }

    /// Stages the record `image` holds as instance `id` of `move_id` (whose staging exists),
    /// replacing an earlier image of it. An image that does not parse or names another id is
    /// skipped and recorded as the engine's divergence.
    fn stage(&mut self, move_id: u64, id: String, image: &str, offset: u64) -> Option<Value> {
        let mut record = match InstanceRecord::from_image(image, &mut self.names) {
            Ok(record) if record.instance.id.as_str() == id => record,
            Ok(record) => {
                let named = record.instance.id.as_str();
                self.diverge(offset, format!("import of `{id}` holds instance `{named}`"));
                return None;
            }
            Err(e) => {
                self.diverge(
                    offset,
                    format!("import of `{id}`: image does not parse: {e}"),
                );
                return None;
            }
        };
        record.instance.wal_offset = offset;
        record.timer_due_ms = 0;
        if record.entered_offset == UNKNOWN || record.entered_at_ms == UNKNOWN {
            // As a snapshot load does: the last change is the best guess.
            record.entered_at_ms = record.instance.updated_at_ms;
            record.entered_offset = offset;
        }
        let staged = self.staging.moves.get_mut(&move_id)?;
        staged.records.insert(id.clone(), Box::new(record));
        Some(json!({"move_id": move_id, "id": id, "staged": true, "wal_offset": offset}))
    }

    /// Makes every staged record of `move_id` live, replacing a live one of the same id, and
    /// forgets the move (an unknown move changes nothing). Timers are not armed: the shard
    /// arms each id (`arm_timer`), as it does after a create.
    fn move_in(&mut self, move_id: u64, offset: u64) -> Value {
        let Some(staged) = self.staging.moves.remove(&move_id) else {
            return json!({"move_id": move_id, "moved_in": 0, "wal_offset": offset});
        };
        self.moved_in.mark(staged.lo, staged.hi, offset);
        let mut records: Vec<_> = staged.records.into_iter().collect();
        // Table order follows insertion order: the same in a replay as live.
        records.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut moved = 0;
        for (_, record) in records {
            moved += usize::from(self.go_live(record));
        }
        json!({"move_id": move_id, "moved_in": moved, "wal_offset": offset})
    }

    /// Puts one staged record into the live table (counted and indexed as a create); false
    /// when its machine version is unknown here, and the record is dropped.
    fn go_live(&mut self, record: Box<InstanceRecord>) -> bool {
        let instance = &record.instance;
        if self
            .catalog
            .get(&instance.machine, instance.version)
            .is_none()
        {
            log::warn!(
                "slot move: instance `{}` of unknown machine `{}` v{} not moved in",
                instance.id,
                instance.machine,
                instance.version
            );
            return false;
        }
        self.remove_instance(instance.id.as_str(), false);
        let group = Group::of(&record, &mut self.names);
        match self.instances.insert(record) {
            Ok(live) => {
                (self.indexes).created(&self.catalog, group, live);
                if self.departed.holds(live.instance.id.as_str()) {
                    self.departed.arrived(); // not expected: `MoveIn` cleared its slots
                } else {
                    (self.stats).count_create(&live.instance.machine, &live.instance.state);
                }
                true
            }
            // Unreachable: the id was removed just above.
            Err(_) => false,
        }
    }
}
