//! The data directory as a whole: an exclusive lock (one server per directory) and a metadata
//! file recording the format version, shard count and routing it was written with. Each of the
//! three is fixed for the directory's life: a server configured otherwise refuses to open it
//! (exit 1, naming both values) and changes nothing on disk.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use shards::routing::Routing;

/// On-disk format version of the data directory layout.
pub const FORMAT_VERSION: u32 = 1;
const META_FILE: &str = "smdb.meta";
const LOCK_FILE: &str = "LOCK";
/// A data dir holding this file (written by `smdb-server restore --pause-timers`, docs/backup.md
/// "Timers after a restore") starts with its timers paused: none fires until `TIMERS_RESUME` (`smdb-cli timers
/// resume`) deletes it. Its content is informational text.
pub const TIMERS_PAUSED_FILE: &str = "timers.paused";

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Meta {
    format_version: u32,
    shard_count: u32,
    /// The instance tables' hash key (32 hex digits; `shards::engine::set_index_key`): the
    /// same in every process on this data dir, so a restart loads and replays in table order.
    /// Added to a data dir that lacks it (older builds ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index_key: Option<String>,
    /// How ids map to shards (`Routing::as_str`: "hash" or "slots", docs/cluster.md "Slots").
    /// Absent in a data dir of an older build, which routed by hash; new data dirs record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    routing: Option<String>,
}

/// Holds the directory lock for the life of the process.
#[derive(Debug)]
pub struct DataDir {
    pub path: PathBuf,
    /// The instance tables' hash key (`Meta::index_key`).
    pub index_key: (u64, u64),
    _lock: File,
}

impl DataDir {
    /// Creates the directory if needed, takes the lock, and checks (or records) the shard count
    /// and the routing.
    pub fn open(path: &Path, shard_count: u32, routing: Routing) -> Result<DataDir, String> {
        std::fs::create_dir_all(path)
            .map_err(|e| format!("cannot create data dir {}: {e}", path.display()))?;
        // Absolute from here on: glommio's directory open fails (EBADF) on relative paths such
        // as the default `./data`.
        let path = &std::fs::canonicalize(path)
            .map_err(|e| format!("cannot resolve data dir {}: {e}", path.display()))?;
        let lock = lock(path)?;
        let index_key = check_meta(path, shard_count, routing)?;
        Ok(DataDir {
            path: path.to_path_buf(),
            index_key,
            _lock: lock,
        })
    }

    /// Whether `path` holds a data directory already (its metadata file exists).
    pub fn has_data(path: &Path) -> bool {
        path.join(META_FILE).exists()
    }

    /// `<data_dir>/shard-<n>`.
    pub fn shard_dir(&self, shard: u32) -> PathBuf {
        self.path.join(format!("shard-{shard}"))
    }
}

fn lock(path: &Path) -> Result<File, String> {
    let lock_path = path.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
    // SAFETY: flock on a valid fd we own; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(format!(
            "data dir {} is locked by another smdb-server ({})",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(file)
}

/// Checks (or writes) the meta file; returns the data dir's index key.
fn check_meta(path: &Path, shard_count: u32, routing: Routing) -> Result<(u64, u64), String> {
    let meta_path = path.join(META_FILE);
    let mut meta = match std::fs::read(&meta_path) {
        Ok(bytes) => {
            let meta: Meta = serde_json::from_slice(&bytes)
                .map_err(|e| format!("{} is unreadable: {e}", meta_path.display()))?;
            if meta.format_version != FORMAT_VERSION {
                return Err(format!(
                    "data dir {} has format version {}; this server reads version {FORMAT_VERSION}",
                    path.display(),
                    meta.format_version
                ));
            }
            if meta.shard_count != shard_count {
                return Err(format!(
                    "data dir {} was written with {} shards but this server is configured with \
                     {shard_count} shards (shards.count); the shard of an instance depends on \
                     the count, so it must not change",
                    path.display(),
                    meta.shard_count
                ));
            }
            check_routing(path, meta.routing.as_deref(), routing).map_err(|e| e.to_string())?;
            meta
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Meta {
            format_version: FORMAT_VERSION,
            shard_count,
            index_key: None,
            routing: Some(routing.as_str().to_owned()),
        },
        Err(e) => return Err(format!("cannot read {}: {e}", meta_path.display())),
    };
    if let Some(key) = meta.index_key.as_deref().and_then(parse_key) {
        return Ok(key);
    }
    let key = (
        crate::util::random::random_u64(),
        crate::util::random::random_u64(),
    );
    meta.index_key = Some(format!("{:016x}{:016x}", key.0, key.1));
    write_meta(path, &meta)?;
    Ok(key)
}

/// Refuses a data dir whose recorded routing (`None`: an older build's, hash) is not `want`.
fn check_routing(path: &Path, recorded: Option<&str>, want: Routing) -> Result<(), OtherRouting> {
    let have = recorded.unwrap_or(Routing::Hash.as_str());
    match have == want.as_str() {
        true => Ok(()),
        false => Err(OtherRouting {
            path: path.to_path_buf(),
            have: have.to_owned(),
            want,
        }),
    }
}

/// A data dir made with another routing than the server's.
#[derive(Debug)]
struct OtherRouting {
    path: PathBuf,
    /// The data dir's routing, as recorded.
    have: String,
    want: Routing,
}

impl std::fmt::Display for OtherRouting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = |r: &str| match Routing::parse(r) {
            Some(Routing::Hash) => "without [cluster]",
            Some(Routing::Slots) => "in cluster mode",
            None => "by an unknown build",
        };
        write!(
            f,
            "data dir {} was made with routing \"{}\" ({}) but this server routes by \"{}\" \
             ({}); an instance's shard depends on the routing, so a data dir keeps the one that \
             made it (load the data through a client instead)",
            self.path.display(),
            self.have,
            mode(&self.have),
            self.want.as_str(),
            mode(self.want.as_str()),
        )
    }
}

/// 32 hex digits as two words.
fn parse_key(hex: &str) -> Option<(u64, u64)> {
    let (a, b) = (hex.get(..16)?, hex.get(16..)?);
    Some((
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ))
    .filter(|_| hex.len() == 32)
}

/// Writes the meta file durably: temp file, fsync, rename, fsync the directory. A write that
/// fails (a full disk: docs/wal.md, "A full disk") removes its temp file: start-up leaves no
/// partial or temporary file behind.
fn write_meta(path: &Path, meta: &Meta) -> Result<(), String> {
    let tmp = path.join(format!("{META_FILE}.tmp"));
    let io = |e: std::io::Error| format!("cannot write {}: {e}", tmp.display());
    let bytes = serde_json::to_vec(meta).map_err(|e| e.to_string())?;
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path.join(META_FILE))
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    File::open(path).and_then(|d| d.sync_all()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path, shards: u32) -> Result<DataDir, String> {
        DataDir::open(path, shards, Routing::Hash)
    }

    #[test]
    fn shard_count_change_is_refused_naming_both_counts() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path(), 2).unwrap());
        let err = open(dir.path(), 3).unwrap_err();
        assert!(
            err.contains("2 shards") && err.contains("3 shards"),
            "{err}"
        );
        drop(open(dir.path(), 2).unwrap());
    }

    #[test]
    fn a_relative_path_is_made_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let rel = dir.path().join("a/../data");
        let d = open(&rel, 1).unwrap();
        assert!(d.path.is_absolute() && !d.path.to_string_lossy().contains(".."));
        assert_eq!(d.path, dir.path().canonicalize().unwrap().join("data"));
    }

    #[test]
    fn the_index_key_is_kept_across_opens_and_added_where_missing() {
        let dir = tempfile::tempdir().unwrap();
        let first = open(dir.path(), 1).unwrap().index_key;
        assert_eq!(open(dir.path(), 1).unwrap().index_key, first);
        // A meta file of an older build: a key is added, then kept.
        let meta = dir.path().join(META_FILE);
        std::fs::write(&meta, br#"{"format_version":1,"shard_count":1}"#).unwrap();
        let added = open(dir.path(), 1).unwrap().index_key;
        assert_ne!(added, first);
        assert_eq!(open(dir.path(), 1).unwrap().index_key, added);
        assert_eq!(parse_key("00000000000000010000000000000002"), Some((1, 2)));
        assert_eq!(parse_key("0001"), None);
    }

    #[test]
    fn second_open_is_locked_out() {
        let dir = tempfile::tempdir().unwrap();
        let first = open(dir.path(), 1).unwrap();
        let err = open(dir.path(), 1).unwrap_err();
        assert!(err.contains("locked"), "{err}");
        drop(first);
    }

    #[test]
    fn a_routing_change_is_refused_naming_both_and_leaves_the_dir_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        drop(DataDir::open(dir.path(), 2, Routing::Slots).unwrap());
        let meta = dir.path().join(META_FILE);
        let before = std::fs::read(&meta).unwrap();
        assert!(String::from_utf8_lossy(&before).contains(r#""routing":"slots""#));
        let err = DataDir::open(dir.path(), 2, Routing::Hash).unwrap_err();
        assert!(
            err.contains("\"slots\"") && err.contains("\"hash\""),
            "{err}"
        );
        assert_eq!(std::fs::read(&meta).unwrap(), before, "nothing rewritten");
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [LOCK_FILE, META_FILE], "no temporary file left");
        drop(DataDir::open(dir.path(), 2, Routing::Slots).unwrap());
    }

    #[test]
    fn a_data_dir_without_a_routing_routes_by_hash() {
        let dir = tempfile::tempdir().unwrap();
        let meta = dir.path().join(META_FILE);
        std::fs::write(&meta, br#"{"format_version":1,"shard_count":1}"#).unwrap();
        let err = DataDir::open(dir.path(), 1, Routing::Slots).unwrap_err();
        assert!(
            err.contains("\"hash\"") && err.contains("\"slots\""),
            "{err}"
        );
        drop(open(dir.path(), 1).unwrap());
        // A new one records its routing.
        let fresh = tempfile::tempdir().unwrap();
        drop(open(fresh.path(), 1).unwrap());
        let text = std::fs::read_to_string(fresh.path().join(META_FILE)).unwrap();
        assert!(text.contains(r#""routing":"hash""#), "{text}");
    }
}
