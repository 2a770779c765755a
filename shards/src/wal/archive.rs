//! The archiver (`storage.archive_dir`, docs/wal.md "The archive"): copies each
//! closed segment into `ARCHIVE/shard-<n>/<first>-<last>-e<epoch>.seg` (names:
//! `smdb_format::archive`), and for a segment that begins an epoch (the live one included, as
//! soon as it exists) adds this shard's `from` to `ARCHIVE/history/<epoch>.json`
//! (`history.rs`).
//!
//! One task per log (`start`, spawned by `Wal::open` beside the committer), woken at each
//! rotation. A copy is a byte-for-byte prefix of the segment: its header block and every block
//! up to the end of its records (the preallocated zeros after them are left out), written to a
//! temporary name in the same directory, fdatasynced, renamed, and the directory fsynced. An
//! existing name is skipped (another member, or this one before a restart, wrote the same
//! records). A failure (any error, ENOSPC included) is counted, logged once per streak and
//! retried with a backoff of 1 s doubling to 30 s; meanwhile `Shared::archive_hold` keeps
//! compaction off that segment and every later one.
//!
//! It reads the segment with its own DMA file in 1 MiB chunks paced to `BYTES_PER_SEC_MAX`, so
//! it never competes with the log's commits for long; it never touches the live segment.

mod history;

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::io::DmaFile;
use glommio::task::JoinHandle;
use smdb_format::archive::{shard_dir, ArchivedSegment};

use super::error::WalError;
use super::files::{self, align_up};
use super::shared::{SegmentEpoch, Shared};
use super::space::free_bytes;

/// Bytes read and written per step of a copy: large enough to stream, small enough that one
/// step never holds the disk long beside a group commit.
const CHUNK_BYTES: usize = 1 << 20;
/// The copy's pace: the backup stream's cap (src/backup/stream.rs), measured to leave the
/// foreground at 0.9x or more; a 64 MiB segment takes about a second.
const BYTES_PER_SEC_MAX: u64 = 64 << 20;
/// First wait after a failed copy, doubled after each further failure up to the max.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
const _: () = assert!(CHUNK_BYTES as u64 % super::limits::BLOCK_BYTES == 0);

/// A closed segment to archive, as the log knew it when the copy began.
#[derive(Debug, Clone)]
struct Closed {
    first: u64,
    last: u64,
    end: u64,
    path: PathBuf,
    epoch: SegmentEpoch,
}

/// Spawns the archiver of this log when it has an archive; `close` waits for it.
pub(crate) fn start(shared: &Rc<Shared>) -> Option<JoinHandle<()>> {
    let archive = shared.cfg.archive_dir.clone()?;
    shared.archive_hold.set(shared.oldest());
    Some(glommio::spawn_local(run(shared.clone(), archive)).detach())
}

async fn run(shared: Rc<Shared>, archive: PathBuf) {
    let mut failures: u32 = 0;
    // First offset of the newest epoch-starting segment whose history entry is written.
    let mut history_done = 0;
    while !shared.closing.get() {
        if let Some((first, epoch)) = epoch_start_after(&shared, history_done) {
            match history::add_from(&archive, shared.cfg.shard, first, epoch) {
                Ok(()) => history_done = first,
                Err(e) => {
                    failed(&shared, &mut failures, first, &e).await;
                    continue;
                }
            }
        }
        let Some(seg) = next_closed(&shared) else {
            shared.archive_bell.wait().await;
            continue;
        };
        match archive_one(&shared, &archive, &seg).await {
            Ok(copied) => {
                if failures > 0 {
                    log::info!(
                        "wal: shard {}: archiving works again after {failures} failure(s)",
                        shared.cfg.shard
                    );
                }
                failures = 0;
                shared.archive_hold.set(seg.last + 1);
                if copied {
                    shared.counters.borrow_mut().archived_segments_total += 1;
                }
            }
            Err(_) if shared.closing.get() => return,
            Err(e) => failed(&shared, &mut failures, seg.first, &e).await,
        }
    }
}

/// Counts a failure, logs the first of a streak, and waits out the backoff.
async fn failed(shared: &Shared, failures: &mut u32, first: u64, e: &WalError) {
    shared.counters.borrow_mut().archive_failures_total += 1;
    if *failures == 0 {
        log::error!(
            "wal: shard {}: archiving the segment at {first} failed: {e}; retrying, and \
             compaction keeps it until its copy exists",
            shared.cfg.shard
        );
    }
    let wait = RETRY_FIRST
        .saturating_mul(1 << (*failures).min(5))
        .min(RETRY_MAX);
    *failures = failures.saturating_add(1);
    sleep_unless_closing(shared, wait).await;
}

/// The oldest segment (the live one included) after `done` whose first entry begins an epoch.
fn epoch_start_after(shared: &Shared, done: u64) -> Option<(u64, SegmentEpoch)> {
    let segs = shared.segments.borrow();
    segs.iter()
        .find(|m| m.first > done && m.epoch.starts)
        .map(|m| (m.first, m.epoch))
}

/// The oldest closed (not the newest) segment at or after the hold, if any.
fn next_closed(shared: &Shared) -> Option<Closed> {
    let hold = shared.archive_hold.get();
    let segs = shared.segments.borrow();
    let closed = &segs[..segs.len().saturating_sub(1)];
    closed.iter().find(|m| m.first >= hold).map(|m| Closed {
        first: m.first,
        last: m.last,
        end: m.end,
        path: m.path.clone(),
        epoch: m.epoch,
    })
}

/// Archives `seg` (and its epoch's history entry); false when its name already existed.
async fn archive_one(shared: &Shared, archive: &Path, seg: &Closed) -> Result<bool, WalError> {
    let dir = shard_dir(archive, shared.cfg.shard);
    let name = ArchivedSegment {
        first: seg.first,
        last: seg.last,
        epoch: seg.epoch.epoch,
    }
    .file_name();
    let dest = dir.join(&name);
    if dest.exists() {
        return Ok(false);
    }
    std::fs::create_dir_all(&dir).map_err(|e| WalError::std_io("mkdir", &dir, e))?;
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    if let Err(e) = copy(shared, seg, &tmp).await {
        if let Err(rm) = std::fs::remove_file(&tmp) {
            if rm.kind() != std::io::ErrorKind::NotFound {
                log::warn!("wal: removing {}: {rm}", tmp.display());
            }
        }
        return Err(e);
    }
    std::fs::rename(&tmp, &dest).map_err(|e| WalError::std_io("rename", &tmp, e))?;
    files::sync_dir(&dir).await?;
    Ok(true)
}

/// Copies the segment's header and records into `tmp` and fdatasyncs it.
/// Both files are DMA files: the copy never fills the page cache, so no large buffered
/// flush queues ahead of the log's writes (docs/glommio.md §4).
async fn copy(shared: &Shared, seg: &Closed, tmp: &Path) -> Result<(), WalError> {
    let src = files::open_read(&seg.path).await?;
    let out = match files::create_rw(tmp).await {
        Ok(out) => out,
        Err(e) => {
            let _ = files::close(src, &seg.path).await;
            return Err(e);
        }
    };
    let done = copy_blocks(shared, seg, &src, &out, tmp).await;
    let synced = match done {
        Ok(()) => out
            .fdatasync()
            .await
            .map_err(|e| WalError::io("fdatasync", tmp, e)),
        Err(e) => Err(e),
    };
    let closed_out = files::close(out, tmp).await;
    let closed_src = files::close(src, &seg.path).await;
    synced.and(closed_out).and(closed_src)
}

async fn copy_blocks(
    shared: &Shared,
    seg: &Closed,
    src: &DmaFile,
    out: &DmaFile,
    tmp: &Path,
) -> Result<(), WalError> {
    let len = align_up(seg.end);
    let reserve = same_filesystem(&shared.wal_dir, tmp).then(|| shared.cfg.reserve());
    let began = Instant::now();
    let mut pos = 0;
    while pos < len {
        if shared.closing.get() {
            return Err(WalError::Closed);
        }
        let n = (len - pos).min(CHUNK_BYTES as u64) as usize;
        if let Some(reserve) = reserve {
            check_room(tmp, n as u64, reserve)?;
        }
        let block = files::read_aligned(src, &seg.path, pos, n).await?;
        if block.len() < n {
            let reason = format!("segment ends at byte {}", pos + block.len() as u64);
            return Err(WalError::corrupt(&seg.path, pos, reason));
        }
        // `n` is whole blocks: `len` and the chunk are multiples of the block size.
        files::write_block_at(out, tmp, pos, n, |b| b.copy_from_slice(&block[..n])).await?;
        pos += n as u64;
        pace(shared, began, pos).await;
    }
    Ok(())
}

/// Sleeps until `bytes` is within `BYTES_PER_SEC_MAX` of the time since `began`.
async fn pace(shared: &Shared, began: Instant, bytes: u64) {
    let due = Duration::from_secs_f64(bytes as f64 / BYTES_PER_SEC_MAX as f64);
    if let Some(wait) = due.checked_sub(began.elapsed()) {
        sleep_unless_closing(shared, wait).await;
    }
}

async fn sleep_unless_closing(shared: &Shared, wait: Duration) {
    let sleep = async { glommio::timer::sleep(wait).await };
    let closing = async {
        while !shared.closing.get() {
            shared.archive_bell.wait().await;
        }
    };
    futures_lite::future::or(sleep, closing).await;
}

/// Whether the archive file `tmp` and the log live on one filesystem (then a copy must leave
/// `reserve_bytes` free for the log). Unknown: assume they do.
fn same_filesystem(wal_dir: &Path, tmp: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dir = tmp.parent().unwrap_or(tmp);
    match (std::fs::metadata(wal_dir), std::fs::metadata(dir)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => true,
    }
}

/// Refuses a write of `n` bytes that would leave less than `reserve` free (ENOSPC, so it is
/// counted and retried like the disk's own).
fn check_room(tmp: &Path, n: u64, reserve: u64) -> Result<(), WalError> {
    let free = free_bytes(tmp).map_err(|e| WalError::std_io("statvfs", tmp, e))?;
    if free < n.saturating_add(reserve) {
        return Err(WalError::StorageFull {
            path: tmp.to_path_buf(),
            needed: n.saturating_add(reserve),
            free,
        });
    }
    Ok(())
}
