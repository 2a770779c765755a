//! DELETE_INSTANCES, one instance at a time (docs/lifecycle.md): each selected instance is
//! deleted by its own log entry (`Entry::Delete` naming its machine and the reason), applied
//! as DELETE_INSTANCE's is.

use super::migrate::Step;
use crate::engine::bulk::Selector;
use crate::engine::{DeleteReason, Engine, Entry};

impl Engine {
    /// What DELETE_INSTANCES does with instance `id` at `now_ms`.
    pub fn decide_bulk_delete(&self, id: &str, sel: &Selector, now_ms: u64) -> Step {
        let Some(record) = self.instances.get(id) else {
            return Step::Unselected;
        };
        let instance = &record.instance;
        if *instance.machine != *sel.selection.machine || !sel.selects(record) {
            return Step::Unselected;
        }
        Step::Write(Entry::Delete {
            id: id.to_owned(),
            at_ms: self.entry_time(now_ms),
            machine: Some(instance.machine.to_string()),
            reason: Some(DeleteReason::Delete),
        })
    }
}
