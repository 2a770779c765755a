//! A full disk (docs/wal.md "A full disk"): running out of space while the log
//! *allocates* (a new segment, the spare segment) is not corruption. The log refuses appends
//! (`WalError::StorageFull`) while an allocation keeps failing for lack of space, retries it
//! every `SPACE_RETRY_INTERVAL`, and takes appends again by itself once it succeeds. An error from
//! a write or fdatasync of the log itself stays fatal (the log is poisoned, `shared.rs`).
//!
//! Owns the classification of space errors, the free-space probe (`statvfs`) and the flags that
//! say which allocation is failing. Touches no file.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::config::WalConfig;
use super::error::WalError;
use super::handle::Published;

/// How long a failed allocation waits before it is tried again. The contract wants writes back
/// within 10 s of space returning; one second keeps that with room to spare and costs one
/// `fallocate` attempt a second while the disk stays full.
pub(crate) const SPACE_RETRY_INTERVAL: Duration = Duration::from_secs(1);
const _: () = assert!(SPACE_RETRY_INTERVAL.as_secs() < 10);

/// Whether `e` says the filesystem ran out of space or quota (ENOSPC, EDQUOT).
pub(crate) fn is_out_of_space(e: &WalError) -> bool {
    match e {
        WalError::Io { source, .. } => io_out_of_space(source),
        WalError::StorageFull { .. } => true,
        _ => false,
    }
}

pub(crate) fn io_out_of_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
}

/// Bytes an unprivileged writer may still allocate on the filesystem holding `path` (the
/// nearest existing ancestor when `path` does not exist yet).
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let mut probe: PathBuf = path.to_path_buf();
    while !probe.exists() {
        if !probe.pop() || probe.as_os_str().is_empty() {
            probe = PathBuf::from(".");
            break;
        }
    }
    let c = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    // SAFETY: statvfs is a plain C struct of integers, for which all zeros is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized, writable statvfs
    // that the call fills; nothing else is touched.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// An allocation the log makes ahead of its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alloc {
    /// A new segment at rotation (the committer).
    Segment,
    /// The pre-zeroed spare segment (its background task).
    Spare,
}

/// Which allocations are failing for lack of space. Shared (`Rc`) by the committer and the
/// spare's background task; the log refuses appends while any is set.
#[derive(Debug)]
pub(crate) struct SpaceFlags {
    shard: u32,
    segment: Cell<bool>,
    spare: Cell<bool>,
    /// Where `full()` is published for other threads (`LogHandle::is_storage_full`).
    published: Arc<Published>,
}

impl SpaceFlags {
    pub fn new(shard: u32, published: Arc<Published>) -> Rc<SpaceFlags> {
        published.set_storage_full(false);
        Rc::new(SpaceFlags {
            shard,
            segment: Cell::new(false),
            spare: Cell::new(false),
            published,
        })
    }

    pub fn full(&self) -> bool {
        self.segment.get() || self.spare.get()
    }

    fn flag(&self, what: Alloc) -> &Cell<bool> {
        match what {
            Alloc::Segment => &self.segment,
            Alloc::Spare => &self.spare,
        }
    }

    /// `what` failed for lack of space (`cause`). Logs one `error` line when the log was
    /// accepting appends until now.
    pub fn failed(&self, what: Alloc, cause: &WalError) {
        let was_full = self.full();
        self.flag(what).set(true);
        self.published.set_storage_full(true);
        if !was_full {
            log::error!(
                "wal: shard {}: the disk is full ({cause}); writes are refused with STORAGE_FULL \
                 until space returns (retried every {} s), reads go on",
                self.shard,
                SPACE_RETRY_INTERVAL.as_secs()
            );
        }
    }

    /// `what` succeeded. Logs one line when that makes the log take appends again.
    pub fn succeeded(&self, what: Alloc) {
        let was = self.flag(what).replace(false);
        self.published.set_storage_full(self.full());
        if was && !self.full() {
            log::info!(
                "wal: shard {}: space is back; writes are accepted again",
                self.shard
            );
        }
    }
}

/// The start-up check: a log needs room for its next segment and the spare (a new log: its
/// first segment and the spare). Leftover temp files in `wal/` count as free: the open deletes
/// them first. Runs before the open creates anything, so a refusal leaves no file behind.
pub(crate) fn check_room_at_open(cfg: &WalConfig) -> Result<(), WalError> {
    let wal_dir = cfg.wal_dir();
    let mut new_log = true;
    let mut leftover = 0u64;
    if let Ok(entries) = std::fs::read_dir(&wal_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".seg") {
                new_log = false;
            } else if name.ends_with(".tmp") {
                leftover += entry.metadata().map_or(0, |m| m.len());
            }
        }
    }
    let segments = if new_log { 2 } else { 1 };
    let needed = segments * cfg.segment_bytes;
    let free = free_bytes(&cfg.dir)
        .map_err(|e| WalError::std_io("statvfs", &cfg.dir, e))?
        .saturating_add(leftover);
    if free < needed {
        return Err(WalError::StorageFull {
            path: cfg.dir.clone(),
            needed,
            free,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_bytes_of_a_missing_path_is_that_of_its_ancestor() {
        let here = free_bytes(Path::new("/tmp")).unwrap();
        let missing = free_bytes(Path::new("/tmp/does/not/exist/yet")).unwrap();
        // Both name the same filesystem; other writers may change it between the calls.
        assert!(here.abs_diff(missing) < 1 << 30);
    }

    #[test]
    fn enospc_and_edquot_are_out_of_space_other_errors_are_not() {
        let io =
            |code| WalError::std_io("x", Path::new("p"), std::io::Error::from_raw_os_error(code));
        assert!(is_out_of_space(&io(libc::ENOSPC)));
        assert!(is_out_of_space(&io(libc::EDQUOT)));
        assert!(!is_out_of_space(&io(libc::EIO)));
        assert!(!is_out_of_space(&WalError::Poisoned));
    }
}
