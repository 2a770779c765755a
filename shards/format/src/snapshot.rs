//! Snapshot files: `snapshots/<offset, 20 digits>.snap`.
//!
//! Header block (4096 bytes, little-endian): `magic "SMDBSNP1" | version u32 | shard u32 |
//! offset u64 | payload_len u64 | payload_crc32c u32 | header_crc32c u32` (the header CRC covers
//! the 36 bytes before it), then zeros; the payload starts at byte 4096 and the file is
//! zero-padded to a multiple of 4096. Written as `<name>.tmp`, fdatasynced, renamed, and the
//! directory fsynced, so a `.snap` file is complete unless the disk damaged it.

use std::path::{Path, PathBuf};

use crate::segment::{list_numbered, Listing};

pub const SNAPSHOT_MAGIC: &[u8; 8] = b"SMDBSNP1";
pub const SNAPSHOT_VERSION: u32 = 1;
pub const SNAPSHOT_EXT: &str = "snap";
pub const HEADER_FIELDS: usize = 36;

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

pub fn list_snapshots(dir: &Path) -> std::io::Result<Listing> {
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
}
