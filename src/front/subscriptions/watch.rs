//! The ops: WATCH_INSTANCE and WATCH_ALL start a driver task per subscription (register on the
//! shards, answer, replay, go live, and finally unregister); UNWATCH ends one.

use std::rc::Rc;

use serde_json::json;
use shards::{ErrorCode, Rejection};

use super::agree::{self, Agreement};
use super::conn::ConnSubs;
use super::cursor;
use super::params::{self, From, WatchSpec};
use super::sub::{End, Sub};
use super::SUBSCRIPTIONS_PER_CONNECTION_MAX;
use crate::front::executor::Front;
use crate::mesh::router::{ReplySlot, Router};
use crate::protocol::routes;
use crate::shard::subs::{trimmed, Filter, REPLAY_CHUNK_RECORDS_MAX};
use crate::shard::{ReplyBody, ShardCall};
use crate::util::slot::Slot;

/// Starts a subscription op.
pub fn dispatch(
    op: routes::Subscriptions,
    params: Option<&[u8]>,
    conn: &Rc<ConnSubs>,
    front: &Rc<Front>,
) -> ReplySlot {
    let shards = front.router.layout();
    match op {
        routes::Subscriptions::WatchInstance => {
            watch(params::watch_instance(params, shards), conn, front)
        }
        routes::Subscriptions::WatchAll => {
            watch(params::watch_all(params, shards.count), conn, front)
        }
        routes::Subscriptions::Unwatch => unwatch(params, conn),
    }
}

fn watch(spec: Result<WatchSpec, Rejection>, conn: &Rc<ConnSubs>, front: &Rc<Front>) -> ReplySlot {
    let slot = Slot::new();
    let spec = match spec {
        Ok(s) => s,
        Err(rej) => {
            slot.fill(Err(rej));
            return slot;
        }
    };
    if conn.len() >= SUBSCRIPTIONS_PER_CONNECTION_MAX {
        let msg = format!("a connection may hold {SUBSCRIPTIONS_PER_CONNECTION_MAX} subscriptions");
        let rej = Rejection::new(ErrorCode::BadRequest, msg)
            .with("limit", SUBSCRIPTIONS_PER_CONNECTION_MAX);
        slot.fill(Err(rej));
        return slot;
    }
    let table = &front.subs;
    let watched = spec.from.iter().map(Option::is_some).collect();
    let queue_max = front.limits.subscription_queue_max;
    let stats = front.subs_stats.clone();
    let sub = Sub::new(
        table.next_id(),
        watched,
        queue_max,
        conn.framing,
        stats,
        Rc::downgrade(conn),
    );
    // In the table before any shard knows it: pushes that overtake the set-up are held.
    table.insert(sub.clone());
    conn.add(sub.clone());
    let task = drive(front.clone(), sub.clone(), spec, slot.clone());
    match conn.drivers.spawn(task) {
        Ok(t) => *sub.driver.borrow_mut() = Some(t.detach()),
        Err(_) => {
            sub.end(End::Failed);
            let rej = Rejection::new(ErrorCode::ShuttingDown, "the connection is closing");
            slot.fill(Err(rej));
        }
    }
    slot
}

/// One subscription's life on this front, after the WATCH request.
async fn drive(front: Rc<Front>, sub: Rc<Sub>, spec: WatchSpec, reply: ReplySlot) {
    let router = &front.router;
    let (subscribed, setup) = subscribe(router, &sub, &spec).await;
    let starts = setup.and_then(|logs| resolve(&spec, &logs).map(|plan| (plan, logs)));
    let (plan, logs) = match starts {
        Ok(ok) => ok,
        Err(rej) => {
            sub.end(End::Failed);
            reply.fill(Err(rej));
            unsubscribe(router, &sub, &subscribed).await;
            return;
        }
    };
    let positions: Vec<(u64, u64)> = (plan.shards.iter().zip(&logs))
        .map(|(p, log)| match (p, log) {
            (Some((start, _)), Some(log)) => (agree::epoch_of(&log.epochs, *start), *start),
            _ => (0, 0),
        })
        .collect();
    let heads: Vec<u64> = plan
        .shards
        .iter()
        .map(|p| p.map_or(0, |(_, h)| h))
        .collect();
    let result = json!({ "subscription_id": sub.id, "cursor": cursor::encode(&positions) });
    sub.finish_setup(positions, &heads);
    reply.fill(Ok(ReplyBody::Watch {
        result: result.to_string().into_bytes(),
        subscription: sub.id,
    }));
    // A resume from a position this member's log no longer agrees with ends at once with a
    // `diverged` lag notice naming where the logs agree (docs/ha.md "Subscriptions across terms"); nothing is replayed.
    if plan.diverged.is_empty() || !sub.diverge(&plan.diverged) {
        replay(router, &sub, &spec.filter, &plan.shards).await;
    }
    while !sub.is_ended() {
        sub.space.wait().await;
    }
    unsubscribe(router, &sub, &subscribed).await;
}

/// A watched shard's log, as registered.
struct Log {
    head: u64,
    oldest: u64,
    epochs: Vec<(u64, u64)>,
}

/// Each watched shard's log.
type Logs = Vec<Option<Log>>;

/// Registers the subscription on every shard it watches. Returns the shards that registered
/// it (to unregister later) and their log positions, or the first failure.
async fn subscribe(
    router: &Router,
    sub: &Sub,
    spec: &WatchSpec,
) -> (Vec<u32>, Result<Logs, Rejection>) {
    let mut subscribed = Vec::new();
    let mut logs: Logs = spec.from.iter().map(|_| None).collect();
    for (k, from) in spec.from.iter().enumerate() {
        if from.is_none() {
            continue;
        }
        let call = ShardCall::Subscribe {
            sub: sub.id,
            filter: spec.filter.clone(),
        };
        match router.call(k as u32, call).await {
            Ok(ReplyBody::Watching {
                head,
                oldest,
                epochs,
            }) => {
                subscribed.push(k as u32);
                logs[k] = Some(Log {
                    head,
                    oldest,
                    epochs,
                });
            }
            Ok(_) => return (subscribed, Err(unexpected())),
            Err(rej) => return (subscribed, Err(rej)),
        }
    }
    (subscribed, Ok(logs))
}

/// Per watched shard: (position to replay after, head to replay through).
type Shards = Vec<Option<(u64, u64)>>;

/// Where each watched shard starts, and the `(shard, epoch, offset)` where a log that no
/// longer agrees with the cursor does (the subscription then ends at once).
struct Plan {
    shards: Shards,
    diverged: Vec<(u32, u64, u64)>,
}

/// Where each watched shard starts, checked against what its log holds.
fn resolve(spec: &WatchSpec, logs: &Logs) -> Result<Plan, Rejection> {
    let mut plan = Plan {
        shards: vec![None; spec.from.len()],
        diverged: Vec::new(),
    };
    for (k, (from, log)) in spec.from.iter().zip(logs).enumerate() {
        let (Some(from), Some(log)) = (from, log) else {
            continue;
        };
        let (head, oldest) = (log.head, log.oldest);
        let after = match *from {
            From::Head => head,
            From::Oldest => oldest.saturating_sub(1).min(head),
            From::After(p) => match agreed(k as u32, p, log)? {
                Some((epoch, offset)) => {
                    // Starts where the logs agree; reaches as far as the cursor went.
                    plan.diverged.push((k as u32, epoch, offset));
                    plan.shards[k] = Some((offset, p.offset));
                    continue;
                }
                None => p.offset,
            },
            From::At(o) => o.saturating_sub(1),
        };
        if after > head {
            let msg = format!(
                "offset {} of shard {k} is beyond its log (head {head})",
                after + 1
            );
            return Err(Rejection::new(ErrorCode::BadRequest, msg)
                .with("shard", k)
                .with("head_offset", head));
        }
        if after < head && after + 1 < oldest {
            return Err(with_oldest_cursor(
                trimmed(k as u32, after + 1, oldest),
                spec,
                logs,
            ));
        }
        plan.shards[k] = Some((after, head));
    }
    Ok(plan)
}

/// A cursor's position against shard `k`'s log: `None` when they agree (or the cursor has no
/// epochs: a `c1` cursor resumes as before), else where they do. A position of an epoch this
/// log has not reached is refused: this member is behind the cursor.
fn agreed(k: u32, p: cursor::Pos, log: &Log) -> Result<Option<(u64, u64)>, Rejection> {
    let Some(epoch) = p.epoch else {
        return Ok(None);
    };
    match agree::check(&log.epochs, log.head, epoch, p.offset) {
        Agreement::Agrees => Ok(None),
        Agreement::Diverged { epoch, offset } => Ok(Some((epoch, offset))),
        Agreement::Behind { log_epoch } => {
            let msg = format!(
                "the cursor's position in shard {k} is of epoch {epoch}; this member's log \
                 has reached epoch {log_epoch} only: it is behind (resume on the primary, or \
                 here once it has caught up)"
            );
            Err(Rejection::new(ErrorCode::BadRequest, msg)
                .with("shard", k)
                .with("epoch", epoch)
                .with("log_epoch", log_epoch))
        }
    }
}

/// A WATCH_ALL cursor that is retained everywhere: the requested positions, raised to just
/// before each shard's oldest retained offset.
fn with_oldest_cursor(rej: Rejection, spec: &WatchSpec, logs: &Logs) -> Rejection {
    let raised: Option<Vec<(u64, u64)>> = spec
        .from
        .iter()
        .zip(logs)
        .map(|(from, log)| match (from, log) {
            (Some(From::After(p)), Some(log)) => {
                let offset = p.offset.max(log.oldest.saturating_sub(1));
                Some((agree::epoch_of(&log.epochs, offset), offset))
            }
            _ => None,
        })
        .collect();
    match raised {
        Some(pos) => rej.with("oldest_cursor", cursor::encode(&pos)),
        None => rej,
    }
}

/// Replays every watched shard from its start to its registration head, a chunk at a time
/// and round-robin, queuing a chunk only when the subscription's queue is at most half full;
/// each shard goes live once caught up. In HA sync mode a primary's shard replays only what
/// replicas acknowledged, and may answer "nothing yet" (`take_chunk`).
async fn replay(router: &Router, sub: &Sub, filter: &Filter, plan: &Shards) {
    let mut todo: Vec<(u32, u64, u64)> = Vec::new();
    for (k, p) in plan.iter().enumerate() {
        match p {
            Some((after, head)) if after < head => todo.push((k as u32, after + 1, *head)),
            Some(_) if !sub.go_live(k as u32) => return,
            _ => {}
        }
    }
    while !todo.is_empty() {
        let mut i = 0;
        while i < todo.len() {
            while !sub.is_ended() && sub.queue_len() > sub.queue_max() / 2 {
                sub.space.wait().await;
            }
            if sub.is_ended() {
                return;
            }
            let (k, from, head) = todo[i];
            let room = sub.queue_max().saturating_sub(sub.queue_len());
            let call = ShardCall::ReadEvents {
                filter: filter.clone(),
                from,
                to: head,
                max: room.clamp(1, REPLAY_CHUNK_RECORDS_MAX),
            };
            let reply = router.call(k, call).await;
            let Some(next) = take_chunk(sub, k, from, reply) else {
                return;
            };
            if next > head {
                if !sub.go_live(k) {
                    return;
                }
                todo.remove(i);
            } else {
                todo[i].1 = next;
                i += 1;
            }
        }
    }
}

/// Queues one replay chunk of shard `k` read from `from`; where to go on, or `None` once the
/// subscription ended (now or before). No events and `next == from`: nothing was
/// sync-acknowledged at `from` yet (HA sync mode, `shard/replay.rs`; the shard waited a
/// bounded time): the same read is asked again on the next round.
fn take_chunk(sub: &Sub, k: u32, from: u64, reply: Result<ReplyBody, Rejection>) -> Option<u64> {
    if sub.is_ended() {
        return None;
    }
    match reply {
        Ok(ReplyBody::Events { events, next }) if next > from => {
            for (offset, epoch, body) in events {
                if !sub.enqueue(k, epoch, offset, &body) {
                    return None;
                }
            }
            Some(next)
        }
        Ok(ReplyBody::Events { events, next }) if next == from && events.is_empty() => Some(next),
        other => {
            let why = other.err().map_or("no progress".to_string(), |r| r.message);
            log::warn!("subscription {}: replay of shard {k} failed: {why}", sub.id);
            sub.end(End::Lagged);
            None
        }
    }
}

async fn unsubscribe(router: &Router, sub: &Sub, shards: &[u32]) {
    for &k in shards {
        if let Err(rej) = router.call(k, ShardCall::Unsubscribe { sub: sub.id }).await {
            log::debug!("unsubscribing {} from shard {k}: {}", sub.id, rej.message);
        }
    }
}

/// UNWATCH: ends the subscription at once (nothing more of it is written after this response)
/// and answers once every shard has dropped it.
fn unwatch(params: Option<&[u8]>, conn: &Rc<ConnSubs>) -> ReplySlot {
    let slot = Slot::new();
    let id = match params::unwatch(params) {
        Ok(id) => id,
        Err(rej) => {
            slot.fill(Err(rej));
            return slot;
        }
    };
    let removed = |b: bool| {
        Ok(ReplyBody::Json(
            json!({ "removed": b }).to_string().into_bytes(),
        ))
    };
    let Some(sub) = conn.find(id).filter(|s| !s.is_ended()) else {
        slot.fill(removed(false));
        return slot;
    };
    sub.end(End::Unwatched);
    let driver = sub.driver.borrow_mut().take();
    let fill = slot.clone();
    let spawned = conn.drivers.spawn(async move {
        if let Some(d) = driver {
            d.await;
        }
        fill.fill(removed(true));
    });
    match spawned {
        Ok(t) => drop(t.detach()),
        Err(_) => slot.fill(removed(true)),
    }
    slot
}

fn unexpected() -> Rejection {
    Rejection::new(ErrorCode::InternalError, "unexpected reply from shard")
}
