//! Reading the archive: one shard's archived segments by name, and the entries a segment file
//! holds (`smdb_format`: a header block, then records up to the end of the data).

use std::path::{Path, PathBuf};

use smdb_format::archive::{shard_dir, ArchivedSegment};
use smdb_format::limits::SEGMENT_HEADER_BYTES;
use smdb_format::record::{decode, Decoded, KIND_ENTRY};
use smdb_format::segment::{decode_epoch, decode_header, SegmentEpoch};

use super::error::RestoreError;

/// An archived segment of one shard: what its name says, and where it is.
#[derive(Debug, Clone)]
pub struct Archived {
    pub name: ArchivedSegment,
    pub path: PathBuf,
}

/// Every archived segment of `shard`, sorted by first offset then epoch. An absent
/// directory is an empty archive for that shard.
pub fn list(archive: &Path, shard: u32) -> Result<Vec<Archived>, RestoreError> {
    let dir = shard_dir(archive, shard);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RestoreError::io(&dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| RestoreError::io(&dir, e))?;
        let Some(name) = entry.file_name().to_str().and_then(ArchivedSegment::parse) else {
            continue;
        };
        out.push(Archived {
            name,
            path: entry.path(),
        });
    }
    out.sort_by_key(|a| (a.name.first, a.name.epoch, a.name.last));
    Ok(out)
}

/// A segment file read whole and checked: its header, and its entries in order.
pub struct SegmentData {
    pub epoch: SegmentEpoch,
    bytes: Vec<u8>,
    /// `(offset, payload range)` of each entry record.
    entries: Vec<(u64, std::ops::Range<usize>)>,
}

impl SegmentData {
    /// Reads `path`, expecting shard `shard` and the offsets `name` says. Records are read up
    /// to the end of the data (a zero length or the end of the file); anything else before the
    /// name's last offset is an error naming the byte.
    pub fn read(a: &Archived, shard: u32) -> Result<SegmentData, RestoreError> {
        let at = |why: String| RestoreError::file(&a.path, why);
        let bytes = std::fs::read(&a.path).map_err(|e| RestoreError::io(&a.path, e))?;
        let header_len = SEGMENT_HEADER_BYTES as usize;
        let block = bytes
            .get(..header_len)
            .ok_or_else(|| at("no header".into()))?;
        let h = decode_header(block).map_err(at)?;
        let epoch = decode_epoch(block).map_err(at)?;
        if h.shard != shard || h.first_offset != a.name.first || epoch.epoch != a.name.epoch {
            return Err(at(format!(
                "header says shard {} from {} epoch {}, the name says shard {shard} from {} \
                 epoch {}",
                h.shard, h.first_offset, epoch.epoch, a.name.first, a.name.epoch
            )));
        }
        let (entries, next) = entries_in(&bytes, a.name.first, a.name.last, &a.path)?;
        if next <= a.name.last {
            return Err(at(format!(
                "holds offsets up to {} but its name says {}",
                next - 1,
                a.name.last
            )));
        }
        Ok(SegmentData {
            epoch,
            bytes,
            entries,
        })
    }

    /// The last entry's offset and payload, if any.
    pub fn last(&self) -> Option<(u64, &[u8])> {
        self.entries
            .last()
            .map(|(o, r)| (*o, &self.bytes[r.clone()]))
    }

    /// Reads a data directory's segment file (`wal/<first>.seg`): the header's first offset,
    /// then its entries to the end of the data.
    pub fn read_plain(path: &Path) -> Result<SegmentData, RestoreError> {
        let at = |why: String| RestoreError::file(path, why);
        let bytes = std::fs::read(path).map_err(|e| RestoreError::io(path, e))?;
        let block = bytes
            .get(..SEGMENT_HEADER_BYTES as usize)
            .ok_or_else(|| at("no header".into()))?;
        let h = decode_header(block).map_err(at)?;
        let epoch = decode_epoch(block).map_err(at)?;
        let (entries, _) = entries_in(&bytes, h.first_offset, u64::MAX, path)?;
        Ok(SegmentData {
            epoch,
            bytes,
            entries,
        })
    }

    /// The entries from `from` on, in order, as `(offset, payload)`.
    pub fn from(&self, from: u64) -> impl Iterator<Item = (u64, &[u8])> {
        let skip = self.entries.partition_point(|(o, _)| *o < from);
        self.entries[skip..]
            .iter()
            .map(|(o, r)| (*o, &self.bytes[r.clone()]))
    }
}

type Entries = Vec<(u64, std::ops::Range<usize>)>;

/// The entry records after the header, from `first` on with contiguous offsets, up to `last`
/// or the end of the data; returns them and the offset after the last one. An error names
/// the byte of `path`, the file `bytes` were read from.
fn entries_in(
    bytes: &[u8],
    first: u64,
    last: u64,
    path: &Path,
) -> Result<(Entries, u64), RestoreError> {
    let mut entries = Vec::new();
    let (mut pos, mut next) = (SEGMENT_HEADER_BYTES as usize, first);
    while pos < bytes.len() && next <= last {
        match decode(&bytes[pos..]) {
            Decoded::Record(r) => {
                if r.kind == KIND_ENTRY {
                    if r.offset != next {
                        let why = format!("byte {pos}: expected offset {next}, found {}", r.offset);
                        return Err(RestoreError::file(path, why));
                    }
                    entries.push((r.offset, pos + r.payload.start..pos + r.payload.end));
                    next += 1;
                }
                pos += r.size;
            }
            Decoded::End | Decoded::Incomplete(_) => break,
            Decoded::Bad(why) => {
                return Err(RestoreError::file(path, format!("byte {pos}: {why}")));
            }
        }
    }
    Ok((entries, next))
}
