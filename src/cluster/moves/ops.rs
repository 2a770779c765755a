//! `CLUSTER_MOVE_SLOTS` and `CLUSTER_CANCEL_MOVE` (docs/cluster.md, "Moving slots"): served by
//! any member, whose failover thread writes etcd. A move never depends on the connection that
//! started it: the source group's primary runs it (`source`) once its copy shows the intent;
//! `wait` only watches the copy for the move's record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::super::admin::{self, MoveAnswer, MoveAsk};
use super::super::map::{MigrationRecord, MigrationState};
use super::super::{Cluster, ClusterError};
use super::etcd::Figures;
use crate::ops::cluster::refused;
use crate::ops::params::parse;

/// How often `wait` looks at the copy.
const LOOK_EVERY: Duration = Duration::from_millis(20);
/// How long `wait` waits past the move's own bounds (catch-up, the freeze attempts) for a
/// source that never took the move up; then it answers that the move is running.
const WAIT_SLACK: Duration = Duration::from_secs(60);

/// `CLUSTER_MOVE_SLOTS {slots:[lo,hi], to, wait?}`.
pub async fn move_slots(params: Option<&[u8]>, cluster: &Arc<Cluster>) -> Result<Value, Rejection> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct MoveSlots {
        slots: [u32; 2],
        to: String,
        #[serde(default = "yes")]
        wait: bool,
    }
    fn yes() -> bool {
        true
    }
    let p: MoveSlots = parse(params)?;
    let [lo, hi] = p.slots;
    if lo > hi || hi > u32::from(super::super::map::SLOT_MAX) {
        return Err(Rejection::new(
            ErrorCode::BadRequest,
            format!("slots [{lo}, {hi}] are not a range within 0..=16383"),
        ));
    }
    let (lo, hi) = (lo as u16, hi as u16);
    let ask = MoveAsk::Start { lo, hi, to: p.to };
    let record = match admin::move_txn(cluster, ask).await.map_err(refused)? {
        MoveAnswer::Record(r) => r,
        MoveAnswer::Switch(_) => return Err(refused(ClusterError::Contended)),
    };
    if !p.wait {
        return Ok(record_json(&record));
    }
    let started = Instant::now();
    let bound = Duration::from_millis(
        cluster.moves.move_catchup_timeout_ms
            + cluster.moves.move_freeze_max_ms * 2 * u64::from(cluster.moves.move_attempts),
    ) + WAIT_SLACK;
    loop {
        let copy = cluster.view.get();
        if let Some(r) = copy.migration(&record.id) {
            match r.state {
                MigrationState::Done => {
                    let mut v = record_json(r);
                    v["map_epoch"] = json!(copy.map_epoch());
                    v["duration_ms"] = json!(started.elapsed().as_millis() as u64);
                    return Ok(v);
                }
                MigrationState::Aborted => return Err(aborted(r)),
                MigrationState::Running => {}
            }
        }
        if started.elapsed() > bound {
            return Ok(record_json(&record));
        }
        glommio::timer::sleep(LOOK_EVERY).await;
    }
}

/// `CLUSTER_CANCEL_MOVE {id}` → `{id, state}`; a switched move is `BAD_REQUEST` with
/// `details.state: "done"`.
pub async fn cancel(params: Option<&[u8]>, cluster: &Arc<Cluster>) -> Result<Value, Rejection> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cancel {
        id: String,
    }
    let p: Cancel = parse(params)?;
    let ask = MoveAsk::Abort {
        id: p.id.clone(),
        reason: "cancelled".into(),
        figures: Figures::default(),
    };
    match admin::move_txn(cluster, ask).await.map_err(refused)? {
        MoveAnswer::Record(r) if r.state == MigrationState::Done => {
            Err(refused(ClusterError::MoveDone { id: r.id }))
        }
        MoveAnswer::Record(r) => Ok(json!({"id": r.id, "state": r.state})),
        MoveAnswer::Switch(_) => Err(refused(ClusterError::Contended)),
    }
}

/// A move's record as the ops answer it.
fn record_json(r: &MigrationRecord) -> Value {
    json!({
        "id": r.id,
        "slots": [r.lo, r.hi],
        "from": r.from,
        "to": r.to,
        "state": r.state,
        "instances": r.instances,
        "entries": r.entries,
        "freeze_ms": r.freeze_ms,
        "attempts": r.attempts,
        "bytes": r.bytes,
    })
}

/// `MIGRATION_ABORTED` for an aborted move.
pub fn aborted(r: &MigrationRecord) -> Rejection {
    let reason = r.reason.clone().unwrap_or_default();
    Rejection::new(
        ErrorCode::MigrationAborted,
        format!(
            "move {} of slots [{}, {}] from {} to {} was aborted: {reason}",
            r.id, r.lo, r.hi, r.from, r.to
        ),
    )
    .with("id", r.id.as_str())
    .with("reason", reason)
    .with("slots", vec![r.lo, r.hi])
    .with("from", r.from.as_str())
    .with("to", r.to.as_str())
}
