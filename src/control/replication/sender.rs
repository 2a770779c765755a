//! One replica's stream on the primary (control executor): reads each shard's log through a
//! `LogReader` of its own (never on a shard's commit path), sends durable entries in order,
//! a snapshot first where the replica's position was compacted away, and heartbeats. Flow
//! control: at most `replication.fanout_max` entries sent and not yet acknowledged (the
//! replica's fan-out queue); a replica that keeps it full with no ack for two heartbeats is
//! disconnected and counted (docs/replication.md), and catches up when it reconnects.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use shards::wal::{LogHandle, LogReader, SnapshotStream, WalError};

use super::error::ReplError;
use super::hub::Hub;
use crate::config::ReplicationMode;
use crate::member::ReplState;
use crate::mesh::relay::Down;
use crate::protocol::stream;
use crate::util::notify::Notify;
use crate::util::time::now_ms;

/// How often an idle stream looks for newly durable entries.
const POLL: Duration = Duration::from_millis(1);

/// One connected replica.
pub struct Link {
    pub id: u64,
    pub front: usize,
    pub replica_id: String,
    /// Snapshot formats the replica reads (`REPLICATE`'s `snapshot_versions`).
    snapshot_versions: Vec<u32>,
    /// Durable on the replica, per shard.
    acked: RefCell<Vec<u64>>,
    /// Per shard, the offset of a snapshot sent: flow control counts entries after it only.
    floor: RefCell<Vec<u64>>,
    last_ack: Cell<Instant>,
    wake: Notify,
    stopped: Cell<bool>,
}

impl Link {
    pub fn new(
        id: u64,
        front: usize,
        replica_id: String,
        start: &[u64],
        snapshot_versions: Vec<u32>,
    ) -> Link {
        Link {
            id,
            front,
            replica_id,
            snapshot_versions,
            acked: RefCell::new(start.to_vec()),
            floor: RefCell::new(vec![0; start.len()]),
            last_ack: Cell::new(Instant::now()),
            wake: Notify::default(),
            stopped: Cell::new(false),
        }
    }

    /// Something for the replica besides its own acknowledgement: the sender looks again now.
    pub fn nudge(&self) {
        self.wake.notify();
    }

    pub fn stop(&self) {
        self.stopped.set(true);
        self.wake.notify();
    }

    pub fn acked_at(&self, shard: usize) -> u64 {
        self.acked.borrow().get(shard).copied().unwrap_or(0)
    }

    fn floor_at(&self, shard: usize) -> u64 {
        self.floor.borrow().get(shard).copied().unwrap_or(0)
    }

    pub fn record_ack(&self, positions: &[u64], state: &ReplState) {
        let mut acked = self.acked.borrow_mut();
        let mut moved = false;
        for (a, p) in acked.iter_mut().zip(positions) {
            if *p > *a {
                *a = *p;
                moved = true;
            }
        }
        if moved {
            self.last_ack.set(Instant::now());
        }
        if let Ok(mut r) = state.stats.replicas.lock() {
            if let Some(view) = r.get_mut(&self.replica_id) {
                view.acked.clone_from(&acked);
            }
        }
        self.wake.notify();
    }
}

/// Streams to `link` until it stops, its connection ends or it is too slow.
pub async fn run(hub: Rc<Hub>, link: Rc<Link>, handles: Vec<LogHandle>) {
    let mut readers: Vec<LogReader> = handles.iter().map(LogHandle::reader).collect();
    let mut next: Vec<u64> = link.acked.borrow().iter().map(|a| a + 1).collect();
    let why = stream(&hub, &link, &mut readers, &mut next).await;
    if !link.stopped.get() {
        log::warn!("replica {}: disconnecting: {why}", link.replica_id);
        hub.down(link.front, Down::Close { link: link.id }).await;
    } else {
        log::info!("replica {}: stream ended", link.replica_id);
    }
    hub.remove_link(link.id);
}

async fn stream(hub: &Hub, link: &Link, readers: &mut [LogReader], next: &mut [u64]) -> ReplError {
    let max = hub.settings.fanout_max;
    let mut last_beat: Option<Instant> = None;
    // Failover, sync mode: the acknowledged offsets the replica was last told.
    let mut told: Option<Vec<u64>> = None;
    while !link.stopped.get() {
        let room = max.saturating_sub(in_flight(link, next));
        let mut out = Vec::new();
        let sent = match read_entries(hub, link, readers, next, room, &mut out).await {
            Ok(sent) => sent,
            Err(e) => return e,
        };
        update_lag(hub, link, readers);
        // A heartbeat when one is due, and at once when the acknowledged offset moved: the
        // replica's subscribers wait for it. It rides with the entries, after them.
        let committed = hub.committed();
        if last_beat.is_none_or(|t| t.elapsed() >= hub.settings.heartbeat) || committed != told {
            let heads: Vec<u64> = readers.iter().map(LogReader::durable).collect();
            let epoch = hub.state.epoch();
            stream::heartbeat_frame(&mut out, epoch, &heads, committed.as_deref(), now_ms());
            last_beat = Some(Instant::now());
            told = committed;
        }
        if !out.is_empty() {
            if let Err(e) = send(hub, link, out).await {
                return e;
            }
            hub.state.stats.entries_sent.fetch_add(sent, Relaxed);
        }
        if let Err(e) = pace(hub, link, room.saturating_sub(sent), sent).await {
            return e;
        }
    }
    ReplError::Stopped
}

/// Entries sent to the replica and not yet acknowledged, over all shards.
fn in_flight(link: &Link, next: &[u64]) -> u64 {
    next.iter()
        .enumerate()
        .map(|(s, n)| (n - 1).saturating_sub(link.acked_at(s).max(link.floor_at(s))))
        .sum()
}

/// Reads up to `room` durable entries past `next` into `entries` frames (a shard whose
/// position was trimmed gets its snapshot first). Returns how many entries it framed.
async fn read_entries(
    hub: &Hub,
    link: &Link,
    readers: &mut [LogReader],
    next: &mut [u64],
    mut room: u64,
    out: &mut Vec<u8>,
) -> Result<u64, ReplError> {
    let mut sent = 0u64;
    for (shard, reader) in readers.iter_mut().enumerate() {
        if room == 0 {
            break;
        }
        if next[shard] > reader.durable() {
            continue;
        }
        let want = (room as usize).min(stream::ENTRIES_PER_FRAME_MAX);
        match reader
            .read_from(next[shard], want, stream::ENTRY_BYTES_PER_FRAME_MAX)
            .await
        {
            Ok(records) if records.is_empty() => {}
            Ok(records) => {
                if records[0].0 != next[shard] {
                    let why = format!("log read gave offset {} for {}", records[0].0, next[shard]);
                    return Err(ReplError::shard(shard, why));
                }
                let first = next[shard];
                let bodies: Vec<Vec<u8>> = records.into_iter().map(|(_, b)| b).collect();
                let epoch = hub.state.epoch();
                stream::entries_frame(out, shard as u32, epoch, first, now_ms(), &bodies);
                next[shard] += bodies.len() as u64;
                sent += bodies.len() as u64;
                room = room.saturating_sub(bodies.len() as u64);
            }
            Err(WalError::Trimmed { oldest, .. }) => {
                let at = send_snapshot(hub, link, reader, shard, oldest).await?;
                next[shard] = at + 1;
                link.floor.borrow_mut()[shard] = at;
                link.last_ack.set(Instant::now());
            }
            Err(e) => return Err(ReplError::shard(shard, format!("reading the log: {e}"))),
        }
    }
    Ok(sent)
}

/// Hands encoded frames to the front that holds the replica's connection.
async fn send(hub: &Hub, link: &Link, bytes: Vec<u8>) -> Result<(), ReplError> {
    let frames = Down::Frames {
        link: link.id,
        bytes,
    };
    match hub.down(link.front, frames).await {
        true => Ok(()),
        false => Err(ReplError::FrontGone),
    }
}

/// Waits before the next read: for an ack when the window is full (too long without one is
/// too slow), for entries to gather when caught up in async mode.
async fn pace(hub: &Hub, link: &Link, room: u64, sent: u64) -> Result<(), ReplError> {
    let beat = hub.settings.heartbeat;
    if room == 0 {
        if link.last_ack.get().elapsed() >= beat * 2 {
            hub.state
                .stats
                .slow_replica_disconnects
                .fetch_add(1, Relaxed);
            return Err(ReplError::TooSlow {
                fanout_max: hub.settings.fanout_max,
                ms: (beat * 2).as_millis(),
            });
        }
        wait(link, beat / 4).await;
    } else if hub.settings.mode == ReplicationMode::Async
        && (sent as usize) < stream::ENTRIES_PER_FRAME_MAX
    {
        // Caught up, async: let entries gather for one poll interval instead of waking at
        // every replica ack, so a busy primary sends frames of many entries, not one frame
        // (a log read, a hop to the front, a socket write) per ack. Adds at most POLL to
        // the replica's lag; sync mode keeps waking at acks, its writes wait for them.
        glommio::timer::sleep(POLL).await;
    } else if sent == 0 {
        wait(link, POLL).await;
    }
    Ok(())
}

async fn wait(link: &Link, at_most: Duration) {
    futures_lite::future::or(link.wake.wait(), glommio::timer::sleep(at_most)).await;
}

/// The replica's lag in entries (durable here, not acknowledged there).
fn update_lag(hub: &Hub, link: &Link, readers: &[LogReader]) {
    let lag: u64 = readers
        .iter()
        .enumerate()
        .map(|(s, r)| r.durable().saturating_sub(link.acked_at(s)))
        .sum();
    if let Ok(mut r) = hub.state.stats.replicas.lock() {
        if let Some(view) = r.get_mut(&link.replica_id) {
            view.lag_entries = lag;
            if lag == 0 {
                view.live = true;
            }
        }
    }
}

/// The replica needs entries older than the oldest one kept: send the newest snapshot of
/// `shard` in parts, read from its file as they go (`SnapshotStream`: at most two parts in
/// memory); the stream continues after its offset. Returns that offset. A snapshot in a format
/// the replica does not read is refused, naming both (an `error` frame tells the replica).
async fn send_snapshot(
    hub: &Hub,
    link: &Link,
    reader: &mut LogReader,
    shard: usize,
    oldest: u64,
) -> Result<u64, ReplError> {
    let snap = reader
        .newest_snapshot_stream()
        .await
        .map_err(|e| ReplError::shard(shard, format!("reading the snapshot: {e}")))?;
    let Some(mut snap) = snap else {
        return Err(ReplError::shard(shard, format!(
            "the replica needs entries before offset {oldest}, which were compacted, and there is no snapshot"
        )));
    };
    let sent = send_parts(hub, link, &mut snap, shard, oldest).await;
    let closed = snap
        .close()
        .await
        .map_err(|e| ReplError::shard(shard, e.to_string()));
    sent.and_then(|offset| closed.map(|()| offset))
}

async fn send_parts(
    hub: &Hub,
    link: &Link,
    snap: &mut SnapshotStream,
    shard: usize,
    oldest: u64,
) -> Result<u64, ReplError> {
    usable(hub, link, snap, shard, oldest).await?;
    let offset = snap.offset();
    log::info!(
        "replica {}: shard {shard}: sending the snapshot at offset {offset} ({} bytes, format {}): its position was compacted away",
        link.replica_id,
        snap.len(),
        snap.version()
    );
    let info = stream::SnapshotInfo {
        shard: shard as u32,
        epoch: hub.state.epoch(),
        offset,
        version: snap.version(),
        bytes: snap.len(),
        crc: snap.crc(),
    };
    send_part_frames(hub, link, snap, &info, shard).await?;
    Ok(offset)
}

/// Refuses a snapshot the replica cannot start from: older than the oldest entry kept, or in
/// a format it does not read (an `error` frame tells the replica).
async fn usable(
    hub: &Hub,
    link: &Link,
    snap: &SnapshotStream,
    shard: usize,
    oldest: u64,
) -> Result<(), ReplError> {
    let offset = snap.offset();
    if offset + 1 < oldest {
        return Err(ReplError::shard(
            shard,
            format!(
            "the newest snapshot (offset {offset}) is older than the oldest entry kept ({oldest})"
        ),
        ));
    }
    if !link.snapshot_versions.contains(&snap.version()) {
        let why = ReplError::shard(
            shard,
            format!(
                "the replica needs the snapshot at offset {offset}, which is in snapshot \
                 format {}, and it reads formats {:?} only: upgrade replicas first",
                snap.version(),
                link.snapshot_versions
            ),
        );
        let mut out = Vec::new();
        stream::error_frame(&mut out, hub.state.epoch(), &why.to_string());
        let _ = send(hub, link, out).await;
        return Err(why);
    }
    Ok(())
}

/// The snapshot's bytes in `SNAPSHOT_PART_BYTES` parts, one frame each, the last one marked.
async fn send_part_frames(
    hub: &Hub,
    link: &Link,
    snap: &mut SnapshotStream,
    info: &stream::SnapshotInfo,
    shard: usize,
) -> Result<(), ReplError> {
    let read = |e| ReplError::shard(shard, format!("reading the snapshot: {e}"));
    let mut next = snap
        .next_part(stream::SNAPSHOT_PART_BYTES)
        .await
        .map_err(read)?;
    let mut part = 0u32;
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
        stream::snapshot_frame(&mut out, info, part, last, &data);
        send(hub, link, out).await?;
        link.last_ack.set(Instant::now());
        if last {
            return Ok(());
        }
        part += 1;
    }
}
