//! State shared by the `Wal` handle, the committer task and readers, all on one executor.
//!
//! Offsets, in order: `synced <= durable <= written <= head` except that under
//! `FsyncPolicy::Always` `durable == synced`, and under the other policies `durable == written`.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use glommio::io::DmaFile;

use super::config::{FsyncPolicy, WalConfig};
use super::error::WalError;
use super::files;
use super::handle::LogHandle;
use super::limits::{INDEX_STRIDE_BYTES, SEGMENT_HEADER_BYTES};
use super::space::SpaceFlags;
use super::stats::Counters;
use super::waiters::{wake_all, Doorbell, Waiters};
pub(crate) use smdb_format::segment::SegmentEpoch;

/// What the log knows about one segment file.
#[derive(Debug, Clone)]
pub(crate) struct SegmentMeta {
    pub first: u64,
    pub path: PathBuf,
    /// Highest offset stored in it (`first - 1` while empty).
    pub last: u64,
    /// Byte position just past the last record.
    pub end: u64,
    /// Sparse `(offset, byte position of its record)`, ascending; may be empty.
    pub index: Vec<(u64, u64)>,
    /// The epoch of its entries and whether its first entry begins that epoch (`archive.rs`;
    /// stored in the header block, `smdb_format::segment::SegmentEpoch`).
    pub epoch: SegmentEpoch,
}

impl SegmentMeta {
    pub fn new(first: u64, path: PathBuf) -> SegmentMeta {
        SegmentMeta {
            first,
            path,
            last: first - 1,
            end: SEGMENT_HEADER_BYTES,
            index: Vec::new(),
            epoch: SegmentEpoch::default(),
        }
    }

    /// Notes that the entry `offset` starts at byte `pos`, keeping one index entry per stride.
    pub fn note_entry(&mut self, offset: u64, pos: u64) {
        if self
            .index
            .last()
            .is_none_or(|&(_, p)| pos >= p + INDEX_STRIDE_BYTES)
        {
            self.index.push((offset, pos));
        }
    }

    /// Where to start scanning to find `offset`: `(offset of the record there, byte position)`.
    pub fn start_for(&self, offset: u64) -> (u64, u64) {
        let i = self.index.partition_point(|&(o, _)| o <= offset);
        match i.checked_sub(1) {
            Some(i) => self.index[i],
            None => (self.first, SEGMENT_HEADER_BYTES),
        }
    }
}

/// Entries appended since the committer last took a batch.
///
/// Bound: none by design: `append` never blocks or refuses for space, so callers bound their
/// own in-flight entries (the server's per-connection limits). Gauge: `WalStats::pending_entries`.
/// A buffer that grew past `BATCH_REUSE_BYTES_MAX` is freed after its commit.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Offset of the first entry (meaningless while empty).
    pub first: u64,
    /// Encoded records, back to back.
    pub bytes: Vec<u8>,
    /// End of each record in `bytes`.
    pub ends: Vec<usize>,
}

impl Batch {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    pub fn start_of(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1]
        }
    }
}

/// Test-only fault injection: makes the next segment write or fdatasync fail.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Faults {
    pub fail_next_write: Cell<bool>,
    pub fail_next_fsync: Cell<bool>,
    pub write_attempts: Cell<u64>,
    pub fsync_attempts: Cell<u64>,
    /// This many segment creations fail with ENOSPC, as on a full disk.
    pub segment_enospc: Cell<u32>,
}

pub(crate) struct Shared {
    pub cfg: WalConfig,
    pub wal_dir: PathBuf,
    pub snap_dir: PathBuf,
    /// Largest payload `append` accepts with this segment size.
    pub payload_max: usize,
    pub head: Cell<u64>,
    pub written: Cell<u64>,
    pub durable: Cell<u64>,
    pub synced: Cell<u64>,
    pub pending: RefCell<Batch>,
    pub poisoned: Cell<bool>,
    /// Allocations failing for lack of space (`space.rs`): appends are refused meanwhile.
    pub space: Rc<SpaceFlags>,
    /// `close` was called or the handle dropped: `append` refuses, the committer drains and
    /// stops.
    pub closing: Cell<bool>,
    /// The committer task has exited.
    pub stopped: Cell<bool>,
    /// `truncate_after` or `install_snapshot` changed the files: no more snapshots from this
    /// `Wal` (its state is not the log's any more).
    pub rewound: Cell<bool>,
    pub waiters: RefCell<Waiters>,
    pub doorbell: Doorbell,
    pub segments: RefCell<Vec<SegmentMeta>>,
    /// The segment the committer writes, for `write_snapshot`'s fdatasync.
    pub current: RefCell<Option<(Rc<DmaFile>, PathBuf)>>,
    /// Offsets of the snapshots on disk, ascending.
    pub snapshots: RefCell<Vec<u64>>,
    pub counters: RefCell<Counters>,
    /// What other executors see (`LogHandle`): published by `publish_durable`,
    /// `publish_oldest`.
    pub handle: LogHandle,
    /// First offset of the oldest segment not known to be archived (`archive.rs`): compaction
    /// keeps it and every segment after it. `u64::MAX` without an archive.
    pub archive_hold: Cell<u64>,
    /// Rung at each rotation and at close: the archiver looks for a closed segment to copy.
    pub archive_bell: Doorbell,
    /// Epochs announced by `Wal::begin_epoch` whose entry is not written yet: the committer
    /// starts a segment at each (`archive.rs`, docs/wal.md "Epoch segments").
    pub epoch_breaks: RefCell<std::collections::VecDeque<EpochBreak>>,
    #[cfg(test)]
    pub faults: Faults,
}

/// The entry at `offset` begins epoch `epoch`, which follows `follows`: it starts a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EpochBreak {
    pub offset: u64,
    pub epoch: u64,
    pub follows: u64,
}

impl Shared {
    pub fn new(
        cfg: WalConfig,
        head: u64,
        segments: Vec<SegmentMeta>,
        snaps: Vec<u64>,
        handle: LogHandle,
    ) -> Shared {
        let payload_max = super::limits::record_payload_max(cfg.segment_bytes);
        let space = SpaceFlags::new(cfg.shard, handle.published.clone());
        handle.published.set_poisoned(false);
        Shared {
            wal_dir: cfg.wal_dir(),
            snap_dir: cfg.snapshot_dir(),
            cfg,
            payload_max,
            head: Cell::new(head),
            written: Cell::new(head),
            durable: Cell::new(head),
            synced: Cell::new(head),
            pending: RefCell::new(Batch::default()),
            poisoned: Cell::new(false),
            space,
            closing: Cell::new(false),
            stopped: Cell::new(false),
            rewound: Cell::new(false),
            waiters: RefCell::new(Waiters::default()),
            doorbell: Doorbell::default(),
            segments: RefCell::new(segments),
            current: RefCell::new(None),
            snapshots: RefCell::new(snaps),
            counters: RefCell::new(Counters::default()),
            handle,
            archive_hold: Cell::new(u64::MAX),
            archive_bell: Doorbell::default(),
            epoch_breaks: RefCell::new(Default::default()),
            #[cfg(test)]
            faults: Faults::default(),
        }
    }

    pub fn policy(&self) -> FsyncPolicy {
        self.cfg.fsync
    }

    /// Oldest offset still in a segment.
    pub fn oldest(&self) -> u64 {
        let segs = self.segments.borrow();
        segs.first().map_or(self.head.get() + 1, |s| s.first)
    }

    /// Tells other executors the current oldest offset (after the segment list changed).
    pub fn publish_oldest(&self) {
        self.handle.published.set_oldest(self.oldest());
    }

    /// Marks the log failed for good and fails every waiter. Logs the cause once.
    pub fn poison(&self, cause: &WalError) {
        if self.poisoned.replace(true) {
            return;
        }
        self.handle.published.set_poisoned(true);
        log::error!(
            "wal: shard {}: {cause}; log poisoned, no more writes until restart (durable: {})",
            self.cfg.shard,
            self.durable.get()
        );
        self.pending.borrow_mut().clear();
        let wakers = self.waiters.borrow_mut().take_all();
        wake_all(wakers);
        self.doorbell.ring();
    }

    /// Releases every waiter at or below `offset`: the entries are durable under the policy.
    pub fn publish_durable(&self, offset: u64) {
        debug_assert!(
            offset >= self.durable.get(),
            "durable offset must not go backwards"
        );
        self.durable.set(offset);
        self.handle.published.set_durable(offset);
        let wakers = self.waiters.borrow_mut().take_through(offset);
        wake_all(wakers);
    }

    /// The committer has exited: wake everyone so they see `Closed` or `Poisoned`.
    pub fn stop(&self) {
        self.stopped.set(true);
        *self.current.borrow_mut() = None;
        let wakers = self.waiters.borrow_mut().take_all();
        wake_all(wakers);
    }

    /// One segment write of a block-aligned buffer, timed and counted; a failure poisons.
    pub async fn write_at(
        &self,
        file: &DmaFile,
        path: &Path,
        pos: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), WalError> {
        if self.poisoned.get() {
            return Err(WalError::Poisoned);
        }
        #[cfg(test)]
        {
            let f = &self.faults;
            f.write_attempts.set(f.write_attempts.get() + 1);
            if f.fail_next_write.replace(false) {
                let err = WalError::std_io("write", path, std::io::Error::other("injected fault"));
                self.poison(&err);
                return Err(err);
            }
        }
        let t = Instant::now();
        match files::write_block_at(file, path, pos, len, fill).await {
            Ok(()) => {
                let mut c = self.counters.borrow_mut();
                c.writes_total += 1;
                c.bytes_written_total += len as u64;
                c.write_seconds.observe(t.elapsed().as_secs_f64());
                Ok(())
            }
            Err(err) => {
                self.poison(&err);
                Err(err)
            }
        }
    }

    /// One fdatasync of a segment, timed and counted; a failure poisons (never retried).
    pub async fn fdatasync(&self, file: &DmaFile, path: &Path) -> Result<(), WalError> {
        if self.poisoned.get() {
            return Err(WalError::Poisoned);
        }
        #[cfg(test)]
        {
            let f = &self.faults;
            f.fsync_attempts.set(f.fsync_attempts.get() + 1);
            if f.fail_next_fsync.replace(false) {
                let err =
                    WalError::std_io("fdatasync", path, std::io::Error::other("injected fault"));
                self.poison(&err);
                return Err(err);
            }
        }
        let t = Instant::now();
        match file.fdatasync().await {
            Ok(()) => {
                let mut c = self.counters.borrow_mut();
                c.fsyncs_total += 1;
                c.fsync_seconds.observe(t.elapsed().as_secs_f64());
                Ok(())
            }
            Err(e) => {
                let err = WalError::io("fdatasync", path, e);
                self.poison(&err);
                Err(err)
            }
        }
    }

    /// Makes sure every entry up to `offset` (<= written) is covered by a completed fdatasync.
    pub async fn ensure_synced(&self, offset: u64) -> Result<(), WalError> {
        if self.synced.get() >= offset {
            return Ok(());
        }
        if self.poisoned.get() {
            return Err(WalError::Poisoned);
        }
        let current = self.current.borrow().clone();
        let Some((file, path)) = current else {
            return Err(WalError::Closed);
        };
        // Older segments were synced at rotation; everything written so far is in `file` or in
        // them, so one fdatasync of `file` covers `written` as of now.
        let written = self.written.get();
        self.fdatasync(&file, &path).await?;
        self.synced.set(self.synced.get().max(written));
        Ok(())
    }
}
