//! MIGRATE_INSTANCES and DELETE_INSTANCES across the shards (docs/lifecycle.md): every shard
//! that is not done walks its part at once (`shard::bulk`), from its place in the cursor, with
//! an even share of the call's `limit`; the reply sums their counts, estimates what remains,
//! and carries each shard's new place in the next cursor (null once all are done). A dry run
//! walks every shard whole and takes no cursor.
//!
//! Cluster mode (docs/lifecycle.md, "Cluster mode"): the shards walk past the instances of
//! slots the member's group does not own by its copy (`cluster::serve::Owned`), uncounted, and
//! stop before an instance a move freezes. A call that changed nothing because a shard stopped
//! so answers that shard's `TRYAGAIN` (nothing executed); one that changed something reports
//! it, with the stopped shard's place before the frozen instance.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::router::{Reply, Router};
use crate::cluster::Cluster;
use crate::ops::lifecycle::{delete_call, encode_places, migrate_call, BulkCall, BulkOp, Place};
use crate::shard::bulk::{BulkDone, BulkPart};
use crate::shard::{ReplyBody, ShardCall};

/// MIGRATE_INSTANCES: `{migrated, skipped, remaining, cursor}`; a dry run
/// `{would_migrate: {state: n}, skipped}`.
pub async fn migrate_instances(
    router: &Router,
    cluster: Option<Arc<Cluster>>,
    params: Option<Vec<u8>>,
) -> Reply {
    run(router, cluster, migrate_call(params.as_deref())?).await
}

/// DELETE_INSTANCES: `{deleted, remaining, cursor}`; a dry run `{would_delete: {state: n}}`.
pub async fn delete_instances(
    router: &Router,
    cluster: Option<Arc<Cluster>>,
    params: Option<Vec<u8>>,
) -> Reply {
    run(router, cluster, delete_call(params.as_deref())?).await
}

async fn run(router: &Router, cluster: Option<Arc<Cluster>>, call: BulkCall) -> Reply {
    let shards = router.shard_count() as usize;
    let mut places = match (&call.cursor, call.dry_run) {
        (Some(_), true) => return Err(bad("a dry run covers the whole machine: no cursor")),
        (Some(places), false) if places.len() != shards => {
            return Err(bad("cursor is from a server with another shard count"))
        }
        (Some(places), false) => places.clone(),
        (None, _) => vec![Place::default(); shards],
    };
    let budget = call.limit.div_ceil(shards).max(1);
    let mut pending = Vec::new();
    for (k, place) in places.iter().enumerate().filter(|(_, p)| !p.done) {
        let part = BulkPart {
            op: call.op.clone(),
            dry_run: call.dry_run,
            after: place.after.clone(),
            budget,
            cluster: cluster.clone(),
        };
        pending.push((
            k,
            router
                .start(k as u32, ShardCall::Bulk(Box::new(part)))
                .await,
        ));
    }
    let mut total = BulkDone::default();
    let mut remaining = 0u64;
    let mut frozen = None;
    for (k, slot) in pending {
        let ReplyBody::Bulk(mut done) = slot.wait().await? else {
            return Err(unexpected());
        };
        let place = &mut places[k];
        place.seen += done.examined;
        place.done = done.through.is_none() && done.frozen.is_none();
        place.after = done.through.clone();
        if !place.done {
            remaining += done.machine_instances.saturating_sub(place.seen);
        }
        frozen = frozen.or(done.frozen.take());
        add(&mut total, done);
    }
    if let Some((slot, move_id)) = frozen.filter(|_| total.written == 0) {
        return Err(crate::shard::moves::try_again(slot, move_id, "frozen"));
    }
    let body = reply(&call, total, remaining, encode_places(&places));
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

fn add(total: &mut BulkDone, done: BulkDone) {
    total.written += done.written;
    total.examined += done.examined;
    for (k, n) in done.skipped {
        *total.skipped.entry(k).or_default() += n;
    }
    for (k, n) in done.by_state {
        *total.by_state.entry(k).or_default() += n;
    }
}

fn reply(call: &BulkCall, t: BulkDone, remaining: u64, cursor: Option<String>) -> Value {
    let counts = |m: BTreeMap<String, u64>| {
        Value::Object(m.into_iter().map(|(k, n)| (k, n.into())).collect())
    };
    match (&call.op, call.dry_run) {
        (BulkOp::Migrate(_), true) => json!({
            "would_migrate": counts(t.by_state), "skipped": counts(t.skipped),
            "examined": t.examined,
        }),
        (BulkOp::Migrate(_), false) => json!({
            "migrated": t.written, "skipped": counts(t.skipped), "examined": t.examined,
            "remaining": remaining, "cursor": cursor,
        }),
        (BulkOp::Delete(_), true) => json!({
            "would_delete": counts(t.by_state), "examined": t.examined,
        }),
        (BulkOp::Delete(_), false) => json!({
            "deleted": t.written, "examined": t.examined, "remaining": remaining,
            "cursor": cursor,
        }),
    }
}

fn bad(message: &str) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, message)
}

fn unexpected() -> Rejection {
    Rejection::new(
        ErrorCode::InternalError,
        "unexpected shard reply to a bulk call",
    )
}
