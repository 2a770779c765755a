//! Deciding which segments a snapshot makes unnecessary, and deleting them.
//!
//! A segment goes only when all three hold: it is not the newest; every offset in it is
//! covered by the OLDEST retained snapshot and by every pin (`LogPin`) (so falling back to that snapshot still finds the
//! log after it); it has an archived copy when there is an archive (`archive.rs`); and the
//! segments after it hold at least `retain_bytes` for readers.
//!
//! Deleting a preallocated segment frees its extents in the filesystem's journal; the files
//! go one at a time with `DELETE_PACE` between them, so a compaction of many segments does
//! not queue its metadata work in one burst beside the log's commits.

use std::time::Duration;

use super::error::WalError;
use super::files;
use super::shared::Shared;

/// Pause between two segment deletions (module doc).
const DELETE_PACE: Duration = Duration::from_millis(10);

/// How many of the oldest segments may go. `segs` is `(first offset, bytes)` oldest first.
pub(crate) fn deletable(segs: &[(u64, u64)], covered_through: u64, retain_bytes: u64) -> usize {
    let mut after: u64 = segs.iter().skip(1).map(|s| s.1).sum();
    let mut n = 0;
    for i in 0..segs.len().saturating_sub(1) {
        let wholly_covered = segs[i + 1].0 <= covered_through + 1;
        if !wholly_covered || after < retain_bytes {
            break;
        }
        n = i + 1;
        after -= segs[i + 1].1;
    }
    n
}

/// Deletes the segments the retained snapshots make unnecessary.
pub(crate) async fn compact(shared: &Shared) -> Result<(), WalError> {
    let Some(&oldest_snapshot) = shared.snapshots.borrow().first() else {
        return Ok(());
    };
    // A pin (a running backup: `LogPin`) keeps every segment after its snapshot.
    let covered = match shared.handle.pinned_floor() {
        Some(pin) => oldest_snapshot.min(pin),
        None => oldest_snapshot,
    };
    // The oldest segment without an archived copy stays, and so does every one after it.
    let covered = covered.min(shared.archive_hold.get().saturating_sub(1));
    let victims: Vec<_> = {
        let mut segs = shared.segments.borrow_mut();
        let sizes: Vec<(u64, u64)> = segs.iter().map(|s| (s.first, s.end)).collect();
        let n = deletable(&sizes, covered, shared.cfg.retain_bytes);
        // Out of the list first, so readers see the new oldest offset at once.
        segs.drain(..n).map(|s| s.path).collect()
    };
    shared.publish_oldest();
    if victims.is_empty() {
        return Ok(());
    }
    for (i, path) in victims.iter().enumerate() {
        if i > 0 {
            glommio::timer::sleep(DELETE_PACE).await;
        }
        files::remove(path).await?;
    }
    files::sync_dir(&shared.wal_dir).await?;
    log::info!(
        "wal: shard {}: deleted {} segment(s) covered by the snapshot at {covered}; oldest offset \
         now {}",
        shared.cfg.shard,
        victims.len(),
        shared.oldest()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::deletable;

    #[test]
    fn wal_compaction_needs_coverage_and_retention() {
        let segs = [(1, 100), (11, 100), (21, 100), (31, 50)];
        // Snapshot at 25: segments 1 and 11 are wholly covered, 21 is not.
        assert_eq!(deletable(&segs, 25, 0), 2);
        assert_eq!(deletable(&segs, 20, 0), 2);
        assert_eq!(deletable(&segs, 19, 0), 1);
        // Retention: after deleting segment 1, 250 bytes remain; after 11, 150.
        assert_eq!(deletable(&segs, 25, 200), 1);
        assert_eq!(deletable(&segs, 25, 300), 0);
        // Never the newest, even when covered.
        assert_eq!(deletable(&segs, 1000, 0), 3);
        assert_eq!(deletable(&[(1, 100)], 1000, 0), 0);
    }
}
