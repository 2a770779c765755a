//! Thin wrappers over glommio file calls that attach the operation and path to every error,
//! plus the few file chores the log needs (directory fsync, zero fill, the iopoll probe).

use std::path::Path;

use glommio::io::{Directory, DmaFile, OpenOptions, ReadResult};

use super::error::WalError;
use super::limits::{BLOCK_BYTES, WRITE_BYTES_MAX};

pub(crate) fn align_down(v: u64) -> u64 {
    v & !(BLOCK_BYTES - 1)
}

pub(crate) fn align_up(v: u64) -> u64 {
    align_down(v + BLOCK_BYTES - 1)
}

pub(crate) async fn open_read(path: &Path) -> Result<DmaFile, WalError> {
    DmaFile::open(path)
        .await
        .map_err(|e| WalError::io("open", path, e))
}

pub(crate) async fn open_rw(path: &Path) -> Result<DmaFile, WalError> {
    open_rw_with(path, false).await
}

/// Opens an existing file for reading and writing; with `durable_writes`, `O_DSYNC` (each
/// write completes once its data is on stable storage).
pub(crate) async fn open_rw_with(path: &Path, durable_writes: bool) -> Result<DmaFile, WalError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(if durable_writes { libc::O_DSYNC } else { 0 })
        .dma_open(path)
        .await
        .map_err(|e| WalError::io("open", path, e))
}

/// Creates (or truncates) a file for writing.
pub(crate) async fn create_rw(path: &Path) -> Result<DmaFile, WalError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .dma_open(path)
        .await
        .map_err(|e| WalError::io("create", path, e))
}

/// fsync of a directory, after creating, renaming or removing files in it.
pub(crate) async fn sync_dir(dir: &Path) -> Result<(), WalError> {
    let d = Directory::open(dir)
        .await
        .map_err(|e| WalError::io("open dir", dir, e))?;
    let res = d
        .sync()
        .await
        .map_err(|e| WalError::io("fsync dir", dir, e));
    let closed = d
        .close()
        .await
        .map_err(|e| WalError::io("close dir", dir, e));
    res.and(closed)
}

/// Fills a DMA buffer of `len` bytes (a multiple of 4096) with `fill` and writes it at `pos`,
/// failing on a short write.
pub(crate) async fn write_block_at(
    file: &DmaFile,
    path: &Path,
    pos: u64,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), WalError> {
    debug_assert!(pos % BLOCK_BYTES == 0 && len as u64 % BLOCK_BYTES == 0 && len > 0);
    let mut buf = file.alloc_dma_buffer(len);
    fill(buf.as_bytes_mut());
    let n = file
        .write_at(buf, pos)
        .await
        .map_err(|e| WalError::io("write", path, e))?;
    if n != len {
        return Err(WalError::std_io(
            "write",
            path,
            std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short write: {n} of {len}"),
            ),
        ));
    }
    Ok(())
}

/// Writes zeros over the block-aligned range `[from, to)`.
pub(crate) async fn write_zeros(
    file: &DmaFile,
    path: &Path,
    from: u64,
    to: u64,
) -> Result<(), WalError> {
    let mut pos = from;
    while pos < to {
        let len = (to - pos).min(WRITE_BYTES_MAX as u64) as usize;
        write_block_at(file, path, pos, len, |b| b.fill(0)).await?;
        pos += len as u64;
    }
    Ok(())
}

pub(crate) async fn read_aligned(
    file: &DmaFile,
    path: &Path,
    pos: u64,
    len: usize,
) -> Result<ReadResult, WalError> {
    file.read_at_aligned(pos, len)
        .await
        .map_err(|e| WalError::io("read", path, e))
}

pub(crate) async fn file_size(file: &DmaFile, path: &Path) -> Result<u64, WalError> {
    file.file_size()
        .await
        .map_err(|e| WalError::io("stat", path, e))
}

pub(crate) async fn close(file: DmaFile, path: &Path) -> Result<(), WalError> {
    file.close()
        .await
        .map_err(|e| WalError::io("close", path, e))
}

pub(crate) async fn remove(path: &Path) -> Result<(), WalError> {
    glommio::io::remove(path)
        .await
        .map_err(|e| WalError::io("remove", path, e))
}

/// The iopoll probe workaround (docs/glommio.md §0.1): the first `DmaFile` an executor opens on a
/// device must be a non-empty file, or glommio marks the device pollable and later reads fail
/// with EOPNOTSUPP. Opens `dir/.probe` (created with 4096 bytes if missing) and closes it.
pub(crate) async fn probe_device(dir: &Path) -> Result<(), WalError> {
    let path = dir.join(".probe");
    let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        let mut content = vec![0u8; BLOCK_BYTES as usize];
        let text = b"smdb iopoll probe: must stay non-empty\n";
        content[..text.len()].copy_from_slice(text);
        std::fs::write(&path, &content).map_err(|e| WalError::std_io("create", &path, e))?;
    }
    let f = open_read(&path).await?;
    close(f, &path).await
}
