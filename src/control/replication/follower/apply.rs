//! The follower's stream once REPLICATE has answered: entries go to their shards in stream
//! order, snapshots are installed part by part, and acks report what is durable.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::error::{FollowError, StreamError};
use super::link::FrameReader;
use super::Settings;
use crate::control::replication::hub::Hub;
use crate::mesh::router::ReplySlot;
use crate::protocol::stream::{self, StreamFrame};
use crate::shard::{ReplyBody, ShardCall, SnapshotChunk};
use crate::util::notify::Notify;
use crate::util::time::now_ms;
use shards::wal::SNAPSHOT_VERSION_JSON;

/// Appends in flight to the shards, in stream order, and what the acker reports.
pub(super) struct Applier {
    pending: RefCell<VecDeque<(usize, ReplySlot)>>,
    positions: RefCell<Vec<u64>>,
    /// The `at_ms` of the newest applied entry that has one (lag in seconds).
    last_at_ms: std::cell::Cell<u64>,
    /// The primary's clock minus ours, from its latest heartbeat.
    skew_ms: std::cell::Cell<i64>,
    pub(super) wake: Notify,
    /// Set when the session must end (read error, or an append refused).
    pub(super) failed: RefCell<Option<FollowError>>,
    /// The primary's `ack_every_ms`: acks that only move positions come at most this often.
    pub(super) ack_every: std::time::Duration,
    /// Failover, sync mode: per shard, the acknowledged offset last passed to the shard.
    committed: RefCell<Vec<u64>>,
}

impl Applier {
    pub(super) fn new(positions: Vec<u64>) -> Applier {
        Applier {
            pending: RefCell::new(VecDeque::new()),
            positions: RefCell::new(positions),
            last_at_ms: std::cell::Cell::new(0),
            skew_ms: std::cell::Cell::new(0),
            wake: Notify::default(),
            failed: RefCell::new(None),
            ack_every: std::time::Duration::ZERO,
            committed: RefCell::new(Vec::new()),
        }
    }
}

/// Reads the stream until it ends; returns why it ended.
pub(super) async fn read_loop<R: AsyncRead + Unpin>(
    hub: &Rc<Hub>,
    cfg: &Settings,
    r: &mut FrameReader<R>,
    applier: &Rc<Applier>,
) -> FollowError {
    let silence = cfg.heartbeat * 3 + Duration::from_secs(2);
    let mut receiving: Option<Receiving> = None;
    let Err(ended) = read_frames(hub, cfg, r, applier, silence, &mut receiving).await;
    if let Some(rx) = receiving {
        // The stream broke inside a snapshot: the shard deletes what it received.
        let _ = hub
            .router
            .call(rx.shard, ShardCall::InstallSnapshot(SnapshotChunk::Abandon))
            .await;
    }
    ended
}

async fn read_frames<R: AsyncRead + Unpin>(
    hub: &Rc<Hub>,
    cfg: &Settings,
    r: &mut FrameReader<R>,
    applier: &Rc<Applier>,
    silence: Duration,
    receiving: &mut Option<Receiving>,
) -> Result<Infallible, FollowError> {
    let _ = cfg;
    loop {
        if let Some(e) = applier.failed.borrow().clone() {
            return Err(e);
        }
        let payload = r.next(silence).await?;
        let f: StreamFrame =
            serde_json::from_slice(&payload).map_err(|e| StreamError::BadFrame(e.to_string()))?;
        if f.kind_of == "response" {
            continue; // e.g. an answer to nothing we asked: ignore
        }
        if f.epoch < hub.state.epoch() {
            let (stream, seen) = (f.epoch, hub.state.epoch());
            return Err(StreamError::StaleEpoch { stream, seen }.into());
        }
        match f.kind.as_str() {
            "entries" => on_entries(hub, applier, &f).await?,
            "snapshot" => receive_snapshot(hub, applier, &f, receiving).await?,
            "error" => return Err(StreamError::PrimaryEnds(f.message).into()),
            "heartbeat" => {
                on_heartbeat(hub, applier, &f)?;
                on_committed(hub, applier, &f).await?;
            }
            other => return Err(StreamError::UnknownKind(other.to_string()).into()),
        }
    }
}

/// An `entries` frame goes to its shard (`ReplicaAppend`); the ack loop awaits the answer.
async fn on_entries(hub: &Hub, applier: &Applier, f: &StreamFrame) -> Result<(), StreamError> {
    let records = stream::decode_entries(f).map_err(|why| StreamError::Field {
        what: "entries",
        why,
    })?;
    let count = records.len() as u64;
    let call = ShardCall::ReplicaAppend {
        epoch: f.epoch,
        first: f.first,
        entries: records,
    };
    let slot = hub.router.start(f.shard, call).await;
    applier
        .pending
        .borrow_mut()
        .push_back((f.shard as usize, slot));
    applier.wake.notify();
    note_primary_head(hub, f.shard as usize, f.first + count - 1);
    Ok(())
}

/// A heartbeat: the primary's heads and clock (lag).
fn on_heartbeat(hub: &Hub, applier: &Applier, f: &StreamFrame) -> Result<(), StreamError> {
    let skew_ms = f.time_ms as i64 - now_ms() as i64;
    let heads = stream::positions_vec(&f.heads, hub.router.shard_count()).map_err(|why| {
        let what = "a heartbeat's heads";
        StreamError::Field { what, why }
    })?;
    if let Ok(mut v) = hub.state.stats.follower.lock() {
        v.primary_heads = heads;
        v.primary_epoch = f.epoch;
    }
    applier.skew_ms.set(skew_ms);
    update_lag(hub, applier);
    applier.wake.notify();
    Ok(())
}

/// A heartbeat's `committed` (a primary under failover in sync mode): each shard whose
/// acknowledged offset moved hears it (`ShardCall::ReplicaAcked`), and releases the pushes it
/// held for it (`shard/push_hold.rs`).
async fn on_committed(hub: &Hub, applier: &Applier, f: &StreamFrame) -> Result<(), StreamError> {
    let Some(map) = &f.committed else {
        return Ok(());
    };
    let committed = stream::positions_vec(map, hub.router.shard_count()).map_err(|why| {
        let what = "a heartbeat's committed";
        StreamError::Field { what, why }
    })?;
    let moved: Vec<(u32, u64)> = {
        let mut told = applier.committed.borrow_mut();
        told.resize(committed.len(), 0);
        (told.iter_mut().zip(&committed).enumerate())
            .filter(|(_, (t, c))| **c > **t)
            .map(|(shard, (t, c))| {
                *t = *c;
                (shard as u32, *c)
            })
            .collect()
    };
    for (shard, through) in moved {
        // Fire and forget: the shard answers at once; nobody needs the reply.
        drop(
            hub.router
                .start(shard, ShardCall::ReplicaAcked { through })
                .await,
        );
    }
    Ok(())
}

fn note_primary_head(hub: &Hub, shard: usize, offset: u64) {
    if let Ok(mut v) = hub.state.stats.follower.lock() {
        if let Some(h) = v.primary_heads.get_mut(shard) {
            *h = (*h).max(offset);
        }
    }
}

/// A snapshot being received: its shard, offset and the next part expected.
struct Receiving {
    shard: u32,
    offset: u64,
    next: u32,
}

/// One `snapshot` frame: each part goes to the shard as it arrives (`SnapshotChunk`), so the
/// replica never holds the snapshot; the last one installs it. Part 0 first waits until every
/// append sent before it is done.
async fn receive_snapshot(
    hub: &Hub,
    applier: &Applier,
    f: &StreamFrame,
    receiving: &mut Option<Receiving>,
) -> Result<(), StreamError> {
    let data = stream::decode_data(f).map_err(|why| StreamError::Field {
        what: "snapshot data",
        why,
    })?;
    let shard = f.shard;
    if f.part == 0 {
        let before = hub.router.start(shard, ShardCall::LogPosition).await;
        drop(before.wait().await); // the shard has handled everything sent before
        let begin = SnapshotChunk::Begin {
            offset: f.offset,
            version: f.version.unwrap_or(SNAPSHOT_VERSION_JSON),
            len: f.bytes.unwrap_or(0),
        };
        install_call(hub, shard, f.offset, begin).await?;
        *receiving = Some(Receiving {
            shard,
            offset: f.offset,
            next: 0,
        });
    }
    match receiving.as_mut() {
        Some(rx) if rx.shard == shard && rx.offset == f.offset && rx.next == f.part => rx.next += 1,
        _ => {
            let part = f.part;
            return Err(StreamError::SnapshotOutOfOrder { shard, part });
        }
    }
    install_call(hub, shard, f.offset, SnapshotChunk::Part(data)).await?;
    if !f.last {
        return Ok(());
    }
    *receiving = None;
    log::info!(
        "replication: shard {shard}: installing the primary's snapshot at offset {} ({} bytes)",
        f.offset,
        f.bytes.map_or("?".into(), |b| b.to_string())
    );
    install_call(hub, shard, f.offset, SnapshotChunk::End { crc: f.crc }).await?;
    applier.positions.borrow_mut()[shard as usize] = f.offset;
    applier.wake.notify();
    Ok(())
}

/// One part of the snapshot at `offset` to shard `shard`.
async fn install_call(
    hub: &Hub,
    shard: u32,
    offset: u64,
    chunk: SnapshotChunk,
) -> Result<(), StreamError> {
    (hub.router
        .call(shard, ShardCall::InstallSnapshot(chunk))
        .await)
        .map(drop)
        .map_err(|r| StreamError::Install {
            shard,
            offset,
            why: r.message,
        })
}

fn update_lag(hub: &Hub, applier: &Applier) {
    let skew_ms = applier.skew_ms.get();
    let positions = applier.positions.borrow().clone();
    if let Ok(mut v) = hub.state.stats.follower.lock() {
        let lag: u64 = v
            .primary_heads
            .iter()
            .zip(&positions)
            .map(|(h, p)| h.saturating_sub(*p))
            .sum();
        v.lag_entries = lag;
        v.lag_seconds = if lag == 0 || applier.last_at_ms.get() == 0 {
            0.0
        } else {
            let primary_now = now_ms() as i64 + skew_ms;
            (primary_now - applier.last_at_ms.get() as i64).max(0) as f64 / 1000.0
        };
        v.positions = positions;
    }
}

/// Awaits the shards' replies in stream order and acks what is durable.
pub(super) async fn ack_loop<W: AsyncWrite + Unpin>(
    hub: Rc<Hub>,
    applier: Rc<Applier>,
    mut w: W,
) -> Result<(), FollowError> {
    let mut acked: Vec<u64> = Vec::new();
    let mut sent_at = std::time::Instant::now();
    loop {
        if let Err(e) = await_applied(&applier).await {
            return fail(&applier, e.into());
        }
        if applier.failed.borrow().is_some() {
            return Ok(());
        }
        let positions = applier.positions.borrow().clone();
        // Ack what moved (at most once per `ack_every`), and at least once per heartbeat so
        // the primary knows we are here.
        let since = sent_at.elapsed();
        let moved = positions != acked;
        let due = since >= applier.ack_every;
        if (moved && due) || since >= hub.settings.heartbeat {
            let mut out = Vec::new();
            stream::ack_frame(&mut out, hub.state.epoch(), &positions);
            if w.write_all(&out).await.is_err() || w.flush().await.is_err() {
                return fail(&applier, StreamError::AckWrite.into());
            }
            acked = positions;
            sent_at = std::time::Instant::now();
            update_lag(&hub, &applier);
        }
        if moved && !due {
            // An ack is owed: come back when it is due (entries keep arriving meanwhile).
            glommio::timer::sleep(applier.ack_every - since).await;
        } else if applier.pending.borrow().is_empty() {
            futures_lite::future::or(
                applier.wake.wait(),
                glommio::timer::sleep(hub.settings.heartbeat),
            )
            .await;
        }
    }
}

/// Awaits the shards' answers to the entries sent so far, in stream order, and moves the
/// positions to ack.
async fn await_applied(applier: &Applier) -> Result<(), StreamError> {
    loop {
        let next = applier.pending.borrow_mut().pop_front();
        let Some((shard, slot)) = next else {
            return Ok(());
        };
        match slot.wait().await {
            Ok(ReplyBody::Replicated {
                through,
                last_at_ms,
            }) => {
                let mut positions = applier.positions.borrow_mut();
                positions[shard] = positions[shard].max(through);
                drop(positions);
                if last_at_ms > 0 {
                    applier.last_at_ms.set(last_at_ms);
                }
            }
            Ok(_) => {
                return Err(StreamError::UnexpectedReply {
                    call: "ReplicaAppend",
                })
            }
            Err(rej) => {
                return Err(StreamError::EntriesRefused {
                    shard,
                    code: rej.code,
                    message: rej.message,
                })
            }
        }
    }
}

fn fail(applier: &Applier, why: FollowError) -> Result<(), FollowError> {
    applier.failed.borrow_mut().get_or_insert(why.clone());
    Err(why)
}
