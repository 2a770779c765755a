//! Snapshot files: `snapshots/<offset, 20 digits>.snap`.
//!
//! Header block (4096 bytes, little-endian): `magic "SMDBSNP1" | version u32 | shard u32 |
//! offset u64 | payload_len u64 | payload_crc32c u32 | header_crc32c u32` (the header CRC covers
//! the 36 bytes before it), then zeros; the payload starts at byte 4096 and the file is
//! zero-padded to a multiple of 4096. Written as `<name>.tmp`, fdatasynced, renamed, and the
//! directory fsynced, so a `.snap` file is complete unless the disk damaged it.

use std::path::{Path, PathBuf};

use glommio::io::DmaStreamReaderBuilder;

use super::error::WalError;
pub use smdb_format::snapshot::*;

/// Lists snapshot files as the WAL reports errors.
pub fn list_snapshots(dir: &Path) -> Result<smdb_format::segment::Listing, WalError> {
    smdb_format::snapshot::list_snapshots(dir).map_err(|e| WalError::std_io("list", dir, e))
}
use super::files;
use super::limits::{
    READ_AHEAD_BUFFERS, READ_CHUNK_BYTES, SNAPSHOT_BYTES_MAX, SNAPSHOT_HEADER_BYTES,
    WRITE_BYTES_MAX,
};
use super::segment::TMP_SUFFIX;

/// Copies the bytes of the virtual file `header block ++ payload ++ zeros` that fall in
/// `[pos, pos + dst.len())` into `dst`.
fn fill_from(dst: &mut [u8], pos: u64, header: &[u8], payload: &[u8]) {
    dst.fill(0);
    let hl = header.len() as u64;
    if pos < hl {
        let n = ((hl - pos) as usize).min(dst.len());
        dst[..n].copy_from_slice(&header[pos as usize..pos as usize + n]);
    }
    let data_start = pos.max(hl);
    let data_end = (pos + dst.len() as u64).min(hl + payload.len() as u64);
    if data_start < data_end {
        let src = &payload[(data_start - hl) as usize..(data_end - hl) as usize];
        let at = (data_start - pos) as usize;
        dst[at..at + src.len()].copy_from_slice(src);
    }
}

/// Writes a snapshot durably: temp file, fdatasync, rename, directory fsync.
pub async fn write(dir: &Path, shard: u32, offset: u64, payload: &[u8]) -> Result<(), WalError> {
    let path = snapshot_path(dir, offset);
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", path.display()));
    if payload.len() as u64 > SNAPSHOT_BYTES_MAX {
        return Err(WalError::TooLarge {
            len: payload.len(),
            max: SNAPSHOT_BYTES_MAX as usize,
        });
    }
    let mut header = vec![0u8; SNAPSHOT_HEADER_BYTES as usize];
    let h = SnapshotHeader {
        shard,
        offset,
        payload_len: payload.len() as u64,
        payload_crc: crc32c::crc32c(payload),
    };
    encode_header(h, &mut header);
    let file = files::create_rw(&tmp).await?;
    let total = files::align_up(SNAPSHOT_HEADER_BYTES + payload.len() as u64);
    let mut written = async {
        let mut pos = 0;
        while pos < total {
            let len = (total - pos).min(WRITE_BYTES_MAX as u64) as usize;
            files::write_block_at(&file, &tmp, pos, len, |b| {
                fill_from(b, pos, &header, payload)
            })
            .await?;
            pos += len as u64;
        }
        file.fdatasync()
            .await
            .map_err(|e| WalError::io("fdatasync", &tmp, e))?;
        file.rename(&path)
            .await
            .map_err(|e| WalError::io("rename", &tmp, e))
    }
    .await;
    let closed = files::close(file, &tmp).await;
    if written.is_ok() {
        written = closed;
    }
    if let Err(e) = written {
        // Best effort: a leftover temp file is also deleted on the next open.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    files::sync_dir(dir).await
}

/// The result of reading one snapshot file.
pub enum Loaded {
    Valid(Vec<u8>),
    /// The file fails a check; the reason says which.
    Invalid(String),
}

/// Reads and checks the snapshot at `path`, which by its name holds `offset`.
pub async fn read(path: &Path, shard: u32, offset: u64) -> Result<Loaded, WalError> {
    let file = files::open_read(path).await?;
    let size = files::file_size(&file, path).await?;
    if size < SNAPSHOT_HEADER_BYTES {
        files::close(file, path).await?;
        return Ok(Loaded::Invalid(format!(
            "file is {size} bytes, shorter than its header"
        )));
    }
    let block = files::read_aligned(&file, path, 0, SNAPSHOT_HEADER_BYTES as usize).await?;
    let h = match decode_header(&block) {
        Ok(h) => h,
        Err(reason) => {
            files::close(file, path).await?;
            return Ok(Loaded::Invalid(reason));
        }
    };
    drop(block);
    let problem = if h.shard != shard {
        Some(format!("belongs to shard {}, not {shard}", h.shard))
    } else if h.offset != offset {
        Some(format!(
            "header says offset {}, name says {offset}",
            h.offset
        ))
    } else if h.payload_len > SNAPSHOT_BYTES_MAX {
        Some(format!(
            "payload length {} exceeds the limit",
            h.payload_len
        ))
    } else if size < SNAPSHOT_HEADER_BYTES + h.payload_len {
        Some(format!(
            "truncated: {size} bytes for a {} byte payload",
            h.payload_len
        ))
    } else {
        None
    };
    if let Some(reason) = problem {
        files::close(file, path).await?;
        return Ok(Loaded::Invalid(reason));
    }
    let payload = read_payload(file, path, h.payload_len as usize).await?;
    if crc32c::crc32c(&payload) != h.payload_crc {
        return Ok(Loaded::Invalid("payload checksum mismatch".into()));
    }
    Ok(Loaded::Valid(payload))
}

async fn read_payload(
    file: glommio::io::DmaFile,
    path: &Path,
    len: usize,
) -> Result<Vec<u8>, WalError> {
    let mut reader = DmaStreamReaderBuilder::new(file)
        .with_start_pos(SNAPSHOT_HEADER_BYTES)
        .with_end_pos(SNAPSHOT_HEADER_BYTES + len as u64)
        .with_buffer_size(READ_CHUNK_BYTES)
        .with_read_ahead(READ_AHEAD_BUFFERS)
        .build();
    let mut payload = Vec::with_capacity(len);
    let mut res = Ok(());
    while payload.len() < len {
        match reader
            .get_buffer_aligned((len - payload.len()) as u64)
            .await
        {
            Ok(buf) if buf.is_empty() => break,
            Ok(buf) => payload.extend_from_slice(&buf),
            Err(e) => {
                res = Err(WalError::io("read", path, e));
                break;
            }
        }
    }
    let closed = reader
        .close()
        .await
        .map_err(|e| WalError::io("close", path, e));
    res.and(closed)?;
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_snapshot_fill_spans_header_payload_and_padding() {
        let header = [9u8; 8];
        let payload = [1u8, 2, 3];
        let mut dst = [0xFFu8; 6];
        fill_from(&mut dst, 6, &header, &payload);
        assert_eq!(dst, [9, 9, 1, 2, 3, 0]);
    }
}
