//! Snapshot files: `snapshots/<offset, 20 digits>.snap`.
//!
//! Header block (4096 bytes, little-endian): `magic "SMDBSNP1" | version u32 | shard u32 |
//! offset u64 | payload_len u64 | payload_crc32c u32 | header_crc32c u32` (the header CRC covers
//! the 36 bytes before it), then zeros; the payload starts at byte 4096 and the file is
//! zero-padded to a multiple of 4096. Written as `<name>.tmp` (the header block last, once the
//! payload's length and CRC are known), fdatasynced, renamed, and the directory fsynced, so a
//! `.snap` file is complete unless the disk damaged it.
//!
//! The version says what the payload is: 1, the engine as one JSON document (written by builds
//! before streamed snapshots, still read); 2, a stream of binary items (`snapshot_items`).
//! [`check`] reads a whole file through `std::io::Read` and checks everything but the
//! engine's meaning of the items: what an offline verifier needs.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::limits::{BLOCK_BYTES, SNAPSHOT_HEADER_BYTES, SNAPSHOT_JSON_BYTES_MAX};
use crate::limits::{SNAPSHOT_BYTES_MAX, SNAPSHOT_READ_CHUNK_BYTES};
use crate::segment::{list_numbered, Listing};
use crate::snapshot_items::ItemSplitter;

pub const SNAPSHOT_MAGIC: &[u8; 8] = b"SMDBSNP1";
/// Payload version 1: the engine as one JSON document.
pub const SNAPSHOT_VERSION_JSON: u32 = 1;
/// Payload version 2: a stream of binary items (`snapshot_items`).
pub const SNAPSHOT_VERSION_ITEMS: u32 = 2;
/// What this build writes.
pub const SNAPSHOT_VERSION: u32 = SNAPSHOT_VERSION_ITEMS;
/// What this build reads, ascending (a replica states these in `REPLICATE`).
pub const SNAPSHOT_VERSIONS_READ: &[u32] = &[SNAPSHOT_VERSION_JSON, SNAPSHOT_VERSION_ITEMS];
pub const SNAPSHOT_EXT: &str = "snap";
pub const HEADER_FIELDS: usize = 36;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub version: u32,
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

/// The largest payload a snapshot of `version` may have.
pub fn payload_max(version: u32) -> u64 {
    match version {
        SNAPSHOT_VERSION_JSON => SNAPSHOT_JSON_BYTES_MAX,
        _ => SNAPSHOT_BYTES_MAX,
    }
}

pub fn encode_header(h: SnapshotHeader, block: &mut [u8]) {
    block.fill(0);
    block[..8].copy_from_slice(SNAPSHOT_MAGIC);
    block[8..12].copy_from_slice(&h.version.to_le_bytes());
    block[12..16].copy_from_slice(&h.shard.to_le_bytes());
    block[16..24].copy_from_slice(&h.offset.to_le_bytes());
    block[24..32].copy_from_slice(&h.payload_len.to_le_bytes());
    block[32..36].copy_from_slice(&h.payload_crc.to_le_bytes());
    let crc = crc32c::crc32c(&block[..HEADER_FIELDS]);
    block[36..40].copy_from_slice(&crc.to_le_bytes());
}

/// Reads a header block: magic, header CRC, a version this build reads, and a payload length
/// within that version's limit.
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
    let version = u32_at(8);
    if !SNAPSHOT_VERSIONS_READ.contains(&version) {
        return Err(format!("unsupported snapshot version {version}"));
    }
    let h = SnapshotHeader {
        version,
        shard: u32_at(12),
        offset: u64_at(16),
        payload_len: u64_at(24),
        payload_crc: u32_at(32),
    };
    if h.payload_len > payload_max(version) {
        return Err(format!(
            "payload length {} exceeds the limit of version {version} ({})",
            h.payload_len,
            payload_max(version)
        ));
    }
    Ok(h)
}

/// Bytes of a snapshot file holding `payload_len` bytes of payload (header block, payload,
/// zero padding to a whole block).
pub fn file_bytes(payload_len: u64) -> u64 {
    (SNAPSHOT_HEADER_BYTES + payload_len).div_ceil(BLOCK_BYTES) * BLOCK_BYTES
}

/// Reads a whole snapshot file from `r` and checks it: the header, the payload's length and
/// CRC, and for version 2 the item framing (every item whole, the last one the end item).
/// Returns the header. Holds one read chunk and one item at a time.
pub fn check(r: &mut impl Read) -> Result<SnapshotHeader, String> {
    let mut block = vec![0u8; SNAPSHOT_HEADER_BYTES as usize];
    r.read_exact(&mut block)
        .map_err(|e| format!("reading the header: {e}"))?;
    let h = decode_header(&block)?;
    let mut splitter = ItemSplitter::default();
    let mut crc = 0u32;
    let mut left = h.payload_len;
    let mut chunk = vec![0u8; SNAPSHOT_READ_CHUNK_BYTES];
    while left > 0 {
        let n = (left.min(chunk.len() as u64)) as usize;
        r.read_exact(&mut chunk[..n])
            .map_err(|e| format!("reading the payload ({left} bytes short): {e}"))?;
        crc = crc32c::crc32c_append(crc, &chunk[..n]);
        if h.version == SNAPSHOT_VERSION_ITEMS {
            splitter.feed(&chunk[..n], &mut |_, _| Ok(()))?;
        }
        left -= n as u64;
    }
    if crc != h.payload_crc {
        return Err("payload checksum mismatch".into());
    }
    if h.version == SNAPSHOT_VERSION_ITEMS {
        splitter.finish()?;
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: u32, payload_len: u64) -> SnapshotHeader {
        SnapshotHeader {
            version,
            shard: 1,
            offset: 99,
            payload_len,
            payload_crc: 7,
        }
    }

    #[test]
    fn wal_snapshot_header_roundtrip_and_damage() {
        for version in [SNAPSHOT_VERSION_JSON, SNAPSHOT_VERSION_ITEMS] {
            let h = header(version, 5);
            let mut block = vec![1u8; 4096];
            encode_header(h, &mut block);
            assert_eq!(decode_header(&block), Ok(h));
            block[30] ^= 1;
            assert!(decode_header(&block).is_err());
        }
    }

    #[test]
    fn unknown_versions_and_oversized_payloads_are_refused() {
        let mut block = vec![0u8; 4096];
        encode_header(header(3, 5), &mut block);
        assert_eq!(
            decode_header(&block),
            Err("unsupported snapshot version 3".into())
        );
        encode_header(header(1, SNAPSHOT_JSON_BYTES_MAX + 1), &mut block);
        assert!(decode_header(&block).unwrap_err().contains("exceeds"));
        encode_header(header(2, SNAPSHOT_JSON_BYTES_MAX + 1), &mut block);
        assert!(
            decode_header(&block).is_ok(),
            "version 2 streams past 4 GiB"
        );
    }

    fn file(version: u32, payload: &[u8]) -> Vec<u8> {
        let mut h = header(version, payload.len() as u64);
        h.payload_crc = crc32c::crc32c(payload);
        let mut out = vec![0u8; 4096];
        encode_header(h, &mut out);
        out.extend_from_slice(payload);
        out.resize(file_bytes(payload.len() as u64) as usize, 0);
        out
    }

    #[test]
    fn check_reads_whole_files_and_names_the_damage() {
        use crate::snapshot_items::{put_item, TAG_END, TAG_META};
        let mut payload = Vec::new();
        put_item(&mut payload, TAG_META, &[0, 0, 0]);
        put_item(&mut payload, TAG_END, &[0]);
        let good = file(2, &payload);
        assert_eq!(check(&mut &good[..]).unwrap().payload_len, 5 + 3);
        let mut flipped = good.clone();
        flipped[4096 + 3] ^= 0x40;
        assert_eq!(
            check(&mut &flipped[..]),
            Err("payload checksum mismatch".into())
        );
        let short = &good[..4096 + 4];
        assert!(check(&mut &short[..]).unwrap_err().contains("short"));
        let torn = file(2, &payload[..payload.len() - 1]);
        assert!(check(&mut &torn[..]).is_err(), "an item cut at the end");
        let json = file(1, br#"{"v":1}"#);
        assert_eq!(check(&mut &json[..]).unwrap().version, 1);
    }
}
