//! Shared test plumbing: an executor per test, temp dirs on ext4, collecting recovery output.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::{LocalExecutorBuilder, Placement};

use crate::wal::{FsyncPolicy, Recovered, Wal, WalConfig, WalError};

/// Runs `f` to completion in a fresh executor (1 MiB of io_memory), propagating panics.
pub fn run<F, Fut>(f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .spawn(f)
        .expect("spawn executor")
        .join()
        .expect("executor panicked");
}

/// A temp dir on the real filesystem (tmpfs would hide O_DIRECT alignment bugs).
pub fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir_in("/tmp").expect("tempdir in /tmp")
}

pub fn cfg(dir: &Path, segment_bytes: u64) -> WalConfig {
    WalConfig {
        dir: dir.join("shard-0"),
        shard: 0,
        segment_bytes,
        fsync: FsyncPolicy::Always,
        retain_bytes: 0,
        sync_writes: true,
        reserve_bytes: None,
        archive_dir: None,
        archive_timeout: None,
    }
}

/// A deterministic payload of varying size (20..=300 bytes) for entry `i`.
pub fn payload(i: u64) -> Vec<u8> {
    let len = 20 + (i * 7919 % 281) as usize;
    let mut v = format!("entry-{i}-").into_bytes();
    v.resize(len, (i % 251) as u8);
    v
}

#[derive(Debug, Default)]
pub struct Collected {
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// Snapshots whose payload failed its CRC after it was streamed.
    pub discarded: Vec<u64>,
    pub records: Vec<(u64, Vec<u8>)>,
}

/// The payload version tests write (the WAL does not read payloads).
pub const V: u32 = crate::wal::snapshot::SNAPSHOT_VERSION;

impl Collected {
    pub fn offsets(&self) -> Vec<u64> {
        self.records.iter().map(|r| r.0).collect()
    }
}

pub async fn open_collect(cfg: WalConfig) -> Result<(Rc<Wal>, Collected), WalError> {
    let handle = crate::wal::LogHandle::new(&cfg);
    reopen_collect(cfg, handle).await
}

/// `open_collect` through `Wal::open_with`, keeping `handle`.
pub async fn reopen_collect(
    cfg: WalConfig,
    handle: crate::wal::LogHandle,
) -> Result<(Rc<Wal>, Collected), WalError> {
    let mut got = Collected::default();
    let mut parts: Option<(u64, Vec<u8>)> = None;
    let wal = Wal::open_with(cfg, handle, &mut |r| {
        match r {
            Recovered::SnapshotBegin { offset, len, .. } => {
                assert!(got.records.is_empty(), "snapshot must come first");
                assert!(
                    parts.is_none() && got.snapshot.is_none(),
                    "one snapshot at a time"
                );
                parts = Some((offset, Vec::with_capacity(len as usize)));
            }
            Recovered::SnapshotPart { bytes } => {
                let (_, b) = parts.as_mut().expect("a part after its begin");
                b.extend_from_slice(bytes);
            }
            Recovered::SnapshotEnd { offset } => {
                let (o, b) = parts.take().expect("an end after its begin");
                assert_eq!(o, offset);
                got.snapshot = Some((offset, b));
            }
            Recovered::SnapshotDiscard { offset } => {
                let (o, _) = parts.take().expect("a discard after its begin");
                assert_eq!(o, offset);
                got.discarded.push(offset);
            }
            Recovered::Record { offset, payload } => got.records.push((offset, payload.to_vec())),
        }
        Ok(())
    })
    .await?;
    Ok((wal, got))
}

/// Appends entries `from..=to` (payloads from `payload`) and waits until the last is durable.
pub async fn append_range(wal: &Wal, from: u64, to: u64) {
    let mut last = 0;
    for i in from..=to {
        last = wal.append(&payload(i)).expect("append");
        assert_eq!(last, i);
    }
    wal.wait_durable(last).await.expect("durable");
}

/// Asserts that the recovered records are exactly `from..=to` with the expected payloads.
pub fn assert_records(got: &Collected, from: u64, to: u64) {
    let want: Vec<u64> = (from..=to).collect();
    assert_eq!(got.offsets(), want, "recovered offsets");
    for (o, p) in &got.records {
        assert_eq!(p, &payload(*o), "payload of {o}");
    }
}

/// Segment files, oldest first.
pub fn segment_files(cfg: &WalConfig) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cfg.dir.join("wal"))
        .expect("read wal dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

/// Where the valid records of a segment end (parsing them, as recovery does).
pub fn data_end(path: &Path) -> u64 {
    use crate::wal::record::{decode, Decoded};
    let bytes = std::fs::read(path).expect("read segment");
    let mut pos = 4096;
    while let Decoded::Record(h) = decode(&bytes[pos..]) {
        pos += h.size;
    }
    pos as u64
}

/// Overwrites bytes of a file at `pos` (through the page cache; the WAL is closed).
pub fn write_bytes(path: &Path, pos: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open for damage");
    f.write_all_at(bytes, pos).expect("write damage");
    f.sync_all().expect("sync damage");
}

/// Copies a directory tree: a crash image of a log that is still open.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir copy");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).expect("copy file");
        }
    }
}
