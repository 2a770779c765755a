//! Timers paused by the data dir (`smdb-server restore --pause-timers`, docs/backup.md "Timers after a restore"): a data
//! dir holding `timers.paused` (`datadir::TIMERS_PAUSED_FILE`) starts with every shard's timers
//! armed but firing none, so a restored week-old backup does not fire a week of overdue timers
//! at once. `TIMERS_RESUME` (`smdb-cli timers resume`) deletes the marker, fsyncs the data dir
//! and tells every shard to fire what is due (`mesh::fanout::timers_resume`).
//!
//! One `TimersPause` per process, shared by every front (INFO's `timers_paused`, the op); each
//! shard keeps its own copy of the flag (`shard::timers::Timers::paused`), set from this at
//! start-up and cleared by `ShardCall::TimersResume`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::datadir::TIMERS_PAUSED_FILE;

/// Whether this server's timers are paused, and the marker that says so.
#[derive(Debug)]
pub struct TimersPause {
    /// The data dir (fsynced after the marker is deleted).
    dir: PathBuf,
    /// `<data_dir>/timers.paused`.
    marker: PathBuf,
    paused: AtomicBool,
}

impl TimersPause {
    /// Reads the marker's presence in `data_dir` (at start-up, before any shard starts).
    pub fn detect(data_dir: &Path) -> TimersPause {
        let marker = data_dir.join(TIMERS_PAUSED_FILE);
        let paused = marker.exists();
        TimersPause {
            dir: data_dir.to_path_buf(),
            marker,
            paused: AtomicBool::new(paused),
        }
    }

    /// Paused now: true from start-up with the marker until the first `resume`.
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// The marker's path (the start-up warning names it).
    pub fn marker(&self) -> &Path {
        &self.marker
    }

    /// Deletes the marker (a missing one is fine: the op is idempotent) and fsyncs the data
    /// dir, so a restart after the reply does not pause again; then clears the flag. Returns
    /// whether the server was paused. The caller then resumes every shard. Blocking file
    /// calls: an unlink and one directory fsync, run once per admin request.
    pub fn resume(&self) -> Result<bool, String> {
        match std::fs::remove_file(&self.marker) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot delete {}: {e}", self.marker.display())),
        }
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("cannot fsync {}: {e}", self.dir.display()))?;
        Ok(self.paused.swap(false, Ordering::AcqRel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_pauses_until_resumed_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!TimersPause::detect(dir.path()).paused());
        std::fs::write(dir.path().join(TIMERS_PAUSED_FILE), "restored\n").unwrap();
        let pause = TimersPause::detect(dir.path());
        assert!(pause.paused());
        assert_eq!(pause.resume(), Ok(true));
        assert!(!pause.paused() && !pause.marker().exists());
        assert_eq!(pause.resume(), Ok(false), "idempotent");
        assert!(!TimersPause::detect(dir.path()).paused());
    }
}
