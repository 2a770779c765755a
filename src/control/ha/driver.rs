//! The control executor's side of failover (docs/ha.md, "Promotion" and "Demotion"): it polls
//! the HA thread's decision (`shared::Want`) and carries it out on this executor, then reports
//! back with the log positions it read afterwards and wakes the thread (`Shared::wake`), which
//! then goes on (publishes final positions, writes the term's history) without waiting for
//! its poll.
//!
//! - `Lead { epoch }`: stop the follower, write the epoch record into every shard's log
//!   (`ShardCall::BeginEpoch`, durable before it answers), start timers (`Promote`), then
//!   accept writes (the role flips last).
//! - `Follow { addr }`: demote if primary, follow `addr` (restarting the stream if it followed
//!   another address).
//! - `Fence`: demote if primary, stop the follower: no more acknowledgements.
//!
//! Demotion: the role flips to follower first (the gate refuses new writes), then every shard
//! disarms its timers and answers held sync writes `NO_PRIMARY` (`ShardCall::Demote`), and
//! every replica stream ends.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::error::HaError;
use super::shared::{Shared, Want};
use crate::config::Role;
use crate::control::replication::follower;
use crate::control::replication::hub::Hub;
use crate::shard::{ReplyBody, ShardCall};

/// How often the driver looks for a new decision and reads positions.
const POLL: Duration = Duration::from_millis(50);
/// How long a stopping follower may take.
const FOLLOWER_STOP_WAIT: Duration = Duration::from_secs(10);

/// What the driver runs now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Doing {
    Nothing,
    Following(String),
    Leading(u64),
}

pub async fn run(hub: Rc<Hub>, shared: Arc<Shared>, template: follower::Settings) {
    let mut doing = Doing::Nothing;
    let mut done = 0;
    while !hub.stopping.get() {
        let (gen, want) = shared.want();
        let carried = gen != done;
        if carried {
            if let Some(want) = want {
                let failed = carry_out(&hub, &template, &mut doing, want).await;
                shared.update_report(|r| {
                    r.done = gen;
                    r.lead_failed = failed;
                    r.positions_fresh = false;
                });
            }
            done = gen;
        }
        report_positions(&hub, &shared, &doing).await;
        if carried {
            shared.wake.signal(); // the HA thread goes on from the report at once
        }
        glommio::timer::sleep(POLL).await;
    }
}

/// Returns true when `Lead` failed.
async fn carry_out(
    hub: &Rc<Hub>,
    template: &follower::Settings,
    doing: &mut Doing,
    want: Want,
) -> bool {
    match want {
        Want::Lead { epoch } => {
            if *doing == Doing::Leading(epoch) {
                return false;
            }
            hub.stop_follower(FOLLOWER_STOP_WAIT).await;
            match lead(hub, epoch).await {
                Ok(()) => {
                    *doing = Doing::Leading(epoch);
                    false
                }
                Err(e) => {
                    log::error!("ha: could not begin epoch {epoch}: {e}");
                    demote(hub, true).await;
                    *doing = Doing::Nothing;
                    true
                }
            }
        }
        Want::Follow { addr, .. } => {
            if *doing == Doing::Following(addr.clone()) {
                return false;
            }
            demote(hub, false).await;
            hub.stop_follower(FOLLOWER_STOP_WAIT).await;
            let mut cfg = template.clone();
            cfg.upstream.clone_from(&addr);
            hub.start_follower(cfg);
            *doing = Doing::Following(addr);
            false
        }
        Want::Fence => {
            demote(hub, false).await;
            hub.stop_follower(FOLLOWER_STOP_WAIT).await;
            *doing = Doing::Nothing;
            false
        }
    }
}

/// Shard `shard` refused a step of `lead`.
fn refused(shard: u32, r: shards::Rejection) -> HaError {
    HaError::Shard {
        shard,
        why: r.message,
    }
}

/// Writes the term's epoch records, starts timers, then accepts writes.
async fn lead(hub: &Rc<Hub>, epoch: u64) -> Result<(), HaError> {
    let mut offsets = Vec::new();
    for shard in 0..hub.router.shard_count() {
        let reply = hub
            .router
            .call(shard, ShardCall::BeginEpoch { epoch })
            .await;
        match reply.map_err(|r| refused(shard, r))? {
            ReplyBody::Json(v) => {
                let v: Value = serde_json::from_slice(&v).unwrap_or_default();
                offsets.push(v["offset"].as_u64().unwrap_or(0));
            }
            _ => {
                let why = "unexpected reply to BeginEpoch".to_string();
                return Err(HaError::Shard { shard, why });
            }
        }
    }
    hub.reset_quorum();
    for shard in 0..hub.router.shard_count() {
        hub.router
            .call(shard, ShardCall::Promote)
            .await
            .map_err(|r| refused(shard, r))?;
    }
    hub.state.see_epoch(epoch);
    hub.state.become_primary();
    log::warn!(epoch = epoch, role = "primary", reason = "elected"; "ha: primary for epoch {epoch}; epoch records at {offsets:?}; writes are accepted");
    Ok(())
}

/// Leaves the primary role, if held (`force`: also after a promotion that failed half-way).
async fn demote(hub: &Rc<Hub>, force: bool) {
    if hub.state.role() != Some(Role::Primary) && !force {
        return;
    }
    hub.state.become_follower();
    for shard in 0..hub.router.shard_count() {
        if let Err(r) = hub.router.call(shard, ShardCall::Demote).await {
            log::warn!("ha: demoting shard {shard}: {}", r.message);
        }
    }
    hub.stop_links();
    hub.reset_quorum();
    let reason = match hub.ha.as_deref().and_then(|s| s.demoted_for.lock().ok()) {
        Some(why) if !why.is_empty() => *why,
        _ => "lost the lease or the leader key",
    };
    log::warn!(epoch = hub.state.epoch(), role = "follower", reason = reason; "ha: demoted ({reason}): writes are refused, replica streams closed");
}

/// Reports the durable heads. `following` is read first: positions read after the stream had
/// stopped are final (a candidate compares them, docs/ha.md).
async fn report_positions(hub: &Hub, shared: &Shared, doing: &Doing) {
    let following = hub.follower_running.get();
    let Ok(logs) = hub.positions().await else {
        return;
    };
    let positions: Vec<u64> = logs.iter().map(|l| l.durable).collect();
    let last_epoch = logs.iter().map(|l| l.last_epoch).max().unwrap_or(0);
    let log_poisoned = logs.iter().any(|l| l.handle.is_poisoned());
    let storage_full = logs.iter().any(|l| l.handle.is_storage_full());
    let leading = matches!(doing, Doing::Leading(_)) && hub.state.role() == Some(Role::Primary);
    shared.update_report(|r| {
        r.positions = positions;
        r.last_epoch = last_epoch;
        r.following = following;
        r.leading = leading;
        r.positions_fresh = true;
        r.log_poisoned = log_poisoned;
        r.storage_full = storage_full;
    });
}
