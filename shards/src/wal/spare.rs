//! The spare segment: a pre-zeroed file prepared in the background for the next rotation.
//!
//! Writing into preallocated but unwritten extents makes every fdatasync also commit an extent
//! conversion to the filesystem journal; overwriting blocks that already hold zeros does not
//! (docs/glommio.md §4). Zeroing a 64 MiB segment takes ~50 ms, too long to do inside the commit
//! path, so after each rotation a task prepares `wal/spare.seg.tmp` (fallocate, zero, fsync).
//! At the next rotation the committer stamps the header on it and renames it into place; if it
//! is not ready yet, the committer creates a merely preallocated segment instead.
//!
//! Costs one extra segment of disk per shard. A leftover spare is deleted on open like any
//! `*.tmp` file. Failures here never poison the log: the committer falls back. A failure for
//! lack of space (`space.rs`) deletes the partial file, marks the disk full (appends are
//! refused) and is retried every `SPACE_RETRY_INTERVAL` until it succeeds or the log closes.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::DmaFile;
use glommio::Task;

use super::error::WalError;
use super::files;
use super::limits::WRITE_BYTES_MAX;
use super::space::{is_out_of_space, Alloc, SpaceFlags, SPACE_RETRY_INTERVAL};
use super::writer::preallocate;

pub(crate) const SPARE_NAME: &str = "spare.seg.tmp";

/// Bytes. Size of each zeroing write; one shared buffer, reused for every write.
const ZERO_WRITE_BYTES: usize = 1 << 20;
const _: () = assert!(ZERO_WRITE_BYTES <= WRITE_BYTES_MAX);

/// Pause after each zeroing write of a spare prepared in the background: at most one 1 MiB
/// write of zeros is queued beside the log's commits, and the zeroing takes at most ~64 MiB/s
/// of the device (a 64 MiB spare in about a second, while a segment takes several seconds to
/// fill at full load), so a commit seldom waits behind a zero write. A brand-new log's first
/// segment is zeroed at full speed (`prepare_now`, at open).
const ZERO_PACE: std::time::Duration = std::time::Duration::from_millis(16);

pub(crate) struct Spare {
    path: PathBuf,
    bytes: u64,
    task: Option<Task<Result<DmaFile, WalError>>>,
    finished: Rc<Cell<bool>>,
    /// Set by `discard`: a preparation waiting for space gives up.
    cancel: Rc<Cell<bool>>,
    space: Rc<SpaceFlags>,
}

impl Spare {
    pub fn new(wal_dir: &Path, bytes: u64, space: Rc<SpaceFlags>) -> Spare {
        Spare {
            path: wal_dir.join(SPARE_NAME),
            bytes,
            task: None,
            finished: Rc::new(Cell::new(false)),
            cancel: Rc::new(Cell::new(false)),
            space,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts preparing a spare unless one is already in progress or ready.
    pub fn start(&mut self) {
        if self.task.is_some() {
            return;
        }
        self.finished.set(false);
        let fut = prepare(
            self.path.clone(),
            self.bytes,
            self.finished.clone(),
            self.cancel.clone(),
            self.space.clone(),
        );
        self.task = Some(glommio::spawn_local(fut));
    }

    /// Prepares a spare now and returns it (used for a brand-new log's first segment).
    pub async fn prepare_now(&self) -> Result<DmaFile, WalError> {
        let res = zeroed_file(&self.path, self.bytes, None).await;
        if res.is_err() {
            remove_quietly(&self.path).await;
        }
        res
    }

    /// The prepared spare, if it is ready (without waiting).
    pub async fn take_ready(&mut self) -> Option<DmaFile> {
        if !self.finished.get() {
            return None;
        }
        match self.task.take()?.await {
            Ok(file) => Some(file),
            Err(e) => {
                log::warn!("wal: preparing the spare segment failed, continuing without: {e}");
                None
            }
        }
    }

    /// Waits for a preparation in progress, then deletes the spare file.
    pub async fn discard(&mut self) {
        self.cancel.set(true);
        if let Some(task) = self.task.take() {
            if let Ok(file) = task.await {
                let _ = files::close(file, &self.path).await;
            }
        }
        remove_quietly(&self.path).await;
    }
}

/// Deletes `path` if it exists; a failure is only logged (open deletes leftovers anyway).
async fn remove_quietly(path: &Path) {
    if path.exists() {
        if let Err(e) = files::remove(path).await {
            log::warn!("wal: removing {}: {e}", path.display());
        }
    }
}

/// Prepares the spare in the background; while the disk has no room for it, deletes the
/// partial file, marks the disk full and tries again every `SPACE_RETRY_INTERVAL`.
async fn prepare(
    path: PathBuf,
    bytes: u64,
    finished: Rc<Cell<bool>>,
    cancel: Rc<Cell<bool>>,
    space: Rc<SpaceFlags>,
) -> Result<DmaFile, WalError> {
    let res = loop {
        match zeroed_file(&path, bytes, Some(ZERO_PACE)).await {
            Ok(file) => {
                space.succeeded(Alloc::Spare);
                break Ok(file);
            }
            Err(e) if is_out_of_space(&e) => {
                remove_quietly(&path).await;
                space.failed(Alloc::Spare, &e);
                glommio::timer::sleep(SPACE_RETRY_INTERVAL).await;
                if cancel.get() {
                    break Err(e);
                }
            }
            Err(e) => break Err(e),
        }
    };
    finished.set(true);
    res
}

/// A preallocated file of `bytes` zeros, synced; `pace` is a pause after each write.
async fn zeroed_file(
    path: &Path,
    bytes: u64,
    pace: Option<std::time::Duration>,
) -> Result<DmaFile, WalError> {
    let file = files::create_rw(path).await?;
    let res = async {
        preallocate(&file, path, bytes).await?;
        let mut zeros = file.alloc_dma_buffer(ZERO_WRITE_BYTES);
        zeros.as_bytes_mut().fill(0);
        let zeros = Rc::new(zeros);
        let mut pos = 0;
        while pos < bytes {
            let n = file
                .write_rc_at(zeros.clone(), pos)
                .await
                .map_err(|e| WalError::io("write", path, e))?;
            if n == 0 {
                let zero = std::io::Error::new(std::io::ErrorKind::WriteZero, "zero-length write");
                return Err(WalError::std_io("write", path, zero));
            }
            pos += n as u64;
            if let Some(pause) = pace.filter(|_| pos < bytes) {
                glommio::timer::sleep(pause).await;
            }
        }
        file.fdatasync()
            .await
            .map_err(|e| WalError::io("fdatasync", path, e))
    }
    .await;
    match res {
        Ok(()) => Ok(file),
        Err(e) => {
            let _ = files::close(file, path).await;
            Err(e)
        }
    }
}
