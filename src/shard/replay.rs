//! Replay reads for subscriptions (`ShardCall::ReadEvents`): matching events read back from
//! the log, as replayed push bodies with their offsets and epochs. Runs in the registry's
//! low-share replay task queue (`subs.rs`); never touches the engine but for epochs.

use shards::engine::Entry;
use shards::wal::WalError;
use shards::{ErrorCode, Rejection};

use super::message::ReplyBody;
use super::runtime::Shard;
use super::subs::{EventView, Filter, REPLAY_CHUNK_RECORDS_MAX};

/// Payload bytes one `ReadEvents` call reads at most (the first record always comes back).
const REPLAY_CHUNK_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Records decoded between two `yield_if_needed` checks during a replay read.
const REPLAY_YIELD_EVERY: usize = 128;

/// Reads up to `max` log records from `from` (no further than `to`), once durable, and returns
/// the events that pass `filter` as replayed push bodies, with the offset to continue from.
pub(super) async fn read_events(
    shard: &Shard,
    filter: &Filter,
    from: u64,
    to: u64,
    max: usize,
) -> Result<ReplyBody, Rejection> {
    let from = from.max(1);
    let max = max.clamp(1, REPLAY_CHUNK_RECORDS_MAX);
    if from > to {
        return Ok(ReplyBody::Events {
            events: Vec::new(),
            next: from,
        });
    }
    let last = to.min(from + max as u64 - 1);
    shard.log.wait_durable(last).await?;
    let records = shard
        .log
        .wal()
        .read_from(from, max, REPLAY_CHUNK_BYTES_MAX)
        .await
        .map_err(|e| read_failure(shard.index, e))?;
    if records.is_empty() {
        let msg = format!("no durable log records at offset {from} (durable through {last})");
        return Err(Rejection::new(ErrorCode::InternalError, msg));
    }
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
        if !Entry::record_is_event(payload) && !Entry::record_is_batch(payload) {
            continue;
        }
        let entry = Entry::decode(payload).map_err(|e| {
            let msg = format!("log entry at offset {offset} does not decode: {e}");
            Rejection::new(ErrorCode::InternalError, msg)
        })?;
        // An atomic batch's events all carry its one offset, in order.
        let inner = match &entry {
            Entry::Batch { entries } => entries.as_slice(),
            single => std::slice::from_ref(single),
        };
        for e in inner {
            if let Some(ev) = EventView::of(e).filter(|ev| filter.matches(ev)) {
                let epoch = shard.engine.borrow().epoch_of(*offset);
                events.push((*offset, epoch, ev.body(None, true)));
            }
        }
    }
    Ok(ReplyBody::Events { events, next })
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
