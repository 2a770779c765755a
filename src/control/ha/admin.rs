//! The operator's requests to the HA thread (docs/ha.md, "Maintenance" and "Forcing a
//! primary"): `HA_PAUSE {}` / `HA_RESUME {}`, `PROMOTE {force: true}` and the steps of
//! `SWITCHOVER` (`control::ha::switchover`).
//!
//! - Pausing writes the key `/smdb/<cluster>/paused` (no lease: it outlives the member that
//!   wrote it); while it exists no member campaigns by itself, so a primary that dies is not
//!   replaced, and the primary keeps its lease. Resuming deletes it.
//! - A forced promotion campaigns on this member at the HA thread's next poll, skipping the
//!   eligibility rules (lag, sync set, `nofailover`) and the pause, but only when no member holds
//!   the leader key: the campaign transaction itself requires the key to be absent.
//!
//! Only the HA thread talks to etcd: an op (on the control executor) queues a request here and
//! waits for its outcome. Bounds: at most `PENDING_MAX` requests wait (one more is refused
//! `INTERNAL_ERROR`, naming the limit), and at most `OUTCOMES_MAX` outcomes are kept for their
//! askers (the oldest is dropped: its asker has given up).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::error::HaError;
use super::session::Session;
use super::shared::Shared;
use super::Ctx;
use crate::config::Role;
use crate::member::ReplState;

/// Requests waiting for the HA thread.
const PENDING_MAX: usize = 16;
/// Outcomes kept for askers that have not read them yet.
const OUTCOMES_MAX: usize = 64;
/// How long an op waits for the HA thread (a poll is 200 ms; etcd calls time out sooner).
const WAIT: Duration = Duration::from_secs(10);
/// How long a forced promotion waits for the epoch records after winning the key.
const LEAD_WAIT: Duration = Duration::from_secs(10);
/// How often an op looks for its outcome.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// What the operator asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    Pause(bool),
    Force,
    /// A step of `SWITCHOVER` (`control::ha::switchover`, `control::ha::handover`).
    Switchover(Step),
}

/// The steps of a switchover the primary's HA thread takes (`control::ha::handover`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Check the target (or pick one), write the switchover key, stop taking writes.
    Begin(Option<String>),
    /// The target has the head: delete the leader key and mark the handover caught up.
    Resign,
    /// Give up (why): delete the switchover key and take writes again.
    Abort(String),
}

/// What the HA thread answers: an epoch (the one won by a forced promotion, the primary's
/// own for a switchover step, 0 for a pause) and a node id (a switchover's target).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    pub epoch: u64,
    pub node: String,
}

impl Done {
    pub fn epoch(epoch: u64) -> Done {
        Done {
            epoch,
            node: String::new(),
        }
    }
}

/// An outcome: what was done, or why not.
pub type Outcome = Result<Done, HaError>;

#[derive(Debug, Default)]
pub struct Requests {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    pending: VecDeque<(u64, Ask)>,
    done: VecDeque<(u64, Outcome)>,
}

impl Requests {
    /// Queues a request; its ticket, or why it cannot be queued.
    fn ask(&self, ask: Ask) -> Result<u64, HaError> {
        let poisoned = || HaError::Refused("the HA state is poisoned".into());
        let mut i = self.inner.lock().map_err(|_| poisoned())?;
        if i.pending.len() >= PENDING_MAX {
            let busy = format!("{PENDING_MAX} requests are already waiting");
            return Err(HaError::Refused(busy));
        }
        i.next += 1;
        let ticket = i.next;
        i.pending.push_back((ticket, ask));
        Ok(ticket)
    }

    /// The outcome of `ticket`, once the HA thread has one (taken: asked once).
    fn outcome(&self, ticket: u64) -> Option<Outcome> {
        let mut i = self.inner.lock().ok()?;
        let at = i.done.iter().position(|(t, _)| *t == ticket)?;
        i.done.remove(at).map(|(_, r)| r)
    }

    /// Takes the waiting requests `pick` chooses (one kind), in order.
    pub(super) fn take(&self, pick: fn(&Ask) -> bool) -> Vec<(u64, Ask)> {
        let Ok(mut i) = self.inner.lock() else {
            return Vec::new();
        };
        let (taken, kept) = i.pending.drain(..).partition(|(_, a)| pick(a));
        i.pending = kept;
        taken.into()
    }

    pub(super) fn finish(&self, ticket: u64, outcome: Outcome) {
        if let Ok(mut i) = self.inner.lock() {
            if i.done.len() >= OUTCOMES_MAX {
                i.done.pop_front();
            }
            i.done.push_back((ticket, outcome));
        }
    }
}

/// HA thread: writes or deletes the paused key for every queued pause request.
pub(super) async fn carry_out_pauses(ctx: &Ctx, s: &mut Session) {
    for (ticket, ask) in ctx.shared.admin.take(|a| matches!(a, Ask::Pause(_))) {
        let pause = ask == Ask::Pause(true);
        let key = ctx.keys.paused();
        let outcome = if pause {
            let value = json!({"by": ctx.node_id, "at_ms": crate::util::time::now_ms()});
            s.etcd
                .put("put paused", key, value.to_string().into_bytes(), None)
                .await
                .map(|_| Done::default())
        } else {
            s.etcd
                .delete("delete paused", key)
                .await
                .map(|_| Done::default())
        };
        match &outcome {
            Ok(_) if pause => log::warn!("ha: automatic failover paused (HA_PAUSE)"),
            Ok(_) => log::warn!("ha: automatic failover resumed (HA_RESUME)"),
            Err(e) => log::warn!("ha: {}: {e}", if pause { "HA_PAUSE" } else { "HA_RESUME" }),
        }
        ctx.shared.admin.finish(ticket, outcome);
    }
}

/// `HA_PAUSE` / `HA_RESUME` on the control executor (`shared` is None when failover is off):
/// answers `{paused}` once the key is written (or deleted) in etcd.
pub async fn pause_op(shared: Option<&Shared>, pause: bool) -> Result<Value, Rejection> {
    let name = if pause { "HA_PAUSE" } else { "HA_RESUME" };
    let Some(shared) = shared else {
        let msg = format!("{name} needs ha.enabled = true (automatic failover on etcd)");
        return Err(Rejection::new(ErrorCode::BadRequest, msg));
    };
    wait_outcome(shared, Ask::Pause(pause), name).await?;
    Ok(json!({ "paused": pause }))
}

/// `PROMOTE {force: true}` with failover on: answers `{role, epoch}` once this member holds the
/// leader key and its epoch records are durable (the role flips last, `control::ha::driver`).
pub async fn force_op(shared: &Shared, state: &ReplState) -> Result<Value, Rejection> {
    let epoch = wait_outcome(shared, Ask::Force, "PROMOTE {force: true}")
        .await?
        .epoch;
    let deadline = Instant::now() + LEAD_WAIT;
    while state.role() != Some(Role::Primary) || state.epoch() < epoch {
        if Instant::now() >= deadline {
            let msg = format!(
                "PROMOTE {{force: true}}: won epoch {epoch} but its epoch records were not \
                 durable within {LEAD_WAIT:?}; see the log"
            );
            return Err(Rejection::new(ErrorCode::InternalError, msg));
        }
        glommio::timer::sleep(LOOK_EVERY).await;
    }
    log::warn!(epoch = epoch, role = "primary", reason = "PROMOTE force"; "ha: primary for epoch {epoch} by PROMOTE {{force: true}}");
    Ok(json!({"role": "primary", "epoch": epoch, "forced": true}))
}

/// Queues `ask` and waits for the HA thread's outcome: what it did, or a rejection (a refusal
/// the thread gave is `BAD_REQUEST`; no answer in time is `INTERNAL_ERROR`).
pub async fn wait_outcome(shared: &Shared, ask: Ask, name: &str) -> Result<Done, Rejection> {
    let ticket = (shared.admin.ask(ask))
        .map_err(|e| Rejection::new(ErrorCode::InternalError, format!("{name}: {e}")))?;
    shared.wake.signal(); // carried out at the thread's next read, now rather than at its poll
    let deadline = Instant::now() + WAIT;
    loop {
        match shared.admin.outcome(ticket) {
            Some(Ok(done)) => return Ok(done),
            Some(Err(e)) => {
                return Err(Rejection::new(
                    ErrorCode::BadRequest,
                    format!("{name}: {e}"),
                ));
            }
            None if Instant::now() >= deadline => {
                let msg =
                    format!("{name}: no answer from etcd within {WAIT:?}; it may still apply");
                return Err(Rejection::new(ErrorCode::InternalError, msg));
            }
            None => glommio::timer::sleep(LOOK_EVERY).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_bounded_taken_by_kind_and_outcomes_taken_once() {
        let r = Requests::default();
        let force = r.ask(Ask::Force).unwrap();
        let tickets: Vec<u64> = (1..PENDING_MAX)
            .map(|_| r.ask(Ask::Pause(true)).unwrap())
            .collect();
        assert!(r.ask(Ask::Pause(false)).is_err(), "the queue is bounded");
        assert_eq!(
            r.take(|a| matches!(a, Ask::Pause(_))).len(),
            PENDING_MAX - 1
        );
        assert_eq!(r.take(|a| *a == Ask::Force), vec![(force, Ask::Force)]);
        r.finish(tickets[0], Ok(Done::epoch(0)));
        assert!(matches!(r.outcome(tickets[0]), Some(Ok(d)) if d == Done::epoch(0)));
        assert!(r.outcome(tickets[0]).is_none(), "taken once");
        for t in 0..(OUTCOMES_MAX as u64 + 5) {
            r.finish(1000 + t, Err(HaError::Refused("x".into())));
        }
        assert!(r.outcome(1000).is_none(), "the oldest outcomes are dropped");
        assert!(r.outcome(1000 + OUTCOMES_MAX as u64).is_some());
    }
}
