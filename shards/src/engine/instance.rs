//! Instances: the record of one running machine, its recent history and the idempotency keys
//! it has seen, and the JSON shapes GET_INSTANCE and GET_HISTORY return.
//!
//! Nothing here reads definitions: an instance and its history are self-contained, so `apply`
//! can rebuild them from log entries alone.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::history::{History, NewItem};
use super::idempotency::IdempotencyStore;
use super::json_text::JsonText;
use super::names::Name;
use super::rfc3339::format_ms;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub machine: Name,
    pub version: u32,
    pub state: Name,
    pub context: Map<String, Value>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub event_count: u64,
    /// Offset of the last log entry that changed this instance.
    pub wal_offset: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryItem {
    pub seq: u64,
    pub event: Name,
    pub from_state: Name,
    pub to_state: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<JsonText>,
    pub at_ms: u64,
    pub wal_offset: u64,
}

impl Instance {
    /// The GET_INSTANCE result (also each item of LIST_INSTANCES).
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "machine": self.machine,
            "version": self.version,
            "state": self.state,
            "context": self.context,
            "created_at": format_ms(self.created_at_ms),
            "updated_at": format_ms(self.updated_at_ms),
            "event_count": self.event_count,
            "wal_offset": self.wal_offset,
        })
    }

    /// `to_json` (with the instance's `timer` member when it has one) serialised straight
    /// into `out`: the same bytes, without building the map or cloning the context.
    pub(crate) fn write_json(&self, timer: Option<&Value>, out: &mut Vec<u8>) {
        #[derive(Serialize)]
        struct View<'a> {
            context: &'a Map<String, Value>,
            created_at: String,
            event_count: u64,
            id: &'a str,
            machine: &'a str,
            state: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            timer: Option<&'a Value>,
            updated_at: String,
            version: u32,
            wal_offset: u64,
        }
        let view = View {
            context: &self.context,
            created_at: format_ms(self.created_at_ms),
            event_count: self.event_count,
            id: &self.id,
            machine: &self.machine,
            state: &self.state,
            timer,
            updated_at: format_ms(self.updated_at_ms),
            version: self.version,
            wal_offset: self.wal_offset,
        };
        // Serialising into a Vec cannot fail: no I/O, and every map key is a string.
        let _ = serde_json::to_writer(out, &view);
    }

    /// `event_result` serialised straight into `out`: the same bytes (fields in the order
    /// serde_json's sorted map gives them), without building the map or cloning the context.
    pub(crate) fn write_event_result(&self, from: &str, wal_offset: u64, out: &mut Vec<u8>) {
        #[derive(Serialize)]
        struct EventResult<'a> {
            applied: bool,
            context: &'a Map<String, Value>,
            from_state: &'a str,
            instance_id: &'a str,
            to_state: &'a str,
            wal_offset: u64,
        }
        let result = EventResult {
            applied: true,
            context: &self.context,
            from_state: from,
            instance_id: &self.id,
            to_state: &self.state,
            wal_offset,
        };
        // Serialising into a Vec cannot fail: no I/O, and every map key is a string.
        let _ = serde_json::to_writer(out, &result);
    }

    /// The APPLY_EVENT result for an event that moved this instance from `from` to its current
    /// state at `wal_offset`.
    pub(crate) fn event_result(&self, from: &str, wal_offset: u64) -> Value {
        json!({
            "instance_id": self.id,
            "from_state": from,
            "to_state": self.state,
            "context": self.context,
            "wal_offset": wal_offset,
            "applied": true,
        })
    }

    /// The CREATE_INSTANCE result.
    pub fn create_result(&self) -> Value {
        json!({
            "id": self.id,
            "machine": self.machine,
            "version": self.version,
            "state": self.state,
            "context": self.context,
            "wal_offset": self.wal_offset,
            "applied": true,
        })
    }
}

impl HistoryItem {
    /// One item of GET_HISTORY's `events`; an absent payload shows as `{}`.
    pub fn to_json(&self) -> Value {
        json!({
            "seq": self.seq,
            "event": self.event,
            "from_state": self.from_state,
            "to_state": self.to_state,
            "payload": self.payload.as_ref().and_then(|p| p.to_map().ok()).unwrap_or_default(),
            "at": format_ms(self.at_ms),
            "wal_offset": self.wal_offset,
        })
    }
}

/// The creation result kept when CREATE_INSTANCE carried an idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreatedWithKey {
    pub(crate) key: String,
    pub(crate) result: Value,
}

/// Everything the engine keeps about one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct InstanceRecord {
    pub(crate) instance: Instance,
    #[serde(default)]
    pub(crate) history: History,
    /// APPLY_EVENT idempotency keys and their first results.
    #[serde(default)]
    pub(crate) keys: IdempotencyStore,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) created: Option<CreatedWithKey>,
    /// When and at which log offset the instance entered its current state (creation or the
    /// last event that changed the state): the base of `after_ms` timers, and the timer's
    /// generation (`engine::timers`). `UNKNOWN` in a snapshot written before these existed;
    /// restore fills in `updated_at_ms` / `wal_offset`.
    #[serde(default = "unknown")]
    pub(crate) entered_at_ms: u64,
    #[serde(default = "unknown")]
    pub(crate) entered_offset: u64,
    /// Due time (epoch ms) of the live timer the shard's timer queue holds for this entry into
    /// the state; 0 when none (set by `Engine::arm_timer`, cleared when the state is left or
    /// the timer fires or is spent). Not in snapshots: timers are rebuilt from the state.
    #[serde(skip)]
    pub(crate) timer_due_ms: u64,
}

/// `entered_*` of a snapshot that predates them.
pub(crate) const UNKNOWN: u64 = u64::MAX;

fn unknown() -> u64 {
    UNKNOWN
}

/// What `decide` reads about one instance: the engine's record, or an atomic batch's scratch
/// copy of it (`engine::batch`).
#[derive(Clone, Copy)]
pub(crate) struct InstanceView<'a> {
    pub(crate) instance: &'a Instance,
    pub(crate) created: Option<&'a CreatedWithKey>,
    /// The APPLY_EVENT keys recorded before the batch (None once the batch recreated the id).
    pub(crate) keys: Option<&'a IdempotencyStore>,
    /// Keys recorded by earlier ops of the batch being decided.
    pub(crate) batch_keys: &'a [(String, Value)],
}

impl<'a> InstanceView<'a> {
    pub(crate) fn of(record: &'a InstanceRecord) -> Self {
        InstanceView {
            instance: &record.instance,
            created: record.created.as_ref(),
            keys: Some(&record.keys),
            batch_keys: &[],
        }
    }

    /// The first result of the APPLY_EVENT that used idempotency key `key`.
    pub(crate) fn key(&self, key: &str) -> Option<&'a Value> {
        (self
            .batch_keys
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v))
        .or_else(|| self.keys.and_then(|store| store.get(key)))
    }
}

impl InstanceRecord {
    pub(crate) fn new(instance: Instance) -> Self {
        InstanceRecord {
            entered_at_ms: instance.created_at_ms,
            entered_offset: instance.wal_offset,
            timer_due_ms: 0,
            instance,
            history: History::default(),
            keys: IdempotencyStore::default(),
            created: None,
        }
    }

    /// Applies a logged event described by `item`: merges the payload into the context
    /// (top-level keys overwrite), moves the state, counts the event and appends it to the
    /// history as the next event number. Returns true when this left the state while a timer
    /// was armed for it (the timer is cancelled).
    pub(crate) fn advance(&mut self, item: NewItem<'_>) -> bool {
        let mut cancelled = false;
        if *item.from_state != item.to_state {
            self.entered_at_ms = item.at_ms;
            self.entered_offset = item.wal_offset;
            cancelled = std::mem::take(&mut self.timer_due_ms) != 0;
        }
        let instance = &mut self.instance;
        if let Some(payload) = item.payload {
            if let Err(e) = JsonText::merge_str_into(payload, &mut instance.context) {
                // Unreachable for entries `decide` wrote: their payload is a serialized map.
                log::error!("instance `{}`: payload not merged: {e}", instance.id);
            }
        }
        let seq = instance.event_count + 1;
        instance.event_count = seq;
        instance.updated_at_ms = item.at_ms;
        instance.wal_offset = item.wal_offset;
        let to = item.to_state.clone();
        self.history.push(seq, item);
        self.instance.state = to;
        cancelled
    }

    /// The APPLY_EVENT result for an event that moved this instance from `from` to its current
    /// state at `wal_offset` (what `advance` just did).
    pub(crate) fn event_result(&self, from: &str, wal_offset: u64) -> Value {
        self.instance.event_result(from, wal_offset)
    }

    /// `event_result` written to `out` (`Instance::write_event_result`).
    pub(crate) fn write_event_result(&self, from: &str, wal_offset: u64, out: &mut Vec<u8>) {
        self.instance.write_event_result(from, wal_offset, out)
    }

    /// The GET_HISTORY result for `from` (first seq wanted, 1-based) and `limit` items.
    pub(crate) fn history_json(&self, from: u64, limit: usize) -> Value {
        let (items, next) = self.history.page(from, limit);
        let events: Vec<Value> = items.iter().map(HistoryItem::to_json).collect();
        json!({
            "id": self.instance.id,
            "events": events,
            "next": next,
            "oldest_seq": self.history.oldest_seq().unwrap_or(self.instance.event_count + 1),
        })
    }
}
