//! PROMOTE (docs/replication.md): a replica stops following, begins a new epoch (the highest it has
//! seen plus one) with an epoch record in every shard's log, arms its timers, and accepts
//! writes. Its offsets continue where the stream left them.

use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::error::ReplError;
use super::hub::{internal, Hub};
use crate::config::Role;
use crate::protocol::stream;
use crate::shard::{ReplyBody, ShardCall};

/// How long PROMOTE waits for the follower to stop.
const FOLLOWER_STOP_WAIT: Duration = Duration::from_secs(10);

pub async fn promote(hub: &Rc<Hub>, params: Option<&[u8]>) -> Result<Value, Rejection> {
    if hub.state.ha() {
        let force = params
            .and_then(|p| serde_json::from_slice::<Value>(p).ok())
            .is_some_and(|p| p["force"] == true);
        return match (force, hub.ha.as_deref()) {
            (true, Some(shared)) => crate::control::ha::admin::force_op(shared, &hub.state).await,
            _ => Err(Rejection::new(
                ErrorCode::BadRequest,
                "PROMOTE is refused with ha.enabled: etcd elects the primary (docs/ha.md); \
                 PROMOTE {force: true} takes the leader key when no member holds it, skipping \
                 the eligibility rules",
            )),
        };
    }
    match hub.state.role() {
        Some(Role::Replica) => {}
        other => {
            return Err(Rejection::new(
                ErrorCode::BadRequest,
                format!(
                    "PROMOTE turns a replica into a primary; this server is {}",
                    match other {
                        Some(Role::Primary) => "already a primary",
                        _ => "standalone",
                    }
                ),
            ))
        }
    }
    hub.stopping.set(true);
    hub.follower_stop.notify();
    let since = Instant::now();
    while hub.follower_running.get() {
        if since.elapsed() > FOLLOWER_STOP_WAIT {
            return Err(internal("the follower did not stop; PROMOTE abandoned"));
        }
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    let logs = hub.positions().await?;
    let seen = logs.iter().map(|l| l.last_epoch).max().unwrap_or(0);
    let epoch = seen.max(hub.state.epoch()) + 1;
    let mut offsets = Vec::with_capacity(logs.len());
    for shard in 0..hub.router.shard_count() {
        match hub
            .router
            .call(shard, ShardCall::BeginEpoch { epoch })
            .await?
        {
            ReplyBody::Json(v) => {
                let v: Value = serde_json::from_slice(&v).unwrap_or_default();
                offsets.push(v["offset"].as_u64().unwrap_or(0));
            }
            _ => return Err(internal("unexpected reply to BeginEpoch")),
        }
    }
    for shard in 0..hub.router.shard_count() {
        hub.router.call(shard, ShardCall::Promote).await?;
    }
    hub.state.see_epoch(epoch);
    hub.state.become_primary();
    log::warn!(
        "promoted to primary: epoch {epoch}, epoch records at {offsets:?}; writes are accepted"
    );
    Ok(json!({
        "role": "primary",
        "epoch": epoch,
        "epoch_offsets": stream::positions_map(&offsets),
    }))
}

/// Start-up on the control executor, before the fronts open: a primary makes sure its term has
/// an epoch (a new log gets epoch 1 in every shard); every member learns the highest epoch in
/// its logs.
pub async fn start_up(hub: &Hub) -> Result<(), ReplError> {
    let logs = (hub.positions().await).map_err(|r| ReplError::Positions(r.message))?;
    let seen = logs.iter().map(|l| l.last_epoch).max().unwrap_or(0);
    hub.state.see_epoch(seen);
    if hub.state.role() != Some(Role::Primary) {
        return Ok(());
    }
    let epoch = seen.max(1);
    for (shard, log) in logs.iter().enumerate() {
        if log.last_epoch < epoch {
            hub.router
                .call(shard as u32, ShardCall::BeginEpoch { epoch })
                .await
                .map_err(|r| ReplError::Epoch {
                    shard,
                    epoch,
                    why: r.message,
                })?;
        }
    }
    hub.state.see_epoch(epoch);
    log::info!("replication: primary, epoch {epoch}");
    Ok(())
}
