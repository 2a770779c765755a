//! Operations that involve more than one shard: PUT_MACHINE (decided on shard 0, then copied to
//! every other shard before the client hears back), LIST_INSTANCES and FIND_INSTANCES (merges
//! of per-shard pages), SCAN_INSTANCES (a merge of bounded walks),
//! INFO (totals from every shard), and the start-up copy of definitions.
//!
//! In cluster mode the three listings leave out, after the merge, the instances of slots the
//! member's group does not own by its map copy (the caller's `keep`, `cluster::serve::Owned`
//! read once the shards have answered): the data of slots moved away until the settling
//! purges it. The cursor is taken before that filter, so the next page goes on past the items
//! left out, nothing owned is skipped, and a page may hold fewer than `limit` items (even
//! none) while `next_cursor` goes on. Without `[cluster]` (`keep` None) nothing is filtered
//! and nothing is paid.

use serde_json::{json, Value};
use shards::engine::Entry;
use shards::{ErrorCode, Rejection};

use super::router::{Reply, Router};
use crate::ops::instances::{encode_cursor, find_query, list_query, scan_query};
use crate::shard::message::Query;
use crate::shard::{ReplyBody, ShardCall, ShardOp};
use crate::timers_pause::TimersPause;

/// The shard that decides machine definitions, so two concurrent PUT_MACHINEs of one version
/// cannot be accepted in different orders on different shards.
pub const DEFINITIONS_SHARD: u32 = 0;

/// PUT_MACHINE: decide and log on shard 0, then install on every other shard.
pub async fn put_machine(router: &Router, params: Option<Vec<u8>>) -> Reply {
    let call = ShardCall::Op {
        op: ShardOp::PutMachine,
        params,
    };
    match router.call(DEFINITIONS_SHARD, call).await? {
        ReplyBody::Machine { result, entry } => {
            install_everywhere(router, vec![entry]).await?;
            Ok(ReplyBody::Json(result))
        }
        _ => Err(unexpected()),
    }
}

/// Copies definition entries to every shard but the deciding one; idempotent.
pub async fn install_everywhere(router: &Router, entries: Vec<Entry>) -> Result<(), Rejection> {
    for shard in 1..router.shard_count() {
        router
            .call(shard, ShardCall::InstallMachines(entries.clone()))
            .await?;
    }
    Ok(())
}

/// Start-up: every shard gets every definition shard 0 holds (a crash may have interrupted a
/// PUT_MACHINE between shard 0 and the others).
pub async fn reconcile_definitions(router: &Router) -> Result<usize, Rejection> {
    match router
        .call(DEFINITIONS_SHARD, ShardCall::MachineEntries)
        .await?
    {
        ReplyBody::Entries(entries) => {
            let n = entries.len();
            if n > 0 {
                install_everywhere(router, entries).await?;
            }
            Ok(n)
        }
        _ => Err(unexpected()),
    }
}

/// LIST_INSTANCES: ask every shard for its first `limit` matches after the cursor, merge by id
/// (in cluster mode, then keep those owned here).
pub async fn list_instances(
    router: &Router,
    params: Option<Vec<u8>>,
    keep: Option<impl Fn(&str) -> bool>,
) -> Reply {
    let q = list_query(params.as_deref())?;
    let mut all = Vec::new();
    let mut more = false;
    for shard in 0..router.shard_count() {
        let call = ShardCall::Query(Query::List(q.clone()));
        match router.call(shard, call).await? {
            ReplyBody::Page(page) => {
                more |= page.more;
                all.extend(page.instances);
            }
            _ => return Err(unexpected()),
        }
    }
    let next = merge_by_id(&mut all, more, q.limit);
    keep_owned(&mut all, keep);
    let body = json!({ "instances": all, "next_cursor": next });
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

/// FIND_INSTANCES: every shard's first `limit` matches after the cursor, merged by id; the
/// versions searched are every shard's (each holds every definition). In cluster mode, then
/// those owned here.
pub async fn find_instances(
    router: &Router,
    params: Option<Vec<u8>>,
    keep: Option<impl Fn(&str) -> bool>,
) -> Reply {
    let q = Box::new(find_query(params.as_deref())?);
    let (mut all, mut more, mut versions) = (Vec::new(), false, Vec::new());
    for shard in 0..router.shard_count() {
        match router
            .call(shard, ShardCall::Query(Query::Find(q.clone())))
            .await?
        {
            ReplyBody::Found(page) => {
                more |= page.more;
                all.extend(page.instances);
                versions = page.versions;
            }
            _ => return Err(unexpected()),
        }
    }
    let next = merge_by_id(&mut all, more, q.limit);
    keep_owned(&mut all, keep);
    let body = json!({ "instances": all, "next_cursor": next, "versions": versions });
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

/// SCAN_INSTANCES: each shard walks its part (`shard::scan`); the page holds the matches up to
/// the smallest id a shard that has not finished examined through (past it, a shard has not
/// looked yet), at most `limit` of them, and the cursor goes on from there. In cluster mode,
/// then those owned here (`examined` still counts what the shards walked).
pub async fn scan_instances(
    router: &Router,
    params: Option<Vec<u8>>,
    keep: Option<impl Fn(&str) -> bool>,
) -> Reply {
    let q = Box::new(scan_query(params.as_deref())?);
    let (mut all, mut examined) = (Vec::new(), 0usize);
    let mut bound: Option<String> = None;
    for shard in 0..router.shard_count() {
        match router
            .call(shard, ShardCall::Query(Query::Scan(q.clone())))
            .await?
        {
            ReplyBody::Scanned(slice) => {
                examined += slice.examined;
                all.extend(slice.instances);
                if let Some(through) = slice.through {
                    if bound.as_ref().is_none_or(|b| through < *b) {
                        bound = Some(through);
                    }
                }
            }
            _ => return Err(unexpected()),
        }
    }
    if let Some(bound) = &bound {
        all.retain(|i| id_of(i) <= bound.as_str());
    }
    let truncated = merge_by_id(&mut all, false, q.limit);
    let next = match (truncated, bound) {
        (Value::Null, Some(bound)) => Value::String(encode_cursor(&bound)),
        (next, _) => next,
    };
    keep_owned(&mut all, keep);
    let body = json!({ "instances": all, "next_cursor": next, "examined": examined });
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

/// Sorts shards' pages by id and keeps the first `limit`; the next page's cursor (the last id
/// kept), or null when no shard has more.
fn merge_by_id(all: &mut Vec<Value>, mut more: bool, limit: usize) -> Value {
    all.sort_by(|a, b| id_of(a).cmp(id_of(b)));
    if all.len() > limit {
        all.truncate(limit);
        more = true;
    }
    match (more, all.last()) {
        (true, Some(last)) => Value::String(encode_cursor(id_of(last))),
        _ => Value::Null,
    }
}

/// Cluster mode: drops the merged page's instances `keep` refuses (slots this member's group
/// does not own). Called after the cursor is taken.
fn keep_owned(all: &mut Vec<Value>, keep: Option<impl Fn(&str) -> bool>) {
    if let Some(keep) = keep {
        all.retain(|i| keep(id_of(i)));
    }
}

fn id_of(v: &Value) -> &str {
    v.get("id").and_then(Value::as_str).unwrap_or("")
}

/// MACHINE_STATS: every shard's counts of the machine's instances per state, summed
/// (`{machine, states: {name: count}}`).
pub async fn machine_stats(router: &Router, params: Option<Vec<u8>>) -> Reply {
    let machine = crate::ops::machines::stats_query(params.as_deref())?;
    let mut states = serde_json::Map::new();
    for shard in 0..router.shard_count() {
        let call = ShardCall::Op {
            op: ShardOp::MachineStats,
            params: params.clone(),
        };
        let ReplyBody::Value(Value::Object(counts)) = router.call(shard, call).await? else {
            return Err(unexpected());
        };
        for (state, n) in counts {
            let sum = states.get(&state).and_then(Value::as_u64).unwrap_or(0);
            states.insert(state, (sum + n.as_u64().unwrap_or(0)).into());
        }
    }
    let body = json!({ "machine": machine, "states": states });
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

/// TIMERS_RESUME: deletes the data dir's `timers.paused` marker (and fsyncs the dir), then
/// resumes every shard's timers; `{"resumed": true, "was_paused": bool}`. Idempotent.
pub async fn timers_resume(router: &Router, pause: &TimersPause) -> Reply {
    let mut was_paused = pause
        .resume()
        .map_err(|e| Rejection::new(ErrorCode::InternalError, e))?;
    for shard in 0..router.shard_count() {
        match router.call(shard, ShardCall::TimersResume).await? {
            ReplyBody::Value(v) => was_paused |= v["was_paused"] == true,
            _ => return Err(unexpected()),
        }
    }
    if was_paused {
        log::info!("timers: resumed (TIMERS_RESUME)");
    }
    let body = json!({ "resumed": true, "was_paused": was_paused });
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

/// Per-shard INFO figures, in shard order.
pub async fn shard_infos(router: &Router) -> Result<Vec<Value>, Rejection> {
    let mut out = Vec::new();
    for shard in 0..router.shard_count() {
        match router.call(shard, ShardCall::Info).await? {
            ReplyBody::Value(v) => out.push(v),
            _ => return Err(unexpected()),
        }
    }
    Ok(out)
}

fn unexpected() -> Rejection {
    Rejection::new(ErrorCode::InternalError, "unexpected reply from shard")
}
