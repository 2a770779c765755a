//! One typed request per operation of docs/protocol.md and a typed result for each. Both clients
//! (blocking and async) build their calls from these, so op names and param keys are spelled
//! once. Results keep fields this client does not name in `extra`, so nothing the server sends
//! is lost, and a newer server's additions do not break decoding.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use smdb_protocol::op::Op;

use crate::error::{Error, Result};

/// Whether a request may be sent again after an error or a lost connection without risk of
/// applying it twice. Each op's class is in the op table (`smdb_protocol::op::Resend`, the
/// `resend` fact of its row): `Retry::of` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A read, or a write whose repetition is harmless (the same PUT_MACHINE again is
    /// `created:false`; a write carrying an idempotency key answers its first result).
    Safe,
    /// A write without an idempotency key: never resent by the client.
    Unsafe,
}

impl Retry {
    /// A request of `op`'s class by the op table: `keyed` says it carries an idempotency key,
    /// `each_safe` (BATCH) that every op inside is `Safe`.
    pub const fn of(op: Op, keyed: bool, each_safe: bool) -> Retry {
        match op.facts().resend.allows(keyed, each_safe) {
            true => Retry::Safe,
            false => Retry::Unsafe,
        }
    }
}

/// A request ready to send: op name, params, retry safety, and the type of its result.
#[derive(Debug, Clone)]
pub struct Request<T> {
    pub op: &'static str,
    /// `Null`: no `params` field.
    pub params: Value,
    pub retry: Retry,
    result: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Request<T> {
    pub fn new(op: &'static str, params: Value, retry: Retry) -> Request<T> {
        Request {
            op,
            params,
            retry,
            result: PhantomData,
        }
    }

    /// A request of `op` (its wire name and, without an idempotency key, its retry class from
    /// the op table).
    pub fn of(op: Op, params: Value) -> Request<T> {
        Request::keyed(op, params, false)
    }

    /// A request of `op` that carries an idempotency key when `keyed`.
    fn keyed(op: Op, params: Value, keyed: bool) -> Request<T> {
        Request::new(op.as_str(), params, Retry::of(op, keyed, false))
    }

    /// Decodes the `result` of this request's response.
    pub fn decode(&self, result: Value) -> Result<T> {
        serde_json::from_value(result).map_err(|e| self.undecodable(e))
    }

    /// Decodes the raw text of this request's `result` (one pass, no intermediate `Value`).
    pub fn decode_raw(&self, result: &RawValue) -> Result<T> {
        decode_raw(self.op, result)
    }

    fn undecodable(&self, e: serde_json::Error) -> Error {
        undecodable(self.op, e)
    }

    /// The same request with its result as plain JSON.
    pub fn untyped(self) -> Request<Value> {
        Request::new(self.op, self.params, self.retry)
    }
}

/// Decodes the raw text of an `op` request's `result` into `T`.
pub fn decode_raw<T: DeserializeOwned>(op: &str, result: &RawValue) -> Result<T> {
    serde_json::from_str(result.get()).map_err(|e| undecodable(op, e))
}

fn undecodable(op: &str, e: serde_json::Error) -> Error {
    Error::Protocol(format!("{op} result does not decode: {e}"))
}

/// Fields a result struct does not name.
pub type Extra = Map<String, Value>;

/// HELLO's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    #[serde(default)]
    pub protocol_version: u32,
    #[serde(default)]
    pub server_name: String,
    #[serde(default)]
    pub server_version: String,
    #[serde(default)]
    pub auth_required: bool,
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub features: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// PING's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pong {
    pub pong: bool,
}

/// AUTH's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Authenticated {
    pub authenticated: bool,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// INFO's result: the common fields typed, the rest (limits, connections, per-shard details)
/// in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Info {
    pub server_version: String,
    pub role: String,
    pub shards: u32,
    #[serde(default)]
    pub uptime_seconds: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// PUT_MACHINE's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachinePut {
    pub machine: String,
    pub version: u64,
    pub created: bool,
    pub checksum: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// GET_MACHINE's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub machine: String,
    pub version: u64,
    pub definition: Value,
    #[serde(default)]
    pub checksum: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of LIST_MACHINES.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineVersions {
    pub machine: String,
    pub versions: Vec<u64>,
}

/// LIST_MACHINES's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machines {
    pub machines: Vec<MachineVersions>,
}

/// CREATE_INSTANCE's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Created {
    pub id: String,
    pub machine: String,
    pub version: u64,
    pub state: String,
    pub context: Value,
    pub wal_offset: u64,
    /// `false` when an idempotency key repeated an earlier create.
    #[serde(default = "yes")]
    pub applied: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An instance (GET_INSTANCE, LIST_INSTANCES).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub machine: String,
    pub version: u64,
    pub state: String,
    /// Null in FIND and SCAN items without `include_context`.
    #[serde(default)]
    pub context: Value,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub updated_at: String,
    #[serde(default)]
    pub event_count: u64,
    pub wal_offset: u64,
    /// `{event, due_at}` while a durable timer is armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// APPLY_EVENT's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Applied {
    pub instance_id: String,
    pub from_state: String,
    pub to_state: String,
    pub context: Value,
    pub wal_offset: u64,
    /// `false` when an idempotency key repeated an earlier apply (this is its first result).
    pub applied: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

/// By hand rather than derived: `#[serde(flatten)]` buffers every member (the whole context)
/// before reading it, on the hottest result of all. Members are read in one pass straight into
/// their fields; the ones this client does not name go to `extra`, as with the derive.
impl<'de> Deserialize<'de> for Applied {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(AppliedVisitor)
    }
}

struct AppliedVisitor;

/// A member name of an APPLY_EVENT result.
enum AppliedKey {
    InstanceId,
    FromState,
    ToState,
    Context,
    WalOffset,
    Applied,
    Other(String),
}

impl<'de> Deserialize<'de> for AppliedKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = AppliedKey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: serde::de::Error>(self, k: &str) -> std::result::Result<AppliedKey, E> {
                Ok(match k {
                    "instance_id" => AppliedKey::InstanceId,
                    "from_state" => AppliedKey::FromState,
                    "to_state" => AppliedKey::ToState,
                    "context" => AppliedKey::Context,
                    "wal_offset" => AppliedKey::WalOffset,
                    "applied" => AppliedKey::Applied,
                    other => AppliedKey::Other(other.to_string()),
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> serde::de::Visitor<'de> for AppliedVisitor {
    type Value = Applied;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an APPLY_EVENT result object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut m: A,
    ) -> std::result::Result<Applied, A::Error> {
        use serde::de::Error as _;
        fn once<T, E: serde::de::Error>(
            slot: &mut Option<T>,
            key: &'static str,
            v: T,
        ) -> std::result::Result<(), E> {
            match slot.replace(v) {
                Some(_) => Err(E::duplicate_field(key)),
                None => Ok(()),
            }
        }
        let (mut instance_id, mut from_state, mut to_state) = (None, None, None);
        let (mut context, mut wal_offset, mut applied) = (None, None, None);
        let mut extra = Extra::new();
        while let Some(k) = m.next_key::<AppliedKey>()? {
            match k {
                AppliedKey::InstanceId => once(&mut instance_id, "instance_id", m.next_value()?)?,
                AppliedKey::FromState => once(&mut from_state, "from_state", m.next_value()?)?,
                AppliedKey::ToState => once(&mut to_state, "to_state", m.next_value()?)?,
                AppliedKey::Context => once(&mut context, "context", m.next_value()?)?,
                AppliedKey::WalOffset => once(&mut wal_offset, "wal_offset", m.next_value()?)?,
                AppliedKey::Applied => once(&mut applied, "applied", m.next_value()?)?,
                AppliedKey::Other(k) => {
                    extra.insert(k, m.next_value()?);
                }
            }
        }
        Ok(Applied {
            instance_id: instance_id.ok_or_else(|| A::Error::missing_field("instance_id"))?,
            from_state: from_state.ok_or_else(|| A::Error::missing_field("from_state"))?,
            to_state: to_state.ok_or_else(|| A::Error::missing_field("to_state"))?,
            context: context.ok_or_else(|| A::Error::missing_field("context"))?,
            wal_offset: wal_offset.ok_or_else(|| A::Error::missing_field("wal_offset"))?,
            applied: applied.ok_or_else(|| A::Error::missing_field("applied"))?,
            extra,
        })
    }
}

/// LIST_INSTANCES's result: one page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstancePage {
    pub instances: Vec<Instance>,
    /// Pass back as `cursor` for the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// DELETE_INSTANCE's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deleted {
    pub id: String,
    pub deleted: bool,
    pub wal_offset: u64,
}

/// One applied event of GET_HISTORY.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub seq: u64,
    pub event: String,
    pub from_state: String,
    pub to_state: String,
    #[serde(default)]
    pub payload: Value,
    pub wal_offset: u64,
    #[serde(default)]
    pub at: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// GET_HISTORY's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub id: String,
    pub events: Vec<HistoryEvent>,
    /// The next `from` to ask for, `None` at the end.
    pub next: Option<u64>,
    #[serde(default)]
    pub oldest_seq: u64,
}

/// WATCH_INSTANCE's and WATCH_ALL's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Watching {
    pub subscription_id: Value,
    pub cursor: String,
}

/// UNWATCH's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unwatched {
    pub removed: bool,
}

/// One entry of a BATCH result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchEntry {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

impl BatchEntry {
    /// This op's result, or its error as an `Error::Server`.
    pub fn into_result(self) -> Result<Value> {
        match (self.status.as_str(), self.result, self.error) {
            ("ok", r, _) => Ok(r.unwrap_or(Value::Null)),
            (_, _, e) => Err(Error::from_wire(&e.unwrap_or(Value::Null))),
        }
    }
}

/// BATCH's result: one entry per op, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResults {
    pub results: Vec<BatchEntry>,
}

/// REPLICATION_STATUS's result: `role` typed, peers, positions and lag as the server sends
/// them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicationStatus {
    pub role: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A subscription push (`type: "event"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub subscription_id: Value,
    pub instance_id: String,
    pub machine: String,
    pub version: u64,
    pub event: String,
    pub from_state: String,
    pub to_state: String,
    #[serde(default)]
    pub payload: Value,
    pub shard: u32,
    pub wal_offset: u64,
    pub cursor: String,
    /// The context after the event, for live events of a subscription with
    /// `include_context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// Read back from the log rather than live.
    #[serde(default)]
    pub replayed: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

fn yes() -> bool {
    true
}

/// Optional fields of CREATE_INSTANCE.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// Optional fields of APPLY_EVENT: optimistic-concurrency expectations and an idempotency key.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApplyOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_wal_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// Filters and paging of LIST_INSTANCES.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ListFilter {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_timer: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Options of WATCH_INSTANCE.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatchOptions {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub include_context: bool,
    /// Replay from this offset in the instance's shard log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_offset: Option<u64>,
}

/// Filters of WATCH_ALL; an empty list matches everything.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatchAllFilter {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub from_states: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub to_states: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub include_context: bool,
    /// Resume from a cursor of an earlier push or `subscription_lagged` (`"0"`: all retained).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_cursor: Option<String>,
}

/// BATCH mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// All or nothing, on one shard (`BATCH_ABORTED`, `CROSS_SHARD`).
    Atomic,
    /// Each op on its own; the batch succeeds, each entry says how its op went.
    BestEffort,
}

/// One op of a BATCH; made from the single-op request (`create_instance(..).into()`).
#[derive(Debug, Clone)]
pub struct BatchOp {
    pub op: &'static str,
    pub params: Value,
    pub retry: Retry,
}

impl<T> From<Request<T>> for BatchOp {
    fn from(r: Request<T>) -> BatchOp {
        BatchOp {
            op: r.op,
            params: r.params,
            retry: r.retry,
        }
    }
}

/// `value` as a JSON object, to add fields to.
fn object<T: Serialize>(value: &T) -> Result<Map<String, Value>> {
    match serde_json::to_value(value) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::Config(format!("params are not an object: {other}"))),
        Err(e) => Err(Error::Config(e.to_string())),
    }
}

/// Options structs serialise to objects by construction; an error here is impossible, but is
/// still reported rather than unwrapped.
fn with(opts: Result<Map<String, Value>>, fields: Value) -> Value {
    let mut m = opts.unwrap_or_default();
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    Value::Object(m)
}

/// The protocol version this client speaks (docs/protocol.md, "Session ops").
pub const PROTOCOL_VERSION: u32 = 1;

pub fn hello(client_name: &str) -> Request<Hello> {
    Request::of(
        Op::Hello,
        json!({"protocol_version": PROTOCOL_VERSION, "client_name": client_name,
               "client_version": env!("CARGO_PKG_VERSION")}),
    )
}

pub fn ping() -> Request<Pong> {
    Request::of(Op::Ping, Value::Null)
}

pub fn bye() -> Request<Value> {
    Request::of(Op::Bye, Value::Null)
}

pub fn info() -> Request<Info> {
    Request::of(Op::Info, Value::Null)
}

pub fn auth(token: &str) -> Request<Authenticated> {
    Request::of(Op::Auth, json!({"method": "bearer", "token": token}))
}

pub fn put_machine(machine: &str, version: u64, definition: &Value) -> Request<MachinePut> {
    Request::of(
        Op::PutMachine,
        json!({"machine": machine, "version": version, "definition": definition}),
    )
}

pub fn get_machine(machine: &str, version: Option<u64>) -> Request<Machine> {
    let mut p = json!({"machine": machine});
    if let Some(v) = version {
        p["version"] = json!(v);
    }
    Request::of(Op::GetMachine, p)
}

pub fn list_machines() -> Request<Machines> {
    Request::of(Op::ListMachines, json!({}))
}

pub fn create_instance(
    machine: &str,
    version: u64,
    id: &str,
    context: &Value,
    opts: &CreateOptions,
) -> Request<Created> {
    let p = with(
        object(opts),
        json!({"machine": machine, "version": version, "id": id, "context": context}),
    );
    Request::keyed(Op::CreateInstance, p, opts.idempotency_key.is_some())
}

pub fn get_instance(id: &str) -> Request<Instance> {
    Request::of(Op::GetInstance, json!({"id": id}))
}

pub fn list_instances(filter: &ListFilter) -> Request<InstancePage> {
    Request::of(Op::ListInstances, with(object(filter), Value::Null))
}

pub fn delete_instance(id: &str) -> Request<Deleted> {
    Request::of(Op::DeleteInstance, json!({"id": id}))
}

pub fn apply_event(
    instance_id: &str,
    event: &str,
    payload: Option<&Value>,
    opts: &ApplyOptions,
) -> Request<Applied> {
    let p = ApplyParams::new(instance_id, event, payload, opts);
    // Cannot fail: `ApplyParams` holds strings, a `Value` and an integer, and serde_json only
    // refuses maps with non-string keys or a failing `Serialize` impl.
    let params = serde_json::to_value(p).unwrap_or(Value::Null);
    Request::new(Op::ApplyEvent.as_str(), params, p.retry())
}

/// APPLY_EVENT's params, borrowed: the one definition of what `apply_event` sends. The async
/// client serializes it straight into the request frame (no map, no copy of the payload).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ApplyParams<'a> {
    pub instance_id: &'a str,
    pub event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_state: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_wal_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<&'a str>,
}

impl<'a> ApplyParams<'a> {
    pub fn new(
        instance_id: &'a str,
        event: &'a str,
        payload: Option<&'a Value>,
        opts: &'a ApplyOptions,
    ) -> ApplyParams<'a> {
        ApplyParams {
            instance_id,
            event,
            payload,
            expected_state: opts.expected_state.as_deref(),
            expected_wal_offset: opts.expected_wal_offset,
            idempotency_key: opts.idempotency_key.as_deref(),
        }
    }

    /// Safe to resend only with an idempotency key (the server then answers a repeat with the
    /// first result; the op table's `Resend::WithKey`).
    pub fn retry(&self) -> Retry {
        Retry::of(Op::ApplyEvent, self.idempotency_key.is_some(), false)
    }
}

pub fn get_history(id: &str, from: Option<u64>, limit: Option<u64>) -> Request<History> {
    let mut p = json!({"id": id});
    if let Some(f) = from {
        p["from"] = json!(f);
    }
    if let Some(l) = limit {
        p["limit"] = json!(l);
    }
    Request::of(Op::GetHistory, p)
}

pub fn watch_instance(instance_id: &str, opts: &WatchOptions) -> Request<Watching> {
    Request::of(
        Op::WatchInstance,
        with(object(opts), json!({"instance_id": instance_id})),
    )
}

pub fn watch_all(filter: &WatchAllFilter) -> Request<Watching> {
    Request::of(Op::WatchAll, with(object(filter), Value::Null))
}

pub fn unwatch(subscription_id: &Value) -> Request<Unwatched> {
    Request::of(Op::Unwatch, json!({"subscription_id": subscription_id}))
}

/// BATCH of `ops`; safe to resend only when every op is.
pub fn batch(mode: BatchMode, ops: &[BatchOp]) -> Request<BatchResults> {
    let retry = Retry::of(Op::Batch, false, ops.iter().all(|o| o.retry == Retry::Safe));
    let list: Vec<Value> = ops
        .iter()
        .map(|o| json!({"op": o.op, "params": o.params}))
        .collect();
    let mode = match mode {
        BatchMode::Atomic => "atomic",
        BatchMode::BestEffort => "best_effort",
    };
    Request::new(
        Op::Batch.as_str(),
        json!({"mode": mode, "ops": list}),
        retry,
    )
}

pub fn replication_status() -> Request<ReplicationStatus> {
    Request::of(Op::ReplicationStatus, json!({}))
}

pub fn promote() -> Request<Value> {
    Request::of(Op::Promote, json!({}))
}

/// TIMERS_RESUME: `{"resumed": true, "was_paused": bool}`. Idempotent, but a resend after
/// the first reply was lost would report `was_paused: false`, so it is not resent.
pub fn timers_resume() -> Request<Value> {
    Request::of(Op::TimersResume, json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_event_params_carry_exactly_the_options_given() {
        let payload = json!({"p": "x\"y", "n": [1, 2]});
        let all = ApplyOptions {
            expected_state: Some("s".into()),
            expected_wal_offset: Some(7),
            idempotency_key: Some("k".into()),
        };
        let r = apply_event("i", "e", Some(&payload), &all);
        assert_eq!(
            r.params,
            json!({"instance_id": "i", "event": "e", "payload": payload,
                   "expected_state": "s", "expected_wal_offset": 7, "idempotency_key": "k"})
        );
        assert_eq!((r.op, r.retry), ("APPLY_EVENT", Retry::Safe));
        let r = apply_event("i", "e", None, &ApplyOptions::default());
        assert_eq!(r.params, json!({"instance_id": "i", "event": "e"}));
        assert_eq!(r.retry, Retry::Unsafe);
        let offset_only = ApplyOptions {
            expected_wal_offset: Some(0),
            ..ApplyOptions::default()
        };
        let p = ApplyParams::new("i", "e", None, &offset_only);
        assert_eq!(
            serde_json::to_value(p).unwrap(),
            json!({"instance_id": "i", "event": "e", "expected_wal_offset": 0})
        );
        assert_eq!(p.retry(), Retry::Unsafe);
    }

    #[test]
    fn applied_decodes_its_members_and_keeps_the_rest() {
        let v = json!({"instance_id": "o1", "from_state": "a", "to_state": "b",
                       "context": {"n": 1, "tags": ["x"]}, "wal_offset": 42, "applied": true,
                       "newer_member": {"k": 7}});
        let a: Applied = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            (
                a.instance_id.as_str(),
                a.from_state.as_str(),
                a.to_state.as_str()
            ),
            ("o1", "a", "b")
        );
        assert_eq!((a.wal_offset, a.applied), (42, true));
        assert_eq!(a.context, json!({"n": 1, "tags": ["x"]}));
        assert_eq!(
            a.extra,
            json!({"newer_member": {"k": 7}})
                .as_object()
                .unwrap()
                .clone()
        );
        // What it serialises to reads back the same (extra flattened).
        assert_eq!(serde_json::to_value(&a).unwrap(), v);
        let mut missing = v.clone();
        missing.as_object_mut().unwrap().remove("wal_offset");
        let e = serde_json::from_value::<Applied>(missing).unwrap_err();
        assert!(e.to_string().contains("wal_offset"), "{e}");
        let mut wrong = v.clone();
        wrong["applied"] = json!("yes");
        assert!(serde_json::from_value::<Applied>(wrong).is_err());
        // Read from text (as the async client reads a result) it is the same value.
        let raw = serde_json::value::to_raw_value(&v).unwrap();
        assert_eq!(
            apply_event("o1", "go", None, &ApplyOptions::default())
                .decode_raw(&raw)
                .unwrap(),
            a
        );
        let twice = r#"{"instance_id":"o1","from_state":"a","to_state":"b","context":{},"wal_offset":1,"applied":true,"applied":false}"#;
        let e = serde_json::from_str::<Applied>(twice).unwrap_err();
        assert!(e.to_string().contains("duplicate field `applied`"), "{e}");
    }

    #[test]
    fn unset_options_are_left_out() {
        assert_eq!(object(&ApplyOptions::default()).unwrap(), Map::new());
        assert_eq!(list_instances(&ListFilter::default()).params, json!({}));
        let f = WatchAllFilter {
            machines: vec!["order".into()],
            include_context: true,
            ..Default::default()
        };
        assert_eq!(
            watch_all(&f).params,
            json!({"machines": ["order"], "include_context": true})
        );
    }

    #[test]
    fn only_keyed_or_harmless_writes_are_retry_safe() {
        let none = ApplyOptions::default();
        assert_eq!(apply_event("a", "e", None, &none).retry, Retry::Unsafe);
        let keyed = ApplyOptions {
            idempotency_key: Some("k".into()),
            ..Default::default()
        };
        assert_eq!(apply_event("a", "e", None, &keyed).retry, Retry::Safe);
        assert_eq!(delete_instance("a").retry, Retry::Unsafe);
        assert_eq!(get_instance("a").retry, Retry::Safe);
        let ops = [get_instance("a").into(), delete_instance("a").into()];
        assert_eq!(batch(BatchMode::BestEffort, &ops).retry, Retry::Unsafe);
    }

    /// Every typed request's retry class, as it was written by hand before the op table held
    /// it (`Resend`): reads and PUT_MACHINE are safe, keyed writes only with their key.
    #[test]
    fn every_request_has_the_retry_class_of_its_op() {
        use Retry::{Safe, Unsafe};
        let def = json!({});
        let keyed = CreateOptions {
            idempotency_key: Some("k".into()),
        };
        let unkeyed = CreateOptions::default();
        let get = || BatchOp::from(get_instance("a"));
        let create = |o| BatchOp::from(create_instance("m", 1, "a", &def, o));
        let got = [
            (hello("c").untyped(), Safe),
            (ping().untyped(), Safe),
            (bye(), Unsafe),
            (info().untyped(), Safe),
            (auth("t").untyped(), Safe),
            (put_machine("m", 1, &def).untyped(), Safe),
            (get_machine("m", None).untyped(), Safe),
            (list_machines().untyped(), Safe),
            (
                create_instance("m", 1, "a", &def, &unkeyed).untyped(),
                Unsafe,
            ),
            (create_instance("m", 1, "a", &def, &keyed).untyped(), Safe),
            (get_instance("a").untyped(), Safe),
            (list_instances(&ListFilter::default()).untyped(), Safe),
            (delete_instance("a").untyped(), Unsafe),
            (get_history("a", None, None).untyped(), Safe),
            (
                watch_instance("a", &WatchOptions::default()).untyped(),
                Safe,
            ),
            (watch_all(&WatchAllFilter::default()).untyped(), Safe),
            (unwatch(&json!(1)).untyped(), Unsafe),
            (
                batch(BatchMode::Atomic, &[get(), create(&keyed)]).untyped(),
                Safe,
            ),
            (
                batch(BatchMode::Atomic, &[get(), create(&unkeyed)]).untyped(),
                Unsafe,
            ),
            (replication_status().untyped(), Safe),
            (promote(), Unsafe),
            (timers_resume(), Unsafe),
        ];
        for (r, want) in got {
            assert_eq!(r.retry, want, "{}", r.op);
            assert!(smdb_protocol::Op::parse(r.op).is_some(), "{}", r.op);
        }
    }

    #[test]
    fn results_keep_unknown_fields() {
        let r = replication_status();
        let s = r
            .decode(json!({"role": "replica", "lag": {"0": 3}}))
            .unwrap();
        assert_eq!(s.role, "replica");
        assert_eq!(s.extra["lag"]["0"], 3);
        assert!(get_instance("x").decode(json!({"id": 1})).is_err());
    }
}
