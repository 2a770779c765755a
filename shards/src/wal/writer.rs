//! The segment writer: appends bytes to the current segment with block-aligned DMA writes,
//! rewriting the partial tail block each time, and creates new segments.
//!
//! Owned by the committer task; nothing else writes segments.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::DmaFile;

use super::error::WalError;
use super::files::{self, align_down, align_up};
use super::limits::{BLOCK_BYTES, SEGMENT_HEADER_BYTES, WRITE_BYTES_MAX};
use super::segment::{encode_epoch, encode_header, segment_path, SegmentHeader, TMP_SUFFIX};
use super::shared::{SegmentEpoch, SegmentMeta, Shared};

pub(crate) struct SegmentWriter {
    pub file: Rc<DmaFile>,
    pub path: PathBuf,
    pub first: u64,
    /// Byte position where the next record goes.
    pub pos: u64,
    /// The bytes of the partial block `[align_down(pos), pos)`, rewritten by the next write.
    tail: Vec<u8>,
}

/// Reads consecutive bytes out of a list of slices.
struct Parts<'a> {
    parts: &'a [&'a [u8]],
    idx: usize,
    off: usize,
}

impl Parts<'_> {
    fn copy_to(&mut self, dst: &mut [u8]) {
        let mut d = 0;
        while d < dst.len() {
            let p = self.parts[self.idx];
            let n = (p.len() - self.off).min(dst.len() - d);
            dst[d..d + n].copy_from_slice(&p[self.off..self.off + n]);
            d += n;
            self.off += n;
            if self.off == p.len() {
                self.idx += 1;
                self.off = 0;
            }
        }
    }
}

impl SegmentWriter {
    /// Creates segment `first` of `epoch` durably (header, fdatasync, rename into place,
    /// directory fsync), registers it and makes it the current one. Uses `spare` (a pre-zeroed
    /// file at `spare_path`) if given, else a new preallocated file.
    pub async fn create(
        shared: &Shared,
        first: u64,
        epoch: SegmentEpoch,
        spare: Option<(DmaFile, &Path)>,
    ) -> Result<SegmentWriter, WalError> {
        let path = segment_path(&shared.wal_dir, first);
        let mut file = create_segment_file(shared, &path, (first, epoch), spare).await?;
        if shared.cfg.durable_writes() {
            // The file was made (and zeroed) with plain writes; appends go through O_DSYNC.
            files::close(file, &path).await?;
            file = files::open_rw_with(&path, true).await?;
        }
        let mut meta = SegmentMeta::new(first, path.clone());
        meta.epoch = epoch;
        shared.segments.borrow_mut().push(meta);
        let w = SegmentWriter {
            file: Rc::new(file),
            path,
            first,
            pos: SEGMENT_HEADER_BYTES,
            tail: Vec::new(),
        };
        *shared.current.borrow_mut() = Some((w.file.clone(), w.path.clone()));
        Ok(w)
    }

    /// Continues the recovered newest segment, whose valid data ends at `pos`. Syncs it once,
    /// so what recovery read counts as synced.
    pub async fn resume(
        shared: &Shared,
        path: PathBuf,
        first: u64,
        pos: u64,
    ) -> Result<SegmentWriter, WalError> {
        let file = files::open_rw_with(&path, shared.cfg.durable_writes()).await?;
        let block_start = align_down(pos);
        let tail = if pos > block_start {
            let block =
                files::read_aligned(&file, &path, block_start, BLOCK_BYTES as usize).await?;
            let keep = (pos - block_start) as usize;
            if block.len() < keep {
                return Err(WalError::corrupt(
                    &path,
                    block_start,
                    "tail block shorter than data",
                ));
            }
            block[..keep].to_vec()
        } else {
            Vec::new()
        };
        shared.fdatasync(&file, &path).await?;
        let w = SegmentWriter {
            file: Rc::new(file),
            path,
            first,
            pos,
            tail,
        };
        *shared.current.borrow_mut() = Some((w.file.clone(), w.path.clone()));
        Ok(w)
    }

    pub fn room(&self, segment_bytes: u64) -> u64 {
        segment_bytes.saturating_sub(self.pos)
    }

    /// Appends the concatenation of `parts` at `pos`: one `write_at` per `WRITE_BYTES_MAX`,
    /// each starting at the block holding `pos` and zero-padded to a whole block.
    pub async fn append(&mut self, shared: &Shared, parts: &[&[u8]]) -> Result<(), WalError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut src = Parts {
            parts,
            idx: 0,
            off: 0,
        };
        let mut done = 0;
        while done < total {
            let block_start = align_down(self.pos);
            let tail_len = self.tail.len();
            debug_assert_eq!(block_start + tail_len as u64, self.pos);
            let take = (total - done).min(WRITE_BYTES_MAX - tail_len);
            let len = align_up((tail_len + take) as u64) as usize;
            let new_pos = self.pos + take as u64;
            let keep =
                (align_down(new_pos) - block_start) as usize..(new_pos - block_start) as usize;
            let mut new_tail = Vec::with_capacity(keep.len());
            let tail = &self.tail;
            shared
                .write_at(&self.file, &self.path, block_start, len, |b| {
                    b[..tail_len].copy_from_slice(tail);
                    src.copy_to(&mut b[tail_len..tail_len + take]);
                    b[tail_len + take..].fill(0);
                    new_tail.extend_from_slice(&b[keep]);
                })
                .await?;
            self.pos = new_pos;
            self.tail = new_tail;
            done += take;
        }
        Ok(())
    }

    /// Makes the current segment, which holds no entry yet, one of `epoch` (its first entry
    /// will begin it): rewrites its header block (records start after it) and syncs it.
    pub async fn set_epoch(&self, shared: &Shared, epoch: SegmentEpoch) -> Result<(), WalError> {
        let header = SegmentHeader {
            shard: shared.cfg.shard,
            first_offset: self.first,
        };
        let len = SEGMENT_HEADER_BYTES as usize;
        shared
            .write_at(&self.file, &self.path, 0, len, |b| {
                encode_header(header, b);
                encode_epoch(epoch, b);
            })
            .await?;
        self.sync(shared).await?;
        if let Some(meta) = shared.segments.borrow_mut().last_mut() {
            meta.epoch = epoch;
        }
        Ok(())
    }

    /// Gives back the preallocated space after the data of a segment closed before it was
    /// full (a timed close or an epoch), so quiet hours do not keep many empty segments'
    /// worth of disk. The data is synced already; losing the truncation in a crash only
    /// leaves zeros, which every reader treats as the end of the data.
    pub async fn trim(&self) -> Result<(), WalError> {
        self.file
            .truncate(align_up(self.pos))
            .await
            .map_err(|e| WalError::io("truncate", &self.path, e))
    }

    pub async fn sync(&self, shared: &Shared) -> Result<(), WalError> {
        shared.fdatasync(&self.file, &self.path).await
    }

    /// Closes the file if no reader still holds it (otherwise the last holder closes it).
    pub async fn close(self) {
        if let Ok(file) = Rc::try_unwrap(self.file) {
            if let Err(e) = files::close(file, &self.path).await {
                log::warn!("wal: closing {}: {e}", self.path.display());
            }
        }
    }
}

async fn create_segment_file(
    shared: &Shared,
    path: &Path,
    (first, epoch): (u64, SegmentEpoch),
    spare: Option<(DmaFile, &Path)>,
) -> Result<DmaFile, WalError> {
    let (file, tmp, fresh) = match spare {
        Some((file, spare_path)) => (file, spare_path.to_path_buf(), false),
        None => {
            let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", path.display()));
            (files::create_rw(&tmp).await?, tmp, true)
        }
    };
    let header = SegmentHeader {
        shard: shared.cfg.shard,
        first_offset: first,
    };
    let made = async {
        #[cfg(test)]
        {
            let left = shared.faults.segment_enospc.get();
            if left > 0 {
                shared.faults.segment_enospc.set(left - 1);
                let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
                return Err(WalError::std_io("fallocate", &tmp, full));
            }
        }
        files::write_block_at(&file, &tmp, 0, SEGMENT_HEADER_BYTES as usize, |b| {
            encode_header(header, b);
            encode_epoch(epoch, b);
        })
        .await?;
        if fresh {
            preallocate(&file, &tmp, shared.cfg.segment_bytes).await?;
        }
        shared.fdatasync(&file, &tmp).await?;
        file.rename(path)
            .await
            .map_err(|e| WalError::io("rename", &tmp, e))
    }
    .await;
    if let Err(e) = made {
        let _ = files::close(file, &tmp).await;
        if fresh && tmp.exists() {
            // A partial file must not stay behind (on a full disk it holds what space there was).
            if let Err(rm) = files::remove(&tmp).await {
                log::warn!("wal: removing {}: {rm}", tmp.display());
            }
        }
        return Err(e);
    }
    files::sync_dir(&shared.wal_dir).await?;
    Ok(file)
}

/// Reserves the whole segment (unwritten extents read as zeros), so appends do not extend the
/// file. Filesystems without fallocate just skip it.
pub(crate) async fn preallocate(file: &DmaFile, path: &Path, bytes: u64) -> Result<(), WalError> {
    match file.pre_allocate(bytes, false).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let e: std::io::Error = e.into();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                Ok(())
            } else {
                Err(WalError::std_io("fallocate", path, e))
            }
        }
    }
}
