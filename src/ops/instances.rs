//! CREATE_INSTANCE, GET_INSTANCE, LIST_INSTANCES, FIND_INSTANCES, SCAN_INSTANCES and
//! DELETE_INSTANCE params.

use serde::Deserialize;
use serde_json::{Map, Value};
use shards::engine::{Command, Condition, FindQuery, ScanQuery, LATEST_VERSION};
use shards::{ErrorCode, Rejection};

use super::params::{check_id, parse};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateParams {
    machine: String,
    /// Absent: the machine's latest version (`LATEST_VERSION`).
    #[serde(default)]
    version: Option<u32>,
    #[serde(alias = "instance_id")]
    id: String,
    #[serde(default, alias = "initial_ctx")]
    context: Option<Value>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// CREATE_INSTANCE params → command. `context` defaults to `{}` and must be an object.
pub fn create_command(raw: Option<&[u8]>) -> Result<Command, Rejection> {
    let p: CreateParams = parse(raw)?;
    check_id(&p.id)?;
    let context = match p.context {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(Rejection::new(
                ErrorCode::BadRequest,
                "context must be an object",
            ))
        }
    };
    Ok(Command::CreateInstance {
        id: p.id,
        machine: p.machine,
        version: p.version.unwrap_or(LATEST_VERSION),
        context,
        idempotency_key: p.idempotency_key,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdParams {
    #[serde(alias = "instance_id")]
    id: String,
}

/// GET_INSTANCE / DELETE_INSTANCE params: the instance id.
pub fn id_param(raw: Option<&[u8]>) -> Result<String, Rejection> {
    let p: IdParams = parse(raw)?;
    check_id(&p.id)?;
    Ok(p.id)
}

/// DELETE_INSTANCE params → command.
pub fn delete_command(raw: Option<&[u8]>) -> Result<Command, Rejection> {
    Ok(Command::DeleteInstance { id: id_param(raw)? })
}

/// Default and largest LIST_INSTANCES page: a page is one response frame and one scan per shard.
pub const LIST_LIMIT_DEFAULT: usize = 100;
pub const LIST_LIMIT_MAX: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    #[serde(default)]
    machine: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    has_timer: Option<bool>,
}

/// A validated LIST_INSTANCES request: `after` is the decoded cursor (last id of the previous
/// page).
#[derive(Debug, Clone, PartialEq)]
pub struct ListQuery {
    pub machine: Option<String>,
    pub state: Option<String>,
    pub limit: usize,
    pub after: Option<String>,
    /// Only instances with (true) or without (false) an armed timer.
    pub has_timer: Option<bool>,
}

pub fn list_query(raw: Option<&[u8]>) -> Result<ListQuery, Rejection> {
    let p: ListParams = parse(raw)?;
    Ok(ListQuery {
        machine: p.machine,
        state: p.state,
        limit: page_limit(p.limit)?,
        after: page_after(p.cursor.as_deref())?,
        has_timer: p.has_timer,
    })
}

/// FIND_INSTANCES and SCAN_INSTANCES params (docs/queries.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryParams {
    machine: String,
    #[serde(default, rename = "where")]
    conditions: Map<String, Value>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    include_context: bool,
}

/// FIND_INSTANCES params: a machine, at least one `where` condition on a `ctx.<path>`, and
/// LIST's `limit` and `cursor`.
pub fn find_query(raw: Option<&[u8]>) -> Result<FindQuery, Rejection> {
    let q = scan_query(raw)?;
    if q.conditions.is_empty() {
        return Err(Rejection::new(
            ErrorCode::BadRequest,
            "where needs at least one condition (SCAN_INSTANCES walks every instance)",
        ));
    }
    Ok(q)
}

/// SCAN_INSTANCES params: FIND's, with `where` on any `ctx.<path>` and optional.
pub fn scan_query(raw: Option<&[u8]>) -> Result<ScanQuery, Rejection> {
    let p: QueryParams = parse(raw)?;
    Ok(ScanQuery {
        machine: p.machine,
        conditions: conditions(&p.conditions)?,
        state: p.state,
        after: page_after(p.cursor.as_deref())?,
        limit: page_limit(p.limit)?,
        include_context: p.include_context,
    })
}

fn conditions(raw: &Map<String, Value>) -> Result<Vec<(String, Condition)>, Rejection> {
    (raw.iter())
        .map(|(path, v)| Ok((path.clone(), Condition::parse(path, v)?)))
        .collect()
}

/// A page's `limit`: 1 to `LIST_LIMIT_MAX`, `LIST_LIMIT_DEFAULT` when absent.
fn page_limit(limit: Option<usize>) -> Result<usize, Rejection> {
    let limit = limit.unwrap_or(LIST_LIMIT_DEFAULT);
    if limit == 0 || limit > LIST_LIMIT_MAX {
        return Err(Rejection::new(
            ErrorCode::BadRequest,
            format!("limit must be in 1..={LIST_LIMIT_MAX}"),
        ));
    }
    Ok(limit)
}

/// A page's decoded cursor: the last id of the previous page.
fn page_after(cursor: Option<&str>) -> Result<Option<String>, Rejection> {
    match cursor {
        None | Some("") => Ok(None),
        Some(c) => Ok(Some(decode_cursor(c).ok_or_else(|| {
            Rejection::new(
                ErrorCode::BadRequest,
                "cursor is not one this server issued",
            )
        })?)),
    }
}

/// List cursors are the hex of the last id returned: opaque to clients, safe in any JSON.
pub fn encode_cursor(last_id: &str) -> String {
    last_id.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The id an `encode_cursor` cursor holds.
pub fn decode_cursor(c: &str) -> Option<String> {
    if c.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(c.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_accepts_aliases() {
        let raw = br#"{"machine":"m","version":1,"instance_id":"i","initial_ctx":{"a":1}}"#;
        match create_command(Some(raw)).unwrap() {
            Command::CreateInstance { id, context, .. } => {
                assert_eq!(id, "i");
                assert_eq!(context["a"], 1);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn create_rejects_bad_ids_and_contexts() {
        let long = format!(
            r#"{{"machine":"m","version":1,"id":"{}"}}"#,
            "x".repeat(257)
        );
        assert!(create_command(Some(long.as_bytes())).is_err());
        assert!(create_command(Some(br#"{"machine":"m","version":1,"id":""}"#)).is_err());
        let raw = br#"{"machine":"m","version":1,"id":"a","context":[1]}"#;
        assert_eq!(
            create_command(Some(raw)).unwrap_err().code,
            ErrorCode::BadRequest
        );
        let raw = br#"{"machine":"m","version":1,"id":"a","contxt":{}}"#;
        assert!(create_command(Some(raw))
            .unwrap_err()
            .message
            .contains("contxt"));
    }

    #[test]
    fn cursor_round_trips() {
        let c = encode_cursor("order-\"7\"");
        let q = list_query(Some(format!(r#"{{"cursor":"{c}"}}"#).as_bytes())).unwrap();
        assert_eq!(q.after.as_deref(), Some("order-\"7\""));
        assert!(list_query(Some(br#"{"cursor":"zz"}"#)).is_err());
    }
}
