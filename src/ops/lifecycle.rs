//! MIGRATE_INSTANCES and DELETE_INSTANCES params (docs/lifecycle.md), and their cursor.
//!
//! Both walk a machine's instances shard by shard, at most `limit` examined per call (split
//! between the shards). The cursor holds each shard's place: the last id it examined and how
//! many it has examined so far (for the `remaining` estimate), or that it is done. On the wire
//! it is the hex of that JSON, opaque like the LIST cursors.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use shards::engine::{Condition, MigratePlan, Selection};
use shards::{ErrorCode, Rejection};

use super::instances::{decode_cursor, encode_cursor};
use super::params::parse;

/// Instances examined per call when the request names no `limit`.
pub const BULK_LIMIT_DEFAULT: usize = 1_000;
/// The most instances one call examines (all shards together).
pub const BULK_LIMIT_MAX: usize = 10_000;

/// One bulk op, ready for the shards.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkOp {
    Migrate(MigratePlan),
    Delete(Selection),
}

impl BulkOp {
    /// The op it is.
    pub fn op(&self) -> crate::protocol::Op {
        match self {
            BulkOp::Migrate(_) => crate::protocol::Op::MigrateInstances,
            BulkOp::Delete(_) => crate::protocol::Op::DeleteInstances,
        }
    }

    pub fn selection(&self) -> &Selection {
        match self {
            BulkOp::Migrate(plan) => &plan.selection,
            BulkOp::Delete(sel) => sel,
        }
    }
}

/// A parsed call: the op, whether it only reports, how many to examine, and where each shard
/// is (None: no cursor given, every shard from its start).
#[derive(Debug, Clone, PartialEq)]
pub struct BulkCall {
    pub op: BulkOp,
    pub dry_run: bool,
    pub limit: usize,
    pub cursor: Option<Vec<Place>>,
}

/// Where one shard's walk is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Place {
    /// The last id examined (None: not begun).
    pub after: Option<String>,
    /// Instances examined so far.
    pub seen: u64,
    pub done: bool,
}

/// Both ops' params: MIGRATE_INSTANCES takes the versions and `states`, DELETE_INSTANCES
/// `updated_before`; each refuses the other's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkParams {
    machine: String,
    #[serde(default)]
    from_version: Option<u32>,
    #[serde(default)]
    to_version: Option<u32>,
    #[serde(default)]
    states: Option<Map<String, Value>>,
    /// RFC 3339: only instances last updated before it.
    #[serde(default)]
    updated_before: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default, rename = "where")]
    conditions: Map<String, Value>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    cursor: Option<String>,
}

fn bad(message: impl Into<String>) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, message)
}

/// MIGRATE_INSTANCES params.
pub fn migrate_call(raw: Option<&[u8]>) -> Result<BulkCall, Rejection> {
    let p: BulkParams = parse(raw)?;
    if p.updated_before.is_some() {
        return Err(bad("updated_before is a DELETE_INSTANCES param"));
    }
    let (Some(from_version), Some(to_version)) = (p.from_version, p.to_version) else {
        return Err(bad("MIGRATE_INSTANCES needs from_version and to_version"));
    };
    let mut states = Vec::new();
    for (old, new) in p.states.clone().unwrap_or_default() {
        let new = new
            .as_str()
            .ok_or_else(|| bad("states maps state names to state names"))?;
        states.push((old, new.to_owned()));
    }
    let selection = selection(&p, None)?;
    let plan = MigratePlan {
        selection,
        from_version,
        to_version,
        states,
    };
    call(BulkOp::Migrate(plan), &p)
}

/// DELETE_INSTANCES params.
pub fn delete_call(raw: Option<&[u8]>) -> Result<BulkCall, Rejection> {
    let p: BulkParams = parse(raw)?;
    if p.from_version.is_some() || p.to_version.is_some() || p.states.is_some() {
        return Err(bad(
            "from_version, to_version and states are MIGRATE_INSTANCES params",
        ));
    }
    let before = match p.updated_before.as_deref() {
        None => None,
        Some(t) => Some(
            shards::engine::rfc3339::parse_ms(t)
                .ok_or_else(|| bad("updated_before must be an RFC 3339 time"))?,
        ),
    };
    let selection = selection(&p, before)?;
    call(BulkOp::Delete(selection), &p)
}

fn call(op: BulkOp, common: &BulkParams) -> Result<BulkCall, Rejection> {
    let limit = common.limit.unwrap_or(BULK_LIMIT_DEFAULT);
    if limit == 0 || limit > BULK_LIMIT_MAX {
        return Err(bad(format!("limit must be in 1..={BULK_LIMIT_MAX}")));
    }
    let cursor = match common.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => {
            Some(decode_places(c).ok_or_else(|| bad("cursor is not one this server issued"))?)
        }
    };
    Ok(BulkCall {
        op,
        dry_run: common.dry_run,
        limit,
        cursor,
    })
}

/// The selection: `where` on context paths (any path), or `{"id": ..}` for one instance.
fn selection(c: &BulkParams, before: Option<u64>) -> Result<Selection, Rejection> {
    let mut sel = Selection {
        machine: c.machine.clone(),
        state: c.state.clone(),
        updated_before_ms: before,
        ..Selection::default()
    };
    for (path, v) in &c.conditions {
        if path == "id" {
            let id = v
                .as_str()
                .ok_or_else(|| bad("where.id must be an instance id"))?;
            sel.only_id = Some(id.to_owned());
        } else {
            sel.conditions
                .push((path.clone(), Condition::parse(path, v)?));
        }
    }
    Ok(sel)
}

/// The wire cursor for `places`; None once every shard is done.
pub fn encode_places(places: &[Place]) -> Option<String> {
    if places.iter().all(|p| p.done) {
        return None;
    }
    let list: Vec<Value> = (places.iter())
        .map(|p| match p.done {
            true => Value::Null,
            false => json!([p.after, p.seen]),
        })
        .collect();
    Some(encode_cursor(&Value::Array(list).to_string()))
}

fn decode_places(c: &str) -> Option<Vec<Place>> {
    let list: Vec<Value> = serde_json::from_str(&decode_cursor(c)?).ok()?;
    (list.into_iter())
        .map(|v| match v {
            Value::Null => Some(Place {
                done: true,
                ..Place::default()
            }),
            Value::Array(pair) if pair.len() == 2 => Some(Place {
                after: match &pair[0] {
                    Value::Null => None,
                    other => Some(other.as_str()?.to_owned()),
                },
                seen: pair[1].as_u64()?,
                done: false,
            }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        let places = vec![
            Place {
                after: Some("o-7".into()),
                seen: 12,
                done: false,
            },
            Place {
                done: true,
                ..Place::default()
            },
            Place::default(),
        ];
        let c = encode_places(&places).unwrap();
        assert_eq!(decode_places(&c).unwrap(), places);
        assert!(decode_places("zz").is_none());
        assert!(decode_places(&encode_cursor("[1]")).is_none());
        let done = vec![Place {
            done: true,
            ..Place::default()
        }];
        assert_eq!(encode_places(&done), None);
    }

    #[test]
    fn params_are_checked() {
        let raw = br#"{"machine":"m","from_version":1,"to_version":2,"states":{"a":"b"},
            "where":{"id":"x","ctx.k":{"gte":3}},"dry_run":true,"limit":50}"#;
        let call = migrate_call(Some(raw)).unwrap();
        assert!(call.dry_run);
        assert_eq!(call.limit, 50);
        let BulkOp::Migrate(plan) = &call.op else {
            panic!("{call:?}")
        };
        assert_eq!(plan.states, vec![("a".to_string(), "b".to_string())]);
        assert_eq!(plan.selection.only_id.as_deref(), Some("x"));
        assert_eq!(plan.selection.conditions.len(), 1);
        let over = br#"{"machine":"m","from_version":1,"to_version":2,"limit":10001}"#;
        assert_eq!(
            migrate_call(Some(over)).unwrap_err().code,
            ErrorCode::BadRequest
        );
        let when = br#"{"machine":"m","updated_before":"yesterday"}"#;
        assert_eq!(
            delete_call(Some(when)).unwrap_err().code,
            ErrorCode::BadRequest
        );
        let ok = br#"{"machine":"m","updated_before":"2026-12-06T00:00:00Z"}"#;
        let BulkOp::Delete(sel) = delete_call(Some(ok)).unwrap().op else {
            panic!()
        };
        assert!(sel.updated_before_ms.is_some());
    }
}
