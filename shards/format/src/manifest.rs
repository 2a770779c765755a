//! The backup manifest `backup.json` (docs/backup.md): what a backup directory holds, written by
//! `smdb-cli backup --out`, checked by `--verify`, and read by `smdb-server restore`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The manifest's name, at the top of a backup directory.
pub const MANIFEST: &str = "backup.json";

/// `backup.json`, exactly the fields §14 names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub created_at: String,
    pub server_version: String,
    pub epoch: u64,
    pub shards: u32,
    /// Per shard (its number as a string), the offset the backup holds the log up to.
    pub positions: BTreeMap<String, u64>,
    pub files: Vec<FileEntry>,
}

/// One file of a backup: `path` relative to the backup directory (`/`-separated), its size
/// and its CRC32C as 8 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    pub path: String,
    pub bytes: u64,
    pub crc32c: String,
}
