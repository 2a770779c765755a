//! The engine's side of durable timers (docs/protocol.md, "Timed transitions"): which timer an
//! instance has, arming and spending it, and deciding a fire. Pure: the shard runtime passes
//! the time in; the deadline-ordered queue itself is `crate::timers::TimerQueue`.
//!
//! A timer belongs to one entry into a state: its generation is the log offset of the entry
//! that moved the instance there (`InstanceRecord::entered_offset`). Leaving the state clears
//! `timer_due_ms` in `apply`, so a queued timer of an older generation is stale and skipped.

use serde_json::{json, Value};

use super::indexes::Group;
use super::instance::InstanceRecord;
use super::rfc3339::format_ms;
use super::{Command, Decision, DeleteReason, Engine, Entry};
use crate::Rejection;

/// `arm_all_timers` arming more than one instance in this many re-sorts the placement index
/// once instead of moving each instance (a sort of n ids beats n/8 moves of ~1 µs each).
const BULK_ARM_FRACTION: usize = 8;

/// A timer to queue: due time (epoch ms), generation, instance id.
pub type Armed = (u64, u64, Box<str>);

/// What a due timer does.
#[derive(Debug, Clone, PartialEq)]
pub enum Fire {
    /// The instance left the state, was deleted or its timer is spent: nothing to do.
    Stale,
    /// Log and apply this entry (an `Entry::Apply` with `timer: true`).
    Write(Entry),
    /// The event does not apply now (a false guard): the timer is spent, nothing is logged.
    Refused(Rejection),
}

impl Engine {
    /// (event, due) of the timer `record` has in its current state, from its definition:
    /// a timed transition's event, or None for its retention's deletion (docs/lifecycle.md;
    /// a final state has no timed transition, so the two never compete).
    fn timer_of<'a>(&'a self, record: &'a InstanceRecord) -> Option<(Option<&'a str>, u64)> {
        let instance = &record.instance;
        let compiled = &self
            .catalog
            .get(&instance.machine, instance.version)?
            .compiled;
        let entered = record.entered_at_ms;
        match compiled.timer(&instance.state, entered, &instance.context) {
            Some((event, due)) => Some((Some(event), due)),
            None => Some((None, compiled.expiry(&instance.state, entered)?)),
        }
    }

    /// The log offset at which instance `id` entered its state (its timer's generation).
    pub fn entered_offset(&self, id: &str) -> Option<u64> {
        self.instances.get(id).map(|r| r.entered_offset)
    }

    /// Arms the timer of instance `id` if it entered its state in the record at `offset` and
    /// that state has a timer. Returns the due time to queue.
    pub fn arm_timer(&mut self, id: &str, offset: u64) -> Option<u64> {
        let record = self.instances.get(id)?;
        if record.entered_offset != offset || record.timer_due_ms != 0 {
            return None;
        }
        let due = self.timer_of(record)?.1.max(1);
        self.set_timer_due(id, due);
        Some(due)
    }

    /// Sets instance `id`'s `timer_due_ms` to `due` (0: none), keeping the armed count and the
    /// instance's placement group (`engine::indexes`) in step.
    fn set_timer_due(&mut self, id: &str, due: u64) {
        let Some(record) = self.instances.get_mut(id) else {
            return;
        };
        let group = Group::of(record, &mut self.names);
        let (was, armed) = (record.timer_due_ms != 0, due != 0);
        record.timer_due_ms = due;
        if was == armed {
            return;
        }
        if armed {
            self.timers_armed += 1;
        } else {
            self.timers_armed = self.timers_armed.saturating_sub(1);
        }
        (self.indexes).timer_set(group, armed, &record.instance.id);
    }

    /// Arms every instance's timer (recovery, promotion): the queue's initial contents. With
    /// no timed transition in any stored machine there is nothing to arm, and the instances
    /// are not visited (a cache miss each: a tenth of a 1M-instance restart).
    pub fn arm_all_timers(&mut self) -> Vec<Armed> {
        let mut out: Vec<Armed> = Vec::new();
        if self.timers_armed == 0 && !self.catalog.has_timers() {
            return out;
        }
        for record in self.instances.records() {
            let id = &record.instance.id;
            if record.timer_due_ms != 0 {
                out.push((
                    record.timer_due_ms,
                    record.entered_offset,
                    id.as_str().into(),
                ));
            } else if let Some((_, due)) = self.timer_of(record) {
                out.push((due.max(1), record.entered_offset, id.as_str().into()));
            }
        }
        // Many at once (a recovery): set them all, then sort the placement index once, rather
        // than move each instance between groups.
        let bulk = out.len() > self.instances.len() / BULK_ARM_FRACTION;
        for (due, _, id) in &out {
            match self.instances.get_mut(id) {
                Some(record) if record.timer_due_ms == 0 && bulk => {
                    record.timer_due_ms = *due;
                    self.timers_armed += 1;
                }
                Some(record) if record.timer_due_ms == 0 => self.set_timer_due(id, *due),
                _ => {}
            }
        }
        if bulk && self.indexes.live() {
            self.build_indexes();
        }
        out
    }

    /// Decides what the timer of generation `gen` of instance `id` does at `now_ms`: the event
    /// through the same decide as a client's APPLY_EVENT (payload `{}`), marked as a timer's;
    /// or, for a retention timer, the instance's deletion.
    pub fn decide_timer(&self, id: &str, gen: u64, now_ms: u64) -> Fire {
        let Some(record) = self.instances.get(id) else {
            return Fire::Stale;
        };
        if record.entered_offset != gen || record.timer_due_ms == 0 {
            return Fire::Stale;
        }
        let event = match self.timer_of(record) {
            None => return Fire::Stale,
            Some((Some(event), _)) => event,
            Some((None, _)) => {
                return Fire::Write(Entry::Delete {
                    id: id.to_owned(),
                    at_ms: self.entry_time(now_ms),
                    machine: Some(record.instance.machine.to_string()),
                    reason: Some(DeleteReason::Retention),
                })
            }
        };
        let cmd = Command::ApplyEvent {
            instance_id: id.to_owned(),
            event: event.to_owned(),
            payload: None,
            expected_state: None,
            expected_wal_offset: None,
            idempotency_key: None,
        };
        match self.decide(&cmd, now_ms) {
            Ok(Decision::Write(mut entry @ Entry::Apply { .. })) => {
                if let Entry::Apply { timer, .. } = &mut entry {
                    *timer = true;
                }
                Fire::Write(entry)
            }
            Ok(_) => Fire::Stale, // without a key or expectations decide always writes
            Err(rejection) => Fire::Refused(rejection),
        }
    }

    /// Marks the timer of generation `gen` of `id` as used (it fired and the instance stayed,
    /// or it was refused): it fires at most once per entry into the state.
    pub fn spend_timer(&mut self, id: &str, gen: u64) {
        if let Some(record) = self.instances.get_mut(id) {
            if record.entered_offset == gen && record.timer_due_ms != 0 {
                self.set_timer_due(id, 0);
            }
        }
    }

    /// Instances with an armed timer (the `svc_timers_pending` gauge).
    pub fn timers_armed(&self) -> u64 {
        self.timers_armed
    }

    /// GET_INSTANCE's `timer` object, while one is armed.
    pub(crate) fn timer_json(&self, record: &InstanceRecord) -> Option<Value> {
        if record.timer_due_ms == 0 {
            return None;
        }
        let due_at = format_ms(record.timer_due_ms);
        Some(match self.timer_of(record)? {
            (Some(event), _) => json!({"event": event, "due_at": due_at}),
            (None, _) => json!({"event": null, "reason": "retention", "due_at": due_at}),
        })
    }
}

impl Engine {
    /// The generation of `id`'s armed timer, if one is armed (queue compaction).
    pub fn timer_generation(&self, id: &str) -> Option<u64> {
        let record = self.instances.get(id)?;
        (record.timer_due_ms != 0).then_some(record.entered_offset)
    }
}
