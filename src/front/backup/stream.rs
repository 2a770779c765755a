//! A backup's stream (docs/backup.md): per shard in order, the pinned snapshot in `snapshot`
//! frames (none when the shard has no snapshot), then the log records after it up to exactly
//! the cut in `entries` frames (the replication stream's frames, `protocol::stream`), then one
//! `end` frame with the positions. An `error` frame says why a stream stops early. The pins
//! go with the `BackupCut`s when this returns.

use std::rc::Rc;

use shards::wal::{LogReader, SnapshotStream};

use super::send;
use crate::front::connection::{Conn, Pending};
use crate::protocol::stream;
use crate::shard::pause::BackupCut;
use crate::util::time::now_ms;

/// Frames queued on the connection before the stream waits for the client to read (each at
/// most `stream::SNAPSHOT_PART_BYTES` of data as base64, or `ENTRY_BYTES_PER_FRAME_MAX`).
pub const QUEUED_FRAMES_MAX: usize = 8;
/// The most a backup reads and sends per second (snapshot and log, before base64). Its reads
/// bypass the page cache (O_DIRECT) and share the disk with the log's writes and fsyncs:
/// unpaced, a 190 MB backup ran at 90 MB/s here and the load beside it fell to 0.3x.
pub const BYTES_PER_SEC_MAX: u64 = 64 << 20;

/// Paces a backup's frames to `BYTES_PER_SEC_MAX` on average since the stream began.
struct Pace {
    started: std::time::Instant,
    bytes: std::cell::Cell<u64>,
}

impl Pace {
    /// Sends `frame` (carrying `data` bytes of snapshot or log) once the pace allows it.
    async fn send(&self, conn: &Conn, frame: Vec<u8>, data: u64) -> bool {
        let sent = self.bytes.get() + data;
        self.bytes.set(sent);
        let due = std::time::Duration::from_secs_f64(sent as f64 / BYTES_PER_SEC_MAX as f64);
        if let Some(wait) = due.checked_sub(self.started.elapsed()) {
            glommio::timer::sleep(wait).await;
        }
        send(conn, frame).await
    }
}

/// Streams every shard's part of the backup, then ends the connection.
pub async fn run(conn: Rc<Conn>, cuts: Vec<BackupCut>, epoch: u64) {
    let started = std::time::Instant::now();
    let pace = Pace {
        started,
        bytes: std::cell::Cell::new(0),
    };
    let mut bytes = 0u64;
    for (shard, cut) in cuts.iter().enumerate() {
        match shard_part(&conn, &pace, cut, shard as u32, epoch).await {
            Ok(n) => bytes += n,
            Err(why) => {
                log::warn!("backup: shard {shard}: {why}; the backup ends unfinished");
                let mut out = Vec::new();
                stream::error_frame(&mut out, epoch, &format!("shard {shard}: {why}"));
                let _ = send(&conn, out).await;
                conn.push(Pending::Close);
                return;
            }
        }
    }
    let heads: Vec<u64> = cuts.iter().map(|c| c.head).collect();
    let mut out = Vec::new();
    end_frame(&mut out, epoch, &heads);
    if send(&conn, out).await {
        log::info!(
            "backup: streamed to {heads:?} ({bytes} bytes of snapshot and log) in {} ms",
            started.elapsed().as_millis()
        );
    }
    conn.push(Pending::Close);
}

/// One shard: its snapshot, then its records up to the cut. Returns the bytes sent.
async fn shard_part(
    conn: &Conn,
    pace: &Pace,
    cut: &BackupCut,
    shard: u32,
    epoch: u64,
) -> Result<u64, String> {
    let mut reader = cut.handle.reader();
    let from = cut.pin.offset();
    let mut bytes = 0;
    if from > 0 {
        let snap = reader
            .snapshot_stream_at(from)
            .await
            .map_err(|e| format!("reading the snapshot at {from}: {e}"))?;
        let Some(mut snap) = snap else {
            return Err(format!("the pinned snapshot at {from} is not readable"));
        };
        let sent = snapshot_parts(conn, pace, &mut snap, shard, epoch).await;
        let closed = snap.close().await.map_err(|e| e.to_string());
        bytes += sent.and_then(|n| closed.map(|()| n))?;
    }
    bytes += records(conn, pace, &mut reader, from + 1, cut.head, shard, epoch).await?;
    Ok(bytes)
}

async fn snapshot_parts(
    conn: &Conn,
    pace: &Pace,
    snap: &mut SnapshotStream,
    shard: u32,
    epoch: u64,
) -> Result<u64, String> {
    let info = stream::SnapshotInfo {
        shard,
        epoch,
        offset: snap.offset(),
        version: snap.version(),
        bytes: snap.len(),
        crc: snap.crc(),
    };
    let read = |e| format!("reading the snapshot: {e}");
    let mut next = snap
        .next_part(stream::SNAPSHOT_PART_BYTES)
        .await
        .map_err(read)?;
    let (mut part, mut bytes) = (0u32, 0u64);
    loop {
        let data = next.take().unwrap_or_default();
        next = match data.is_empty() {
            true => None,
            false => snap
                .next_part(stream::SNAPSHOT_PART_BYTES)
                .await
                .map_err(read)?,
        };
        let last = next.is_none();
        let mut out = Vec::new();
        stream::snapshot_frame(&mut out, &info, part, last, &data);
        bytes += data.len() as u64;
        if !pace.send(conn, out, data.len() as u64).await {
            return Err("the client went away".into());
        }
        if last {
            return Ok(bytes);
        }
        part += 1;
    }
}

/// Records `from..=to`, in `entries` frames.
async fn records(
    conn: &Conn,
    pace: &Pace,
    reader: &mut LogReader,
    mut from: u64,
    to: u64,
    shard: u32,
    epoch: u64,
) -> Result<u64, String> {
    let mut bytes = 0;
    while from <= to {
        let want = ((to - from + 1) as usize).min(stream::ENTRIES_PER_FRAME_MAX);
        let records = reader
            .read_from(from, want, stream::ENTRY_BYTES_PER_FRAME_MAX)
            .await
            .map_err(|e| format!("reading the log at {from}: {e}"))?;
        match records.first() {
            Some((o, _)) if *o == from => {}
            Some((o, _)) => return Err(format!("the log gave offset {o} for {from}")),
            None => return Err(format!("the log ended before offset {from}")),
        }
        let bodies: Vec<Vec<u8>> = records.into_iter().map(|(_, b)| b).collect();
        let data = bodies.iter().map(|b| b.len() as u64).sum::<u64>();
        bytes += data;
        let mut out = Vec::new();
        stream::entries_frame(&mut out, shard, epoch, from, now_ms(), &bodies);
        from += bodies.len() as u64;
        if !pace.send(conn, out, data).await {
            return Err("the client went away".into());
        }
    }
    Ok(bytes)
}

/// The last frame: the backup is complete up to `heads`.
fn end_frame(out: &mut Vec<u8>, epoch: u64, heads: &[u64]) {
    let start = crate::protocol::frame::begin_frame(out);
    let body = serde_json::json!({
        "type": "stream",
        "kind": "end",
        "epoch": epoch,
        "positions": stream::positions_map(heads),
    });
    out.extend_from_slice(body.to_string().as_bytes());
    crate::protocol::frame::finish_frame(out, start);
}
