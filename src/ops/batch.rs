//! BATCH params (CONTRACT §5): `{mode, ops:[{op, params}]}`, parsed once, on the front, into a
//! typed list (`parse_batch`); the shard turns each op's params into an engine op
//! (`engine_op`) exactly as it would for the op sent alone.

use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use shards::engine::BatchOp;
use shards::{ErrorCode, Rejection};

use super::{events, instances};
use crate::protocol::Op;

/// Most ops in one BATCH. A larger batch is `BAD_REQUEST` (nothing runs). The frame size
/// limit bounds the bytes; this bounds the work one request holds a shard for.
pub const BATCH_OPS_MAX: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// All or nothing, on one shard, in one log record.
    Atomic,
    /// Each op on its own shard, on its own; results in request order.
    BestEffort,
}

/// One op of a batch: what it would be if sent alone.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchItem {
    pub op: Op,
    /// Where the op's raw `params` JSON is in `BatchOps::text` (None when absent or null).
    params: Option<Range<usize>>,
}

/// A batch's ops with their params, all in one buffer (one allocation per batch, not one per
/// op, and one free on the shard that runs it).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOps {
    text: Vec<u8>,
    items: Vec<BatchItem>,
}

impl BatchOps {
    pub fn iter(&self) -> std::slice::Iter<'_, BatchItem> {
        self.items.iter()
    }

    /// The raw `params` JSON of `item` (one of `items()`).
    pub fn params(&self, item: &BatchItem) -> Option<&[u8]> {
        item.params.clone().and_then(|range| self.text.get(range))
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    pub mode: BatchMode,
    pub ops: BatchOps,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchParams<'a> {
    mode: String,
    #[serde(borrow)]
    ops: Vec<OpParams<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpParams<'a> {
    op: String,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// The ops a batch may hold.
pub fn batchable(op: Op) -> bool {
    matches!(
        op,
        Op::CreateInstance | Op::ApplyEvent | Op::DeleteInstance | Op::GetInstance
    )
}

/// Parses BATCH params into the mode and the typed op list: the one place that knows which
/// ops a request runs (a per-op check, e.g. authorization, belongs right after this).
/// Errors are `BAD_REQUEST` for the whole request: a bad mode, no ops, more than
/// `BATCH_OPS_MAX`, or an op that cannot be batched (details name its `index` and `op`).
pub fn parse_batch(raw: Option<&[u8]>) -> Result<BatchRequest, Rejection> {
    let raw = raw.unwrap_or(b"{}");
    let p: BatchParams<'_> =
        serde_json::from_slice(raw).map_err(|e| bad(format!("invalid params: {e}")))?;
    let mode = match p.mode.as_str() {
        "atomic" => BatchMode::Atomic,
        "best_effort" => BatchMode::BestEffort,
        other => {
            return Err(bad(format!(
                "mode must be \"atomic\" or \"best_effort\", not {other:?}"
            )))
        }
    };
    if p.ops.is_empty() {
        return Err(bad("ops must not be empty".into()));
    }
    if p.ops.len() > BATCH_OPS_MAX {
        return Err(
            bad(format!("a batch holds at most {BATCH_OPS_MAX} ops")).with("limit", BATCH_OPS_MAX)
        );
    }
    let mut items = Vec::with_capacity(p.ops.len());
    for (index, item) in p.ops.into_iter().enumerate() {
        let op = Op::parse(&item.op)
            .filter(|op| batchable(*op))
            .ok_or_else(|| {
                bad(format!(
                    "op {:?} cannot be batched (CREATE_INSTANCE, APPLY_EVENT, DELETE_INSTANCE, \
                 GET_INSTANCE can)",
                    item.op
                ))
                .with("index", index)
                .with("op", item.op.as_str())
            })?;
        let params = (item.params)
            .map(RawValue::get)
            .filter(|text| *text != "null")
            .map(|text| {
                // A borrowed RawValue is a slice of `raw` itself.
                let start = text.as_ptr() as usize - raw.as_ptr() as usize;
                start..start + text.len()
            });
        items.push(BatchItem { op, params });
    }
    let ops = BatchOps {
        text: raw.to_vec(),
        items,
    };
    Ok(BatchRequest { mode, ops })
}

/// The engine op for one batched op, parsed as the op alone would be (same errors).
pub fn engine_op<'o>(ops: &'o BatchOps, item: &BatchItem) -> Result<BatchOp<'o>, Rejection> {
    let params = ops.params(item);
    match item.op {
        Op::CreateInstance => instances::create_command(params).map(BatchOp::Write),
        Op::ApplyEvent => events::apply_event_params(params).map(BatchOp::Event),
        Op::DeleteInstance => instances::delete_command(params).map(BatchOp::Write),
        Op::GetInstance => instances::id_param(params).map(|id| BatchOp::Get { id }),
        other => Err(bad(format!("op {} cannot be batched", other.as_str()))),
    }
}

/// `BATCH_ABORTED`: op `index` failed with `error`; nothing was applied.
pub fn aborted(index: usize, error: &Rejection) -> Rejection {
    Rejection::new(
        ErrorCode::BatchAborted,
        format!(
            "op {index} failed ({}): {}",
            error.code.as_str(),
            error.message
        ),
    )
    .with("index", index)
    .with("error", error_object(error))
}

/// An error as it appears in a response's `error` member.
pub fn error_object(error: &Rejection) -> Value {
    json!({
        "code": error.code.as_str(),
        "message": error.message,
        "retryable": error.code.retryable(),
        "details": Value::Object(error.details.clone()),
    })
}

fn bad(message: String) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, message)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parsed(v: serde_json::Value) -> Result<BatchRequest, Rejection> {
        parse_batch(Some(v.to_string().as_bytes()))
    }

    #[test]
    fn parses_mode_and_ops_in_order() {
        let b = parsed(json!({"mode": "atomic", "ops": [
            {"op": "CREATE_INSTANCE", "params": {"id": "a"}},
            {"op": "GET_INSTANCE", "params": null},
            {"op": "DELETE_INSTANCE"},
        ]}))
        .unwrap();
        assert_eq!(b.mode, BatchMode::Atomic);
        let ops: Vec<Op> = b.ops.iter().map(|i| i.op).collect();
        assert_eq!(
            ops,
            [Op::CreateInstance, Op::GetInstance, Op::DeleteInstance]
        );
        let items: Vec<&BatchItem> = b.ops.iter().collect();
        assert_eq!(b.ops.params(items[0]), Some(&br#"{"id":"a"}"#[..]));
        assert_eq!(b.ops.params(items[1]), None);
        assert_eq!(b.ops.params(items[2]), None);
    }

    #[test]
    fn bad_batches_are_bad_requests() {
        let code = |v| parsed(v).unwrap_err();
        let e = code(json!({"mode": "all", "ops": [{"op": "GET_INSTANCE"}]}));
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(code(json!({"mode": "atomic", "ops": []}))
            .message
            .contains("empty"));
        let e = code(json!({"mode": "atomic", "ops": [{"op": "GET_INSTANCE"}, {"op": "PING"}]}));
        assert_eq!(e.details["index"], 1);
        assert_eq!(e.details["op"], "PING");
        let e = code(json!({"mode": "atomic", "ops": [{"op": "GET_INSTANCE", "x": 1}]}));
        assert!(e.message.contains("unknown field"), "{}", e.message);
        let many: Vec<_> = (0..=BATCH_OPS_MAX)
            .map(|_| json!({"op": "GET_INSTANCE"}))
            .collect();
        let e = code(json!({"mode": "best_effort", "ops": many}));
        assert_eq!(e.details["limit"], BATCH_OPS_MAX);
    }
}
