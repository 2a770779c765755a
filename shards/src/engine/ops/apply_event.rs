//! APPLY_EVENT: move an instance along a transition of its machine.
//!
//! decide order: idempotency key replay (before expectations, so a retried request that
//! already moved the instance still gets its first answer), `expected_state`,
//! `expected_wal_offset`, then the first transition for (state, event) whose guard holds.
//! Guards see the context before the merge and the payload (`{}` when absent).

use std::cell::OnceCell;

use serde_json::{Map, Value};

use super::rejections::replayed;
use super::rejections::{check_idempotency_key, instance_not_found, machine_not_found};
use crate::engine::definition::Resolution;
use crate::engine::divergence::{self, Divergence};
use crate::engine::history::NewItem;
use crate::engine::index::{prefetch, InstanceMap};
use crate::engine::indexes;
use crate::engine::instance::{InstanceRecord, InstanceView};
use crate::engine::{Decision, Engine, EventCommand, EventRef, Fields, Instance};
use crate::{ErrorCode, Rejection};

fn check_expectations(
    instance: &Instance,
    expected_state: Option<&str>,
    expected_wal_offset: Option<u64>,
) -> Result<(), Rejection> {
    if let Some(expected) = expected_state.filter(|s| *s != &*instance.state) {
        // The expected state is the client's: quoted short.
        let expected = smdb_protocol::codes::quote(expected);
        let message = format!(
            "expected state `{expected}`, instance is in `{}`",
            instance.state
        );
        return Err(Rejection::new(ErrorCode::Conflict, message)
            .with("expected_state", expected)
            .with("actual_state", &*instance.state));
    }
    if let Some(expected) = expected_wal_offset.filter(|o| *o != instance.wal_offset) {
        let message = format!(
            "expected wal_offset {expected}, instance is at {}",
            instance.wal_offset
        );
        return Err(Rejection::new(ErrorCode::Conflict, message)
            .with("expected_wal_offset", expected)
            .with("actual_wal_offset", instance.wal_offset));
    }
    Ok(())
}

/// The record an Apply entry can be applied to: it exists and is in the entry's `from` state.
/// Anything else is a divergence, recorded in `diverged`.
fn fitting_record<'a>(
    instances: &'a mut InstanceMap,
    diverged: &mut Option<Divergence>,
    ev: &EventRef<'_>,
    offset: u64,
) -> Option<&'a mut InstanceRecord> {
    let (id, event, from) = (ev.instance_id, ev.event, ev.from);
    let Some(record) = instances.get_mut(id) else {
        let reason = format!("event `{event}` for unknown instance `{id}`");
        divergence::record(diverged, offset, reason);
        return None;
    };
    if *record.instance.state != *from {
        let state = &record.instance.state;
        let reason =
            format!("event `{event}` for `{id}` leaves `{from}`, the instance is in `{state}`");
        divergence::record(diverged, offset, reason);
        return None;
    }
    Some(record)
}

/// An event's payload as guards read it: its compact text, parsed only when a guard reads a
/// member (most transitions have no guard, and most guards read the context only).
struct PayloadFields<'a> {
    text: Option<&'a str>,
    parsed: OnceCell<Map<String, Value>>,
}

impl<'a> PayloadFields<'a> {
    fn new(text: Option<&'a str>) -> Self {
        PayloadFields {
            text,
            parsed: OnceCell::new(),
        }
    }
}

impl Fields for PayloadFields<'_> {
    fn field(&self, name: &str) -> Option<&Value> {
        let parsed = self.parsed.get_or_init(|| {
            // The text is a decided payload (`EventCommand::payload`): an object, so this
            // parses; were it not, the guard would see no members (`{}`), never a panic.
            (self.text)
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default()
        });
        parsed.get(name)
    }
}

fn refused(code: ErrorCode, message: String, state: &str, event: &str) -> Rejection {
    // The event name is the client's: quoted short.
    Rejection::new(code, message)
        .with("state", state)
        .with("event", smdb_protocol::codes::quote(event))
}

impl Engine {
    /// Decides on `cmd` against `current`, the instance it names as this decision sees it.
    pub(crate) fn decide_apply_event(
        &self,
        current: Option<InstanceView<'_>>,
        cmd: &EventCommand<'_>,
        now_ms: u64,
    ) -> Result<Decision, Rejection> {
        Ok(
            match self.decide_event(current, cmd, now_ms, |ev| ev.to_entry())? {
                Ok(entry) => Decision::Write(entry),
                Err(answer) => Decision::Answer(answer),
            },
        )
    }

    /// APPLY_EVENT decided straight into its log record (the live write path): on `Ok(None)`
    /// `record` ends with the entry's binary form, byte for byte what `Entry::encode` writes
    /// for the entry `decide` returns, without building that owned `Entry` first (six
    /// allocations fewer per event); `Ok(Some(answer))` needs no write (an idempotent retry).
    pub fn decide_event_record(
        &self,
        cmd: &EventCommand<'_>,
        now_ms: u64,
        record: &mut Vec<u8>,
    ) -> Result<Option<Value>, Rejection> {
        let now_ms = self.entry_time(now_ms);
        let current = self.view(&cmd.instance_id);
        Ok(self
            .decide_event(current, cmd, now_ms, |ev| ev.encode(record))?
            .err())
    }

    /// The checks of APPLY_EVENT in order; the entry to log goes to `write`, borrowed. The
    /// inner `Err` is an answer without a write (the first answer under an idempotency key).
    pub(crate) fn decide_event<R>(
        &self,
        current: Option<InstanceView<'_>>,
        cmd: &EventCommand<'_>,
        now_ms: u64,
        write: impl FnOnce(EventRef<'_>) -> R,
    ) -> Result<Result<R, Value>, Rejection> {
        let EventCommand {
            instance_id,
            event,
            payload,
            expected_state,
            expected_wal_offset,
            idempotency_key,
        } = cmd;
        check_idempotency_key(idempotency_key.as_deref())?;
        let current = current.ok_or_else(|| instance_not_found(instance_id))?;
        if let Some(first) = idempotency_key.as_deref().and_then(|k| current.key(k)) {
            return Ok(Err(replayed(first)));
        }
        let instance = current.instance;
        check_expectations(instance, expected_state.as_deref(), *expected_wal_offset)?;
        let to = self.resolve(instance, event, payload.as_deref())?;
        Ok(Ok(write(EventRef {
            instance_id,
            event,
            from: &instance.state,
            to,
            payload: payload.as_deref(),
            idempotency_key: idempotency_key.as_deref(),
            at_ms: now_ms,
            machine: Some(&instance.machine),
            version: Some(instance.version),
            timer: false,
        })))
    }

    /// The state `event` moves `instance` to, or why it cannot move.
    fn resolve(
        &self,
        instance: &Instance,
        event: &str,
        payload: Option<&str>,
    ) -> Result<&str, Rejection> {
        let stored = (self.catalog.get(&instance.machine, instance.version))
            .ok_or_else(|| machine_not_found(&instance.machine, Some(instance.version)))?;
        let payload = PayloadFields::new(payload);
        let compiled = &stored.compiled;
        let state = &*instance.state;
        match compiled.resolve(state, event, &instance.context, &payload) {
            Resolution::Move(to) => Ok(to),
            Resolution::GuardFailed => Err(refused(
                ErrorCode::GuardFailed,
                format!("no guard held for event `{event}` in state `{state}`"),
                state,
                event,
            )),
            Resolution::NoTransition if compiled.is_final(state) => Err(refused(
                ErrorCode::InvalidTransition,
                format!("instance is in final state `{state}`"),
                state,
                event,
            )),
            Resolution::NoTransition => Err(refused(
                ErrorCode::InvalidTransition,
                format!("no transition for event `{event}` in state `{state}`"),
                state,
                event,
            )),
        }
    }

    /// Merges the payload, moves the state, appends history, counts, and records the result
    /// under the idempotency key. An unknown instance, or one not in `from`, is skipped and
    /// recorded as a divergence.
    ///
    /// Takes the entry borrowed (from a decided `Entry` or straight from a log record) and
    /// allocates nothing once the instance's buffers have grown: names are interned, the
    /// payload text is copied into the history's ring, and the merge overwrites in place.
    pub(crate) fn apply_event(
        &mut self,
        ev: EventRef<'_>,
        offset: u64,
        want_result: bool,
    ) -> Option<Value> {
        let (record, from) = self.advance_event(&ev, offset)?;
        if !want_result && ev.idempotency_key.is_none() {
            return None;
        }
        let result = record.event_result(&from, offset);
        if let Some(key) = ev.idempotency_key {
            (record.keys_mut().events).insert(key.to_owned(), result.clone());
        }
        Some(result)
    }

    /// `apply_event` writing the result's JSON to `out` instead of returning a `Value` (the
    /// same bytes, without building the result map or cloning the context into it). False
    /// when the entry was skipped, as `apply_event` returns None. The live APPLY path calls it
    /// with the event decoded from its own record (`decide_event_record`).
    pub fn apply_event_into(&mut self, ev: EventRef<'_>, offset: u64, out: &mut Vec<u8>) -> bool {
        let Some((record, from)) = self.advance_event(&ev, offset) else {
            return false;
        };
        match ev.idempotency_key {
            // The key keeps the result to answer a retry: that needs the Value anyway.
            Some(key) => {
                let result = record.event_result(&from, offset);
                // Serialising a Value into a Vec cannot fail (no I/O, string keys only).
                let _ = serde_json::to_writer(&mut *out, &result);
                (record.keys_mut().events).insert(key.to_owned(), result);
            }
            None => record.write_event_result(&from, offset, out),
        }
        true
    }

    /// Whether `ev` will change its instance (`fitting_record` finds it, without the warning).
    fn fits(&self, ev: &EventRef<'_>) -> bool {
        (self.instances.get(ev.instance_id)).is_some_and(|r| *r.instance.state == *ev.from)
    }

    /// What every applied event does to its instance: merge, move, history, counters, timer.
    /// Returns the instance and the state it left; None when the entry does not fit.
    fn advance_event(
        &mut self,
        ev: &EventRef<'_>,
        offset: u64,
    ) -> Option<(&mut InstanceRecord, crate::engine::names::Name)> {
        self.note_time(ev.at_ms);
        if self.walk.is_some() && self.fits(ev) {
            self.before_change(ev.instance_id);
        }
        let record = fitting_record(&mut self.instances, &mut self.divergence, ev, offset)?;
        // The history is one pointer beyond the record (allocated at the first event): start
        // loading it now, so its miss overlaps the interning and counting below.
        if let Some(history) = &record.history {
            prefetch(&**history);
        }
        let names = &mut self.names;
        let (to, to_id) = names.intern_with_id(ev.to);
        let item = NewItem {
            event: names.id(ev.event),
            from_state: names.id(&record.instance.state),
            payload: ev.payload,
            at_ms: ev.at_ms,
            wal_offset: offset,
        };
        let watch = indexes::EventWatch::before(&self.indexes, &self.catalog, record, &item);
        let (from, cancelled) = record.advance(item, to, to_id);
        watch.after(&mut self.indexes, names, record, to_id);
        let instance = &record.instance;
        if !self.departed.holds(ev.instance_id) {
            self.stats
                .count_event(&instance.machine, &from, &instance.state);
        }
        if ev.timer {
            self.stats.count_timer_fired(&instance.machine);
        }
        if cancelled {
            self.timers_armed = self.timers_armed.saturating_sub(1);
        }
        Some((record, from))
    }
}
