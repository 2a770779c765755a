//! DELETE_INSTANCE: remove an instance with its history and idempotency records.

use serde_json::{json, Value};

use super::rejections::{instance_not_found, misrouted};
use crate::engine::indexes::Group;
use crate::engine::instance::InstanceView;
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
        self.before_change(&id);
        let Some(record) = self.instances.remove(id.as_str()) else {
            self.diverge(offset, format!("delete of unknown instance `{id}`"));
            return None;
        };
        if record.timer_due_ms != 0 {
            self.timers_armed = self.timers_armed.saturating_sub(1);
        }
        let group = Group::of(&record, &mut self.names);
        (self.indexes).deleted(&self.catalog, group, &record);
        let instance = &record.instance;
        let expired = reason == Some(DeleteReason::Retention);
        self.stats
            .count_delete(&instance.machine, &instance.state, expired);
        Some(json!({"id": id, "deleted": true, "wal_offset": offset}))
    }
}
