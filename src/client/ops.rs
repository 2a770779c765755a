//! One typed helper per operation of CONTRACT §3–§5. Each builds the op's `params` and returns
//! the server's `result` as JSON, so callers never spell an op name or a param key by hand.
//! Optional params are left out when unset, and the server applies its defaults.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{Client, ClientError};

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

/// `value` as a JSON object, to add fields to.
fn object<T: Serialize>(value: &T) -> Result<Map<String, Value>, ClientError> {
    match serde_json::to_value(value) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ClientError::Protocol(format!(
            "params are not an object: {other}"
        ))),
        Err(e) => Err(ClientError::Protocol(e.to_string())),
    }
}

impl Client {
    /// PING → `{pong: true}`. Allowed before HELLO.
    pub fn ping(&mut self) -> Result<Value, ClientError> {
        self.call("PING", Value::Null)
    }

    /// INFO → version, uptime, role, shard count, limits, WAL totals.
    pub fn info(&mut self) -> Result<Value, ClientError> {
        self.call("INFO", Value::Null)
    }

    /// AUTH with a bearer token → `{authenticated: true}`.
    pub fn auth(&mut self, token: &str) -> Result<Value, ClientError> {
        self.call("AUTH", json!({"method": "bearer", "token": token}))
    }

    /// BYE: the server answers, then closes the connection.
    pub fn bye(&mut self) -> Result<Value, ClientError> {
        self.call("BYE", Value::Null)
    }

    /// PUT_MACHINE → `{machine, version, created, checksum}`.
    pub fn put_machine(
        &mut self,
        machine: &str,
        version: u64,
        definition: &Value,
    ) -> Result<Value, ClientError> {
        let p = json!({"machine": machine, "version": version, "definition": definition});
        self.call("PUT_MACHINE", p)
    }

    /// GET_MACHINE; the latest version when `version` is `None`.
    pub fn get_machine(
        &mut self,
        machine: &str,
        version: Option<u64>,
    ) -> Result<Value, ClientError> {
        let mut p = json!({"machine": machine});
        if let Some(v) = version {
            p["version"] = json!(v);
        }
        self.call("GET_MACHINE", p)
    }

    /// LIST_MACHINES → `{machines: [{machine, versions}]}`.
    pub fn list_machines(&mut self) -> Result<Value, ClientError> {
        self.call("LIST_MACHINES", json!({}))
    }

    /// CREATE_INSTANCE → `{id, machine, version, state, context, wal_offset}`.
    pub fn create_instance(
        &mut self,
        machine: &str,
        version: u64,
        id: &str,
        context: &Value,
    ) -> Result<Value, ClientError> {
        self.create_instance_with(machine, version, id, context, &CreateOptions::default())
    }

    /// CREATE_INSTANCE with options (idempotency key).
    pub fn create_instance_with(
        &mut self,
        machine: &str,
        version: u64,
        id: &str,
        context: &Value,
        opts: &CreateOptions,
    ) -> Result<Value, ClientError> {
        let mut p = object(opts)?;
        p.insert("machine".into(), json!(machine));
        p.insert("version".into(), json!(version));
        p.insert("id".into(), json!(id));
        p.insert("context".into(), context.clone());
        self.call("CREATE_INSTANCE", Value::Object(p))
    }

    /// GET_INSTANCE.
    pub fn get_instance(&mut self, id: &str) -> Result<Value, ClientError> {
        self.call("GET_INSTANCE", json!({"id": id}))
    }

    /// LIST_INSTANCES → `{instances, next_cursor}`.
    pub fn list_instances(&mut self, filter: &ListFilter) -> Result<Value, ClientError> {
        let p = object(filter)?;
        self.call("LIST_INSTANCES", Value::Object(p))
    }

    /// DELETE_INSTANCE → `{id, deleted, wal_offset}`.
    pub fn delete_instance(&mut self, id: &str) -> Result<Value, ClientError> {
        self.call("DELETE_INSTANCE", json!({"id": id}))
    }

    /// APPLY_EVENT → `{instance_id, from_state, to_state, context, wal_offset, applied}`.
    pub fn apply_event(
        &mut self,
        instance_id: &str,
        event: &str,
        payload: Option<&Value>,
    ) -> Result<Value, ClientError> {
        self.apply_event_with(instance_id, event, payload, &ApplyOptions::default())
    }

    /// APPLY_EVENT with expectations or an idempotency key.
    pub fn apply_event_with(
        &mut self,
        instance_id: &str,
        event: &str,
        payload: Option<&Value>,
        opts: &ApplyOptions,
    ) -> Result<Value, ClientError> {
        let mut p = object(opts)?;
        p.insert("instance_id".into(), json!(instance_id));
        p.insert("event".into(), json!(event));
        if let Some(payload) = payload {
            p.insert("payload".into(), payload.clone());
        }
        self.call("APPLY_EVENT", Value::Object(p))
    }

    /// GET_HISTORY → `{id, events, next, oldest_seq}`; `from` is a 1-based event number.
    pub fn history(
        &mut self,
        id: &str,
        from: Option<u64>,
        limit: Option<u64>,
    ) -> Result<Value, ClientError> {
        let mut p = json!({"id": id});
        if let Some(f) = from {
            p["from"] = json!(f);
        }
        if let Some(l) = limit {
            p["limit"] = json!(l);
        }
        self.call("GET_HISTORY", p)
    }

    /// WATCH_INSTANCE → `{subscription_id, cursor}`; events then arrive as pushes
    /// (`next_push`).
    pub fn watch_instance(
        &mut self,
        instance_id: &str,
        opts: &WatchOptions,
    ) -> Result<Value, ClientError> {
        let mut p = object(opts)?;
        p.insert("instance_id".into(), json!(instance_id));
        self.call("WATCH_INSTANCE", Value::Object(p))
    }

    /// WATCH_ALL → `{subscription_id, cursor}`.
    pub fn watch_all(&mut self, filter: &WatchAllFilter) -> Result<Value, ClientError> {
        let p = object(filter)?;
        self.call("WATCH_ALL", Value::Object(p))
    }

    /// BATCH → `{results:[{status:"ok", result} | {status:"error", error}]}`, one per op in
    /// order. `ops` are `(op name, params)`; `atomic` means all or nothing on one shard
    /// (`BATCH_ABORTED`, `CROSS_SHARD`), else each op runs on its own (`best_effort`).
    pub fn batch(&mut self, atomic: bool, ops: &[(&str, Value)]) -> Result<Value, ClientError> {
        let ops: Vec<Value> = ops
            .iter()
            .map(|(op, params)| json!({"op": op, "params": params}))
            .collect();
        let mode = if atomic { "atomic" } else { "best_effort" };
        self.call("BATCH", json!({"mode": mode, "ops": ops}))
    }

    /// UNWATCH → `{removed}`.
    pub fn unwatch(&mut self, subscription_id: &Value) -> Result<Value, ClientError> {
        self.call("UNWATCH", json!({"subscription_id": subscription_id}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_options_are_left_out() {
        assert_eq!(object(&ApplyOptions::default()).unwrap(), Map::new());
        assert_eq!(object(&WatchAllFilter::default()).unwrap(), Map::new());
        let f = WatchAllFilter {
            machines: vec!["order".into()],
            include_context: true,
            ..Default::default()
        };
        assert_eq!(
            Value::Object(object(&f).unwrap()),
            json!({"machines": ["order"], "include_context": true})
        );
    }
}
