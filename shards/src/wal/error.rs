//! The one error type of the WAL boundary. Every variant names the thing it is about.

use std::fmt;
use std::path::{Path, PathBuf};

/// What can go wrong in the write-ahead log.
#[derive(Debug)]
pub enum WalError {
    /// An I/O call failed. From the committer (writes, syncs) this also poisons the log.
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A segment or snapshot failed a check that only damage can explain. `offset` is a byte
    /// offset in the file.
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },
    /// An earlier write or fdatasync failed; the log accepts nothing more until restarted.
    Poisoned,
    /// `close` was called (or the `Wal` dropped); no more appends.
    Closed,
    /// The filesystem holding `path` has no room for what the log must allocate (a segment,
    /// the spare, a snapshot within `reserve_bytes`): appends are refused until it has.
    /// `needed` and `free` are bytes (0 when not known).
    StorageFull {
        path: PathBuf,
        needed: u64,
        free: u64,
    },
    /// The payload exceeds the largest record this log accepts.
    TooLarge { len: usize, max: usize },
    /// `read_from` asked for offsets that compaction already deleted.
    Trimmed { requested: u64, oldest: u64 },
    /// `write_snapshot` for an offset that is not durable yet.
    NotDurable { offset: u64, durable: u64 },
    /// The recovery callback refused an item.
    Apply { offset: u64, reason: String },
    /// The configuration is unusable.
    Config(String),
}

impl WalError {
    /// Builds an `Io` error from a glommio error, naming the operation and the file.
    pub(crate) fn io(op: &'static str, path: &Path, err: glommio::GlommioError<()>) -> WalError {
        // Keep the OS error itself (its errno: `space.rs` tells a full disk by it); glommio's
        // own conversion rewraps it in a message and keeps only its kind. `op` and `path` name
        // what the message said.
        let source = match err {
            glommio::GlommioError::EnhancedIoError { source, .. } => source,
            glommio::GlommioError::IoError(source) => source,
            other => other.into(),
        };
        WalError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Builds an `Io` error from a std error.
    pub(crate) fn std_io(op: &'static str, path: &Path, source: std::io::Error) -> WalError {
        WalError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn corrupt(segment: &Path, offset: u64, reason: impl Into<String>) -> WalError {
        WalError::Corrupt {
            segment: segment.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::Io { op, path, source } => {
                write!(f, "wal: {op} {} failed: {source}", path.display())
            }
            WalError::Corrupt {
                segment,
                offset,
                reason,
            } => {
                write!(
                    f,
                    "wal: {} is corrupt at byte {offset}: {reason}",
                    segment.display()
                )
            }
            WalError::Poisoned => write!(f, "wal: poisoned by an earlier I/O error"),
            WalError::Closed => write!(f, "wal: closed"),
            WalError::StorageFull { path, needed, free } => write!(
                f,
                "wal: no room on the disk of {}: {needed} bytes needed, {free} bytes free",
                path.display()
            ),
            WalError::TooLarge { len, max } => {
                write!(
                    f,
                    "wal: payload of {len} bytes exceeds the limit of {max} bytes"
                )
            }
            WalError::Trimmed { requested, oldest } => write!(
                f,
                "wal: offset {requested} was compacted away; the oldest retained offset is {oldest}"
            ),
            WalError::NotDurable { offset, durable } => {
                write!(
                    f,
                    "wal: offset {offset} is not durable yet (durable: {durable})"
                )
            }
            WalError::Apply { offset, reason } => {
                write!(
                    f,
                    "wal: recovery callback failed at offset {offset}: {reason}"
                )
            }
            WalError::Config(reason) => write!(f, "wal: bad configuration: {reason}"),
        }
    }
}

impl std::error::Error for WalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WalError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
