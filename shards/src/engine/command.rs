//! Commands: the decoded, validated parameters of a write op, as the engine sees them.

use serde_json::{Map, Value};

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
