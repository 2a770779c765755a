//! The shard's log: where entries get offsets and when they count as durable. A thin layer over
//! `shards::wal::Wal` that recovers the engine at open and turns log failures into wire codes.
//!
//! The `Wal` is swappable: a replication rewind (`rewind`) closes it, changes its files, and
//! reopens the directory through the start-up recovery path, so the rebuilt engine is exactly
//! what the log holds. Nothing holds a borrow of the cell across an await.

use std::cell::RefCell;
use std::rc::Rc;

use shards::engine::{Engine, Replay, SnapshotLoader};
use shards::wal::{LogHandle, Recovered, SnapshotWriter, Wal, WalConfig, WalError, WalStats};
use shards::{ErrorCode, Rejection};

pub struct Durability {
    wal: RefCell<Rc<Wal>>,
    cfg: WalConfig,
}

/// What a replication rewind does to the log before it is reopened.
pub enum Rewind {
    /// Drop every entry after this offset.
    TruncateAfter(u64),
    /// Replace the log with the snapshot written into `writer` (not sealed yet), whose
    /// payload loads as `engine` (checked by the caller while it was received).
    Install {
        writer: Box<SnapshotWriter>,
        engine: Box<Engine>,
    },
}

impl Durability {
    /// Opens the shard's log and rebuilds `engine` from the newest snapshot and the entries
    /// after it. A corrupt log (anything but a torn tail) is an error naming file and offset.
    pub async fn open(cfg: WalConfig, engine: &mut Engine) -> Result<Durability, String> {
        let wal = recover(cfg.clone(), None, engine, None).await?;
        Ok(Durability {
            wal: RefCell::new(wal),
            cfg,
        })
    }

    /// Applies `what` to the log, reopens it (recovery, as at start-up) and returns the number
    /// of entries dropped and the engine rebuilt from it. A refused rewind (a truncation the
    /// retained log cannot serve) changes nothing; a failure after the log was closed leaves
    /// it closed (the shard then refuses writes until restarted, as after an I/O error).
    pub async fn rewind(&self, what: Rewind) -> Result<(u64, Engine), Rejection> {
        let wal = self.wal();
        let head = wal.head_offset();
        let (removed, preloaded) = match what {
            Rewind::TruncateAfter(after) => (wal.truncate_after(after).await, None),
            Rewind::Install { writer, engine } => {
                let offset = writer.offset();
                let removed = (wal.install_snapshot_from(*writer).await)
                    .map(|()| head.saturating_sub(offset));
                (removed, Some((offset, *engine)))
            }
        };
        let removed = match removed {
            Ok(n) => n,
            Err(WalError::Trimmed { requested, oldest }) => {
                let msg = format!(
                    "cannot keep the log through offset {}: it is retained from offset {oldest} \
                     only; install a snapshot instead",
                    requested - 1
                );
                return Err(Rejection::new(ErrorCode::BadRequest, msg).with("oldest", oldest));
            }
            Err(e) => {
                log::error!("{}: rewinding the log failed: {e}", self.cfg.dir.display());
                return Err(rejection(e));
            }
        };
        let mut engine = Engine::new();
        let reopened = recover(self.cfg.clone(), Some(wal.handle()), &mut engine, preloaded).await;
        match reopened {
            Ok(new) => {
                *self.wal.borrow_mut() = new;
                Ok((removed, engine))
            }
            Err(e) => {
                log::error!(
                    "{}: reopening the rewound log failed: {e}",
                    self.cfg.dir.display()
                );
                Err(Rejection::new(ErrorCode::InternalError, e))
            }
        }
    }

    /// Buffers one entry for the next group commit and returns its offset.
    pub fn append(&self, payload: &[u8]) -> Result<u64, Rejection> {
        self.wal.borrow().append(payload).map_err(rejection)
    }

    /// `append` of the entry that begins `epoch` (after `follows`): it starts a segment.
    pub fn append_epoch(&self, payload: &[u8], epoch: u64, follows: u64) -> Result<u64, Rejection> {
        (self.wal.borrow().append_epoch(payload, epoch, follows)).map_err(rejection)
    }

    pub fn head(&self) -> u64 {
        self.wal.borrow().head_offset()
    }

    pub fn durable(&self) -> u64 {
        self.wal.borrow().durable_offset()
    }

    pub async fn wait_durable(&self, offset: u64) -> Result<(), Rejection> {
        let wal = self.wal();
        if offset <= wal.durable_offset() {
            return Ok(());
        }
        wal.wait_durable(offset).await.map_err(rejection)
    }

    pub fn stats(&self) -> WalStats {
        self.wal.borrow().stats()
    }

    /// The current log (replaced by `rewind`).
    pub fn wal(&self) -> Rc<Wal> {
        self.wal.borrow().clone()
    }

    /// The log's view for other executors (replication); the same across rewinds.
    pub fn handle(&self) -> LogHandle {
        self.wal.borrow().handle()
    }

    /// Flushes and syncs what is pending (graceful shutdown).
    pub async fn close(&self) {
        if let Err(e) = self.wal().close().await {
            log::error!("closing the log: {e}");
        }
    }
}

/// Opens the log in `cfg` (into `handle` when reopening) and replays it into `engine`: the
/// newest snapshot streamed into a `SnapshotLoader`, then the records after it. `preloaded` is
/// the engine a snapshot install already loaded from the payload it just wrote: that file is
/// read for its CRC only, not decoded a second time.
async fn recover(
    cfg: WalConfig,
    handle: Option<LogHandle>,
    engine: &mut Engine,
    mut preloaded: Option<(u64, Engine)>,
) -> Result<Rc<Wal>, String> {
    let started = std::time::Instant::now();
    // Indexes are built once, after the replay (`Engine::defer_indexes`).
    engine.defer_indexes();
    let mut replay = Replay::new();
    let mut loading: Option<Loading> = None;
    let mut on = |rec: Recovered<'_>| -> Result<(), String> {
        match rec {
            Recovered::SnapshotBegin {
                offset,
                version,
                len,
            } => {
                replay.flush(engine)?;
                loading = Some(match preloaded.take() {
                    Some((o, e)) if o == offset => Loading::Loaded(Box::new(e)),
                    _ => Loading::Stream(SnapshotLoader::new(version, len)?.defer_indexes()),
                });
            }
            Recovered::SnapshotPart { bytes } => match &mut loading {
                Some(Loading::Stream(loader)) => loader.feed(bytes)?,
                Some(Loading::Loaded(_)) => {}
                None => return Err("snapshot bytes before the snapshot".into()),
            },
            Recovered::SnapshotEnd { offset } => {
                *engine = match loading.take() {
                    Some(Loading::Stream(loader)) => loader.finish(),
                    Some(Loading::Loaded(e)) => Ok(*e),
                    None => Err("a snapshot end without its begin".into()),
                }
                .map_err(|e| format!("snapshot at offset {offset}: {e}"))?;
                engine.defer_indexes();
                log::info!(
                    "shard snapshot at offset {offset} loaded after {:?}: {} instances",
                    started.elapsed(),
                    engine.instance_count()
                );
            }
            Recovered::SnapshotDiscard { .. } => loading = None,
            Recovered::Record { offset, payload } => replay.push(engine, offset, payload)?,
        }
        Ok(())
    };
    let wal = match handle {
        Some(handle) => Wal::open_with(cfg, handle, &mut on).await,
        None => Wal::open(cfg, &mut on).await,
    }
    .map_err(|e| e.to_string())?;
    replay.flush(engine)?;
    engine.build_indexes();
    let entries = replay.applied();
    log::info!(
        "shard recovered {entries} log entries in {:?}: {} instances, head offset {}",
        started.elapsed(),
        engine.instance_count(),
        wal.head_offset()
    );
    Ok(wal)
}

/// A snapshot being read at recovery.
enum Loading {
    Stream(SnapshotLoader),
    /// Already in memory (a snapshot install): only the file's CRC is checked.
    Loaded(Box<Engine>),
}

/// How a log failure reaches a client.
fn rejection(e: WalError) -> Rejection {
    match e {
        WalError::TooLarge { len, max } => Rejection::new(
            ErrorCode::BadRequest,
            format!("the log entry would be {len} bytes; the limit is {max}"),
        ),
        WalError::Closed => Rejection::new(ErrorCode::ShuttingDown, "the shard is shutting down"),
        WalError::StorageFull { path, .. } => Rejection::new(
            ErrorCode::StorageFull,
            format!(
                "the disk of {} has no room for the log to grow; writes resume by themselves \
                 once space is freed, reads go on",
                path.display()
            ),
        ),
        WalError::Poisoned | WalError::Io { .. } => Rejection::new(
            ErrorCode::WalIoError,
            "the shard's log failed a write or sync; it refuses writes until restarted",
        ),
        other => Rejection::new(ErrorCode::InternalError, format!("log: {other}")),
    }
}
