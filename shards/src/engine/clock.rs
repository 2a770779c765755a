//! Entry times never run backwards within a shard (docs/wal.md "Entry times"):
//! each entry's timestamp is the later of the wall clock and the previous entry's. The engine
//! remembers the highest time of every entry it applied (live, replayed at start-up, or applied
//! by a replica, and what a loaded snapshot's instances hold), and every `decide` stamps
//! `max(now, last)`. So a new primary starts at or above the highest time it holds, and a
//! restore's `--until` cut is a prefix of the log.

use super::{Engine, Entry};

impl Engine {
    /// The time a new entry decided at wall-clock `now_ms` carries.
    pub fn entry_time(&self, now_ms: u64) -> u64 {
        now_ms.max(self.last_at_ms)
    }

    /// The highest entry time applied so far (0 before any).
    pub fn last_entry_time(&self) -> u64 {
        self.last_at_ms
    }

    /// Notes an applied entry's time.
    pub(crate) fn note_time(&mut self, at_ms: u64) {
        self.last_at_ms = self.last_at_ms.max(at_ms);
    }

    /// Notes the time of `entry` (the latest of a batch's), if it carries one.
    pub(crate) fn note_entry_time(&mut self, entry: &Entry) {
        if let Some(t) = entry_time_of(entry) {
            self.note_time(t);
        }
    }

    /// After a snapshot load: the highest time its instances hold.
    pub(crate) fn recompute_last_time(&mut self) {
        let newest = self
            .instances
            .records()
            .map(|r| r.instance.updated_at_ms.max(r.instance.created_at_ms))
            .max()
            .unwrap_or(0);
        self.note_time(newest);
    }
}

/// The time an entry carries: its own, or the latest of a batch's; none for an epoch entry
/// or a slot move's import or drop.
pub fn entry_time_of(entry: &Entry) -> Option<u64> {
    match entry {
        Entry::PutMachine { at_ms, .. }
        | Entry::Create { at_ms, .. }
        | Entry::Apply { at_ms, .. }
        | Entry::Delete { at_ms, .. }
        | Entry::Migrate { at_ms, .. } => Some(*at_ms),
        Entry::Batch { entries } => entries.iter().filter_map(entry_time_of).max(),
        // A slot move's import is not an event, nor is dropping the staged imports; the
        // switch that makes them live is a change at its time (docs/cluster.md "Moving slots").
        Entry::MoveIn { at_ms, .. } => Some(*at_ms),
        // The source's slots-moved-out changes no instance.
        Entry::Epoch { .. }
        | Entry::Import { .. }
        | Entry::DropStaged { .. }
        | Entry::SlotsMovedOut { .. } => None,
    }
}
