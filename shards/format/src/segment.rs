//! Segment files: names, the header block, and listing a `wal/` directory.
//!
//! A segment is `wal/<first offset, 20 digits>.seg`. Its first 4096 bytes are the header:
//! `magic "SMDBWAL1" | version u32 | shard u32 | first_offset u64 | crc32c u32` (little-endian,
//! CRC over the 24 bytes before it), then zeros. Records follow from byte 4096.

use std::path::{Path, PathBuf};

use crate::limits::SEGMENT_HEADER_BYTES;

pub const SEGMENT_MAGIC: &[u8; 8] = b"SMDBWAL1";
pub const SEGMENT_VERSION: u32 = 1;
pub const SEGMENT_EXT: &str = "seg";
/// Suffix of a segment being created; such files are deleted on open.
pub const TMP_SUFFIX: &str = ".tmp";

/// The metadata a segment header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub shard: u32,
    pub first_offset: u64,
}

/// Writes the header into `block` (at least 28 bytes; the rest is zeroed).
pub fn encode_header(h: SegmentHeader, block: &mut [u8]) {
    block.fill(0);
    block[..8].copy_from_slice(SEGMENT_MAGIC);
    block[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    block[12..16].copy_from_slice(&h.shard.to_le_bytes());
    block[16..24].copy_from_slice(&h.first_offset.to_le_bytes());
    let crc = crc32c::crc32c(&block[..24]);
    block[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes and checks a header block.
pub fn decode_header(block: &[u8]) -> Result<SegmentHeader, String> {
    if block.len() < SEGMENT_HEADER_BYTES as usize {
        return Err(format!(
            "header is {} bytes, expected {SEGMENT_HEADER_BYTES}",
            block.len()
        ));
    }
    if &block[..8] != SEGMENT_MAGIC {
        return Err("bad segment magic".into());
    }
    let u32_at =
        |i: usize| u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
    let crc = u32_at(24);
    if crc != crc32c::crc32c(&block[..24]) {
        return Err("segment header checksum mismatch".into());
    }
    let version = u32_at(8);
    if version != SEGMENT_VERSION {
        return Err(format!("unsupported segment version {version}"));
    }
    let mut first = [0; 8];
    first.copy_from_slice(&block[16..24]);
    Ok(SegmentHeader {
        shard: u32_at(12),
        first_offset: u64::from_le_bytes(first),
    })
}

pub fn segment_path(wal_dir: &Path, first_offset: u64) -> PathBuf {
    wal_dir.join(format!("{first_offset:020}.{SEGMENT_EXT}"))
}

/// Parses `<20 digits>.<ext>`.
pub fn parse_numbered_name(name: &str, ext: &str) -> Option<u64> {
    let stem = name.strip_suffix(ext)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// What a directory listing found.
#[derive(Debug, Default)]
pub struct Listing {
    /// `(number, path)` sorted by number.
    pub files: Vec<(u64, PathBuf)>,
    /// Leftovers of interrupted creations (`*.tmp`).
    pub temps: Vec<PathBuf>,
}

/// Lists `<20 digits>.<ext>` files and `*.tmp` leftovers in `dir`; warns about anything else.
pub fn list_numbered(dir: &Path, ext: &str) -> std::io::Result<Listing> {
    let mut out = Listing::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            log::warn!(
                "wal: ignoring unexpected file {:?} in {}",
                name,
                dir.display()
            );
            continue;
        };
        if let Some(n) = parse_numbered_name(name, ext) {
            out.files.push((n, entry.path()));
        } else if name.ends_with(TMP_SUFFIX) {
            out.temps.push(entry.path());
        } else if !name.ends_with(".corrupt") {
            log::warn!("wal: ignoring unexpected file {name} in {}", dir.display());
        }
    }
    out.files.sort_by_key(|(n, _)| *n);
    Ok(out)
}

pub fn list_segments(wal_dir: &Path) -> std::io::Result<Listing> {
    list_numbered(wal_dir, SEGMENT_EXT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_segment_header_roundtrip_and_damage() {
        let mut block = vec![0xAA; 4096];
        let h = SegmentHeader {
            shard: 3,
            first_offset: 1234,
        };
        encode_header(h, &mut block);
        assert_eq!(decode_header(&block), Ok(h));
        assert!(block[28..].iter().all(|&b| b == 0));
        block[17] ^= 4;
        assert!(decode_header(&block).is_err());
    }

    #[test]
    fn wal_segment_names() {
        let p = segment_path(Path::new("/x/wal"), 42);
        assert_eq!(p, Path::new("/x/wal/00000000000000000042.seg"));
        assert_eq!(
            parse_numbered_name("00000000000000000042.seg", "seg"),
            Some(42)
        );
        assert_eq!(parse_numbered_name("0000000000000000042.seg", "seg"), None);
        assert_eq!(
            parse_numbered_name("00000000000000000042.seg.tmp", "seg"),
            None
        );
    }
}
