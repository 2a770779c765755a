//! APPLY_EVENT and GET_HISTORY params.

use serde::Deserialize;
use serde_json::{Map, Value};
use shards::engine::Command;
use shards::Rejection;

use super::params::{check_id, parse};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyParams {
    instance_id: String,
    event: String,
    #[serde(default)]
    payload: Option<Map<String, Value>>,
    #[serde(default)]
    expected_state: Option<String>,
    #[serde(default)]
    expected_wal_offset: Option<u64>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// APPLY_EVENT params → command.
pub fn apply_command(raw: Option<&[u8]>) -> Result<Command, Rejection> {
    let p: ApplyParams = parse(raw)?;
    check_id(&p.instance_id)?;
    Ok(Command::ApplyEvent {
        instance_id: p.instance_id,
        event: p.event,
        payload: p.payload,
        expected_state: p.expected_state,
        expected_wal_offset: p.expected_wal_offset,
        idempotency_key: p.idempotency_key,
    })
}

/// Largest GET_HISTORY page.
pub const HISTORY_LIMIT_MAX: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryParams {
    #[serde(alias = "instance_id")]
    id: String,
    #[serde(default)]
    from: Option<u64>,
    #[serde(default)]
    limit: Option<usize>,
}

/// GET_HISTORY params: (id, from seq, limit).
pub fn history_query(raw: Option<&[u8]>) -> Result<(String, u64, usize), Rejection> {
    let p: HistoryParams = parse(raw)?;
    check_id(&p.id)?;
    let limit = p
        .limit
        .unwrap_or(HISTORY_LIMIT_MAX)
        .clamp(1, HISTORY_LIMIT_MAX);
    Ok((p.id, p.from.unwrap_or(1).max(1), limit))
}
