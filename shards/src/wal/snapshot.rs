//! Snapshot files (`snapshots/<offset, 20 digits>.snap`; layout in `smdb_format::snapshot`),
//! read as a stream: the header is checked first, then the payload comes in chunks, its CRC
//! computed as they pass. Nothing holds a whole payload (`SnapshotFile`); `SnapshotStream` is
//! the same for another executor (replication's sender). Writing: `snapshot_writer`.

use std::path::{Path, PathBuf};

use glommio::io::{DmaStreamReader, DmaStreamReaderBuilder, ReadResult};

use super::error::WalError;
use super::files;
use super::limits::SNAPSHOT_HEADER_BYTES;
use super::scan::ReadSize;
pub use smdb_format::snapshot::*;

/// Lists snapshot files as the WAL reports errors.
pub fn list_snapshots(dir: &Path) -> Result<smdb_format::segment::Listing, WalError> {
    smdb_format::snapshot::list_snapshots(dir).map_err(|e| WalError::std_io("list", dir, e))
}

/// A snapshot file whose header passed its checks, its payload read in order.
pub(crate) struct SnapshotFile {
    pub(crate) header: SnapshotHeader,
    path: PathBuf,
    reader: DmaStreamReader,
    left: u64,
    crc: u32,
}

/// What opening a snapshot file found.
pub(crate) enum Opened {
    Valid(SnapshotFile),
    /// The file fails a check; the reason says which.
    Invalid(String),
}

impl SnapshotFile {
    /// Opens the snapshot at `path`, which by its name holds `offset` of `shard`, and checks
    /// its header: magic, CRC, version, shard, offset, length against the file's size.
    pub(crate) async fn open(
        path: &Path,
        shard: u32,
        offset: u64,
        size: ReadSize,
    ) -> Result<Opened, WalError> {
        let file = files::open_read(path).await?;
        let header = match check_header(&file, path, shard, offset).await {
            Ok(Ok(h)) => h,
            Ok(Err(reason)) => {
                files::close(file, path).await?;
                return Ok(Opened::Invalid(reason));
            }
            Err(e) => {
                let _ = files::close(file, path).await;
                return Err(e);
            }
        };
        let (chunk, ahead) = size.chunks();
        let reader = DmaStreamReaderBuilder::new(file)
            .with_start_pos(SNAPSHOT_HEADER_BYTES)
            .with_end_pos(SNAPSHOT_HEADER_BYTES + header.payload_len)
            .with_buffer_size(chunk)
            .with_read_ahead(ahead)
            .build();
        Ok(Opened::Valid(SnapshotFile {
            header,
            path: path.to_path_buf(),
            reader,
            left: header.payload_len,
            crc: 0,
        }))
    }

    /// The next chunk of the payload; None once it has all been read.
    pub(crate) async fn next(&mut self) -> Result<Option<ReadResult>, WalError> {
        if self.left == 0 {
            return Ok(None);
        }
        let buf = (self.reader.get_buffer_aligned(self.left).await)
            .map_err(|e| WalError::io("read", &self.path, e))?;
        if buf.is_empty() {
            let reason = format!("the payload ends {} bytes early", self.left);
            return Err(WalError::corrupt(&self.path, 0, reason));
        }
        self.left -= buf.len() as u64;
        self.crc = crc32c::crc32c_append(self.crc, &buf);
        Ok(Some(buf))
    }

    /// After the last chunk: whether the payload matches the header's CRC.
    pub(crate) fn crc_holds(&self) -> bool {
        self.left == 0 && self.crc == self.header.payload_crc
    }

    pub(crate) async fn close(self) -> Result<(), WalError> {
        let path = self.path;
        (self.reader.close().await).map_err(|e| WalError::io("close", &path, e))
    }
}

/// The header of the file, or why it is not a snapshot of `offset` in `shard`.
async fn check_header(
    file: &glommio::io::DmaFile,
    path: &Path,
    shard: u32,
    offset: u64,
) -> Result<Result<SnapshotHeader, String>, WalError> {
    let size = files::file_size(file, path).await?;
    if size < SNAPSHOT_HEADER_BYTES {
        return Ok(Err(format!(
            "file is {size} bytes, shorter than its header"
        )));
    }
    let block = files::read_aligned(file, path, 0, SNAPSHOT_HEADER_BYTES as usize).await?;
    let h = match decode_header(&block) {
        Ok(h) => h,
        Err(reason) => return Ok(Err(reason)),
    };
    Ok(if h.shard != shard {
        Err(format!("belongs to shard {}, not {shard}", h.shard))
    } else if h.offset != offset {
        Err(format!(
            "header says offset {}, name says {offset}",
            h.offset
        ))
    } else if size < SNAPSHOT_HEADER_BYTES + h.payload_len {
        Err(format!(
            "truncated: {size} bytes for a {} byte payload",
            h.payload_len
        ))
    } else {
        Ok(h)
    })
}

/// The newest snapshot of a log, read in parts by another executor (`LogReader`).
pub struct SnapshotStream {
    file: SnapshotFile,
}

impl SnapshotStream {
    pub(crate) fn new(file: SnapshotFile) -> Self {
        SnapshotStream { file }
    }

    /// The state as of this offset.
    pub fn offset(&self) -> u64 {
        self.file.header.offset
    }

    /// The payload's format version (`smdb_format::snapshot`).
    pub fn version(&self) -> u32 {
        self.file.header.version
    }

    /// Bytes of payload.
    pub fn len(&self) -> u64 {
        self.file.header.payload_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload's CRC32C (the header's).
    pub fn crc(&self) -> u32 {
        self.file.header.payload_crc
    }

    /// The next part of the payload, about `max` bytes (at least one read chunk); None after
    /// the last. A payload that does not match its CRC fails at its end (`Corrupt`): whoever
    /// received the earlier parts must discard them.
    pub async fn next_part(&mut self, max: usize) -> Result<Option<Vec<u8>>, WalError> {
        let mut part = Vec::new();
        while part.len() < max {
            match self.file.next().await? {
                Some(chunk) => part.extend_from_slice(&chunk),
                None => break,
            }
        }
        if self.file.left == 0 && !self.file.crc_holds() {
            let path = self.file.path.clone();
            return Err(WalError::corrupt(&path, 0, "payload checksum mismatch"));
        }
        Ok((!part.is_empty()).then_some(part))
    }

    pub async fn close(self) -> Result<(), WalError> {
        self.file.close().await
    }
}
