//! Log entries: everything `apply` needs, decided once. Serialized with serde into the WAL.
//!
//! The serialized form is part of the on-disk format: add fields only as `Option` with
//! `#[serde(default)]`, never rename.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "k")]
pub enum Entry {
    /// A machine definition version, already validated and normalised.
    #[serde(rename = "machine")]
    PutMachine {
        machine: String,
        version: u32,
        definition: Value,
        /// Hex CRC32C of the canonical definition JSON.
        checksum: String,
        at_ms: u64,
    },
    #[serde(rename = "create")]
    Create {
        id: String,
        machine: String,
        version: u32,
        /// Initial state, decided from the definition.
        state: String,
        context: Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
        at_ms: u64,
    },
    #[serde(rename = "apply")]
    Apply {
        instance_id: String,
        event: String,
        from: String,
        to: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<Map<String, Value>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
        at_ms: u64,
        /// The instance's machine and version, so a log reader (subscription replay) can
        /// describe the event without engine state. Absent in entries written before they
        /// were added; `apply` does not use them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<u32>,
    },
    #[serde(rename = "delete")]
    Delete { id: String, at_ms: u64 },
}

impl Entry {
    /// The instance this entry concerns, if any.
    pub fn instance_id(&self) -> Option<&str> {
        match self {
            Entry::PutMachine { .. } => None,
            Entry::Create { id, .. } | Entry::Delete { id, .. } => Some(id),
            Entry::Apply { instance_id, .. } => Some(instance_id),
        }
    }
}
