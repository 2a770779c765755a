//! DELETE_INSTANCE: remove an instance with its history and idempotency records.

use serde_json::{json, Value};

use super::rejections::{instance_not_found, misrouted};
use crate::engine::indexes::Group;
use crate::engine::instance::{InstanceRecord, InstanceView};
use crate::engine::{Command, Decision, DeleteReason, Engine, Entry};
use crate::Rejection;

impl Engine {
    /// Decides on `cmd`; `existing` is the instance as this decision sees it.
    pub(crate) fn decide_delete(
        &self,
        existing: Option<InstanceView<'_>>,
        cmd: &Command,
        now_ms: u64,
    ) -> Result<Decision, Rejection> {
        let Command::DeleteInstance { id } = cmd else {
            return Err(misrouted("DELETE_INSTANCE"));
        };
        if existing.is_none() {
            return Err(instance_not_found(id));
        }
        Ok(Decision::Write(Entry::Delete {
            id: id.clone(),
            at_ms: now_ms,
            machine: None,
            reason: None,
        }))
    }

    /// Removes the instance; an unknown id is skipped and recorded as a divergence.
    pub(crate) fn apply_delete(&mut self, entry: Entry, offset: u64) -> Option<Value> {
        let Entry::Delete { id, reason, .. } = entry else {
            return None; // `Engine::apply` routes only Delete entries here.
        };
        let expired = reason == Some(DeleteReason::Retention);
        if self.remove_instance(&id, expired).is_none() {
            self.diverge(offset, format!("delete of unknown instance `{id}`"));
            return None;
        }
        Some(json!({"id": id, "deleted": true, "wal_offset": offset}))
    }

    /// Removes instance `id` with what derives from it (its armed timer's count, its index
    /// entries, its state's count; `expired` counts a retention deletion) and returns its
    /// record; None for an unknown id. A running snapshot walk writes it first.
    pub(crate) fn remove_instance(
        &mut self,
        id: &str,
        expired: bool,
    ) -> Option<Box<InstanceRecord>> {
        self.before_change(id);
        let record = self.instances.remove(id)?;
        if record.timer_due_ms != 0 {
            self.timers_armed = self.timers_armed.saturating_sub(1);
        }
        let group = Group::of(&record, &mut self.names);
        (self.indexes).deleted(&self.catalog, group, &record);
        let instance = &record.instance;
        if self.departed.holds(id) {
            self.departed.left(); // out of the counts since its slot moved out
        } else {
            self.stats
                .count_delete(&instance.machine, &instance.state, expired);
        }
        Some(record)
    }
}
