//! `SWITCHOVER {to?}` (scope `admin`, on the primary; docs/ha.md, "Switchover"): a planned
//! handover with no acknowledged write lost in any mode. One entry point, `op`, on the control
//! executor; the etcd side is the HA thread's (`control::ha::handover`), asked step by step through
//! `admin`:
//!
//! 1. `Begin`: the target is checked (or chosen), the switchover key written, writes stop.
//! 2. Here: wait until the target has acknowledged this member's head (re-read until it
//!    holds still), at most `CATCH_UP_MAX`; else `Abort` and answer `SYNC_TIMEOUT`.
//! 3. `Resign`: the leader key goes; only the target may campaign, and it does at once.
//! 4. Here: wait until the target holds the leader key, at most `TAKE_OVER_MAX`; answer
//!    `{from, to, epoch}`.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::admin::{wait_outcome, Ask, Step};
use super::error::HaError;
use super::handover::{CATCH_UP_MAX, TAKE_OVER_MAX};
use super::shared::Shared;
use crate::control::replication::hub::Hub;

/// How often the op looks at the target's acknowledgements and at the leader key.
const LOOK_EVERY: Duration = Duration::from_millis(10);
const NAME: &str = "SWITCHOVER";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    to: Option<String>,
}

pub async fn op(hub: &Hub, ha: Option<&Shared>, params: Option<&[u8]>) -> Result<Value, Rejection> {
    let Some(shared) = ha else {
        let msg = "SWITCHOVER needs ha.enabled = true (automatic failover on etcd)";
        return Err(Rejection::new(ErrorCode::BadRequest, msg));
    };
    let params: Params = match params {
        Some(p) => serde_json::from_slice(p)
            .map_err(|e| Rejection::new(ErrorCode::BadRequest, format!("{NAME}: {e}")))?,
        None => Params { to: None },
    };
    let begun = wait_outcome(shared, Ask::Switchover(Step::Begin(params.to)), NAME).await?;
    let to = begun.node;
    if let Err(why) = caught_up(hub, &to).await {
        abort(shared, &why.to_string()).await;
        let msg = format!("{NAME} to {to} abandoned: {why}; this member takes writes again");
        return Err(Rejection::new(ErrorCode::SyncTimeout, msg).with("to", to.as_str()));
    }
    if let Err(r) = wait_outcome(shared, Ask::Switchover(Step::Resign), NAME).await {
        abort(shared, &r.message).await;
        return Err(r);
    }
    let epoch = taken_over(hub, shared, &to, begun.epoch).await?;
    let from = shared.view().node_id;
    log::info!("ha: switchover from {from} to {to} done: epoch {epoch}");
    Ok(json!({"from": from, "to": to, "epoch": epoch}))
}

async fn abort(shared: &Shared, why: &str) {
    let step = Ask::Switchover(Step::Abort(why.to_string()));
    if let Err(r) = wait_outcome(shared, step, NAME).await {
        log::warn!("ha: {NAME}: abandoning: {}", r.message);
    }
}

/// Waits until `to` has acknowledged every entry in this member's log (the heads, appended
/// or durable, re-read until they hold still: a write that passed the lease check just before
/// writes stopped may still land).
async fn caught_up(hub: &Hub, to: &str) -> Result<(), HaError> {
    let deadline = Instant::now() + CATCH_UP_MAX;
    let mut heads = heads(hub).await?;
    loop {
        let acked = (hub.state.stats.replicas.lock().ok())
            .and_then(|r| r.get(to).map(|v| v.acked.clone()))
            .unwrap_or_default();
        let has_all = acked.len() == heads.len() && acked.iter().zip(&heads).all(|(a, h)| a >= h);
        if has_all {
            let now = self::heads(hub).await?;
            if now == heads {
                return Ok(());
            }
            heads = now;
            continue;
        }
        if Instant::now() >= deadline {
            return Err(HaError::NotCaughtUp {
                to: to.to_string(),
                heads,
                acked,
            });
        }
        glommio::timer::sleep(LOOK_EVERY).await;
    }
}

async fn heads(hub: &Hub) -> Result<Vec<u64>, HaError> {
    let logs = (hub.positions().await).map_err(|r| HaError::Refused(r.message))?;
    Ok(logs.iter().map(|l| l.head.max(l.durable)).collect())
}

/// Waits until `to` holds the leader key in an epoch above `old`; that epoch.
async fn taken_over(hub: &Hub, shared: &Shared, to: &str, old: u64) -> Result<u64, Rejection> {
    let deadline = Instant::now() + TAKE_OVER_MAX;
    loop {
        let epoch = hub.state.epoch();
        if shared.view().primary.as_deref() == Some(to) && epoch > old {
            return Ok(epoch);
        }
        if Instant::now() >= deadline {
            let msg = format!(
                "{NAME}: this member resigned for {to}, which did not take over within \
                 {TAKE_OVER_MAX:?}; a normal election follows"
            );
            return Err(Rejection::new(ErrorCode::InternalError, msg));
        }
        glommio::timer::sleep(LOOK_EVERY).await;
    }
}
