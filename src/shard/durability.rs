//! The shard's log: where entries get offsets and when they count as durable. A thin layer over
//! `shards::wal::Wal` that recovers the engine at open and turns log failures into wire codes.

use std::rc::Rc;

use shards::engine::{Engine, Replay};
use shards::wal::{LogHandle, Recovered, Wal, WalConfig, WalError, WalStats};
use shards::{ErrorCode, Rejection};

pub struct Durability {
    wal: Rc<Wal>,
}

impl Durability {
    /// Opens the shard's log and rebuilds `engine` from the newest snapshot and the entries
    /// after it. A corrupt log (anything but a torn tail) is an error naming file and offset.
    pub async fn open(cfg: WalConfig, engine: &mut Engine) -> Result<Durability, String> {
        let started = std::time::Instant::now();
        let mut replay = Replay::new();
        let mut on = |rec: Recovered<'_>| -> Result<(), String> {
            match rec {
                Recovered::Snapshot { offset, bytes } => {
                    replay.flush(engine)?;
                    *engine = Engine::restore(bytes)
                        .map_err(|e| format!("snapshot at offset {offset}: {e}"))?;
                }
                Recovered::Record { offset, payload } => replay.push(engine, offset, payload)?,
            }
            Ok(())
        };
        let wal = Wal::open(cfg, &mut on).await.map_err(|e| e.to_string())?;
        replay.flush(engine)?;
        let entries = replay.applied();
        log::info!(
            "shard recovered {entries} log entries in {:?}: {} instances, head offset {}",
            started.elapsed(),
            engine.instance_count(),
            wal.head_offset()
        );
        Ok(Durability { wal })
    }

    /// Buffers one entry for the next group commit and returns its offset.
    pub fn append(&self, payload: &[u8]) -> Result<u64, Rejection> {
        self.wal.append(payload).map_err(rejection)
    }

    pub fn head(&self) -> u64 {
        self.wal.head_offset()
    }

    pub fn durable(&self) -> u64 {
        self.wal.durable_offset()
    }

    pub async fn wait_durable(&self, offset: u64) -> Result<(), Rejection> {
        if offset <= self.wal.durable_offset() {
            return Ok(());
        }
        self.wal.wait_durable(offset).await.map_err(rejection)
    }

    pub fn stats(&self) -> WalStats {
        self.wal.stats()
    }

    pub fn wal(&self) -> &Rc<Wal> {
        &self.wal
    }

    /// The log's view for other executors (replication).
    pub fn handle(&self) -> LogHandle {
        self.wal.handle()
    }

    /// Flushes and syncs what is pending (graceful shutdown).
    pub async fn close(&self) {
        if let Err(e) = self.wal.close().await {
            log::error!("closing the log: {e}");
        }
    }
}

/// How a log failure reaches a client.
fn rejection(e: WalError) -> Rejection {
    match e {
        WalError::TooLarge { len, max } => Rejection::new(
            ErrorCode::BadRequest,
            format!("the log entry would be {len} bytes; the limit is {max}"),
        ),
        WalError::Closed => Rejection::new(ErrorCode::ShuttingDown, "the shard is shutting down"),
        WalError::Poisoned | WalError::Io { .. } => Rejection::new(
            ErrorCode::WalIoError,
            "the shard's log failed a write or sync; it refuses writes until restarted",
        ),
        other => Rejection::new(ErrorCode::InternalError, format!("log: {other}")),
    }
}
