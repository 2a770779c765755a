//! Commands: the decoded, validated parameters of a write op, as the engine sees them.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::json_text::JsonText;

/// A write the engine is asked to decide on. The server builds these from request params
/// (aliases and type checks happen there; the engine checks domain rules).
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    PutMachine {
        machine: String,
        version: u32,
        /// The raw definition object as the client sent it.
        definition: Value,
    },
    CreateInstance {
        id: String,
        machine: String,
        version: u32,
        context: Map<String, Value>,
        idempotency_key: Option<String>,
    },
    ApplyEvent {
        instance_id: String,
        event: String,
        payload: Option<Map<String, Value>>,
        expected_state: Option<String>,
        expected_wal_offset: Option<u64>,
        idempotency_key: Option<String>,
    },
    DeleteInstance {
        id: String,
    },
}

/// APPLY_EVENT's params borrowed from the request where they can be (the write path's form:
/// no owned strings, and the payload kept as the text it arrived in when that text is already
/// the compact form). `Command::event` gives the same for an owned command.
#[derive(Debug, Clone, PartialEq)]
pub struct EventCommand<'a> {
    pub instance_id: Cow<'a, str>,
    pub event: Cow<'a, str>,
    /// The payload object's compact text: what `JsonText::from_map` writes for its `Map`
    /// (sorted member names, no whitespace), which goes to the log as is.
    pub payload: Option<Cow<'a, str>>,
    pub expected_state: Option<Cow<'a, str>>,
    pub expected_wal_offset: Option<u64>,
    pub idempotency_key: Option<Cow<'a, str>>,
}

impl EventCommand<'_> {
    /// The same command owning its strings.
    pub fn into_owned(self) -> EventCommand<'static> {
        let owned = |s: Cow<'_, str>| Cow::Owned(s.into_owned());
        EventCommand {
            instance_id: owned(self.instance_id),
            event: owned(self.event),
            payload: self.payload.map(owned),
            expected_state: self.expected_state.map(owned),
            expected_wal_offset: self.expected_wal_offset,
            idempotency_key: self.idempotency_key.map(owned),
        }
    }
}

impl Command {
    /// An APPLY_EVENT command in its borrowed form (its payload written as compact text);
    /// None for every other command.
    pub fn event(&self) -> Option<EventCommand<'_>> {
        let Command::ApplyEvent {
            instance_id,
            event,
            payload,
            expected_state,
            expected_wal_offset,
            idempotency_key,
        } = self
        else {
            return None;
        };
        Some(EventCommand {
            instance_id: Cow::Borrowed(instance_id),
            event: Cow::Borrowed(event),
            payload: (payload.as_ref())
                .map(|map| Cow::Owned(JsonText::from_map(map).into_string())),
            expected_state: expected_state.as_deref().map(Cow::Borrowed),
            expected_wal_offset: *expected_wal_offset,
            idempotency_key: idempotency_key.as_deref().map(Cow::Borrowed),
        })
    }
}
