//! The archive's history files (`ARCHIVE/history/<epoch>.json`, codec
//! `smdb_format::archive::History`): which epoch an epoch followed and, per shard, the offset
//! of its epoch record.
//!
//! Every shard of every member archiving into one directory adds its own `from` entry to the
//! same file, so the read-merge-write runs under an exclusive `flock` on
//! `ARCHIVE/history/.lock` (shards are threads of one process, members other processes: a lock
//! per open file serves both). The new file is written to a temporary name, fsynced, renamed
//! over the old one, and the directory fsynced, so a reader sees the old file or the new one.
//! It runs once per epoch per shard, blocking its executor for a few small synchronous I/Os.

use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use smdb_format::archive::{history_path, History, HISTORY_DIR};

use crate::wal::error::WalError;
use crate::wal::shared::SegmentEpoch;

/// Name of the lock file inside `history/`.
const LOCK_FILE: &str = ".lock";

/// Records that `shard`'s epoch record for `e.epoch` took offset `from`.
pub(super) fn add_from(
    archive: &Path,
    shard: u32,
    from: u64,
    e: SegmentEpoch,
) -> Result<(), WalError> {
    let dir = archive.join(HISTORY_DIR);
    std::fs::create_dir_all(&dir).map_err(|err| WalError::std_io("mkdir", &dir, err))?;
    let lock_path = dir.join(LOCK_FILE);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|err| WalError::std_io("open", &lock_path, err))?;
    // SAFETY: `lock` is an open file for the whole call; flock touches nothing else. The lock
    // goes when the file is closed (dropped) at the end of this function.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(WalError::std_io("flock", &lock_path, err));
    }
    merge(&dir, archive, shard, from, e)
}

fn merge(
    dir: &Path,
    archive: &Path,
    shard: u32,
    from: u64,
    e: SegmentEpoch,
) -> Result<(), WalError> {
    let path = history_path(archive, e.epoch);
    let mut h = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<History>(&bytes).map_err(|err| {
            WalError::std_io("parse", &path, std::io::Error::other(err.to_string()))
        })?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => History {
            epoch: e.epoch,
            follows: e.follows,
            from: Default::default(),
        },
        Err(err) => return Err(WalError::std_io("read", &path, err)),
    };
    if h.follows != e.follows {
        log::warn!(
            "wal: shard {shard}: {} says epoch {} follows {}, this log says {}; keeping the file's",
            path.display(),
            e.epoch,
            h.follows,
            e.follows
        );
    }
    let key = shard.to_string();
    if h.from.get(&key) == Some(&from) {
        return Ok(());
    }
    if let Some(old) = h.from.insert(key, from) {
        log::warn!(
            "wal: shard {shard}: epoch {} began at offset {old} in {}, now at {from}",
            e.epoch,
            path.display()
        );
    }
    let text = serde_json::to_vec(&h)
        .map_err(|err| WalError::std_io("encode", &path, std::io::Error::other(err.to_string())))?;
    let tmp = dir.join(format!(
        "{}.json.{}-{shard}.tmp",
        e.epoch,
        std::process::id()
    ));
    if let Err(err) = write_synced(&tmp, &text) {
        let _ = std::fs::remove_file(&tmp);
        return Err(WalError::std_io("write", &tmp, err));
    }
    std::fs::rename(&tmp, &path).map_err(|err| WalError::std_io("rename", &tmp, err))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|err| WalError::std_io("fsync dir", dir, err))
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
