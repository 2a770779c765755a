//! `HA_PAUSE {}` / `HA_RESUME {}` (scope `admin`; docs/ha.md, "Maintenance"): stop and restart
//! automatic failover cluster-wide. Pausing writes the key `/smdb/<cluster>/paused` (no lease:
//! it outlives the member that wrote it); while it exists no member campaigns, so a primary that
//! dies is not replaced, and the primary keeps its lease. Resuming deletes it.
//!
//! Only the HA thread talks to etcd: the op (on the control executor) queues a request here and
//! waits for its outcome; the thread carries requests out once per poll (`carry_out`).
//! Bounds: at most `PENDING_MAX` requests wait (one more is refused `INTERNAL_ERROR`, naming
//! the limit), and at most `OUTCOMES_MAX` outcomes are kept for their askers (the oldest is
//! dropped: its asker has given up).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::session::{call, Session};
use super::shared::Shared;
use super::Ctx;

/// Requests waiting for the HA thread.
const PENDING_MAX: usize = 16;
/// Outcomes kept for askers that have not read them yet.
const OUTCOMES_MAX: usize = 64;
/// How long the op waits for the HA thread (a poll is 200 ms; etcd calls time out sooner).
const WAIT: Duration = Duration::from_secs(10);
/// How often the op looks for its outcome.
const LOOK_EVERY: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
pub struct Requests {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// `(ticket, pause)`.
    pending: VecDeque<(u64, bool)>,
    done: VecDeque<(u64, Result<(), String>)>,
}

impl Requests {
    /// Queues a request; its ticket, or why it cannot be queued.
    fn ask(&self, pause: bool) -> Result<u64, String> {
        let mut i = self.inner.lock().map_err(|_| "the HA state is poisoned")?;
        if i.pending.len() >= PENDING_MAX {
            return Err(format!("{PENDING_MAX} requests are already waiting"));
        }
        i.next += 1;
        let ticket = i.next;
        i.pending.push_back((ticket, pause));
        Ok(ticket)
    }

    /// The outcome of `ticket`, once the HA thread has one (taken: asked once).
    fn outcome(&self, ticket: u64) -> Option<Result<(), String>> {
        let mut i = self.inner.lock().ok()?;
        let at = i.done.iter().position(|(t, _)| *t == ticket)?;
        i.done.remove(at).map(|(_, r)| r)
    }

    fn take_pending(&self) -> Vec<(u64, bool)> {
        (self.inner.lock().map(|mut i| i.pending.drain(..).collect())).unwrap_or_default()
    }

    fn finish(&self, ticket: u64, outcome: Result<(), String>) {
        if let Ok(mut i) = self.inner.lock() {
            if i.done.len() >= OUTCOMES_MAX {
                i.done.pop_front();
            }
            i.done.push_back((ticket, outcome));
        }
    }
}

/// HA thread: writes or deletes the paused key for every queued request.
pub(super) async fn carry_out(ctx: &Ctx, s: &mut Session) {
    for (ticket, pause) in ctx.shared.pause.take_pending() {
        let key = ctx.keys.paused();
        let outcome = if pause {
            let value = json!({"by": ctx.node_id, "at_ms": crate::util::time::now_ms()});
            call("put paused", s.client.put(key, value.to_string(), None))
                .await
                .map(drop)
        } else {
            call("delete paused", s.client.delete(key, None))
                .await
                .map(drop)
        };
        match &outcome {
            Ok(()) if pause => log::warn!("ha: automatic failover paused (HA_PAUSE)"),
            Ok(()) => log::warn!("ha: automatic failover resumed (HA_RESUME)"),
            Err(e) => log::warn!("ha: {}: {e}", if pause { "HA_PAUSE" } else { "HA_RESUME" }),
        }
        ctx.shared.pause.finish(ticket, outcome);
    }
}

/// The op, on the control executor: `None` when failover is off. Answers `{paused}` once the
/// key is written (or deleted) in etcd.
pub async fn op(shared: Option<&Shared>, pause: bool) -> Result<Value, Rejection> {
    let name = if pause { "HA_PAUSE" } else { "HA_RESUME" };
    let Some(shared) = shared else {
        let msg = format!("{name} needs ha.enabled = true (automatic failover on etcd)");
        return Err(Rejection::new(ErrorCode::BadRequest, msg));
    };
    let ticket = shared
        .pause
        .ask(pause)
        .map_err(|e| Rejection::new(ErrorCode::InternalError, format!("{name}: {e}")))?;
    let deadline = Instant::now() + WAIT;
    loop {
        match shared.pause.outcome(ticket) {
            Some(Ok(())) => return Ok(json!({ "paused": pause })),
            Some(Err(e)) => {
                let msg = format!("{name}: etcd: {e}");
                return Err(Rejection::new(ErrorCode::InternalError, msg));
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
    fn requests_are_bounded_and_outcomes_taken_once() {
        let r = Requests::default();
        let tickets: Vec<u64> = (0..PENDING_MAX).map(|_| r.ask(true).unwrap()).collect();
        assert!(r.ask(false).is_err(), "the queue is bounded");
        assert_eq!(r.take_pending().len(), PENDING_MAX);
        r.finish(tickets[0], Ok(()));
        assert_eq!(r.outcome(tickets[0]), Some(Ok(())));
        assert_eq!(r.outcome(tickets[0]), None, "taken once");
        for t in 0..(OUTCOMES_MAX as u64 + 5) {
            r.finish(1000 + t, Err("x".into()));
        }
        assert_eq!(r.outcome(1000), None, "the oldest outcomes are dropped");
        assert!(r.outcome(1000 + OUTCOMES_MAX as u64).is_some());
    }
}
