//! Instances and their history. (Being written.)
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub id: String,
    pub machine: String,
    pub version: u32,
    pub state: String,
    pub context: Map<String, Value>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub event_count: u64,
    /// Offset of the last log entry that changed this instance.
    pub wal_offset: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistoryItem {
    pub seq: u64,
    pub event: String,
    pub from_state: String,
    pub to_state: String,
    pub payload: Option<Map<String, Value>>,
    pub at_ms: u64,
    pub wal_offset: u64,
}
