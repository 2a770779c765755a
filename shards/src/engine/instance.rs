//! Instances: the record of one running machine, its recent history and the idempotency keys
//! it has seen, and the JSON shapes GET_INSTANCE and GET_HISTORY return.
//!
//! Nothing here reads definitions: an instance and its history are self-contained, so `apply`
//! can rebuild them from log entries alone.

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Value};

use super::context::Context;
use super::history::{History, Items, NewItem, Tail};
use super::idempotency::IdempotencyStore;
use super::json_text::JsonText;
use super::json_write;
use super::names::{Interner, Name, NameId};
use super::rfc3339::format_ms;
use super::small_str::SmallStr;

/// Bytes of an APPLY_EVENT result besides its id, states and context: its member names, a
/// 20-digit offset and a small context (reserved once, so the writes below do not regrow).
const RESULT_BYTES_FIXED: usize = 160;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub id: SmallStr,
    pub machine: Name,
    pub version: u32,
    pub state: Name,
    pub context: Context,
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
            "context": self.context.to_json(),
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
            context: &'a Context,
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
        // By hand (json_write), the hottest result: one per instance change.
        out.reserve(RESULT_BYTES_FIXED + self.id.len() + from.len() + self.state.len());
        out.extend_from_slice(br#"{"applied":true,"context":"#);
        json_write::write_context(out, &self.context);
        out.extend_from_slice(br#","from_state":"#);
        json_write::write_str(out, from);
        out.extend_from_slice(br#","instance_id":"#);
        json_write::write_str(out, &self.id);
        out.extend_from_slice(br#","to_state":"#);
        json_write::write_str(out, &self.state);
        out.extend_from_slice(br#","wal_offset":"#);
        json_write::write_u64(out, wal_offset);
        out.push(b'}');
    }

    /// The APPLY_EVENT result for an event that moved this instance from `from` to its current
    /// state at `wal_offset`.
    pub(crate) fn event_result(&self, from: &str, wal_offset: u64) -> Value {
        json!({
            "instance_id": self.id,
            "from_state": from,
            "to_state": self.state,
            "context": self.context.to_json(),
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
            "context": self.context.to_json(),
            "wal_offset": self.wal_offset,
            "applied": true,
        })
    }
}

impl HistoryItem {
    /// One item of GET_HISTORY's `events`; an absent payload shows as `{}`.
    /// A migration's item (its event name is empty: `ops::migrate`) reads
    /// `{seq, type: "migrated", from_version, to_version, from_state, to_state, at, wal_offset}`.
    pub fn to_json(&self) -> Value {
        if self.event.is_empty() {
            let versions = self.payload.as_ref().and_then(|p| p.to_map().ok());
            let version = |k: &str| versions.as_ref().map_or(Value::Null, |m| m[k].clone());
            return json!({
                "seq": self.seq,
                "type": "migrated",
                "from_version": version("from_version"),
                "to_version": version("to_version"),
                "from_state": self.from_state,
                "to_state": self.to_state,
                "at": format_ms(self.at_ms),
                "wal_offset": self.wal_offset,
            });
        }
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

/// Everything the engine keeps about one instance (the layout, byte by byte, is in
/// docs/architecture.md, "Engine state"). What most instances never use is allocated on first
/// use: the history at the first event, the idempotency records at the first key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InstanceRecord {
    pub(crate) instance: Instance,
    /// None until the first event.
    pub(crate) history: Option<Box<History>>,
    /// None until CREATE_INSTANCE or APPLY_EVENT carries an idempotency key.
    pub(crate) keys: Option<Box<Keys>>,
    /// When and at which log offset the instance entered its current state (creation or the
    /// last event that changed the state): the base of `after_ms` timers, and the timer's
    /// generation (`engine::timers`). `UNKNOWN` in a snapshot written before these existed;
    /// restore fills in `updated_at_ms` / `wal_offset`.
    pub(crate) entered_at_ms: u64,
    pub(crate) entered_offset: u64,
    /// Due time (epoch ms) of the live timer the shard's timer queue holds for this entry into
    /// the state; 0 when none (set by `Engine::arm_timer`, cleared when the state is left or
    /// the timer fires or is spent). Not in snapshots: timers are rebuilt from the state.
    pub(crate) timer_due_ms: u64,
}

/// The idempotency records of one instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Keys {
    /// APPLY_EVENT idempotency keys and their first results.
    pub(crate) events: IdempotencyStore,
    pub(crate) created: Option<CreatedWithKey>,
}

/// The snapshot form of a record (unchanged by the lazy allocation: an absent history or key
/// store is written as the empty list it stands for); `InstanceRecord::snapshot_form`.
#[derive(Serialize)]
pub(crate) struct RecordOut<'a> {
    instance: &'a Instance,
    history: Items<'a>,
    #[serde(serialize_with = "keys_or_empty")]
    keys: Option<&'a IdempotencyStore>,
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<&'a CreatedWithKey>,
    entered_at_ms: u64,
    entered_offset: u64,
}

/// A record as a snapshot holds it; `into_record` interns its names.
#[derive(Deserialize)]
struct RecordIn {
    instance: Instance,
    #[serde(default)]
    history: Vec<HistoryItem>,
    #[serde(default)]
    keys: IdempotencyStore,
    #[serde(default)]
    created: Option<CreatedWithKey>,
    #[serde(default = "unknown")]
    entered_at_ms: u64,
    #[serde(default = "unknown")]
    entered_offset: u64,
}

fn keys_or_empty<S: Serializer>(keys: &Option<&IdempotencyStore>, s: S) -> Result<S::Ok, S::Error> {
    match keys {
        Some(keys) => keys.serialize(s),
        None => s.collect_seq(std::iter::empty::<()>()),
    }
}

impl InstanceRecord {
    /// The snapshot form of this record, its history's names read from `names` (the
    /// interner of the engine that holds it).
    pub(crate) fn snapshot_form<'a>(&'a self, names: &'a Interner) -> RecordOut<'a> {
        let keys = self.keys.as_deref();
        RecordOut {
            instance: &self.instance,
            history: Items(self.history.as_deref(), self.tail(), names),
            keys: keys.map(|k| &k.events),
            created: keys.and_then(|k| k.created.as_ref()),
            entered_at_ms: self.entered_at_ms,
            entered_offset: self.entered_offset,
        }
    }
}

impl InstanceRecord {
    /// The record an image holds (the snapshot form as JSON text, `snapshot_form`), its names
    /// interned in `names`: a slot move's `Entry::Import` (`engine::moves`).
    pub(crate) fn from_image(image: &str, names: &mut Interner) -> serde_json::Result<Self> {
        let record: RecordIn = serde_json::from_str(image)?;
        Ok(record.into_record(names))
    }
}

impl RecordIn {
    /// The record, its machine, state and history names interned in `names`.
    fn into_record(self, names: &mut Interner) -> InstanceRecord {
        let mut instance = self.instance;
        names.adopt(&mut instance.machine);
        names.adopt(&mut instance.state);
        let history = History::from_items(&self.history, names);
        let keys = Keys {
            events: self.keys,
            created: self.created,
        };
        InstanceRecord {
            instance,
            history: (!history.is_empty()).then(|| Box::new(history)),
            keys: (keys != Keys::default()).then(|| Box::new(keys)),
            entered_at_ms: self.entered_at_ms,
            entered_offset: self.entered_offset,
            timer_due_ms: 0,
        }
    }
}

/// A snapshot's list of records, read one by one, with the interner their names went into
/// (which becomes the restored engine's): a record's history items exist as full items only
/// while that record is read.
pub(crate) struct RestoredRecords {
    pub(crate) records: Vec<InstanceRecord>,
    pub(crate) names: Interner,
}

impl<'de> Deserialize<'de> for RestoredRecords {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Records;
        impl<'de> Visitor<'de> for Records {
            type Value = RestoredRecords;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of instance records")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut names = Interner::default();
                let mut records = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(record) = seq.next_element::<RecordIn>()? {
                    records.push(record.into_record(&mut names));
                }
                Ok(RestoredRecords { records, names })
            }
        }
        d.deserialize_seq(Records)
    }
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
            created: record.keys.as_ref().and_then(|k| k.created.as_ref()),
            keys: record.keys.as_ref().map(|k| &k.events),
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
            history: None,
            keys: None,
        }
    }

    /// Applies a logged event described by `item`: merges the payload into the context
    /// (top-level keys overwrite), moves the state to `to` (`to_id` its id; `item.from_state`
    /// is the current state's), counts the event and appends it to the history as the next
    /// event number. Returns the state left, and true when this left the state while a timer
    /// was armed for it (the timer is cancelled).
    pub(crate) fn advance(&mut self, item: NewItem<'_>, to: Name, to_id: NameId) -> (Name, bool) {
        let mut cancelled = false;
        if item.from_state != to_id {
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
        instance.event_count += 1;
        instance.updated_at_ms = item.at_ms;
        instance.wal_offset = item.wal_offset;
        let from = std::mem::replace(&mut instance.state, to);
        self.history.get_or_insert_with(Default::default).push(item);
        (from, cancelled)
    }

    /// A migration (`Entry::Migrate`) to `version`, state `to`: `item` is its history item.
    /// The timer's generation moves to the entry (a queued timer of the old version is
    /// stale); the time the state was entered stays, so `after_ms` timers count from it.
    /// Returns the state left.
    pub(crate) fn migrate(&mut self, item: NewItem<'_>, to: Name, version: u32) -> Name {
        self.entered_offset = item.wal_offset;
        let instance = &mut self.instance;
        instance.version = version;
        instance.event_count += 1;
        instance.updated_at_ms = item.at_ms;
        instance.wal_offset = item.wal_offset;
        let from = std::mem::replace(&mut instance.state, to);
        self.history.get_or_insert_with(Default::default).push(item);
        from
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

    /// The GET_HISTORY result for `from` (first seq wanted, 1-based) and `limit` items;
    /// `names` is the interner of the engine that holds the record.
    pub(crate) fn history_json(&self, names: &Interner, from: u64, limit: usize) -> Value {
        let tail = self.tail();
        let history = self.history.as_deref();
        let (items, next) =
            history.map_or((Vec::new(), None), |h| h.page(tail, names, from, limit));
        let events: Vec<Value> = items.iter().map(HistoryItem::to_json).collect();
        json!({
            "id": self.instance.id,
            "events": events,
            "next": next,
            "oldest_seq": (history.and_then(|h| h.oldest_seq(tail)))
                .unwrap_or(self.instance.event_count + 1),
        })
    }

    /// What the history's items derive from this instance.
    fn tail(&self) -> Tail<'_> {
        Tail {
            last_seq: self.instance.event_count,
            state: &self.instance.state,
        }
    }

    /// The idempotency records, created on first use.
    pub(crate) fn keys_mut(&mut self) -> &mut Keys {
        self.keys.get_or_insert_with(Default::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes docs/architecture.md ("Engine state") states.
    #[test]
    fn record_layout() {
        assert_eq!(size_of::<Instance>(), 112);
        assert_eq!(size_of::<InstanceRecord>(), 152);
        assert_eq!(size_of::<History>(), 40);
    }
}
