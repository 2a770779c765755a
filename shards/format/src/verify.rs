//! Checking a backup offline (docs/backup.md): `smdb-cli backup --verify DIR` and
//! `smdb-server restore` both run [`verify`]: every file against the manifest `backup.json`
//! (present, same size, same CRC32C), every file in DIR listed, and each log segment and
//! snapshot against its own checksums. Reads files only; no server.

use std::io::Read;
use std::path::{Path, PathBuf};

pub use crate::manifest::{FileEntry, Manifest, MANIFEST};

/// Bytes read at a time while checksumming a file.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// Why a backup fails `--verify`: the first problem found, naming its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The manifest is missing or does not parse.
    Manifest(String),
    Missing(String),
    Changed {
        path: String,
        why: String,
    },
    Unlisted(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Manifest(why) => write!(f, "{MANIFEST}: {why}"),
            Problem::Missing(p) => write!(f, "{p}: missing"),
            Problem::Changed { path, why } => write!(f, "{path}: changed ({why})"),
            Problem::Unlisted(p) => write!(f, "{p}: not listed in {MANIFEST}"),
        }
    }
}

/// Checks the backup in `dir`; returns how many files it holds when every one holds.
pub fn verify(dir: &Path) -> Result<usize, Problem> {
    let manifest = read_manifest(dir)?;
    for entry in &manifest.files {
        check_file(dir, entry)?;
    }
    let listed: std::collections::HashSet<&str> =
        manifest.files.iter().map(|f| f.path.as_str()).collect();
    for path in files_under(dir).map_err(|e| Problem::Manifest(format!("listing: {e}")))? {
        if path != MANIFEST && !listed.contains(path.as_str()) {
            return Err(Problem::Unlisted(path));
        }
    }
    Ok(manifest.files.len())
}

pub fn read_manifest(dir: &Path) -> Result<Manifest, Problem> {
    let text = std::fs::read(dir.join(MANIFEST)).map_err(|e| Problem::Manifest(e.to_string()))?;
    serde_json::from_slice(&text).map_err(|e| Problem::Manifest(e.to_string()))
}

/// The size and CRC32C of the file at `path`, read in chunks.
pub fn describe(path: &Path) -> std::io::Result<(u64, u32)> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let (mut bytes, mut crc) = (0u64, 0u32);
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok((bytes, crc));
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        bytes += n as u64;
    }
}

fn check_file(dir: &Path, entry: &FileEntry) -> Result<(), Problem> {
    let path = dir.join(&entry.path);
    let changed = |why: String| Problem::Changed {
        path: entry.path.clone(),
        why,
    };
    if !path.is_file() {
        return Err(Problem::Missing(entry.path.clone()));
    }
    let (bytes, crc) = describe(&path).map_err(|e| changed(e.to_string()))?;
    if bytes != entry.bytes {
        return Err(changed(format!(
            "{bytes} bytes, the manifest says {}",
            entry.bytes
        )));
    }
    let hex = format!("{crc:08x}");
    if hex != entry.crc32c {
        return Err(changed(format!(
            "crc32c {hex}, the manifest says {}",
            entry.crc32c
        )));
    }
    let mut f = std::fs::File::open(&path).map_err(|e| changed(e.to_string()))?;
    let name = entry.path.as_str();
    if name.ends_with(".seg") {
        check_segment(&mut f).map_err(changed)?;
    } else if name.ends_with(".snap") {
        crate::snapshot::check(&mut f).map_err(changed)?;
    }
    Ok(())
}

/// Every file under `dir`, as `/`-separated paths relative to it, sorted.
pub fn files_under(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let p = e.path();
            if e.file_type()?.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                let parts: Vec<_> = rel
                    .iter()
                    .map(|c| c.to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads a whole segment file from `r` and checks it as an offline tool can: the header, then
/// every record up to the end of the data (a zero length or the end of the file) for its
/// length, CRC, kind and contiguous offsets. Anything else is an error naming the byte.
/// Unlike recovery it forgives no torn tail: a backup's segments were complete when taken.
pub fn check_segment(r: &mut impl std::io::Read) -> Result<(), String> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)
        .map_err(|e| format!("reading the segment: {e}"))?;
    let header_len = crate::limits::SEGMENT_HEADER_BYTES as usize;
    let header = crate::segment::decode_header(bytes.get(..header_len).unwrap_or(&bytes))?;
    let mut pos = header_len;
    let mut next = header.first_offset;
    while pos < bytes.len() {
        match crate::record::decode(&bytes[pos..]) {
            crate::record::Decoded::End => break,
            crate::record::Decoded::Record(h) => {
                if h.kind == crate::record::KIND_ENTRY {
                    if h.offset != next {
                        return Err(format!(
                            "byte {pos}: offsets must be contiguous: expected {next}, got {}",
                            h.offset
                        ));
                    }
                    next += 1;
                }
                pos += h.size;
            }
            crate::record::Decoded::Incomplete(_) => {
                return Err(format!(
                    "byte {pos}: a record runs past the end of the file"
                ));
            }
            crate::record::Decoded::Bad(why) => return Err(format!("byte {pos}: {why}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{encode, KIND_ENTRY};
    use crate::segment::{encode_header, SegmentHeader};
    use std::collections::BTreeMap;

    /// A backup directory holding one segment with entries 1..=3 and a manifest listing it.
    fn backup() -> tempfile::TempDir {
        let dir = tempfile::tempdir_in("/tmp").expect("temp dir");
        let wal = dir.path().join("shard-0/wal");
        std::fs::create_dir_all(&wal).expect("mkdir");
        let mut bytes = vec![0u8; 4096];
        let header = SegmentHeader {
            shard: 0,
            first_offset: 1,
        };
        encode_header(header, &mut bytes);
        for offset in 1..=3 {
            encode(
                &mut bytes,
                offset,
                KIND_ENTRY,
                format!("entry {offset}").as_bytes(),
            );
        }
        bytes.resize(8192, 0);
        std::fs::write(wal.join("00000000000000000001.seg"), &bytes).expect("segment");
        std::fs::write(dir.path().join("smdb.meta"), b"{}").expect("meta");
        write_manifest(dir.path());
        dir
    }

    fn write_manifest(dir: &Path) {
        let files = files_under(dir)
            .expect("list")
            .into_iter()
            .filter(|p| p != MANIFEST)
            .map(|path| {
                let (bytes, crc) = describe(&dir.join(&path)).expect("describe");
                FileEntry {
                    path,
                    bytes,
                    crc32c: format!("{crc:08x}"),
                }
            })
            .collect();
        let m = Manifest {
            created_at: "2026-11-27T22:00:00.000Z".into(),
            server_version: "0.1.0".into(),
            epoch: 0,
            shards: 1,
            positions: BTreeMap::from([("0".to_string(), 3)]),
            files,
        };
        let text = serde_json::to_vec_pretty(&m).expect("json");
        std::fs::write(dir.join(MANIFEST), text).expect("manifest");
    }

    const SEGMENT: &str = "shard-0/wal/00000000000000000001.seg";

    #[test]
    fn an_intact_backup_verifies() {
        let dir = backup();
        assert_eq!(verify(dir.path()), Ok(2));
    }

    #[test]
    fn a_flipped_byte_is_named() {
        let dir = backup();
        let path = dir.path().join(SEGMENT);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[4096 + 20] ^= 0x40;
        std::fs::write(&path, bytes).expect("write");
        match verify(dir.path()) {
            Err(Problem::Changed { path, why }) => {
                assert_eq!(path, SEGMENT);
                assert!(why.contains("crc32c"), "{why}");
            }
            other => panic!("expected a changed segment, got {other:?}"),
        }
    }

    #[test]
    fn a_damaged_record_that_the_manifest_agrees_with_is_still_found() {
        // The manifest is rewritten after the damage: only the record's own CRC tells.
        let dir = backup();
        let path = dir.path().join(SEGMENT);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[4096 + 20] ^= 0x40;
        std::fs::write(&path, bytes).expect("write");
        write_manifest(dir.path());
        match verify(dir.path()) {
            Err(Problem::Changed { path, why }) => {
                assert_eq!(path, SEGMENT);
                assert!(why.contains("checksum mismatch"), "{why}");
            }
            other => panic!("expected a bad record, got {other:?}"),
        }
    }

    #[test]
    fn missing_and_unlisted_files_are_named() {
        let dir = backup();
        std::fs::write(dir.path().join("shard-0/stray"), b"x").expect("stray");
        assert_eq!(
            verify(dir.path()),
            Err(Problem::Unlisted("shard-0/stray".into()))
        );
        std::fs::remove_file(dir.path().join(SEGMENT)).expect("remove");
        assert_eq!(verify(dir.path()), Err(Problem::Missing(SEGMENT.into())));
        std::fs::remove_file(dir.path().join(MANIFEST)).expect("remove");
        assert!(matches!(verify(dir.path()), Err(Problem::Manifest(_))));
    }
}
