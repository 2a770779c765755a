//! Where a restore writes: a staging directory beside `--data-dir`, renamed onto it only once
//! every file is written and fsynced, so a failed restore leaves nothing a server would start
//! on and `--data-dir` is never written into when it holds anything.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use smdb_format::limits::{BLOCK_BYTES, SEGMENT_HEADER_BYTES};
use smdb_format::manifest::Manifest;
use smdb_format::record::{encode, KIND_ENTRY};
use smdb_format::segment::{
    encode_epoch, encode_header, segment_path, SegmentEpoch, SegmentHeader,
};

use super::error::RestoreError;
use crate::datadir::TIMERS_PAUSED_FILE;

/// Bytes buffered before a write to a segment being built.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// The restore's data directory while it is being built.
pub struct Staging {
    dir: PathBuf,
    target: PathBuf,
    /// The target existed (empty, perhaps a fresh mount): the staging directory is inside
    /// it and its entries move up at the end; else the staging directory is renamed onto it.
    inside: bool,
    committed: bool,
}

impl Staging {
    /// Refuses a `target` that holds anything. An absent target is built as
    /// `.<name>.restore-<pid>` beside it; an empty one (which may be a mount point, where a
    /// rename from outside would cross file systems) as `.restore-<pid>` inside it.
    pub fn create(target: &Path) -> Result<Staging, RestoreError> {
        let inside = match std::fs::read_dir(target) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(RestoreError::NotEmpty(target.to_path_buf()));
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io(target, e)),
        };
        let dir = if inside {
            target.join(format!(".restore-{}", std::process::id()))
        } else {
            let name = target
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| RestoreError::file(target, "not a directory name"))?;
            let parent = parent_of(target);
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            parent.join(format!(".{name}.restore-{}", std::process::id()))
        };
        std::fs::create_dir(&dir).map_err(|e| io(&dir, e))?;
        Ok(Staging {
            dir,
            target: target.to_path_buf(),
            inside,
            committed: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Copies every file the manifest lists (the manifest itself stays behind: the result is
    /// a data directory, not a backup). Returns the bytes copied.
    pub fn copy_backup(&self, backup: &Path, manifest: &Manifest) -> Result<u64, RestoreError> {
        let mut bytes = 0;
        for f in &manifest.files {
            let from = backup.join(&f.path);
            let to = self.dir.join(&f.path);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            bytes += std::fs::copy(&from, &to).map_err(|e| io(&from, e))?;
            File::open(&to)
                .and_then(|f| f.sync_all())
                .map_err(|e| io(&to, e))?;
        }
        Ok(bytes)
    }

    /// Writes the marker that keeps a server's timers paused until `smdb-cli timers resume`.
    pub fn pause_timers(&self, why: &str) -> Result<(), RestoreError> {
        let path = self.dir.join(TIMERS_PAUSED_FILE);
        let mut f = File::create(&path).map_err(|e| io(&path, e))?;
        f.write_all(why.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| io(&path, e))
    }

    /// Fsyncs every directory, then puts the result in place: renamed onto the absent target
    /// (its parent fsynced), or its entries moved up into the empty target (the target
    /// fsynced, the staging directory removed).
    pub fn commit(mut self) -> Result<(), RestoreError> {
        sync_tree(&self.dir)?;
        if !self.inside {
            std::fs::rename(&self.dir, &self.target).map_err(|source| RestoreError::Rename {
                from: self.dir.clone(),
                to: self.target.clone(),
                source,
            })?;
            self.committed = true;
            return sync_dir(parent_of(&self.target));
        }
        for e in std::fs::read_dir(&self.dir).map_err(|e| io(&self.dir, e))? {
            let e = e.map_err(|e| io(&self.dir, e))?;
            let to = self.target.join(e.file_name());
            std::fs::rename(e.path(), &to).map_err(|err| io(&to, err))?;
        }
        sync_dir(&self.target)?;
        std::fs::remove_dir(&self.dir).map_err(|e| io(&self.dir, e))?;
        self.committed = true;
        sync_dir(&self.target)
    }
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Builds one shard's replayed segments in the staging directory: one segment per archived
/// segment it reads from, each created on its first entry.
pub struct SegmentWriter {
    wal: PathBuf,
    shard: u32,
    open: Option<Open>,
    pending: Option<(u64, SegmentEpoch)>,
    buf: Vec<u8>,
    pub written: Vec<PathBuf>,
}

struct Open {
    file: File,
    path: PathBuf,
    bytes: u64,
}

impl SegmentWriter {
    pub fn new(data_dir: &Path, shard: u32) -> Result<SegmentWriter, RestoreError> {
        let wal = data_dir.join(format!("shard-{shard}")).join("wal");
        std::fs::create_dir_all(&wal).map_err(|e| io(&wal, e))?;
        Ok(SegmentWriter {
            wal,
            shard,
            open: None,
            pending: None,
            buf: Vec::with_capacity(WRITE_BUFFER_BYTES),
            written: Vec::new(),
        })
    }

    /// The next entry pushed starts a new segment at `first`, labelled `epoch`.
    pub fn begin(&mut self, first: u64, epoch: SegmentEpoch) -> Result<(), RestoreError> {
        self.close()?;
        self.pending = Some((first, epoch));
        Ok(())
    }

    pub fn push(&mut self, offset: u64, payload: &[u8]) -> Result<(), RestoreError> {
        if let Some((first, epoch)) = self.pending.take() {
            debug_assert_eq!(first, offset);
            self.create(first, epoch)?;
        }
        encode(&mut self.buf, offset, KIND_ENTRY, payload);
        if self.buf.len() >= WRITE_BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// A backup whose shard holds no entry after its snapshot has an empty segment starting
    /// where the replay starts: replaced (it holds nothing).
    fn create(&mut self, first: u64, epoch: SegmentEpoch) -> Result<(), RestoreError> {
        let path = segment_path(&self.wal, first);
        let mut file = File::create(&path).map_err(|e| io(&path, e))?;
        let mut block = vec![0u8; SEGMENT_HEADER_BYTES as usize];
        encode_header(
            SegmentHeader {
                shard: self.shard,
                first_offset: first,
            },
            &mut block,
        );
        encode_epoch(epoch, &mut block);
        file.write_all(&block).map_err(|e| io(&path, e))?;
        self.open = Some(Open {
            file,
            path,
            bytes: SEGMENT_HEADER_BYTES,
        });
        Ok(())
    }

    fn flush(&mut self) -> Result<(), RestoreError> {
        if let Some(o) = self.open.as_mut() {
            o.file.write_all(&self.buf).map_err(|e| io(&o.path, e))?;
            o.bytes += self.buf.len() as u64;
        }
        self.buf.clear();
        Ok(())
    }

    /// Pads the open segment to a whole block (a zero length ends the data) and fsyncs it.
    pub fn close(&mut self) -> Result<(), RestoreError> {
        self.pending = None;
        self.flush()?;
        if let Some(mut o) = self.open.take() {
            let pad = o.bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES - o.bytes;
            o.file
                .write_all(&vec![0u8; pad as usize])
                .and_then(|()| o.file.sync_all())
                .map_err(|e| io(&o.path, e))?;
            self.written.push(o.path);
        }
        Ok(())
    }
}

fn sync_tree(dir: &Path) -> Result<(), RestoreError> {
    for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let e = e.map_err(|e| io(dir, e))?;
        if e.file_type().map_err(|err| io(&e.path(), err))?.is_dir() {
            sync_tree(&e.path())?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), RestoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

fn io(path: &Path, e: std::io::Error) -> RestoreError {
    RestoreError::io(path, e)
}
