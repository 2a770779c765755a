//! The primary's side of `SWITCHOVER` on the HA thread (docs/ha.md, "Switchover"). The op
//! (`control::ha::switchover`, on the control executor) asks for three steps through `admin`:
//!
//! - `Begin`: check the target (a live member that follows this primary over a connected
//!   stream, without `ha.nofailover`; by default the one that acknowledged most), write the
//!   switchover key `{from, to, deadline_ms, caught_up: false}` guarded by the leader key's
//!   revision, on a lease of `CATCH_UP_MAX + ABORT_GRACE`, and stop taking writes: the lease
//!   deadline the shards read drops to 0, so new writes and those in flight are answered
//!   `NO_PRIMARY`, and renewals no longer move it (`Term::renewed`).
//! - `Resign`: once the target has acknowledged the head, one transaction (still guarded by
//!   the leader key) deletes the leader key and rewrites the switchover key with
//!   `caught_up: true` on a lease of `TAKE_OVER_MAX`: only the target may campaign before it
//!   goes, and it may skip the eligibility rules (it holds every acknowledged write). This
//!   member steps down (`svc_ha_demotions_total{reason="switchover"}`) and follows the winner.
//! - `Abort`: delete the switchover key and take writes again. The thread aborts by itself
//!   when the op never comes back (`ABORT_GRACE` after the catch-up deadline).

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::admin::{Ask, Done, Outcome, Step};
use super::error::HaError;
use super::keys::Switchover;
use super::session::{Session, Snapshot};
use super::shared::Demotion;
use super::term::Term;
use super::Ctx;
use crate::member::clock::boottime_ns;

/// How long the primary waits, writes stopped, for the target to acknowledge its head.
pub const CATCH_UP_MAX: Duration = Duration::from_secs(10);
/// After the resignation, how long only the target may campaign.
pub const TAKE_OVER_MAX: Duration = Duration::from_secs(10);
/// Past `CATCH_UP_MAX`, how long the thread leaves the op to abort before it aborts itself.
const ABORT_GRACE: Duration = Duration::from_secs(2);

/// A handover under way on the primary: writes are stopped until it resigns or aborts.
#[derive(Debug, Clone)]
pub struct Handover {
    pub to: String,
    /// CLOCK_BOOTTIME ns after which the thread aborts by itself.
    until_ns: u64,
}

/// Carries out the switchover steps asked since the last poll, and the self-abort.
pub(super) async fn carry_out(term: &mut Term, ctx: &Ctx, s: &mut Session, snap: &Snapshot) {
    let ours = (snap.leader.as_ref())
        .filter(|(l, lease, _)| term.leading && l.instance == ctx.instance && *lease == s.lease)
        .map(|(_, _, rev)| *rev);
    for (ticket, ask) in ctx.shared.admin.take(|a| matches!(a, Ask::Switchover(_))) {
        let Ask::Switchover(step) = ask else {
            continue;
        };
        let outcome = match (step, ours) {
            (Step::Abort(why), _) => abort(term, ctx, s, &why).await,
            (_, None) => Err(refused(
                "this member is not the primary (it holds no leader key)",
            )),
            (Step::Begin(to), Some(rev)) => begin(term, ctx, s, snap, to.as_deref(), rev).await,
            (Step::Resign, Some(rev)) => resign(term, ctx, s, rev).await,
        };
        ctx.shared.admin.finish(ticket, outcome);
    }
    if term
        .handover
        .as_ref()
        .is_some_and(|h| boottime_ns() >= h.until_ns)
    {
        let _ = abort(term, ctx, s, "SWITCHOVER did not finish by its deadline").await;
    }
}

async fn begin(
    term: &mut Term,
    ctx: &Ctx,
    s: &mut Session,
    snap: &Snapshot,
    to: Option<&str>,
    rev: i64,
) -> Outcome {
    if term.handover.is_some() || snap.switchover.is_some() {
        return Err(refused("a switchover is already under way"));
    }
    let to = pick(ctx, snap, to)?;
    let value = Switchover {
        from: ctx.node_id.clone(),
        to: to.clone(),
        deadline_ms: crate::util::time::now_ms() + CATCH_UP_MAX.as_millis() as u64,
        caught_up: false,
    };
    let put = put_key(ctx, s, &value, CATCH_UP_MAX + ABORT_GRACE).await?;
    let txn = Txn::new()
        .when([Compare::mod_revision(
            ctx.keys.leader(),
            CompareOp::Equal,
            rev,
        )])
        .and_then([put]);
    if !s.etcd.txn("switchover txn", txn).await?.succeeded() {
        return Err(refused("the leader key changed meanwhile"));
    }
    let until_ns = boottime_ns() + (CATCH_UP_MAX + ABORT_GRACE).as_nanos() as u64;
    term.handover = Some(Handover {
        to: to.clone(),
        until_ns,
    });
    ctx.state.set_lease_until(0);
    log::warn!("ha: switchover to {to}: writes stopped; waiting for it to acknowledge the head");
    Ok(Done {
        epoch: term.epoch,
        node: to,
    })
}

async fn resign(term: &mut Term, ctx: &Ctx, s: &mut Session, rev: i64) -> Outcome {
    let Some(h) = term.handover.clone() else {
        return Err(refused("no switchover is under way on this member"));
    };
    let value = Switchover {
        from: ctx.node_id.clone(),
        to: h.to.clone(),
        deadline_ms: crate::util::time::now_ms() + TAKE_OVER_MAX.as_millis() as u64,
        caught_up: true,
    };
    let put = put_key(ctx, s, &value, TAKE_OVER_MAX).await?;
    let txn = Txn::new()
        .when([Compare::mod_revision(
            ctx.keys.leader(),
            CompareOp::Equal,
            rev,
        )])
        .and_then([TxnOp::delete(ctx.keys.leader(), None), put]);
    if !s.etcd.txn("resign txn", txn).await?.succeeded() {
        return Err(refused("the leader key changed meanwhile"));
    }
    term.handover = None;
    let why = format!("handed over to {} (SWITCHOVER)", h.to);
    term.step_down(ctx, Demotion::Switchover, &why);
    Ok(Done {
        epoch: term.epoch,
        node: h.to,
    })
}

/// Takes writes again (if still primary) and deletes the switchover key.
async fn abort(term: &mut Term, ctx: &Ctx, s: &mut Session, why: &str) -> Outcome {
    if let Some(h) = term.handover.take() {
        if term.leading {
            ctx.state.set_lease_until(term.lease_deadline);
        }
        log::warn!(
            "ha: switchover to {} abandoned: {why}; writes are taken again",
            h.to
        );
    }
    s.etcd
        .delete("delete switchover", ctx.keys.switchover())
        .await?;
    Ok(Done::epoch(term.epoch))
}

/// The put of the switchover key, on a new lease of `ttl` (whole seconds, rounded up).
async fn put_key(
    ctx: &Ctx,
    s: &mut Session,
    value: &Switchover,
    ttl: Duration,
) -> Result<TxnOp, HaError> {
    let secs = ttl.as_millis().div_ceil(1000) as i64;
    let lease = s.etcd.lease_grant(secs).await?;
    let value = serde_json::to_vec(value)?;
    let opts = PutOptions::new().with_lease(lease);
    Ok(TxnOp::put(ctx.keys.switchover(), value, Some(opts)))
}

/// The target: `to` if eligible, else the eligible member that acknowledged most.
fn pick(ctx: &Ctx, snap: &Snapshot, to: Option<&str>) -> Result<String, HaError> {
    let members = snap.members.iter().map(|(m, _)| m);
    let Some(to) = to else {
        return members
            .filter_map(|m| eligible(ctx, m).ok().map(|acked| (acked, m)))
            .max_by(|(a, x), (b, y)| a.cmp(b).then(y.node_id.cmp(&x.node_id)))
            .map(|(_, m)| m.node_id.clone())
            .ok_or_else(|| {
                refused(
                    "no member is eligible (live, following this primary over a connected \
                     stream, without ha.nofailover)",
                )
            });
    };
    let m = (snap.members.iter().map(|(m, _)| m))
        .find(|m| m.node_id == to)
        .ok_or_else(|| {
            HaError::Refused(format!(
                "{to:?} is not a live member of cluster {:?}",
                ctx.cfg.cluster
            ))
        })?;
    eligible(ctx, m).map_err(|why| HaError::Refused(format!("{to:?} is not eligible: {why}")))?;
    Ok(to.to_string())
}

/// Why `m` may not take over, or the entries it has acknowledged to this primary.
fn eligible(ctx: &Ctx, m: &super::keys::Member) -> Result<u64, &'static str> {
    if m.node_id == ctx.node_id {
        return Err("it is this member, the primary");
    }
    if m.nofailover {
        return Err("it has ha.nofailover set");
    }
    let replicas = ctx
        .state
        .stats
        .replicas
        .lock()
        .map_err(|_| "the replica table is poisoned")?;
    match replicas.get(&m.node_id) {
        Some(view) if m.following => Ok(view.acked_sequence()),
        _ => Err("it does not follow this primary over a connected stream"),
    }
}

/// A refusal the op answers (`BAD_REQUEST`, its message).
fn refused(why: &str) -> HaError {
    HaError::Refused(why.to_string())
}
