//! WAL configuration: where the log lives, how big segments get, when to fdatasync.

use std::path::PathBuf;
use std::time::Duration;

use super::error::WalError;
use super::limits::{
    BLOCK_BYTES, RETAIN_BYTES_DEFAULT, SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN,
};

/// When appended entries count as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Group commit: each batch is durable before any waiter is released (one fdatasync per
    /// batch, or, with `WalConfig::sync_writes`, writes that complete durable).
    Always,
    /// Waiters are released after the write; fdatasync at most once per interval.
    Interval(Duration),
    /// Waiters are released after the write; fdatasync only at rotation, snapshot and close.
    Never,
}

/// Configuration of one shard's log.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// `<data_dir>/shard-<n>`; the log uses `wal/` and `snapshots/` inside it.
    pub dir: PathBuf,
    /// Shard number, stored in every segment and snapshot header and checked on open.
    pub shard: u32,
    /// Segment size in bytes; a multiple of 4096 between 16 KiB and 1 GiB. Default 64 MiB.
    pub segment_bytes: u64,
    pub fsync: FsyncPolicy,
    /// Keep at least this many bytes of log behind the head for readers, even when a snapshot
    /// covers them. Default 256 MiB.
    pub retain_bytes: u64,
    /// Under `FsyncPolicy::Always`, open the live segment with `O_DSYNC`: each write completes
    /// only once its data is on stable storage (a FUA write, or the kernel's flush right after
    /// it), so a batch needs no separate fdatasync: one I/O and one wake-up per group commit
    /// instead of two. Durability is the same. Default true; other policies ignore it.
    pub sync_writes: bool,
    /// Bytes kept free on the log's filesystem for the log itself (`storage.reserve_bytes`):
    /// a snapshot stops rather than eat into them. `None`: one segment plus its spare.
    pub reserve_bytes: Option<u64>,
    /// Where closed segments are copied (`storage.archive_dir`; `archive.rs`). `None`: no
    /// archive, and compaction is not held back by one.
    pub archive_dir: Option<PathBuf>,
    /// A segment that has held entries this long is closed even though it is not full, so the
    /// archive lags the head by at most about this (`storage.archive_timeout_ms`). `None`: off.
    pub archive_timeout: Option<Duration>,
}

impl WalConfig {
    /// A configuration with the defaults: 64 MiB segments, `FsyncPolicy::Always`, 256 MiB
    /// retained.
    pub fn new(dir: impl Into<PathBuf>, shard: u32) -> WalConfig {
        WalConfig {
            dir: dir.into(),
            shard,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            fsync: FsyncPolicy::Always,
            retain_bytes: RETAIN_BYTES_DEFAULT,
            sync_writes: true,
            reserve_bytes: None,
            archive_dir: None,
            archive_timeout: None,
        }
    }

    /// Bytes snapshots leave free for the log (`reserve_bytes`, default two segments).
    pub fn reserve(&self) -> u64 {
        self.reserve_bytes.unwrap_or(2 * self.segment_bytes)
    }

    /// Whether appends are written `O_DSYNC` (durable on completion, no fdatasync per batch).
    pub(crate) fn durable_writes(&self) -> bool {
        self.fsync == FsyncPolicy::Always && self.sync_writes
    }

    pub(crate) fn validate(&self) -> Result<(), WalError> {
        let bytes = self.segment_bytes;
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&bytes) || bytes % BLOCK_BYTES != 0 {
            return Err(WalError::Config(format!(
                "segment_bytes must be a multiple of {BLOCK_BYTES} between {SEGMENT_BYTES_MIN} \
                 and {SEGMENT_BYTES_MAX}, got {bytes}"
            )));
        }
        if self.archive_timeout.is_some_and(|d| d.is_zero()) {
            return Err(WalError::Config("archive timeout must be > 0".into()));
        }
        if let FsyncPolicy::Interval(d) = self.fsync {
            if d.is_zero() {
                return Err(WalError::Config("fsync interval must be > 0".into()));
            }
        }
        Ok(())
    }

    pub(crate) fn wal_dir(&self) -> PathBuf {
        self.dir.join("wal")
    }

    pub(crate) fn snapshot_dir(&self) -> PathBuf {
        self.dir.join("snapshots")
    }
}
