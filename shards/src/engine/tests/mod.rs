//! Engine-level tests: each op's rules and error codes, reads, stats, snapshots, and the
//! property tests against a reference model.

mod batch;
mod clock;
mod departed;
mod divergence;
mod epochs;
mod events;
mod find;
mod instances;
mod lifecycle;
mod machines;
mod model;
mod moves;
mod reads;
mod replay;
mod timers;
mod walk;

use serde_json::{json, Map, Value};

use super::{Command, Decision, Engine};
use crate::{ErrorCode, Rejection};

/// An engine with the offset bookkeeping a shard does: decide, then apply writes at the next
/// offset.
pub(super) struct Shard {
    pub(super) engine: Engine,
    pub(super) next_offset: u64,
    pub(super) now_ms: u64,
    /// Every entry written, with its offset: the log a restart would replay.
    pub(super) log: Vec<(u64, super::Entry)>,
}

impl Shard {
    pub(super) fn new() -> Self {
        Shard {
            engine: Engine::new(),
            next_offset: 1,
            now_ms: 1_769_860_800_000,
            log: Vec::new(),
        }
    }

    /// Runs one command; the value is the response `result`.
    pub(super) fn exec(&mut self, cmd: Command) -> Result<Value, Rejection> {
        self.now_ms += 1;
        match self.engine.decide(&cmd, self.now_ms)? {
            Decision::Answer(v) => Ok(v),
            Decision::Write(entry) => {
                let offset = self.next_offset;
                self.next_offset += 1;
                self.log.push((offset, entry.clone()));
                let result = (self.engine)
                    .apply(entry, offset, true)
                    .expect("a decided entry applies");
                assert_eq!(self.engine.divergence(), None, "a decided entry fits");
                Ok(result)
            }
        }
    }

    pub(super) fn ok(&mut self, cmd: Command) -> Value {
        self.exec(cmd).unwrap()
    }

    pub(super) fn code(&mut self, cmd: Command) -> ErrorCode {
        self.exec(cmd).unwrap_err().code
    }

    /// A shard with the `order` machine stored as version 1.
    pub(super) fn with_order() -> Self {
        let mut shard = Shard::new();
        shard.ok(put("order", 1, order_machine()));
        shard
    }
}

pub(super) fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// An order: pay in full to move on (a partial payment stays in `new`), ship, deliver;
/// cancel from any open state; `note` loops on `paid`.
pub(super) fn order_machine() -> Value {
    json!({
        "states": ["new", "paid", "shipped", "done", "cancelled"],
        "initial": "new",
        "final": ["done", "cancelled"],
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
            {"from": "new", "event": "pay", "to": "new", "guard": "payload.amount < ctx.total"},
            {"from": "paid", "event": "ship", "to": "shipped"},
            {"from": "shipped", "event": "deliver", "to": "done"},
            {"from": "paid", "event": "note", "to": "paid"},
            {"from": "*", "event": "cancel", "to": "cancelled"}
        ]
    })
}

pub(super) fn put(machine: &str, version: u32, definition: Value) -> Command {
    Command::PutMachine {
        machine: machine.into(),
        version,
        definition,
    }
}

/// Instances of `order` in `state` (MACHINE_STATS' count).
pub(super) fn count(engine: &Engine, state: &str) -> u64 {
    let counts = engine.state_counts("order").unwrap();
    counts
        .into_iter()
        .find(|(s, _)| s == state)
        .map_or(0, |(_, n)| n)
}

/// A fresh engine with `log` replayed into it as recovery does (binary records).
pub(super) fn replay_log(log: &[(u64, super::Entry)]) -> Engine {
    let mut engine = Engine::new();
    let mut replay = super::Replay::new();
    for (offset, entry) in log {
        replay
            .push(&mut engine, *offset, &entry.to_bytes())
            .unwrap();
    }
    replay.flush(&mut engine).unwrap();
    engine
}

pub(super) fn create(id: &str, total: i64) -> Command {
    create_keyed(id, total, None)
}

pub(super) fn create_keyed(id: &str, total: i64, key: Option<&str>) -> Command {
    Command::CreateInstance {
        id: id.into(),
        machine: "order".into(),
        version: 1,
        context: obj(json!({"total": total})),
        idempotency_key: key.map(str::to_string),
    }
}

pub(super) fn event(id: &str, name: &str, payload: Option<Value>) -> Command {
    Command::ApplyEvent {
        instance_id: id.into(),
        event: name.into(),
        payload: payload.map(obj),
        expected_state: None,
        expected_wal_offset: None,
        idempotency_key: None,
    }
}

pub(super) fn keyed_event(id: &str, name: &str, payload: Option<Value>, key: &str) -> Command {
    match event(id, name, payload) {
        Command::ApplyEvent {
            instance_id,
            event,
            payload,
            ..
        } => Command::ApplyEvent {
            instance_id,
            event,
            payload,
            expected_state: None,
            expected_wal_offset: None,
            idempotency_key: Some(key.into()),
        },
        other => other,
    }
}

pub(super) fn delete(id: &str) -> Command {
    Command::DeleteInstance { id: id.into() }
}
