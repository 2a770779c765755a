//! The write-ahead log of one shard.
//!
//! Owns `<data_dir>/shard-<n>/wal/` (segments) and `snapshots/`, and nothing else; touched only
//! by the shard's own executor (`Wal` is `!Send`, shared through `Rc`). Entries are opaque
//! payloads with contiguous offsets from 1. `append` buffers; a committer task spawned by
//! `open` writes each batch with one fdatasync and then releases `wait_durable` callers.
//! Format and recovery rules: `docs/wal.md`.

mod archive;
mod committer;
mod compaction;
mod config;
mod epoch;
mod error;
mod files;
mod handle;
pub mod limits;
mod log_reader;
mod reader;
pub mod record;
mod recovery;
mod rewind;
mod scan;
mod segment;
mod shared;
mod snapshot;
mod snapshot_writer;
mod space;
mod spare;
mod stats;
mod waiters;
mod writer;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;

use glommio::sync::Semaphore;
use glommio::task::JoinHandle;

pub use config::{FsyncPolicy, WalConfig};
pub use error::WalError;
pub use handle::{LogHandle, LogPin};
pub use log_reader::LogReader;
pub use snapshot::{
    SnapshotHeader, SnapshotStream, SNAPSHOT_VERSION, SNAPSHOT_VERSIONS_READ, SNAPSHOT_VERSION_JSON,
};
pub use snapshot_writer::SnapshotWriter;
pub use space::free_bytes;
pub use stats::{Histogram, WalStats, BATCH_BOUNDS_ENTRIES, DURATION_BOUNDS_SECONDS};

use limits::SNAPSHOTS_KEPT;
use record::KIND_ENTRY;
use shared::Shared;
use waiters::WaitFor;
use writer::SegmentWriter;

/// One item handed to the recovery callback of `Wal::open`, in log order.
///
/// A snapshot comes first, as a stream: `SnapshotBegin`, its payload in `SnapshotPart`s, then
/// `SnapshotEnd` once the payload's CRC held. A payload that fails its CRC (found at its end)
/// gets `SnapshotDiscard` instead: forget its parts; the next older snapshot follows the same
/// way, or none. Then the records after the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovered<'a> {
    /// The state as of `offset`, a payload of `len` bytes in format `version`, begins.
    SnapshotBegin { offset: u64, version: u32, len: u64 },
    /// The next bytes of its payload.
    SnapshotPart { bytes: &'a [u8] },
    /// The payload is complete and its CRC holds.
    SnapshotEnd { offset: u64 },
    /// The payload failed its CRC: discard it.
    SnapshotDiscard { offset: u64 },
    /// An entry after the snapshot.
    Record { offset: u64, payload: &'a [u8] },
}

/// One shard's write-ahead log. See the module docs.
pub struct Wal {
    shared: Rc<Shared>,
    committer: RefCell<Option<JoinHandle<()>>>,
    /// The archiver task (`archive.rs`), when the log has an archive.
    archiver: RefCell<Option<JoinHandle<()>>>,
    /// Serialises `write_snapshot` calls.
    snapshot_lock: Semaphore,
}

impl Wal {
    /// Opens or creates the log in `cfg.dir` and recovers it: calls `on` with the newest valid
    /// snapshot (if any), then with every record after it, in order. Truncates a torn tail of
    /// the newest segment (with a warning giving the byte count). Then spawns the committer
    /// task on the current executor, in the task queue `open` runs in
    /// (`glommio::spawn_local(..).detach()`); `close` stops it and waits for it.
    ///
    /// Must run inside a glommio executor. Blocks the executor briefly for directory listings.
    /// Fails with `StorageFull`, before it creates anything, when the disk has no room for the
    /// log's next segment and its spare (a new log: its first segment and the spare).
    pub async fn open(
        cfg: WalConfig,
        on: &mut dyn FnMut(Recovered<'_>) -> Result<(), String>,
    ) -> Result<Rc<Wal>, WalError> {
        cfg.validate()?;
        space::check_room_at_open(&cfg)?;
        let handle = LogHandle::new(&cfg);
        Wal::open_with(cfg, handle, on).await
    }

    /// `open`, publishing into an existing `handle` of the same log (taken from the `Wal` this
    /// one replaces after a `truncate_after` or `install_snapshot`), so handles given out
    /// earlier keep reporting the live log. Readers made from it drop their caches.
    pub async fn open_with(
        cfg: WalConfig,
        handle: LogHandle,
        on: &mut dyn FnMut(Recovered<'_>) -> Result<(), String>,
    ) -> Result<Rc<Wal>, WalError> {
        if handle.dir != cfg.dir || handle.shard != cfg.shard {
            return Err(WalError::Config(format!(
                "the log handle of {} (shard {}) does not belong to {} (shard {})",
                handle.dir.display(),
                handle.shard,
                cfg.dir.display(),
                cfg.shard
            )));
        }
        handle.published.bump_generation();
        cfg.validate()?;
        create_dirs(&cfg).await?;
        files::probe_device(&cfg.dir).await?;
        let out = recovery::recover(&cfg, on).await?;
        let shard = cfg.shard;
        let shared = Rc::new(Shared::new(
            cfg,
            out.head,
            out.segments,
            out.snapshots,
            handle,
        ));
        let writer = match out.tail {
            Some(t) => SegmentWriter::resume(&shared, t.path, t.first, t.pos).await?,
            None => {
                // A brand-new log: zero its first segment now, like every later one.
                let spare = spare::Spare::new(
                    &shared.wal_dir,
                    shared.cfg.segment_bytes,
                    shared.space.clone(),
                );
                let file = spare.prepare_now().await?;
                let epoch = Default::default();
                SegmentWriter::create(&shared, out.head + 1, epoch, Some((file, spare.path())))
                    .await?
            }
        };
        shared.handle.published.set_durable(out.head);
        shared.publish_oldest();
        log::info!(
            "wal: shard {shard}: recovered through offset {} ({} segment(s), oldest offset {})",
            out.head,
            shared.segments.borrow().len(),
            shared.oldest()
        );
        let task = glommio::spawn_local(committer::run(shared.clone(), writer)).detach();
        let archiver = archive::start(&shared);
        Ok(Rc::new(Wal {
            shared,
            committer: RefCell::new(Some(task)),
            archiver: RefCell::new(archiver),
            snapshot_lock: Semaphore::new(1),
        }))
    }

    /// Buffers one entry for the next group commit and returns its offset. Never blocks or
    /// waits for I/O. Fails after an I/O error (`Poisoned`), after `close` (`Closed`), or for a
    /// payload over `max_payload()` (`TooLarge`).
    pub fn append(&self, payload: &[u8]) -> Result<u64, WalError> {
        let s = &*self.shared;
        if s.poisoned.get() {
            return Err(WalError::Poisoned);
        }
        if s.closing.get() {
            return Err(WalError::Closed);
        }
        if s.space.full() {
            return Err(WalError::StorageFull {
                path: s.cfg.dir.clone(),
                needed: s.cfg.segment_bytes,
                free: 0,
            });
        }
        if payload.len() > s.payload_max {
            return Err(WalError::TooLarge {
                len: payload.len(),
                max: s.payload_max,
            });
        }
        let offset = s.head.get() + 1;
        {
            let mut batch = s.pending.borrow_mut();
            if batch.ends.is_empty() {
                batch.first = offset;
            }
            let expected = batch.first + batch.ends.len() as u64;
            assert_eq!(
                offset, expected,
                "offsets must be contiguous: expected {expected}, got {offset}"
            );
            record::encode(&mut batch.bytes, offset, KIND_ENTRY, payload);
            let end = batch.bytes.len();
            batch.ends.push(end);
        }
        s.head.set(offset);
        s.doorbell.ring();
        Ok(offset)
    }

    /// Resolves once `offset` is durable under the policy (`Always`: after the fdatasync
    /// covering it; `Interval`/`Never`: after its write). `Err(Poisoned)` if the log failed
    /// first; `Err(Closed)` if the log was closed before `offset` was appended.
    pub async fn wait_durable(&self, offset: u64) -> Result<(), WalError> {
        let s = &*self.shared;
        let check = || {
            if s.durable.get() >= offset {
                Some(Ok(()))
            } else if s.poisoned.get() {
                Some(Err(WalError::Poisoned))
            } else if s.stopped.get() || (s.closing.get() && offset > s.head.get()) {
                Some(Err(WalError::Closed))
            } else {
                None
            }
        };
        WaitFor {
            waiters: &s.waiters,
            offset,
            id: None,
            check,
        }
        .await
    }

    /// A thread-safe view of this log for other executors (durable and oldest offsets, and
    /// readers with their own files). See `LogHandle`.
    pub fn handle(&self) -> LogHandle {
        self.shared.handle.clone()
    }

    /// The newest snapshot's offset (0: none on disk).
    pub fn newest_snapshot_offset(&self) -> u64 {
        self.shared.snapshots.borrow().last().copied().unwrap_or(0)
    }

    /// Highest durable offset.
    pub fn durable_offset(&self) -> u64 {
        self.shared.durable.get()
    }

    /// Highest appended offset.
    pub fn head_offset(&self) -> u64 {
        self.shared.head.get()
    }

    /// Oldest offset `read_from` can serve.
    pub fn oldest_offset(&self) -> u64 {
        self.shared.oldest()
    }

    pub fn is_poisoned(&self) -> bool {
        self.shared.poisoned.get()
    }

    /// Whether the log refuses appends because the disk has no room for its next segment or
    /// its spare (`StorageFull`; it takes them again by itself once there is).
    pub fn is_storage_full(&self) -> bool {
        self.shared.space.full()
    }

    /// Largest payload `append` accepts (depends on `segment_bytes`).
    pub fn max_payload(&self) -> usize {
        self.shared.payload_max
    }

    pub fn stats(&self) -> WalStats {
        let s = &*self.shared;
        let c = s.counters.borrow().clone();
        let segs = s.segments.borrow();
        WalStats {
            offset: s.head.get(),
            durable: s.durable.get(),
            oldest: segs.first().map_or(s.head.get() + 1, |m| m.first),
            size_bytes: segs.iter().map(|m| m.end).sum(),
            segments: segs.len() as u64,
            pending_entries: s.pending.borrow().ends.len() as u64,
            waiters: s.waiters.borrow().len() as u64,
            writes_total: c.writes_total,
            bytes_written_total: c.bytes_written_total,
            entries_total: c.entries_total,
            batches_total: c.batches_total,
            fsyncs_total: c.fsyncs_total,
            rotations_total: c.rotations_total,
            rotations_prezeroed_total: c.rotations_prezeroed_total,
            write_seconds: c.write_seconds,
            fsync_seconds: c.fsync_seconds,
            batch_entries: c.batch_entries,
            poisoned: s.poisoned.get(),
            storage_full: s.space.full(),
            archived_segments_total: c.archived_segments_total,
            archive_failures_total: c.archive_failures_total,
        }
    }

    /// Reads durable entries with offset `>= from`, in order: at most `max_records`, and at
    /// most `max_bytes` of payload except that the first record is always returned. Empty if
    /// `from` is beyond the durable offset. `Err(Trimmed { oldest })` if `from` was compacted
    /// away.
    pub async fn read_from(
        &self,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, WalError> {
        reader::read_from(&self.shared, from, max_records, max_bytes).await
    }

    /// Writes a snapshot of the state as of `offset` (<= durable) whose payload, of format
    /// `version`, is `bytes`: `begin_snapshot`, one `write`, `commit_snapshot`.
    pub async fn write_snapshot(
        &self,
        offset: u64,
        version: u32,
        bytes: &[u8],
    ) -> Result<(), WalError> {
        let durable = self.shared.durable.get();
        if offset > durable {
            return Err(WalError::NotDurable { offset, durable });
        }
        let mut w = self.begin_snapshot(offset, version).await?;
        if let Err(e) = w.write(bytes).await {
            w.abort().await;
            return Err(e);
        }
        self.commit_snapshot(w).await.map(drop)
    }

    /// Starts the snapshot of the state as of `offset` (at most the head) with a payload of
    /// format `version`: its temp file. Write the payload into it, then `commit_snapshot`
    /// (or `abort` it). Refused (`Closed`) once the log was rewound.
    pub async fn begin_snapshot(
        &self,
        offset: u64,
        version: u32,
    ) -> Result<SnapshotWriter, WalError> {
        let s = &*self.shared;
        if s.rewound.get() {
            return Err(WalError::Closed);
        }
        if offset > s.head.get() {
            return Err(WalError::Config(format!(
                "a snapshot at offset {offset} is past the head {}",
                s.head.get()
            )));
        }
        let path = snapshot::snapshot_path(&s.snap_dir, offset);
        let tmp = std::path::PathBuf::from(format!("{}{}", path.display(), segment::TMP_SUFFIX));
        SnapshotWriter::create(tmp, s.cfg.shard, offset, version, s.cfg.reserve()).await
    }

    /// Makes a snapshot written through `begin_snapshot` part of the log: waits until its
    /// offset is durable (and fdatasynced, under every policy), seals the file and renames it
    /// into place, then keeps the 2 newest snapshots and deletes segments wholly covered by
    /// the older of them that lie more than `retain_bytes` behind the head. Calls are
    /// serialised. After a rewind it is refused (`Closed`) and the file deleted, as on any
    /// error. Returns the file's header.
    pub async fn commit_snapshot(&self, mut w: SnapshotWriter) -> Result<SnapshotHeader, WalError> {
        let done = self.commit_inner(&mut w).await;
        if done.is_err() {
            w.abort().await;
        }
        done
    }

    async fn commit_inner(&self, w: &mut SnapshotWriter) -> Result<SnapshotHeader, WalError> {
        let _permit = (self.snapshot_lock.acquire_permit(1).await).map_err(|_| WalError::Closed)?;
        let s = &*self.shared;
        if s.rewound.get() {
            return Err(WalError::Closed);
        }
        let offset = w.offset();
        self.wait_durable(offset).await?;
        s.ensure_synced(offset).await?;
        let header = w.seal().await?;
        let path = snapshot::snapshot_path(&s.snap_dir, offset);
        std::fs::rename(w.tmp_path(), &path)
            .map_err(|e| WalError::std_io("rename", w.tmp_path(), e))?;
        files::sync_dir(&s.snap_dir).await?;
        {
            let mut snaps = s.snapshots.borrow_mut();
            if let Err(i) = snaps.binary_search(&offset) {
                snaps.insert(i, offset);
            }
        }
        self.prune_snapshots().await?;
        compaction::compact(s).await?;
        Ok(header)
    }

    async fn prune_snapshots(&self) -> Result<(), WalError> {
        let s = &*self.shared;
        // A pinned snapshot (a running backup) and those after it stay; the next pruning
        // after the pin is released deletes what is then surplus.
        let floor = s.handle.pinned_floor().unwrap_or(u64::MAX);
        let old: Vec<u64> = {
            let mut snaps = s.snapshots.borrow_mut();
            let surplus = snaps.len().saturating_sub(SNAPSHOTS_KEPT);
            let n = snaps
                .iter()
                .take(surplus)
                .take_while(|o| **o < floor)
                .count();
            snaps.drain(..n).collect()
        };
        if old.is_empty() {
            return Ok(());
        }
        for offset in old {
            files::remove(&snapshot::snapshot_path(&s.snap_dir, offset)).await?;
        }
        files::sync_dir(&s.snap_dir).await
    }

    /// Graceful shutdown: refuses further appends, lets the committer write and fdatasync
    /// everything pending (whatever the policy), and waits for it to stop.
    pub async fn close(&self) -> Result<(), WalError> {
        let s = &*self.shared;
        s.closing.set(true);
        s.doorbell.ring();
        s.archive_bell.ring();
        let task = self.committer.borrow_mut().take();
        if let Some(task) = task {
            task.await;
        }
        let archiver = self.archiver.borrow_mut().take();
        if let Some(task) = archiver {
            task.await;
        }
        if s.poisoned.get() {
            return Err(WalError::Poisoned);
        }
        Ok(())
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for Wal {
    /// Dropping without `close` still stops the committer: it drains what is pending first.
    fn drop(&mut self) {
        self.shared.closing.set(true);
        self.shared.doorbell.ring();
        self.shared.archive_bell.ring();
    }
}

async fn create_dirs(cfg: &WalConfig) -> Result<(), WalError> {
    let fresh = !cfg.dir.exists();
    // An interrupted `install_snapshot`: the log it replaced.
    rewind::remove_old_wal(&cfg.dir.join(rewind::OLD_WAL_DIR))?;
    for d in [cfg.dir.clone(), cfg.wal_dir(), cfg.snapshot_dir()] {
        if !d.exists() {
            std::fs::create_dir_all(&d).map_err(|e| WalError::std_io("mkdir", &d, e))?;
        }
    }
    files::sync_dir(&cfg.dir).await?;
    if fresh {
        if let Some(parent) = cfg.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            files::sync_dir(parent).await?;
        }
    }
    Ok(())
}
