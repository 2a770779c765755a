//! The barrier that fixes a backup's cut (docs/backup.md, "The cut"): every shard is asked to
//! pause (`ShardCall::BackupPause`); each stops executing requests, lets its in-flight group
//! commit become durable and answers its head; once all have answered, all resume. A write
//! acknowledged on shard A before a write was sent to shard B was executed on A before A
//! paused, so it is in A's cut whenever the later one is in B's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shards::{ErrorCode, Rejection};

use crate::mesh::router::Router;
use crate::shard::pause::{BackupCut, BackupRelease};
use crate::shard::{ReplyBody, ShardCall};

/// The longest the shards stay paused: after it they resume by themselves and the backup fails
/// with a retryable error. A pause normally lasts one group commit plus the fan-out.
pub const BACKUP_PAUSE_TIMEOUT: Duration = Duration::from_millis(2000);

/// Pauses every shard, collects its cut, resumes them all. Logs the pause's length.
pub async fn take(router: &Router) -> Result<Vec<BackupCut>, Rejection> {
    let release = Arc::new(BackupRelease::default());
    let started = Instant::now();
    let mut slots = Vec::new();
    for shard in 0..router.shard_count() {
        let call = ShardCall::BackupPause {
            release: release.clone(),
            timeout: BACKUP_PAUSE_TIMEOUT,
        };
        slots.push(router.start(shard, call).await);
    }
    let mut cuts = Vec::with_capacity(slots.len());
    let mut failure = None;
    for slot in slots {
        let left = BACKUP_PAUSE_TIMEOUT.saturating_sub(started.elapsed());
        let reply = futures_lite::future::or(async { Some(slot.wait().await) }, async {
            glommio::timer::sleep(left).await;
            None
        })
        .await;
        match reply {
            Some(Ok(ReplyBody::BackupCut(cut))) => cuts.push(*cut),
            Some(Ok(_)) => failure = Some(internal("unexpected reply to BackupPause")),
            Some(Err(rej)) => failure = Some(rej),
            None => failure = Some(timed_out()),
        }
        if failure.is_some() {
            break;
        }
    }
    release.release();
    let paused = started.elapsed();
    if let Some(rej) = failure {
        log::warn!(
            "backup: no cut after {} ms: {}",
            paused.as_millis(),
            rej.message
        );
        return Err(rej);
    }
    let heads: Vec<u64> = cuts.iter().map(|c| c.head).collect();
    log::info!(
        "backup: cut at {heads:?}; shards paused {} us",
        paused.as_micros()
    );
    Ok(cuts)
}

fn timed_out() -> Rejection {
    Rejection::new(
        ErrorCode::InternalError,
        format!(
            "backup: the shards did not all reach the barrier within {} ms; they resumed, try again",
            BACKUP_PAUSE_TIMEOUT.as_millis()
        ),
    )
}

fn internal(msg: &str) -> Rejection {
    Rejection::new(ErrorCode::InternalError, msg.to_string())
}
