//! `LogReader`: a shard's durable records, read from any glommio executor (replication).
//!
//! It never touches the shard's `Shared`: it lists `wal/` itself, opens its own read-only
//! `DmaFile`s, and trusts only the durable offset the `Wal` publishes (`LogHandle`). Durable
//! records never change on disk (a rewritten tail block repeats their bytes), so reading them
//! while the shard appends is safe.
//!
//! Meant to be called often with small batches (a replication sender tailing the log): files
//! stay open (at most `OPEN_FILES_MAX`), the segment list is cached and re-listed only when an
//! offset is in no known segment, and a read that continues where the last one stopped starts
//! at the byte it stopped at. Reads start small (`FIRST_READ_BYTES`) and double up to
//! `READ_CHUNK_BYTES`, so tailing reads only the blocks it needs.
//!
//! Compaction may delete a segment the reader still has open: an open file stays readable, so
//! a reader that keeps up never sees `Trimmed`. An offset below the oldest retained one that is
//! in no open file is `Trimmed { oldest }`: the caller goes to the snapshot
//! (`newest_snapshot`). When the shard rewinds or replaces its log (truncation, snapshot
//! install) the handle's generation changes and the reader drops everything it cached.

use std::path::{Path, PathBuf};

use glommio::io::DmaFile;

use super::error::WalError;
use super::files::{self, align_down};
use super::handle::LogHandle;
use super::limits::{BLOCK_BYTES, INDEX_STRIDE_BYTES, READ_CHUNK_BYTES, SEGMENT_HEADER_BYTES};
use super::record::{self, Decoded, KIND_ENTRY};
use super::scan::ReadSize;
use super::segment::list_segments;
use super::snapshot::{self, Opened, SnapshotFile, SnapshotStream};

/// Segment files a reader keeps open at most; the oldest open one is closed for a new one.
const OPEN_FILES_MAX: usize = 4;

/// Bytes of the first read of a call (four blocks): a tailing reader wants a few records.
const FIRST_READ_BYTES: usize = 4 * BLOCK_BYTES as usize;
const _: () = assert!(FIRST_READ_BYTES <= READ_CHUNK_BYTES);

/// A segment the reader knows of.
struct Known {
    first: u64,
    path: PathBuf,
    file: Option<DmaFile>,
    /// Sparse `(offset, byte position of its record)`, ascending, built while reading.
    index: Vec<(u64, u64)>,
}

/// Notes that record `offset` starts at byte `pos`, keeping one index entry per stride.
fn note(index: &mut Vec<(u64, u64)>, offset: u64, pos: u64) {
    if index
        .last()
        .is_none_or(|&(o, p)| offset > o && pos >= p + INDEX_STRIDE_BYTES)
    {
        index.push((offset, pos));
    }
}

impl Known {
    /// `(offset, byte)` of the indexed record nearest at or before `offset`.
    fn start_for(&self, offset: u64) -> (u64, u64) {
        let i = self.index.partition_point(|&(o, _)| o <= offset);
        match i.checked_sub(1) {
            Some(i) => self.index[i],
            None => (self.first, SEGMENT_HEADER_BYTES),
        }
    }
}

/// Where the previous read stopped: record `next` starts at byte `pos` of segment `first`.
#[derive(Clone, Copy)]
struct Cursor {
    first: u64,
    next: u64,
    pos: u64,
}

/// What one call collects, and its limits.
struct Collector {
    out: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    max_records: usize,
    max_bytes: usize,
    next: u64,
    durable: u64,
}

impl Collector {
    fn wants_more(&self) -> bool {
        self.next <= self.durable && self.out.len() < self.max_records
    }

    /// Takes the record unless the byte budget is spent (the first record always fits).
    fn take(&mut self, offset: u64, payload: &[u8]) -> bool {
        if !self.out.is_empty() && self.bytes + payload.len() > self.max_bytes {
            return false;
        }
        self.bytes += payload.len();
        self.out.push((offset, payload.to_vec()));
        self.next = offset + 1;
        true
    }
}

/// A reader of one shard's log for the executor it was made on. See the module docs.
pub struct LogReader {
    handle: LogHandle,
    probed: bool,
    generation: u64,
    /// From the last listing of `wal/`, oldest first.
    segments: Vec<Known>,
    cursor: Option<Cursor>,
}

impl LogReader {
    pub(crate) fn new(handle: LogHandle) -> LogReader {
        let generation = handle.generation();
        LogReader {
            handle,
            probed: false,
            generation,
            segments: Vec::new(),
            cursor: None,
        }
    }

    /// Highest durable offset.
    pub fn durable(&self) -> u64 {
        self.handle.durable()
    }

    /// Oldest offset the log still holds.
    pub fn oldest(&self) -> u64 {
        self.handle.oldest()
    }

    /// Durable entries with offset `>= from`, in order: at most `max_records`, and at most
    /// `max_bytes` of payload except that the first record always comes back. Empty when
    /// `from` is beyond the durable offset. `Err(Trimmed { oldest })` when `from` was compacted
    /// away (and is in no file this reader still has open).
    pub async fn read_from(
        &mut self,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, WalError> {
        self.prepare().await?;
        let durable = self.handle.durable();
        let mut c = Collector {
            out: Vec::new(),
            bytes: 0,
            max_records,
            max_bytes,
            next: from.max(1),
            durable,
        };
        if !c.wants_more() {
            return Ok(c.out);
        }
        let mut i = self.locate(c.next)?;
        loop {
            let expected = match self.read_segment(i, &mut c).await {
                Ok(Some(expected)) => expected,
                Ok(None) => break,
                // The next segment was compacted away: return what was read; the next call
                // starts there and gets the error.
                Err(WalError::Trimmed { .. }) if !c.out.is_empty() => break,
                Err(e) => return Err(e),
            };
            if expected > durable {
                break;
            }
            // The segment ended: the next one starts at `expected`.
            i = match self.position(expected) {
                Some(j) => j,
                None => {
                    self.relist()?;
                    match self.position(expected) {
                        Some(j) => j,
                        // Compacted while this reader was in the segment before it.
                        None if expected < self.handle.oldest() => {
                            if !c.out.is_empty() {
                                break;
                            }
                            return Err(WalError::Trimmed {
                                requested: c.next,
                                oldest: self.handle.oldest(),
                            });
                        }
                        None => {
                            let reason = format!(
                                "no segment starts at offset {expected}, below the durable \
                                 offset {durable}"
                            );
                            return Err(WalError::corrupt(&self.handle.wal_dir(), 0, reason));
                        }
                    }
                }
            };
        }
        Ok(c.out)
    }

    /// The newest snapshot whose header is valid, opened for reading in parts (the CRC is
    /// checked at its end: `SnapshotStream::next_part`). Invalid ones are skipped (the shard
    /// sets them aside at its next start).
    pub async fn newest_snapshot_stream(&mut self) -> Result<Option<SnapshotStream>, WalError> {
        self.prepare().await?;
        let dir = self.handle.snapshot_dir();
        let listing = snapshot::list_snapshots(&dir)?;
        for (offset, path) in listing.files.iter().rev() {
            let shard = self.handle.shard;
            match SnapshotFile::open(path, shard, *offset, ReadSize::Reader).await {
                Ok(Opened::Valid(file)) => return Ok(Some(SnapshotStream::new(file))),
                Ok(Opened::Invalid(reason)) => {
                    log::warn!("wal: reader skips snapshot {}: {reason}", path.display());
                }
                // Pruned between the listing and the open: an older one may still be there.
                Err(_) if !path.exists() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// The snapshot at exactly `offset` (a pinned one: `LogHandle::pin`), opened for reading
    /// in parts. `Ok(None)` when it is not on disk or fails its header check.
    pub async fn snapshot_stream_at(
        &mut self,
        offset: u64,
    ) -> Result<Option<SnapshotStream>, WalError> {
        self.prepare().await?;
        let path = snapshot::snapshot_path(&self.handle.snapshot_dir(), offset);
        if !path.exists() {
            return Ok(None);
        }
        match SnapshotFile::open(&path, self.handle.shard, offset, ReadSize::Reader).await? {
            Opened::Valid(file) => Ok(Some(SnapshotStream::new(file))),
            Opened::Invalid(reason) => {
                log::warn!("wal: reader skips snapshot {}: {reason}", path.display());
                Ok(None)
            }
        }
    }

    /// The newest valid snapshot whole: `(offset, version, payload)` (tests and small
    /// tools; replication streams it with `newest_snapshot_stream`).
    pub async fn newest_snapshot(&mut self) -> Result<Option<(u64, u32, Vec<u8>)>, WalError> {
        let Some(mut stream) = self.newest_snapshot_stream().await? else {
            return Ok(None);
        };
        let mut payload = Vec::new();
        let read = loop {
            match stream.next_part(usize::MAX).await {
                Ok(Some(part)) => payload.extend_from_slice(&part),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let (offset, version) = (stream.offset(), stream.version());
        let closed = stream.close().await;
        read.and(closed)?;
        Ok(Some((offset, version, payload)))
    }

    /// Once: the iopoll probe for this executor. Always: drop the cache if the log changed.
    async fn prepare(&mut self) -> Result<(), WalError> {
        if !self.probed {
            files::probe_device(&self.handle.dir).await?;
            self.probed = true;
        }
        let generation = self.handle.generation();
        if generation != self.generation {
            self.generation = generation;
            self.segments.clear();
            self.cursor = None;
        }
        Ok(())
    }

    fn relist(&mut self) -> Result<(), WalError> {
        let listing = list_segments(&self.handle.wal_dir())?;
        let mut old = std::mem::take(&mut self.segments);
        for (first, path) in listing.files {
            let known = match old.iter().position(|k| k.first == first) {
                Some(k) => old.swap_remove(k),
                None => Known {
                    first,
                    path,
                    file: None,
                    index: Vec::new(),
                },
            };
            self.segments.push(known);
        }
        // Segments gone from the directory but still open stay readable.
        for k in old.into_iter().filter(|k| k.file.is_some()) {
            let at = self.segments.partition_point(|s| s.first < k.first);
            self.segments.insert(at, k);
        }
        Ok(())
    }

    fn position(&self, first: u64) -> Option<usize> {
        self.segments.iter().position(|s| s.first == first)
    }

    /// The known segment to start reading `offset` in (re-listing if none could hold it).
    fn locate(&mut self, offset: u64) -> Result<usize, WalError> {
        let holder = |segs: &[Known]| segs.iter().rposition(|s| s.first <= offset);
        let oldest = self.handle.oldest();
        if offset < oldest {
            // Compacted: only a file still open can serve it.
            return match holder(&self.segments) {
                Some(i) if self.segments[i].file.is_some() => Ok(i),
                _ => Err(WalError::Trimmed {
                    requested: offset,
                    oldest,
                }),
            };
        }
        if let Some(i) = holder(&self.segments) {
            return Ok(i);
        }
        self.relist()?;
        holder(&self.segments).ok_or_else(|| WalError::Trimmed {
            requested: offset,
            oldest: self.handle.oldest(),
        })
    }

    /// Opens segment `i` if needed, closing the oldest open one beyond `OPEN_FILES_MAX`.
    async fn open(&mut self, i: usize) -> Result<(), WalError> {
        if self.segments[i].file.is_some() {
            return Ok(());
        }
        let open: Vec<usize> = (0..self.segments.len())
            .filter(|&j| self.segments[j].file.is_some())
            .collect();
        if open.len() >= OPEN_FILES_MAX {
            if let Some(file) = self.segments[open[0]].file.take() {
                let path = self.segments[open[0]].path.clone();
                files::close(file, &path).await?;
            }
        }
        let path = self.segments[i].path.clone();
        match files::open_read(&path).await {
            Ok(file) => {
                self.segments[i].file = Some(file);
                Ok(())
            }
            Err(_) if !path.exists() && self.segments[i].first < self.handle.oldest() => {
                Err(WalError::Trimmed {
                    requested: self.segments[i].first,
                    oldest: self.handle.oldest(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Collects records of segment `i` from `c.next` on. `Some(next offset)` when the segment
    /// ended, `None` when the collector is done.
    async fn read_segment(&mut self, i: usize, c: &mut Collector) -> Result<Option<u64>, WalError> {
        self.open(i).await?;
        let (mut expected, pos) = match self.cursor {
            Some(k) if k.first == self.segments[i].first && k.next == c.next => (k.next, k.pos),
            _ => self.segments[i].start_for(c.next),
        };
        let Known {
            first,
            path,
            file,
            index,
        } = &mut self.segments[i];
        let Some(file) = file.as_ref() else {
            return Err(WalError::Closed); // opened just above
        };
        let mut w = Window::new(pos);
        loop {
            let at = w.pos();
            match record::decode(w.rest()) {
                Decoded::Record(h) => {
                    if h.kind != KIND_ENTRY {
                        w.advance(h.size);
                        continue;
                    }
                    if h.offset != expected {
                        let reason = format!(
                            "offsets must be contiguous: expected {expected}, got {}",
                            h.offset
                        );
                        return Err(WalError::corrupt(path, at, reason));
                    }
                    note(index, h.offset, at);
                    if h.offset >= c.next {
                        let payload = &w.rest()[h.payload.clone()];
                        if !c.take(h.offset, payload) {
                            self.cursor = Some(Cursor {
                                first: *first,
                                next: h.offset,
                                pos: at,
                            });
                            return Ok(None);
                        }
                    }
                    w.advance(h.size);
                    expected += 1;
                    if !c.wants_more() {
                        self.cursor = Some(Cursor {
                            first: *first,
                            next: expected,
                            pos: w.pos(),
                        });
                        return Ok(None);
                    }
                }
                Decoded::End => return Ok(Some(expected)),
                Decoded::Incomplete(need) => {
                    if !w.fill(file, path).await? {
                        return at_file_end(&w, need, path, at).map(|()| Some(expected));
                    }
                }
                Decoded::Bad(reason) => {
                    let reason = format!("{reason} (before the durable offset {})", c.durable);
                    return Err(WalError::corrupt(path, at, reason));
                }
            }
        }
    }
}

/// The file ended inside the room a record at `at` would need. Fine when the file ends at a
/// record boundary (or in zeros): a segment its last record filled, with no room left for an end
/// marker, read the same way recovery reads it (`scan.rs`). Anything else is a torn record.
fn at_file_end(
    w: &Window,
    need: impl std::fmt::Display,
    path: &Path,
    at: u64,
) -> Result<(), WalError> {
    if w.rest().iter().all(|&b| b == 0) {
        return Ok(());
    }
    let reason = format!("torn record needing {need} bytes at the file's end");
    Err(WalError::corrupt(path, at, reason))
}

/// The bytes of a segment from a block-aligned position, read in growing chunks.
struct Window {
    buf: Vec<u8>,
    /// File position of `buf[0]` (block-aligned).
    start: u64,
    cur: usize,
    chunk: usize,
    /// The last read came back short: the file ends there.
    eof: bool,
}

impl Window {
    fn new(pos: u64) -> Window {
        let start = align_down(pos);
        Window {
            buf: Vec::new(),
            start,
            cur: (pos - start) as usize,
            chunk: FIRST_READ_BYTES,
            eof: false,
        }
    }

    fn pos(&self) -> u64 {
        self.start + self.cur as u64
    }

    fn rest(&self) -> &[u8] {
        self.buf.get(self.cur..).unwrap_or(&[])
    }

    fn advance(&mut self, n: usize) {
        self.cur += n;
    }

    /// Reads the next chunk; false at the end of the file.
    async fn fill(&mut self, file: &DmaFile, path: &std::path::Path) -> Result<bool, WalError> {
        if self.eof {
            return Ok(false);
        }
        let consumed = align_down(self.cur.min(self.buf.len()) as u64) as usize;
        self.buf.drain(..consumed);
        self.start += consumed as u64;
        self.cur -= consumed;
        let at = self.start + self.buf.len() as u64;
        let got = files::read_aligned(file, path, at, self.chunk).await?;
        if got.is_empty() {
            return Ok(false);
        }
        // Segment sizes are whole blocks, so only the end of the file reads short.
        self.eof = got.len() < self.chunk;
        self.buf.extend_from_slice(&got);
        self.chunk = (self.chunk * 2).min(READ_CHUNK_BYTES);
        Ok(true)
    }
}
