//! Segment files: names, the header block, and listing a `wal/` directory.
//!
//! A segment is `wal/<first offset, 20 digits>.seg`. Its first 4096 bytes are the header:
//! `magic "SMDBWAL1" | version u32 | shard u32 | first_offset u64 | crc32c u32` (little-endian,
//! CRC over the 24 bytes before it), then the segment's epoch (`SegmentEpoch`, bytes 28..52),
//! then zeros. Records follow from byte 4096.

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

/// The epoch of a segment's entries, kept in header bytes 28..48 (zero in segments written
/// before the archive existed, which read as epoch 0, not starting one): `epoch u64 |
/// follows u64 | starts u8 | 3 zero bytes | crc32c u32 of bytes 28..48`. `starts`: the
/// segment's first entry is the record that began `epoch`, which followed epoch `follows`.
/// Readers that predate it ignore those bytes, as they ignore all of 28..4096.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentEpoch {
    pub epoch: u64,
    pub follows: u64,
    pub starts: bool,
}

/// Writes `e` into a header block `encode_header` filled (at least 52 bytes).
pub fn encode_epoch(e: SegmentEpoch, block: &mut [u8]) {
    block[28..36].copy_from_slice(&e.epoch.to_le_bytes());
    block[36..44].copy_from_slice(&e.follows.to_le_bytes());
    block[44..48].copy_from_slice(&[u8::from(e.starts), 0, 0, 0]);
    let crc = crc32c::crc32c(&block[28..48]);
    block[48..52].copy_from_slice(&crc.to_le_bytes());
}

/// Reads the epoch fields of a header block (`decode_header` checked it): all zero (an older
/// segment) is epoch 0; anything else must carry its CRC.
pub fn decode_epoch(block: &[u8]) -> Result<SegmentEpoch, String> {
    let Some(field) = block.get(28..52) else {
        return Err("header too short for its epoch".into());
    };
    if field.iter().all(|&b| b == 0) {
        return Ok(SegmentEpoch::default());
    }
    let crc = u32::from_le_bytes([field[20], field[21], field[22], field[23]]);
    if crc != crc32c::crc32c(&field[..20]) || field[16] > 1 || field[17..20] != [0, 0, 0] {
        return Err("segment header epoch checksum mismatch".into());
    }
    let mut n = [0; 8];
    n.copy_from_slice(&field[..8]);
    let epoch = u64::from_le_bytes(n);
    n.copy_from_slice(&field[8..16]);
    Ok(SegmentEpoch {
        epoch,
        follows: u64::from_le_bytes(n),
        starts: field[16] == 1,
    })
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
        assert_eq!(decode_epoch(&block), Ok(SegmentEpoch::default()));
        let e = SegmentEpoch {
            epoch: 7,
            follows: 5,
            starts: true,
        };
        encode_epoch(e, &mut block);
        assert_eq!(decode_header(&block), Ok(h));
        assert_eq!(decode_epoch(&block), Ok(e));
        block[30] ^= 1;
        assert!(decode_epoch(&block).is_err());
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
