//! Replay reads for subscriptions (`ShardCall::ReadEvents`): matching events read back from
//! the log, as replayed push bodies with their offsets and epochs. Runs in the registry's
//! low-share replay task queue (`subs.rs`); never touches the engine but for epochs and the
//! slots' latest move-ins (`Engine::before_move_in`: an instance's events from before its
//! latest import here are left out).
//!
//! HA sync mode (docs/ha.md "Subscriptions across terms": "under HA in sync mode a push leaves only once its entry is
//! sync-acknowledged"; docs/ha.md, "Subscriptions across terms"). On a member whose pushes
//! wait for sync acknowledgement (`Registry::holds_local`, `push_hold.rs`), a replay read
//! delivers records only through `SyncState::acked`, the offset that releases held pushes
//! (and, on a primary, write replies; on a follower it is what the primary reports
//! acknowledged): a call reads from `from` through `min(to, acked)` and answers `next` = one
//! past the last record it read. When `acked` is below `from` it waits for it, at most
//! `REPLAY_ACK_WAIT`, and if it did not get there answers no events with `next == from`: the
//! front asks again (`subscriptions/watch.rs`).
//!
//! Why this leaves no gap and no duplicate: the split between replay and live pushes does not
//! move. `Subscribe` registers the subscription at the head H (no await in between), so every
//! entry past H is published to it as a live push, held on the shard until acknowledged and
//! on the front until this shard's replay is done (`Sub::go_live`); entries through H reach it
//! only by replay. The replay still covers exactly `(start, H]`: each call starts where the
//! last one's `next` says and `next` moves only past records read, so each offset is read once,
//! in order, whenever `acked` reaches it; only the timing changes. (Stopping the replay at
//! `acked` and letting the hold cover the rest cannot work: the entries between `acked` and H
//! were published before the subscription existed, so no held push of them names it.)
//!
//! A `slots_moved_out` entry (the source's side of a switch, docs/cluster.md "Subscriptions")
//! replays as the `slots_moved` push its live publication gave, at its own offset, to the
//! subscriptions that covered its slots: the split at H holds for it as for events, so a
//! subscription hears it once, live (entry past H) or replayed (through H).
//!
//! Bounds: each call waits at most `REPLAY_ACK_WAIT`, and the front asks again only while the
//! subscription lives. If acknowledgements never come (replicas gone) the subscriber gets
//! nothing past `acked`, as with held pushes; meanwhile its live pushes wait in the front's
//! held buffer (`subscriptions.queue_max`, then `subscription_lagged`) and on the shard
//! (`PUSHES_HELD_MAX`). Past the lease, or once demoted, a read fails, waiting or not
//! (`NO_PRIMARY`), and the front ends the subscription `subscription_lagged` after what it
//! delivered, as a demotion ends those with held pushes. A new term starts with `acked` at 0, so entries of
//! earlier terms replay once a replica acknowledged something of this one. A follower waits
//! the same way for its primary's reports, and does not fail. Standalone servers and async
//! mode replay what is durable.

use std::time::Duration;

use shards::engine::Entry;
use shards::wal::WalError;
use shards::{ErrorCode, Rejection};

use super::message::ReplyBody;
use super::pushed::Pushed;
use super::runtime::Shard;
use super::subs::{Filter, SlotsMoved, REPLAY_CHUNK_RECORDS_MAX};

/// Payload bytes one `ReadEvents` call reads at most (the first record always comes back).
const REPLAY_CHUNK_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Records decoded between two `yield_if_needed` checks during a replay read.
const REPLAY_YIELD_EVERY: usize = 128;
/// How long one replay read waits for replicas to acknowledge its first record (HA sync mode)
/// before answering "nothing yet": bounds the call, so the front sees a subscription that
/// ended, and shutdown a reader in flight, within it (the front then asks again).
const REPLAY_ACK_WAIT: Duration = Duration::from_millis(200);

/// One event read back: (offset, epoch, push body).
type Replayed = (u64, u64, Vec<u8>);

/// Reads up to `max` log records from `from` (no further than `to`, nor past the sync
/// acknowledgement where pushes wait for it), once durable, and returns the events that pass
/// `filter` as replayed push bodies, with the offset to continue from.
pub(super) async fn read_events(
    shard: &Shard,
    filter: &Filter,
    from: u64,
    to: u64,
    max: usize,
) -> Result<ReplyBody, Rejection> {
    let from = from.max(1);
    let max = max.clamp(1, REPLAY_CHUNK_RECORDS_MAX);
    let nothing = ReplyBody::Events {
        events: Vec::new(),
        next: from,
    };
    if from > to {
        return Ok(nothing);
    }
    let Some(to) = deliverable_through(shard, from, to).await? else {
        return Ok(nothing); // nothing acknowledged at `from` yet: the front asks again
    };
    let last = to.min(from + max as u64 - 1);
    shard.log.wait_durable(last).await?;
    let count = (last - from + 1) as usize; // at most `max`: `from <= last < from + max`
    let records = shard
        .log
        .wal()
        .read_from(from, count, REPLAY_CHUNK_BYTES_MAX)
        .await
        .map_err(|e| read_failure(shard.index, e))?;
    if records.is_empty() {
        let msg = format!("no durable log records at offset {from} (durable through {last})");
        return Err(Rejection::new(ErrorCode::InternalError, msg));
    }
    let (events, next) = matching(shard, filter, &records, from, to).await?;
    Ok(ReplyBody::Events { events, next })
}

/// The events of `records` (read from `from`) through `to` that pass `filter`, and the offset
/// after the last record looked at.
async fn matching(
    shard: &Shard,
    filter: &Filter,
    records: &[(u64, Vec<u8>)],
    from: u64,
    to: u64,
) -> Result<(Vec<Replayed>, u64), Rejection> {
    let mut events = Vec::new();
    let mut next = from;
    for (i, (offset, payload)) in records.iter().enumerate() {
        if *offset > to {
            break;
        }
        next = offset + 1;
        if i % REPLAY_YIELD_EVERY == REPLAY_YIELD_EVERY - 1 {
            glommio::yield_if_needed().await;
        }
        if !Entry::record_may_push(payload) && !Entry::record_is_batch(payload) {
            continue;
        }
        let entry = Entry::decode(payload).map_err(|e| {
            let msg = format!("log entry at offset {offset} does not decode: {e}");
            Rejection::new(ErrorCode::InternalError, msg)
        })?;
        if let Some(moved) = SlotsMoved::of(&entry).filter(|m| m.covers(filter)) {
            // The switch, where the live pushes have it: a resumed subscription hears it too.
            let epoch = shard.engine.borrow().epoch_of(*offset);
            events.push((*offset, epoch, moved.body()));
            continue;
        }
        // An atomic batch's events all carry its one offset, in order.
        let inner = match &entry {
            Entry::Batch { entries } => entries.as_slice(),
            single => std::slice::from_ref(single),
        };
        for e in inner {
            if let Some(ev) = Pushed::of(e).filter(|ev| ev.matches(filter)) {
                // An instance's events from before its latest import here were its old
                // owner's stream (docs/cluster.md, "Subscriptions"): left out.
                if (shard.engine.borrow()).before_move_in(ev.instance_id(), *offset) {
                    continue;
                }
                let epoch = shard.engine.borrow().epoch_of(*offset);
                let group = shard.subs.cluster_group.as_deref();
                events.push((*offset, epoch, ev.body_in(None, true, group)));
            }
        }
    }
    Ok((events, next))
}

/// How far a replay read from `from` may deliver: `to`, or on a member whose pushes wait for
/// sync acknowledgement no further than the acknowledged offset (see the module docs); `None`
/// when that is still below `from` after `REPLAY_ACK_WAIT`. On a primary it fails past the
/// lease or once demoted during the wait, where held pushes are dropped.
async fn deliverable_through(shard: &Shard, from: u64, to: u64) -> Result<Option<u64>, Rejection> {
    let member = &*shard.member;
    let Some(sync) = shard.sync.as_ref() else {
        return Ok(Some(to));
    };
    if !shard.subs.holds_local() {
        return Ok(Some(to));
    }
    if member.is_replica() {
        // A follower: through the offset its primary reports acknowledged, as it pushes.
        let acked = sync.acked_within(from, REPLAY_ACK_WAIT, || false).await;
        return Ok((acked >= from).then(|| to.min(acked)));
    }
    let stop = || member.is_replica() || member.fenced();
    let acked = sync.acked_within(from, REPLAY_ACK_WAIT, stop).await;
    if stop() {
        let msg = "this member lost its primary lease: the replay stops where its held pushes do";
        return Err(Rejection::new(ErrorCode::NoPrimary, msg).with("epoch", member.epoch()));
    }
    Ok((acked >= from).then(|| to.min(acked)))
}

/// How a failed replay read reaches the front. A trimmed offset names the oldest one left.
fn read_failure(shard: u32, e: WalError) -> Rejection {
    match e {
        WalError::Trimmed { requested, oldest } => trimmed(shard, requested, oldest),
        other => {
            log::error!("shard {shard}: replay read failed: {other}");
            Rejection::new(ErrorCode::InternalError, "reading the log failed")
        }
    }
}

/// The error for a replay that starts before the oldest retained log offset.
pub fn trimmed(shard: u32, requested: u64, oldest: u64) -> Rejection {
    Rejection::new(
        ErrorCode::BadRequest,
        format!(
            "offset {requested} of shard {shard} is no longer retained; \
             the oldest available offset of shard {shard} is {oldest}"
        ),
    )
    .with("shard", shard)
    .with("requested_offset", requested)
    .with("oldest_offset", oldest)
}
