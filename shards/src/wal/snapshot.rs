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
use super::files;
use super::limits::{
    READ_AHEAD_BUFFERS, READ_CHUNK_BYTES, SNAPSHOT_BYTES_MAX, SNAPSHOT_HEADER_BYTES,
    WRITE_BYTES_MAX,
};
use super::segment::{list_numbered, Listing, TMP_SUFFIX};

pub const SNAPSHOT_MAGIC: &[u8; 8] = b"SMDBSNP1";
pub const SNAPSHOT_VERSION: u32 = 1;
const SNAPSHOT_EXT: &str = "snap";
const HEADER_FIELDS: usize = 36;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub shard: u32,
    pub offset: u64,
    pub payload_len: u64,
    pub payload_crc: u32,
}

pub fn snapshot_path(dir: &Path, offset: u64) -> PathBuf {
    dir.join(format!("{offset:020}.{SNAPSHOT_EXT}"))
}

pub fn list_snapshots(dir: &Path) -> Result<Listing, WalError> {
    list_numbered(dir, SNAPSHOT_EXT)
}

pub fn encode_header(h: SnapshotHeader, block: &mut [u8]) {
    block.fill(0);
    block[..8].copy_from_slice(SNAPSHOT_MAGIC);
    block[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    block[12..16].copy_from_slice(&h.shard.to_le_bytes());
    block[16..24].copy_from_slice(&h.offset.to_le_bytes());
    block[24..32].copy_from_slice(&h.payload_len.to_le_bytes());
    block[32..36].copy_from_slice(&h.payload_crc.to_le_bytes());
    let crc = crc32c::crc32c(&block[..HEADER_FIELDS]);
    block[36..40].copy_from_slice(&crc.to_le_bytes());
}

pub fn decode_header(block: &[u8]) -> Result<SnapshotHeader, String> {
    if block.len() < HEADER_FIELDS + 4 {
        return Err("snapshot header truncated".into());
    }
    if &block[..8] != SNAPSHOT_MAGIC {
        return Err("bad snapshot magic".into());
    }
    let u32_at =
        |i: usize| u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
    let u64_at = |i: usize| {
        let mut b = [0; 8];
        b.copy_from_slice(&block[i..i + 8]);
        u64::from_le_bytes(b)
    };
    if u32_at(36) != crc32c::crc32c(&block[..HEADER_FIELDS]) {
        return Err("snapshot header checksum mismatch".into());
    }
    if u32_at(8) != SNAPSHOT_VERSION {
        return Err(format!("unsupported snapshot version {}", u32_at(8)));
    }
    Ok(SnapshotHeader {
        shard: u32_at(12),
        offset: u64_at(16),
        payload_len: u64_at(24),
        payload_crc: u32_at(32),
    })
}

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
    fn wal_snapshot_header_roundtrip_and_damage() {
        let h = SnapshotHeader {
            shard: 1,
            offset: 99,
            payload_len: 5,
            payload_crc: 7,
        };
        let mut block = vec![1u8; 4096];
        encode_header(h, &mut block);
        assert_eq!(decode_header(&block), Ok(h));
        block[30] ^= 1;
        assert!(decode_header(&block).is_err());
    }

    #[test]
    fn wal_snapshot_fill_spans_header_payload_and_padding() {
        let header = [9u8; 8];
        let payload = [1u8, 2, 3];
        let mut dst = [0xFFu8; 6];
        fill_from(&mut dst, 6, &header, &payload);
        assert_eq!(dst, [9, 9, 1, 2, 3, 0]);
    }
}
