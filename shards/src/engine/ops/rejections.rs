//! The rejections more than one op builds, with their details (the wire names are contract).

use serde_json::Value;

use crate::engine::limits::IDEMPOTENCY_KEY_BYTES_MAX;
use crate::{ErrorCode, Rejection};

pub(crate) fn instance_not_found(id: &str) -> Rejection {
    Rejection::new(
        ErrorCode::InstanceNotFound,
        format!("instance `{id}` not found"),
    )
    .with("id", id)
}

pub(crate) fn machine_not_found(name: &str, version: Option<u32>) -> Rejection {
    // The name is the client's: quoted short (docs/protocol.md, "Error codes").
    let name = smdb_protocol::codes::quote(name);
    let message = match version {
        Some(v) => format!("machine `{name}` version {v} not found"),
        None => format!("machine `{name}` not found"),
    };
    let rejection = Rejection::new(ErrorCode::MachineNotFound, message).with("machine", name);
    match version {
        Some(v) => rejection.with("version", v),
        None => rejection,
    }
}

/// A request field that breaks a domain bound.
pub(crate) fn bad_field(field: &str, reason: &str) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, format!("`{field}` {reason}"))
        .with("field", field)
        .with("reason", reason)
}

/// Checks an optional idempotency key: non-empty and at most `IDEMPOTENCY_KEY_BYTES_MAX` bytes.
pub(crate) fn check_idempotency_key(key: Option<&str>) -> Result<(), Rejection> {
    match key {
        Some("") => Err(bad_field("idempotency_key", "must not be empty")),
        Some(k) if k.len() > IDEMPOTENCY_KEY_BYTES_MAX => Err(bad_field(
            "idempotency_key",
            &format!("is longer than {IDEMPOTENCY_KEY_BYTES_MAX} bytes"),
        )),
        _ => Ok(()),
    }
}

/// A stored first result, marked as a replay.
pub(crate) fn replayed(first: &Value) -> Value {
    let mut result = first.clone();
    if let Some(map) = result.as_object_mut() {
        map.insert("applied".into(), Value::Bool(false));
    }
    result
}

/// `decide_*`/`apply_*` reached with another op's command or entry: a dispatch bug.
pub(crate) fn misrouted(what: &str) -> Rejection {
    Rejection::new(
        ErrorCode::InternalError,
        format!("internal error: misrouted {what}"),
    )
}
