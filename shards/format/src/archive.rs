//! The WAL archive's layout (docs/backup.md): names of archived segments and the
//! per-epoch history files, as PostgreSQL's timelines, so a restore follows one chain.
//!
//! * `ARCHIVE/shard-<n>/<first, 20 digits>-<last, 20 digits>-e<epoch>.seg`: a closed segment of
//!   shard `n` holding offsets `first..=last`, written under `epoch`;
//! * `ARCHIVE/history/<epoch>.json`: `{epoch, follows, from:{shard:offset}}`: the epoch it
//!   followed and, per shard, the offset its first entry (the epoch record) took.
//!
//! Names and codecs only; no I/O beyond building paths. The archiver and restore are not
//! built yet (docs/backup.md says what is).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Directory of the history files inside the archive.
pub const HISTORY_DIR: &str = "history";

/// What an archived segment's name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchivedSegment {
    pub first: u64,
    pub last: u64,
    pub epoch: u64,
}

impl ArchivedSegment {
    /// `<first>-<last>-e<epoch>.seg`.
    pub fn file_name(&self) -> String {
        format!("{:020}-{:020}-e{}.seg", self.first, self.last, self.epoch)
    }

    /// Parses a name `file_name` wrote; None for anything else.
    pub fn parse(name: &str) -> Option<ArchivedSegment> {
        let stem = name.strip_suffix(".seg")?;
        let mut parts = stem.splitn(3, '-');
        let first = digits20(parts.next()?)?;
        let last = digits20(parts.next()?)?;
        let epoch = parts.next()?.strip_prefix('e')?;
        if epoch.is_empty() || !epoch.bytes().all(|b| b.is_ascii_digit()) || first > last + 1 {
            return None;
        }
        Some(ArchivedSegment {
            first,
            last,
            epoch: epoch.parse().ok()?,
        })
    }
}

fn digits20(s: &str) -> Option<u64> {
    (s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// `ARCHIVE/shard-<n>`.
pub fn shard_dir(archive: &Path, shard: u32) -> PathBuf {
    archive.join(format!("shard-{shard}"))
}

/// `ARCHIVE/history/<epoch>.json`.
pub fn history_path(archive: &Path, epoch: u64) -> PathBuf {
    archive.join(HISTORY_DIR).join(format!("{epoch}.json"))
}

/// One history file: epoch `epoch` followed `follows` (0: none), and its epoch record took
/// offset `from[shard]` on each shard that has written it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub epoch: u64,
    pub follows: u64,
    pub from: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archived_segment_names_roundtrip_and_refuse_others() {
        let s = ArchivedSegment {
            first: 41,
            last: 80,
            epoch: 3,
        };
        let name = s.file_name();
        assert_eq!(name, "00000000000000000041-00000000000000000080-e3.seg");
        assert_eq!(ArchivedSegment::parse(&name), Some(s));
        for bad in [
            "00000000000000000041.seg",
            "00000000000000000041-00000000000000000080-3.seg",
            "00000000000000000041-00000000000000000080-e.seg",
            "0000000000000000041-00000000000000000080-e3.seg",
            "00000000000000000081-00000000000000000010-e3.seg",
            "00000000000000000041-00000000000000000080-e3.seg.tmp",
        ] {
            assert_eq!(ArchivedSegment::parse(bad), None, "{bad}");
        }
        assert_eq!(
            history_path(Path::new("/a"), 7),
            Path::new("/a/history/7.json")
        );
        assert_eq!(shard_dir(Path::new("/a"), 2), Path::new("/a/shard-2"));
    }
}
