//! Rewinding a log for replication: dropping every entry after an offset (`truncate_after`),
//! or replacing the whole log with a snapshot (`install_snapshot`).
//!
//! Both close the `Wal` first (everything pending written and fdatasynced, the committer
//! stopped), change the files, and leave it closed: the owner reopens the directory with
//! `Wal::open_with(cfg, handle, ..)`, so recovery (the start-up path) rebuilds the state from
//! exactly what is on disk. A closed-and-rewound `Wal` refuses `write_snapshot`, so a snapshot
//! of the old state that was waiting for its turn can never land in the new log.
//!
//! Crash safety: every step leaves a directory that recovers to a prefix of the old log (at
//! least up to the target) or to the new state, never to a mix:
//! - truncation deletes snapshots above the target first (so none outruns the log), then the
//!   segments that start after it (newest first), then zeroes the rest of the segment holding
//!   the target after its record, and fdatasyncs;
//! - installation renames `wal/` to `wal.old/` (one atomic step: the log is gone, older
//!   snapshots alone recover to a prefix), deletes the snapshots at or above the new one, writes
//!   the new snapshot durably, deletes the older ones, then `wal.old/`. `open` deletes a
//!   leftover `wal.old/`. The snapshot is written (streamed, synced) as a temp file before the
//!   first step, while the log still serves; "writes it durably" is then a rename.

use std::path::Path;

use super::error::WalError;
use super::files;
use super::limits::{MARKER_BYTES, SEGMENT_HEADER_BYTES};
use super::record::KIND_ENTRY;
use super::recovery::truncate_tail;
use super::scan::{ReadSize, SegmentScan, Step};
use super::shared::Shared;
use super::snapshot;
use super::snapshot_writer::SnapshotWriter;
use super::Wal;

/// Name of the log directory while a snapshot install replaces it.
pub(crate) const OLD_WAL_DIR: &str = "wal.old";

/// Ends the temp file of a snapshot being received (`<offset>.snap.incoming.tmp`): a temp
/// like any other (deleted at open), named apart from the shard's own snapshot of that offset.
const INCOMING_SUFFIX: &str = ".incoming.tmp";

impl Wal {
    /// Drops every entry after `after` from disk and closes the log; returns how many entries
    /// were dropped. The log must keep what recovery needs: after `after` there must remain a
    /// snapshot at or below it from which the oldest segment continues (`Trimmed` otherwise:
    /// install a snapshot instead). `after >= head` only closes the log. Reopen with
    /// `open_with` afterwards.
    pub async fn truncate_after(&self, after: u64) -> Result<u64, WalError> {
        let _permit = self
            .snapshot_lock
            .acquire_permit(1)
            .await
            .map_err(|_| WalError::Closed)?;
        let s = &*self.shared;
        let oldest = s.oldest();
        let base = s
            .snapshots
            .borrow()
            .iter()
            .rev()
            .copied()
            .find(|&o| o <= after);
        if oldest > base.unwrap_or(0) + 1 {
            return Err(WalError::Trimmed {
                requested: after + 1,
                oldest,
            });
        }
        self.close().await?;
        s.rewound.set(true);
        let head = s.head.get();
        if after >= head {
            return Ok(0);
        }
        let published = &s.handle.published;
        published.set_durable(after.min(s.durable.get()));
        published.bump_generation();

        drop_snapshots_after(s, after).await?;
        drop_segments_after(s, after).await?;
        log::warn!(
            "wal: shard {}: truncated {} entries after offset {after} (head was {head})",
            s.cfg.shard,
            head - after
        );
        Ok(head - after)
    }

    /// Replaces the whole log with "state = `payload` (format `version`) as of `offset`, no
    /// entries" and closes it: `incoming_snapshot`, one write, `install_snapshot_from`.
    pub async fn install_snapshot(
        &self,
        offset: u64,
        version: u32,
        payload: &[u8],
    ) -> Result<(), WalError> {
        let mut w = self.incoming_snapshot(offset, version).await?;
        if let Err(e) = w.write(payload).await {
            w.abort().await;
            return Err(e);
        }
        self.install_snapshot_from(w).await
    }

    /// Starts receiving a snapshot (another log's, as of `offset`, payload format `version`)
    /// that will replace this log: its temp file, written while the log still serves. Write
    /// the payload into it, then `install_snapshot_from` (or `abort` it).
    pub async fn incoming_snapshot(
        &self,
        offset: u64,
        version: u32,
    ) -> Result<SnapshotWriter, WalError> {
        if offset == 0 {
            return Err(WalError::Config("a snapshot offset starts at 1".into()));
        }
        let s = &*self.shared;
        let name = format!("{offset:020}.{}{INCOMING_SUFFIX}", snapshot::SNAPSHOT_EXT);
        // An install replaces the log and its files: it is not held to the reserve.
        SnapshotWriter::create(s.snap_dir.join(name), s.cfg.shard, offset, version, 0).await
    }

    /// Replaces the whole log with the snapshot written into `w` and closes it: every segment
    /// and every other snapshot goes, and after `open_with` the next append gets `offset + 1`.
    /// On an error the temp file is deleted.
    pub async fn install_snapshot_from(&self, mut w: SnapshotWriter) -> Result<(), WalError> {
        let done = self.install_inner(&mut w).await;
        if done.is_err() {
            w.abort().await;
        }
        done
    }

    async fn install_inner(&self, w: &mut SnapshotWriter) -> Result<(), WalError> {
        let offset = w.offset();
        w.seal().await?;
        let _permit = (self.snapshot_lock.acquire_permit(1).await).map_err(|_| WalError::Closed)?;
        let s = &*self.shared;
        self.close().await?;
        s.rewound.set(true);
        let published = &s.handle.published;
        published.set_durable(offset.min(s.durable.get()));
        published.bump_generation();

        let old = s.cfg.dir.join(OLD_WAL_DIR);
        remove_old_wal(&old)?;
        std::fs::rename(&s.wal_dir, &old).map_err(|e| WalError::std_io("rename", &s.wal_dir, e))?;
        std::fs::create_dir(&s.wal_dir).map_err(|e| WalError::std_io("mkdir", &s.wal_dir, e))?;
        files::sync_dir(&s.cfg.dir).await?;
        s.segments.borrow_mut().clear();

        let existing = snapshot::list_snapshots(&s.snap_dir)?;
        for (o, path) in existing.files.iter().filter(|(o, _)| *o >= offset) {
            log::debug!("wal: removing snapshot {o} before installing {offset}");
            files::remove(path).await?;
        }
        files::sync_dir(&s.snap_dir).await?;
        let path = snapshot::snapshot_path(&s.snap_dir, offset);
        std::fs::rename(w.tmp_path(), &path)
            .map_err(|e| WalError::std_io("rename", w.tmp_path(), e))?;
        files::sync_dir(&s.snap_dir).await?;
        for (_, path) in existing.files.iter().filter(|(o, _)| *o < offset) {
            files::remove(path).await?;
        }
        files::sync_dir(&s.snap_dir).await?;
        *s.snapshots.borrow_mut() = vec![offset];
        remove_old_wal(&old)?;
        log::warn!(
            "wal: shard {}: log replaced by a snapshot at offset {offset} (head was {})",
            s.cfg.shard,
            s.head.get()
        );
        Ok(())
    }
}

/// Deletes the snapshots above `after` (first, so no snapshot outruns the shortened log).
async fn drop_snapshots_after(s: &Shared, after: u64) -> Result<(), WalError> {
    let newer: Vec<u64> = (s.snapshots.borrow().iter().copied())
        .filter(|&o| o > after)
        .collect();
    for offset in &newer {
        files::remove(&snapshot::snapshot_path(&s.snap_dir, *offset)).await?;
    }
    if !newer.is_empty() {
        files::sync_dir(&s.snap_dir).await?;
    }
    s.snapshots.borrow_mut().retain(|&o| o <= after);
    Ok(())
}

/// Deletes the segments starting after `after` (newest first), then zeroes the segment
/// holding `after` past its record and fdatasyncs it.
async fn drop_segments_after(s: &Shared, after: u64) -> Result<(), WalError> {
    let later: Vec<_> = (s.segments.borrow().iter())
        .filter(|m| m.first > after)
        .map(|m| m.path.clone())
        .collect();
    for path in later.iter().rev() {
        files::remove(path).await?;
    }
    if !later.is_empty() {
        files::sync_dir(&s.wal_dir).await?;
    }
    s.segments.borrow_mut().retain(|m| m.first <= after);
    let kept = s.segments.borrow().last().cloned();
    let Some(meta) = kept else {
        return Ok(());
    };
    let (start_offset, start_pos) = meta.start_for(after);
    let end = record_end(&meta.path, meta.first, start_offset, start_pos, after).await?;
    let size = std::fs::metadata(&meta.path)
        .map_err(|e| WalError::std_io("stat", &meta.path, e))?
        .len();
    // Beyond the last record and the close marker there is nothing but zeros.
    let dirty_end = (meta.end + MARKER_BYTES as u64).min(size);
    if dirty_end > end {
        truncate_tail(&meta.path, end, dirty_end).await?;
    }
    Ok(())
}

/// Deletes a `wal.old/` left by an install (at open, or before a new install).
pub(crate) fn remove_old_wal(old: &Path) -> Result<(), WalError> {
    if old.exists() {
        std::fs::remove_dir_all(old).map_err(|e| WalError::std_io("remove", old, e))?;
    }
    Ok(())
}

/// Byte position just past the record of entry `after` in the segment starting at `first`
/// (the header's end when `after` is `first - 1`), scanning from the indexed record
/// `start_offset` at `start_pos`.
async fn record_end(
    path: &Path,
    first: u64,
    start_offset: u64,
    start_pos: u64,
    after: u64,
) -> Result<u64, WalError> {
    if after < first {
        return Ok(SEGMENT_HEADER_BYTES);
    }
    let mut scan = SegmentScan::open(path, start_pos, ReadSize::Reader).await?;
    let mut expected = start_offset;
    let found = loop {
        match scan.next().await {
            Ok(Step::Record { offset, kind, .. }) if kind == KIND_ENTRY => {
                if offset != expected {
                    let reason = format!("expected offset {expected}, found {offset}");
                    break Err(WalError::corrupt(path, scan.pos(), reason));
                }
                if offset == after {
                    break Ok(scan.pos());
                }
                expected += 1;
            }
            Ok(Step::Record { .. }) => {}
            Ok(Step::End { pos }) | Ok(Step::Bad { pos, .. }) => {
                let reason = format!("offset {after} is not in this segment");
                break Err(WalError::corrupt(path, pos, reason));
            }
            Err(e) => break Err(e),
        }
    };
    scan.close().await?;
    found
}
