//! BATCH on the front (docs/protocol.md, "Instances and events"). An atomic batch goes whole to the one shard all its ids
//! route to (`CROSS_SHARD` otherwise; in cluster mode its ids must share one slot,
//! `CROSS_SLOT`, docs/cluster.md), which decides, logs and applies it as one unit
//! (`shard::batch`). A best-effort batch sends each op to its shard exactly as if it came
//! alone (ops of one shard travel one channel, so they run in request order) and collects the
//! results in request order.
//!
//! Requests leave for the shards before `start` returns, so a request pipelined after the
//! batch on the same connection sees its effects. A small task then waits for the replies,
//! counts every op under its own label in the request metrics, and fills the batch's slot.

use std::rc::Rc;
use std::time::Instant;

use serde_json::{json, Value};
use shards::routing::slot_of;
use shards::{ErrorCode, Rejection};

use super::executor::Front;
use super::request::served_here;
use crate::mesh::router::{Reply, ReplySlot};
use crate::ops::batch::{aborted, error_object, BatchMode, BatchOps, BatchRequest};
use crate::ops::route::route_key;
use crate::protocol::Op;
use crate::shard::{ReplyBody, ShardCall, ShardOp};
use crate::util::slot::Slot;

/// Sends the batch's work to its shard(s); returns the slot the BATCH response lands in.
pub async fn start(front: &Rc<Front>, batch: BatchRequest) -> Result<ReplySlot, Rejection> {
    let started = Instant::now();
    let ops: Vec<Op> = batch.ops.iter().map(|item| item.op.op()).collect();
    match batch.mode {
        BatchMode::Atomic => {
            let shard = match atomic_shard(front, &batch.ops) {
                Ok(shard) => shard,
                Err(rej) => {
                    count_abort(front, &ops, &rej, started);
                    return Err(rej);
                }
            };
            let reply = front.router.start(shard, ShardCall::Batch(batch.ops)).await;
            Ok(finish(front, started, async move {
                let result = reply.wait().await;
                (count_atomic(&ops, &result), result)
            }))
        }
        BatchMode::BestEffort => {
            let mut replies = Vec::with_capacity(batch.ops.len());
            for item in batch.ops.iter() {
                let params = batch.ops.params(item);
                replies.push(
                    match route_key(params)
                        .and_then(|id| served_here(front, item.op, &id).map(|()| id))
                    {
                        Ok(id) => {
                            let shard = front.router.shard_of(&id);
                            let call = ShardCall::Op {
                                op: ShardOp::Instance(item.op),
                                params: params.map(<[u8]>::to_vec),
                            };
                            Ok(front.router.start(shard, call).await)
                        }
                        Err(rej) => Err(rej),
                    },
                );
            }
            Ok(finish(front, started, async move {
                let mut codes = Vec::with_capacity(replies.len());
                let mut out = br#"{"results":["#.to_vec();
                for (i, reply) in replies.into_iter().enumerate() {
                    let result = match reply {
                        Ok(slot) => slot.wait().await,
                        Err(rej) => Err(rej),
                    };
                    if i > 0 {
                        out.push(b',');
                    }
                    codes.push(write_result(&mut out, result));
                }
                out.extend_from_slice(b"]}");
                let counted = ops.into_iter().zip(codes).collect();
                (counted, Ok(ReplyBody::Json(out)))
            }))
        }
    }
}

/// The shard every op of an atomic batch routes to. An op without an id aborts the batch
/// (with the error it would get alone); ids on different shards are `CROSS_SHARD`.
fn atomic_shard(front: &Front, ops: &BatchOps) -> Result<u32, Rejection> {
    let layout = front.router.layout();
    match one_place(ops, |id| layout.shard_of(id))? {
        Places::Empty => Ok(0),
        Places::One(shard) => Ok(shard),
        Places::Several => Err(crossed(ops, CROSS_SHARD, |id| layout.shard_of(id))),
    }
}

/// Cluster mode (docs/cluster.md, "Instances across groups"): the ids of an atomic batch must
/// lie in one slot, else `CROSS_SLOT`, even when their slots share a local shard. Checked
/// after the params and before anything else, so every member answers it alike. A best-effort
/// batch, or a server without `[cluster]`, has nothing to check.
pub fn check_slots(front: &Front, batch: &BatchRequest) -> Result<(), Rejection> {
    if front.info.cluster.is_none() || batch.mode != BatchMode::Atomic {
        return Ok(());
    }
    match one_place(&batch.ops, slot_of)? {
        Places::Empty => Ok(()),
        Places::One(_) => match (batch.ops.iter().next(), &front.info.cluster) {
            (Some(first), Some(cluster)) => {
                crate::cluster::serve::check(cluster, &batch.ops.route_key(first)?)
            }
            _ => Ok(()),
        },
        Places::Several => Err(crossed(&batch.ops, CROSS_SLOT, slot_of)),
    }
}

/// Where the ids of a batch's ops lie.
enum Places<T> {
    Empty,
    One(T),
    Several,
}

/// The one place (`place_of` each op's id) the ops lie in, if there is one. An op without an
/// id aborts the batch with the error it would get alone.
fn one_place<T: PartialEq>(
    ops: &BatchOps,
    place_of: impl Fn(&str) -> T,
) -> Result<Places<T>, Rejection> {
    let mut first = None;
    for (index, item) in ops.iter().enumerate() {
        let id = ops.route_key(item).map_err(|e| aborted(index, &e))?;
        let place = place_of(&id);
        match &first {
            None => first = Some(place),
            Some(seen) if *seen != place => return Ok(Places::Several),
            Some(_) => {}
        }
    }
    Ok(first.map_or(Places::Empty, Places::One))
}

/// A refusal of an atomic batch across places: its code, the detail naming each id's place,
/// and the message.
struct Cross {
    code: ErrorCode,
    detail: &'static str,
    message: &'static str,
}

const CROSS_SHARD: Cross = Cross {
    code: ErrorCode::CrossShard,
    detail: "shards",
    message: "an atomic batch must stay on one shard: give its ids one hash tag, like {order-7}:a",
};

const CROSS_SLOT: Cross = Cross {
    code: ErrorCode::CrossSlot,
    detail: "slots",
    message: "an atomic batch must stay in one slot: give its ids one hash tag, like {order-7}:a",
};

/// `cross`'s refusal, naming each id of the batch once, in order, with its place.
fn crossed<T: Into<Value>>(
    ops: &BatchOps,
    cross: Cross,
    place_of: impl Fn(&str) -> T,
) -> Rejection {
    let mut names: Vec<String> = Vec::with_capacity(ops.len());
    let mut places: Vec<Value> = Vec::with_capacity(ops.len());
    for id in ops.iter().filter_map(|item| ops.route_key(item).ok()) {
        if !names.iter().any(|seen| *seen == id) {
            places.push(place_of(&id).into());
            names.push(id.into_owned());
        }
    }
    Rejection::new(cross.code, cross.message)
        .with("ids", names)
        .with(cross.detail, places)
}

/// Runs `work` (which yields the per-op outcomes to count and the BATCH reply) as a task;
/// returns the slot its reply lands in.
fn finish<F>(front: &Rc<Front>, started: Instant, work: F) -> ReplySlot
where
    F: std::future::Future<Output = (Vec<(Op, Option<ErrorCode>)>, Reply)> + 'static,
{
    let slot = Slot::new();
    let fill = slot.clone();
    let front = front.clone();
    glommio::spawn_local(async move {
        let (counted, reply) = work.await;
        let took = started.elapsed();
        for (op, code) in counted {
            match code {
                None => front.stats.record_ok(op, took),
                Some(code) => front.stats.record_failure(op, code, took),
            }
        }
        fill.fill(reply);
    })
    .detach();
    slot
}

/// Per-op outcomes of an atomic batch: all ok, or the failing op's own code (the ops after
/// it never ran; the ones before it were undone, so neither is counted). A failure of the
/// batch as a whole (the log) counts nothing per op.
fn count_atomic(ops: &[Op], result: &Reply) -> Vec<(Op, Option<ErrorCode>)> {
    match result {
        Ok(_) => ops.iter().map(|op| (*op, None)).collect(),
        Err(rej) => abort_outcome(ops, rej).into_iter().collect(),
    }
}

fn count_abort(front: &Front, ops: &[Op], rej: &Rejection, started: Instant) {
    if let Some((op, Some(code))) = abort_outcome(ops, rej) {
        front.stats.record_failure(op, code, started.elapsed());
    }
}

/// The failing op and its code, read back from a `BATCH_ABORTED` rejection's details.
fn abort_outcome(ops: &[Op], rej: &Rejection) -> Option<(Op, Option<ErrorCode>)> {
    if rej.code != ErrorCode::BatchAborted {
        return None;
    }
    let index = rej.details.get("index")?.as_u64()? as usize;
    let name = rej.details.get("error")?.get("code")?.as_str()?;
    let code = ErrorCode::parse(name)?;
    Some((*ops.get(index)?, Some(code)))
}

/// Appends one `results` item; returns the op's error code, if it failed.
fn write_result(out: &mut Vec<u8>, result: Reply) -> Option<ErrorCode> {
    let error = match result {
        Ok(ReplyBody::Json(bytes)) => {
            out.extend_from_slice(br#"{"status":"ok","result":"#);
            out.extend_from_slice(&bytes);
            out.push(b'}');
            return None;
        }
        Ok(_) => Rejection::new(ErrorCode::InternalError, "bad reply"),
        Err(rej) => rej,
    };
    let item: Value = json!({"status": "error", "error": error_object(&error)});
    // Serialising a Value into a Vec cannot fail: no I/O, and every key is a string.
    let _ = serde_json::to_writer(&mut *out, &item);
    Some(error.code)
}
