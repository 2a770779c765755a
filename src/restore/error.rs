//! Why a restore refused, with its context: the file or directory and what was done to it,
//! the shard and the step, the flag. `Display` gives the text `smdb-server restore` prints
//! after its name before exiting 1 (or 2 for a flag), word for word as before these types.

use std::fmt;
use std::path::PathBuf;

use smdb_format::verify::Problem;

/// An error of `smdb-server restore`.
#[derive(Debug)]
pub enum RestoreError {
    /// A flag (`--until`, `--until-offset`) is wrong.
    Flag(String),
    /// Reading, writing or listing `path` failed.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `path` is not what the step needs (a segment, a history file, a directory name).
    File { path: PathBuf, why: String },
    /// The backup at `path` does not verify.
    Backup { path: PathBuf, problem: Problem },
    /// The backup's manifest is unreadable or incomplete.
    Manifest(String),
    /// The target directory holds something.
    NotEmpty(PathBuf),
    /// The staging directory could not be renamed onto the target.
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    /// Shard `shard` cannot be restored as asked (the archive, the chain or the flags).
    Shard { shard: u32, why: String },
    /// A segment restore wrote does not verify.
    Written { path: PathBuf, why: String },
}

impl RestoreError {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> RestoreError {
        let path = path.to_path_buf();
        RestoreError::Io { path, source }
    }

    pub fn file(path: &std::path::Path, why: impl Into<String>) -> RestoreError {
        let (path, why) = (path.to_path_buf(), why.into());
        RestoreError::File { path, why }
    }

    pub fn shard(shard: u32, why: impl Into<String>) -> RestoreError {
        let why = why.into();
        RestoreError::Shard { shard, why }
    }
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::Flag(why) | RestoreError::Manifest(why) => f.write_str(why),
            RestoreError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            RestoreError::File { path, why } => write!(f, "{}: {why}", path.display()),
            RestoreError::Backup { path, problem } => {
                write!(
                    f,
                    "{}: the backup does not verify: {problem}",
                    path.display()
                )
            }
            RestoreError::NotEmpty(path) => write!(
                f,
                "{} is not empty: restore never writes into a directory that holds anything",
                path.display()
            ),
            RestoreError::Rename { from, to, source } => write!(
                f,
                "renaming {} to {}: {source}",
                from.display(),
                to.display()
            ),
            RestoreError::Shard { shard, why } => write!(f, "shard {shard}: {why}"),
            RestoreError::Written { path, why } => {
                write!(f, "{} as written: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for RestoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RestoreError::Io { source, .. } | RestoreError::Rename { source, .. } => Some(source),
            _ => None,
        }
    }
}
