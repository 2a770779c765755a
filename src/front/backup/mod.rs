//! `BACKUP {}` (docs/backup.md, "Taking a backup"): an online backup of every shard, served on
//! the front that holds the connection. One entry point, `open`: it fixes one cut for all
//! shards behind a barrier (`cut`), answers the request with the cut, then streams per shard
//! the pinned snapshot and the log after it up to exactly the cut (`stream`), and ends. A
//! backup never acknowledges anything, never counts toward sync replication and is not a
//! replica: it lives only on its connection. Dropping the stream (the end, an error, a client
//! that disconnects) drops the pins (`LogPin`), and compaction goes on.
//!
//! Why on the front and not the control executor: the control executor hears from the fronts
//! only through the replication relay, which exists only with `replication.role` set, and a
//! backup must work on a standalone server. The reads are the replica's (`LogReader`: own
//! files, never on a shard's commit path); the front pays their CPU.

mod cut;
mod stream;

use std::rc::Rc;

use serde::{Deserialize, Serialize};
use shards::Rejection;

use crate::front::connection::{Conn, Pending};
use crate::front::executor::Front;
use crate::mesh::router::ReplySlot;
use crate::shard::ReplyBody;
use crate::util::slot::Slot;

/// `BACKUP` params: none yet (`{}` or absent).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackupParams {}

/// `BACKUP`'s result, sent before the stream: the cut.
#[derive(Debug, Serialize)]
struct BackupResult {
    epoch: u64,
    shards: u32,
    server_version: &'static str,
    /// Per shard, the offset the backup holds the log up to.
    positions: std::collections::BTreeMap<String, u64>,
    /// Per shard, the snapshot the stream starts from (0: none; the log from offset 1).
    snapshots: std::collections::BTreeMap<String, u64>,
}

/// Serves `BACKUP` on `conn`: takes the cut and returns the response (filled) and the stream.
/// The caller queues the response, then spawns the stream, so no stream frame can precede
/// the response (an empty server's stream is a lone `end` frame, sent without a pause). The
/// connection carries nothing else afterwards; it closes when the stream ends.
pub async fn open(
    front: &Rc<Front>,
    conn: &Rc<Conn>,
    params: Option<&[u8]>,
) -> Result<(ReplySlot, impl std::future::Future<Output = ()>), Rejection> {
    let _: BackupParams = crate::ops::params::parse(params)?;
    let cuts = cut::take(&front.router).await?;
    let positions: Vec<u64> = cuts.iter().map(|c| c.head).collect();
    let snapshots: Vec<u64> = cuts.iter().map(|c| c.pin.offset()).collect();
    let epoch = front.info.replication.epoch();
    let result = BackupResult {
        epoch,
        shards: front.router.shard_count(),
        server_version: env!("CARGO_PKG_VERSION"),
        positions: crate::protocol::stream::positions_map(&positions),
        snapshots: crate::protocol::stream::positions_map(&snapshots),
    };
    let body = serde_json::to_vec(&result)
        .map_err(|e| Rejection::new(shards::ErrorCode::InternalError, e.to_string()))?;
    let slot = Slot::new();
    slot.fill(Ok(ReplyBody::Json(body)));
    Ok((slot, stream::run(conn.clone(), cuts, epoch)))
}

/// CPU shares of a backup's stream on its front (the default queue, where the front decodes,
/// routes and answers requests, has 1000): the stream's reads and encoding get what the
/// requests leave, so a backup slows the load it runs beside as little as it can.
const STREAM_SHARES: usize = 100;

/// Runs a backup's stream (from `open`) in the front's backup task queue, made on first use.
/// False if it could not be spawned (the stream is dropped; the caller closes the connection).
pub fn spawn(stream: impl std::future::Future<Output = ()> + 'static) -> bool {
    use glommio::{Latency, Shares};
    thread_local! {
        static QUEUE: std::cell::Cell<Option<glommio::TaskQueueHandle>> =
            const { std::cell::Cell::new(None) };
    }
    let queue = QUEUE.with(|q| {
        if let Some(queue) = q.get() {
            return queue;
        }
        let queue = glommio::executor().create_task_queue(
            Shares::Static(STREAM_SHARES),
            Latency::NotImportant,
            "backup",
        );
        q.set(Some(queue));
        queue
    });
    match glommio::spawn_local_into(stream, queue) {
        Ok(task) => {
            task.detach();
            true
        }
        Err(e) => {
            log::warn!("backup: cannot start the stream: {e}");
            false
        }
    }
}

/// Queues `bytes` on the connection once it has room for them; false when the client is gone.
async fn send(conn: &Conn, bytes: Vec<u8>) -> bool {
    if !conn.wait_room(stream::QUEUED_FRAMES_MAX).await {
        return false;
    }
    conn.push(Pending::Frame(bytes));
    true
}
