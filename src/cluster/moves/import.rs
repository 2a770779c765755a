//! The target's side of a move (docs/cluster.md, "Moving slots", steps 2-3 and 6):
//! `CLUSTER_IMPORT`, the requests the source's primary sends on its link (scope `replicate`;
//! a follower refuses them, as the op table says). Each step is answered once what it
//! carried is durable here (and, under sync mode, held by the sync set: the shard's reply
//! waits as a write's does):
//! - `begin {version, definitions}`: the stream's version (1 only, else `target_refused`) and
//!   the definitions its instances use, put as PUT_MACHINE would (a different definition of
//!   one (machine, version) refuses with `definition_conflict`);
//! - `images {images: [[id, image|null], ..]}`: staged on the owning shards as import
//!   entries, invisible until the switch;
//! - `end {}`: everything before it is durable (every earlier step answered so); in async
//!   mode it is answered once one live follower of this group has acknowledged every shard's
//!   head too (`followers_hold`), so a failover of this group after the switch loses nothing
//!   of the slots (sync mode: every step already waited for the sync set);
//! - `switched {map_epoch}` / `aborted {}`: the outcome, applied on every shard (the clean-up
//!   task does the same from the copy, whichever comes first); `switched` is answered once
//!   this member's copy shows `map_epoch` (or after `COPY_WAIT`);
//! - `define {definitions}`, no move's: definitions another group's primary forwards
//!   (`cluster::define`).
//!
//! Every step but `switched` and `aborted` is refused unless this member's copy shows the
//! move running into its group (waiting up to `COPY_WAIT` for the copy to catch up).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::super::Cluster;
use crate::member::ReplState;
use crate::mesh::router::Router;
use crate::ops::params::parse;
use crate::shard::moves::{MoveCall, MoveReply};
use crate::shard::{ReplyBody, ShardCall};

/// The move stream's version this build reads.
pub const STREAM_VERSION: u32 = 1;
/// How long a step waits for this member's copy to show its move.
const COPY_WAIT: Duration = Duration::from_secs(2);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    #[serde(rename = "move", default)]
    id: String,
    step: String,
    #[serde(default)]
    slots: [u16; 2],
    #[serde(default)]
    from: String,
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    definitions: Vec<Value>,
    #[serde(default)]
    images: Vec<(String, Option<Box<RawValue>>)>,
    #[serde(default)]
    map_epoch: u64,
}

/// Answers one `CLUSTER_IMPORT` step.
pub async fn answer(
    params: Option<&[u8]>,
    router: &Router,
    cluster: &Cluster,
    replication: &ReplState,
) -> Result<Value, Rejection> {
    let step: Step = parse(params)?;
    if step.step == "define" {
        return define(router, step.definitions).await;
    }
    let move_id = u64::from_str_radix(&step.id, 16)
        .map_err(|_| refused(&step.id, "the move id is not 16 hex digits"))?;
    let [lo, hi] = step.slots;
    match step.step.as_str() {
        "switched" => {
            let map_epoch = step.map_epoch;
            each_shard(router, |_| MoveCall::MoveIn {
                move_id,
                lo,
                hi,
                map_epoch,
            })
            .await?;
            copy_shows(cluster, map_epoch).await;
            return Ok(json!({}));
        }
        "aborted" => {
            each_shard(router, |_| MoveCall::Drop { move_id }).await?;
            return Ok(json!({}));
        }
        _ => {}
    }
    running_here(cluster, &step).await?;
    match step.step.as_str() {
        "begin" => {
            if step.version != Some(STREAM_VERSION) {
                return Err(refused(
                    &step.id,
                    "this member reads move stream version 1 only",
                ));
            }
            for d in step.definitions {
                put_definition(router, &step.id, d).await?;
            }
        }
        "images" => stage(router, cluster, move_id, (lo, hi), step.images).await?,
        "end" if !cluster.sync_mode => followers_hold(router, cluster, replication).await?,
        "end" => {}
        other => {
            return Err(Rejection::new(
                ErrorCode::BadRequest,
                format!("CLUSTER_IMPORT: unknown step {other:?}"),
            ))
        }
    }
    Ok(json!({}))
}

/// How often `followers_hold` looks at the followers' acknowledgements.
const ACK_POLL: Duration = Duration::from_millis(2);
/// The longest `followers_hold` waits: past any source's `move_freeze_max_ms` (at most 10 s),
/// whose attempt is abandoned by then, so the answer no longer matters.
const ACK_WAIT: Duration = Duration::from_millis(10_500);

/// Async mode, the `end` marker: Ok once one follower connected to this primary has
/// acknowledged every shard's head as it is now (all the move's imports lie before it). A
/// group whose copy lists no live member but this one has no follower to wait for: durable
/// here is then enough, as nobody could take over from this member.
async fn followers_hold(
    router: &Router,
    cluster: &Cluster,
    replication: &ReplState,
) -> Result<(), Rejection> {
    let heads: Vec<u64> = (crate::mesh::fanout::shard_infos(router).await?.iter())
        .map(|info| info["wal_offset"].as_u64().unwrap_or(u64::MAX))
        .collect();
    let until = Instant::now() + ACK_WAIT;
    loop {
        let copy = cluster.view.get();
        let alone = (copy.groups.get(&cluster.group))
            .is_none_or(|g| g.nodes.iter().all(|n| n.node_id == cluster.node_id));
        let held = (replication.stats.replicas.lock()).is_ok_and(|r| {
            (r.values()).any(|v| {
                heads
                    .iter()
                    .enumerate()
                    .all(|(k, h)| v.acked.get(k) >= Some(h))
            })
        });
        if alone || held {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(Rejection::new(
                ErrorCode::SyncTimeout,
                "no follower of this group acknowledged the move's end in time",
            ));
        }
        glommio::timer::sleep(ACK_POLL).await;
    }
}

/// Waits (at most `COPY_WAIT`) until this member's copy shows `map_epoch`, the copy read at
/// once: the source lifts its freeze only after this answer, so from then on both groups'
/// primaries route the moved slots alike (a client is not sent back and forth between a
/// source that gave them up and a target whose copy does not show it yet).
async fn copy_shows(cluster: &Cluster, map_epoch: u64) {
    let until = Instant::now() + COPY_WAIT;
    cluster.wake.signal();
    while cluster.view.get().map_epoch() < map_epoch && Instant::now() < until {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

/// Stages `images` of move `move_id` on their shards, sent to every shard before any answer
/// is awaited so they log side by side.
async fn stage(
    router: &Router,
    cluster: &Cluster,
    move_id: u64,
    (lo, hi): (u16, u16),
    images: Vec<(String, Option<Box<RawValue>>)>,
) -> Result<(), Rejection> {
    let n = images.len() as u64;
    let mut by_shard: BTreeMap<u32, Vec<(String, Option<String>)>> = BTreeMap::new();
    for (id, image) in images {
        let image = image.map(|raw| raw.get().to_string());
        by_shard
            .entry(router.shard_of(&id))
            .or_default()
            .push((id, image));
    }
    let mut slots = Vec::with_capacity(by_shard.len());
    for (shard, images) in by_shard {
        let call = MoveCall::Import {
            move_id,
            lo,
            hi,
            images,
        };
        slots.push(router.start(shard, ShardCall::Move(call)).await);
    }
    for slot in slots {
        slot.wait().await?;
    }
    cluster.counters.entries_in.fetch_add(n, Relaxed);
    Ok(())
}

/// Runs `call(shard)` on every shard, in order.
async fn each_shard(router: &Router, call: impl Fn(u32) -> MoveCall) -> Result<(), Rejection> {
    for shard in 0..router.shard_count() {
        match router.call(shard, ShardCall::Move(call(shard))).await? {
            ReplyBody::Move(MoveReply::Done) => {}
            _ => return Err(Rejection::new(ErrorCode::InternalError, "unexpected reply")),
        }
    }
    Ok(())
}

/// Ok once this member's copy shows move `step.id` running from `step.from` into its group.
async fn running_here(cluster: &Cluster, step: &Step) -> Result<(), Rejection> {
    let deadline = Instant::now() + COPY_WAIT;
    loop {
        let copy = cluster.view.get();
        let running = (copy.map.iter())
            .flat_map(|m| m.migrations.iter())
            .any(|m| m.id == step.id && m.to == cluster.group && m.from == step.from);
        if running {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(refused(
                &step.id,
                &format!(
                    "this member's map copy shows no move {} into {}",
                    step.id, cluster.group
                ),
            ));
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}

/// `define {definitions}` (not a move's: `cluster::define`): each put as PUT_MACHINE would,
/// a different one here refused with `MACHINE_VERSION_EXISTS`; `{created}` if any was new.
async fn define(router: &Router, definitions: Vec<Value>) -> Result<Value, Rejection> {
    let mut created = false;
    for d in definitions {
        let params = serde_json::to_vec(&d).unwrap_or_default();
        if let ReplyBody::Json(r) = crate::mesh::fanout::put_machine(router, Some(params)).await? {
            let r: Value = serde_json::from_slice(&r).unwrap_or(Value::Null);
            created |= r["created"] == true;
        }
    }
    Ok(json!({ "created": created }))
}

/// Puts one definition as PUT_MACHINE would; a different one here is `definition_conflict`.
async fn put_definition(router: &Router, id: &str, d: Value) -> Result<(), Rejection> {
    let params = serde_json::to_vec(&d).unwrap_or_default();
    match crate::mesh::fanout::put_machine(router, Some(params)).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == ErrorCode::MachineVersionExists => Err(Rejection::new(
            ErrorCode::BadRequest,
            format!("move {id}: {}", e.message),
        )
        .with("reason", "definition_conflict")),
        Err(e) => Err(e),
    }
}

fn refused(id: &str, why: &str) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, format!("move {id}: {why}"))
        .with("reason", "target_refused")
}
