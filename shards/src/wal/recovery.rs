//! Recovery at open: newest valid snapshot, then every record after it, checking everything.
//!
//! Rules (see docs/wal.md):
//! - Snapshots newest first; one failing its checks is renamed `*.corrupt` with a warning and
//!   the next older one is tried. No valid snapshot: the log must start at offset 1.
//! - Segments from the one holding `snapshot + 1` on, in order; each must start where the
//!   previous ended ("missing offsets" otherwise) and offsets must be contiguous.
//! - An older segment must end cleanly (a zero length, or the end of the file); anything else
//!   is `Corrupt`.
//! - In the newest segment, the valid data ends at the first zero length, bad record or torn
//!   record. If a valid sync marker after that point says the missing offset had been synced,
//!   synced data was lost: `Corrupt`. Otherwise it is a torn tail: the bytes after the end are
//!   zeroed (tail block rewritten zero-padded) and the writer continues there.

use std::path::{Path, PathBuf};

use super::config::WalConfig;
use super::error::WalError;
use super::files::{self, align_down, align_up};
use super::limits::{BLOCK_BYTES, SEGMENT_HEADER_BYTES};
use super::record::KIND_ENTRY;
use super::scan::{ReadSize, SegmentScan, Step};
use super::segment::{decode_epoch, decode_header, list_segments};
use super::shared::SegmentMeta;
use super::snapshot::{self, Opened, SnapshotFile};
use super::Recovered;

pub(crate) type OnRecovered<'a> = &'a mut dyn FnMut(Recovered<'_>) -> Result<(), String>;

/// Where the writer continues.
pub(crate) struct Tail {
    pub path: PathBuf,
    pub first: u64,
    pub pos: u64,
}

pub(crate) struct Outcome {
    pub head: u64,
    pub segments: Vec<SegmentMeta>,
    /// Snapshot offsets on disk, ascending.
    pub snapshots: Vec<u64>,
    /// `None` when there is no segment yet.
    pub tail: Option<Tail>,
}

pub(crate) async fn recover(cfg: &WalConfig, on: OnRecovered<'_>) -> Result<Outcome, WalError> {
    let (snap, snapshots) = load_snapshot(cfg, on).await?;
    let segs = list_checked_segments(cfg).await?;
    let Some(newest) = segs.last() else {
        return Ok(Outcome {
            head: snap,
            segments: Vec::new(),
            snapshots,
            tail: None,
        });
    };
    let oldest = &segs[0];
    if oldest.first > snap + 1 {
        let reason = if snap == 0 {
            format!(
                "the log starts at offset {} and there is no snapshot",
                oldest.first
            )
        } else {
            format!(
                "the log starts at offset {} but the snapshot ends at {snap}",
                oldest.first
            )
        };
        return Err(WalError::corrupt(&oldest.path, 0, reason));
    }
    // Segments wholly before the snapshot are kept for readers but not read now.
    let k = segs.partition_point(|s| s.first <= snap + 1) - 1;
    let mut metas: Vec<SegmentMeta> = Vec::with_capacity(segs.len());
    for (i, s) in segs[..k].iter().enumerate() {
        let mut m = SegmentMeta::new(s.first, s.path.clone());
        m.epoch = s.epoch;
        m.last = segs[i + 1].first - 1;
        m.end = s.size;
        metas.push(m);
    }
    let newest_path = newest.path.clone();
    let mut expected = segs[k].first;
    let mut tail_pos = SEGMENT_HEADER_BYTES;
    for (i, s) in segs.iter().enumerate().skip(k) {
        if s.first != expected {
            let reason = format!(
                "missing offsets: the previous segment ends at {}, this one starts at {}",
                expected - 1,
                s.first
            );
            return Err(WalError::corrupt(&s.path, 0, reason));
        }
        let is_newest = i + 1 == segs.len();
        let (meta, end) = scan_segment(s, snap, is_newest, &mut expected, on).await?;
        metas.push(meta);
        tail_pos = end;
    }
    let head = expected - 1;
    if head < snap {
        let reason = format!("the log ends at offset {head} but the snapshot is at {snap}");
        return Err(WalError::corrupt(&newest_path, tail_pos, reason));
    }
    let first = newest.first;
    let tail = Some(Tail {
        path: newest_path,
        first,
        pos: tail_pos,
    });
    Ok(Outcome {
        head,
        segments: metas,
        snapshots,
        tail,
    })
}

/// Returns the offset of the snapshot handed to `on` (0 if none) and the offsets of all
/// snapshot files still in place.
async fn load_snapshot(cfg: &WalConfig, on: OnRecovered<'_>) -> Result<(u64, Vec<u64>), WalError> {
    let dir = cfg.snapshot_dir();
    let listing = snapshot::list_snapshots(&dir)?;
    let mut changed = remove_temps(&listing.temps)?;
    let mut chosen = None;
    let mut kept = Vec::new();
    for (offset, path) in listing.files.iter().rev() {
        if chosen.is_none() {
            match stream_snapshot(cfg.shard, path, *offset, on).await? {
                None => chosen = Some(*offset),
                Some(reason) => {
                    let aside = PathBuf::from(format!("{}.corrupt", path.display()));
                    log::warn!(
                        "wal: shard {}: snapshot {} is invalid ({reason}); moved to {} and \
                         falling back to an older one",
                        cfg.shard,
                        path.display(),
                        aside.display()
                    );
                    std::fs::rename(path, &aside)
                        .map_err(|e| WalError::std_io("rename", path, e))?;
                    changed = true;
                    continue;
                }
            }
        }
        kept.push(*offset);
    }
    if changed {
        files::sync_dir(&dir).await?;
    }
    kept.reverse();
    Ok((chosen.unwrap_or(0), kept))
}

/// Hands the snapshot at `path` to `on` as a stream (see `Recovered`). Returns why it is
/// invalid, or None once `on` had all of it. A callback error is kept until the payload's CRC
/// is known: with a bad CRC the snapshot is only damaged (`SnapshotDiscard`, invalid); with a
/// good one the error stands (`Apply`).
async fn stream_snapshot(
    shard: u32,
    path: &Path,
    offset: u64,
    on: OnRecovered<'_>,
) -> Result<Option<String>, WalError> {
    let apply = |reason| WalError::Apply { offset, reason };
    let mut file = match SnapshotFile::open(path, shard, offset, ReadSize::Recovery).await? {
        Opened::Valid(file) => file,
        Opened::Invalid(reason) => return Ok(Some(reason)),
    };
    let h = file.header;
    let begin = Recovered::SnapshotBegin {
        offset,
        version: h.version,
        len: h.payload_len,
    };
    let mut refused = on(begin).err();
    loop {
        match file.next().await {
            Ok(Some(part)) if refused.is_none() => {
                refused = on(Recovered::SnapshotPart { bytes: &part }).err();
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                let _ = file.close().await;
                return Err(e);
            }
        }
    }
    let valid = file.crc_holds();
    file.close().await?;
    if !valid {
        on(Recovered::SnapshotDiscard { offset }).map_err(apply)?;
        return Ok(Some("payload checksum mismatch".into()));
    }
    if let Some(reason) = refused {
        return Err(apply(reason));
    }
    on(Recovered::SnapshotEnd { offset }).map_err(apply)?;
    Ok(None)
}

fn remove_temps(temps: &[PathBuf]) -> Result<bool, WalError> {
    for t in temps {
        log::warn!("wal: removing leftover {}", t.display());
        std::fs::remove_file(t).map_err(|e| WalError::std_io("remove", t, e))?;
    }
    Ok(!temps.is_empty())
}

struct SegmentFile {
    first: u64,
    path: PathBuf,
    size: u64,
    epoch: super::shared::SegmentEpoch,
}

/// Lists the segments and checks each header: magic, checksum, shard, and first offset
/// matching the file name.
async fn list_checked_segments(cfg: &WalConfig) -> Result<Vec<SegmentFile>, WalError> {
    let dir = cfg.wal_dir();
    let listing = list_segments(&dir)?;
    if remove_temps(&listing.temps)? {
        files::sync_dir(&dir).await?;
    }
    let mut out = Vec::with_capacity(listing.files.len());
    for (first, path) in listing.files {
        let file = files::open_read(&path).await?;
        let size = files::file_size(&file, &path).await?;
        let header = if size >= SEGMENT_HEADER_BYTES {
            let block = files::read_aligned(&file, &path, 0, SEGMENT_HEADER_BYTES as usize).await?;
            decode_header(&block).and_then(|h| Ok((h, decode_epoch(&block)?)))
        } else {
            Err(format!(
                "file is {size} bytes, shorter than the segment header"
            ))
        };
        files::close(file, &path).await?;
        let (h, epoch) = header.map_err(|reason| WalError::corrupt(&path, 0, reason))?;
        if h.shard != cfg.shard {
            let reason = format!("segment belongs to shard {}, not {}", h.shard, cfg.shard);
            return Err(WalError::corrupt(&path, 0, reason));
        }
        if first == 0 {
            return Err(WalError::corrupt(
                &path,
                0,
                "offsets start at 1; segment 0 is invalid",
            ));
        }
        if h.first_offset != first {
            let reason = format!(
                "header says first offset {}, name says {first}",
                h.first_offset
            );
            return Err(WalError::corrupt(&path, 0, reason));
        }
        out.push(SegmentFile {
            first,
            path,
            size,
            epoch,
        });
    }
    Ok(out)
}

/// Reads one segment's records, handing entries after `snap` to `on`. Returns the segment's
/// metadata and where its valid data ends.
async fn scan_segment(
    s: &SegmentFile,
    snap: u64,
    is_newest: bool,
    expected: &mut u64,
    on: OnRecovered<'_>,
) -> Result<(SegmentMeta, u64), WalError> {
    let mut meta = SegmentMeta::new(s.first, s.path.clone());
    meta.epoch = s.epoch;
    let mut scan = SegmentScan::open(&s.path, SEGMENT_HEADER_BYTES, ReadSize::Recovery).await?;
    let stop = loop {
        match scan.next().await? {
            Step::Record {
                pos,
                offset,
                kind,
                payload,
            } => {
                if offset != *expected {
                    let reason =
                        format!("offsets must be contiguous: expected {expected}, got {offset}");
                    return Err(WalError::corrupt(&s.path, pos, reason));
                }
                if kind == KIND_ENTRY {
                    if offset > snap {
                        let payload = scan.bytes(payload);
                        on(Recovered::Record { offset, payload })
                            .map_err(|reason| WalError::Apply { offset, reason })?;
                    }
                    meta.note_entry(offset, pos);
                    meta.last = offset;
                    *expected += 1;
                }
                meta.end = scan.pos();
            }
            Step::End { pos } => break (pos, None),
            Step::Bad { pos, reason } => break (pos, Some(reason)),
        }
    };
    let (end, bad) = stop;
    if !is_newest {
        scan.close().await?;
        if let Some(reason) = bad {
            return Err(WalError::corrupt(&s.path, end, reason));
        }
        return Ok((meta, end));
    }
    settle_newest_tail(&s.path, scan, end, bad, *expected).await?;
    Ok((meta, end))
}

/// Decides what the bytes after the valid data of the newest segment are (see the module
/// docs): lost synced data (`Corrupt`) or a torn tail, which is zeroed.
async fn settle_newest_tail(
    path: &Path,
    mut scan: SegmentScan,
    end: u64,
    bad: Option<String>,
    expected: u64,
) -> Result<(), WalError> {
    let rest = scan.scan_rest().await;
    scan.close().await?;
    let rest = rest?;
    if let Some((at, synced)) = rest.marker {
        if synced >= expected {
            let what = bad.as_deref().unwrap_or("the data ends");
            let reason = format!(
                "{what} where offset {expected} should be, but a sync marker at byte {at} says \
                 offsets through {synced} were synced"
            );
            return Err(WalError::corrupt(path, end, reason));
        }
    }
    if let Some(nonzero_end) = rest.nonzero_end.filter(|&e| e > end) {
        let cause = bad
            .as_deref()
            .unwrap_or("zero length followed by stale data");
        log::warn!(
            "wal: {}: truncating a torn tail of {} bytes at byte {end} (offset {expected}): {cause}",
            path.display(),
            nonzero_end - end
        );
        truncate_tail(path, end, nonzero_end).await?;
    }
    Ok(())
}

/// Zeroes `[end, nonzero_end)`: rewrites the block holding `end` keeping its valid prefix, and
/// overwrites later blocks with zeros, then syncs. Stale records must not survive past the
/// end, or a later crash could splice them onto new records with the same offsets.
pub(crate) async fn truncate_tail(path: &Path, end: u64, nonzero_end: u64) -> Result<(), WalError> {
    let file = files::open_rw(path).await?;
    let res = async {
        let block_start = align_down(end);
        let keep = (end - block_start) as usize;
        let old = files::read_aligned(&file, path, block_start, BLOCK_BYTES as usize).await?;
        let prefix = old.get(..keep).map(<[u8]>::to_vec).unwrap_or_default();
        drop(old);
        files::write_block_at(&file, path, block_start, BLOCK_BYTES as usize, |b| {
            b.fill(0);
            b[..prefix.len()].copy_from_slice(&prefix);
        })
        .await?;
        let zero_from = block_start + BLOCK_BYTES;
        files::write_zeros(&file, path, zero_from, align_up(nonzero_end).max(zero_from)).await?;
        file.fdatasync()
            .await
            .map_err(|e| WalError::io("fdatasync", path, e))
    }
    .await;
    let closed = files::close(file, path).await;
    res.and(closed)
}
