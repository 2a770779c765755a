//! The engine proper: the state of one shard and the decide/apply split. (API fixed; bodies
//! are being written.)

use std::collections::HashMap;

use serde_json::Value;

use super::{Command, Entry, Instance};
use crate::Rejection;

/// What `decide` concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Log this entry, then `apply` it; the response is what `apply` returns.
    Write(Entry),
    /// Nothing to log; this is the complete `result` object (idempotent replay, identical
    /// PUT_MACHINE).
    Answer(Value),
}

/// One page of LIST_INSTANCES from this shard, ordered by id.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage {
    pub instances: Vec<Value>,
    /// True when more matching instances exist after the last one returned.
    pub more: bool,
}

/// Counters maintained by `apply`, read by the metrics path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStats {
    /// machine -> events applied (moved or not).
    pub events_applied: HashMap<String, u64>,
    /// (machine, from, to) -> transitions that changed state.
    pub transitions: HashMap<(String, String, String), u64>,
    /// (machine, state) -> current instances in that state.
    pub by_state: HashMap<(String, String), u64>,
}

#[derive(Debug, Default)]
pub struct Engine {
    _private: (),
}

#[allow(unused_variables, clippy::todo)]
impl Engine {
    pub fn new() -> Self {
        todo!()
    }
    pub fn decide(&self, cmd: &Command, now_ms: u64) -> Result<Decision, Rejection> {
        todo!()
    }
    pub fn apply(&mut self, entry: Entry, offset: u64, want_result: bool) -> Option<Value> {
        todo!()
    }
    pub fn instance(&self, id: &str) -> Option<&Instance> {
        todo!()
    }
    pub fn instance_json(&self, id: &str) -> Option<Value> {
        todo!()
    }
    pub fn history(&self, id: &str, from: u64, limit: usize) -> Result<Value, Rejection> {
        todo!()
    }
    pub fn list_instances(
        &self,
        machine: Option<&str>,
        state: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> ListPage {
        todo!()
    }
    pub fn machine(&self, name: &str, version: Option<u32>) -> Result<Value, Rejection> {
        todo!()
    }
    pub fn machines(&self) -> Vec<(String, Vec<u32>)> {
        todo!()
    }
    pub fn machine_entries(&self) -> Vec<Entry> {
        todo!()
    }
    pub fn machine_count(&self) -> usize {
        todo!()
    }
    pub fn instance_count(&self) -> usize {
        todo!()
    }
    pub fn stats(&self) -> &EngineStats {
        todo!()
    }
    pub fn snapshot(&self) -> Vec<u8> {
        todo!()
    }
    pub fn restore(bytes: &[u8]) -> Result<Engine, String> {
        todo!()
    }
}
