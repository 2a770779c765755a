//! Writing one snapshot file as a stream: the payload in order (`write`), then `seal`: the
//! last block zero-padded, the header block (now that the payload's length and CRC are known),
//! one fdatasync. The file is `<name>.tmp` until the log renames it into place
//! (`Wal::commit_snapshot`), so an unfinished one is deleted at the next open like any temp.
//!
//! One write of `SNAPSHOT_WRITE_BYTES` is in flight at a time, so a snapshot never queues more
//! than that ahead of the log's own writes on the device.

use std::path::{Path, PathBuf};

use glommio::io::DmaFile;

use super::error::WalError;
use super::files::{self, align_up};
use super::limits::{SNAPSHOT_HEADER_BYTES, SNAPSHOT_WRITE_BYTES};
use super::snapshot::{encode_header, payload_max, SnapshotHeader};
use super::space::free_bytes;

pub struct SnapshotWriter {
    file: Option<DmaFile>,
    tmp: PathBuf,
    header: SnapshotHeader,
    /// Payload bytes not written yet (less than one write).
    staged: Vec<u8>,
    /// File position of `staged[0]`.
    pos: u64,
    /// Bytes each write must leave free on the filesystem (`WalConfig::reserve`; 0: none).
    reserve: u64,
}

impl SnapshotWriter {
    /// Creates `tmp` for the snapshot of `shard` as of `offset` with a payload of `version`.
    /// Every write leaves `reserve` bytes free on the filesystem or fails with `StorageFull`.
    pub(crate) async fn create(
        tmp: PathBuf,
        shard: u32,
        offset: u64,
        version: u32,
        reserve: u64,
    ) -> Result<SnapshotWriter, WalError> {
        let file = files::create_rw(&tmp).await?;
        Ok(SnapshotWriter {
            file: Some(file),
            tmp,
            header: SnapshotHeader {
                version,
                shard,
                offset,
                payload_len: 0,
                payload_crc: 0,
            },
            staged: Vec::with_capacity(SNAPSHOT_WRITE_BYTES),
            pos: SNAPSHOT_HEADER_BYTES,
            reserve,
        })
    }

    /// The state as of this offset.
    pub fn offset(&self) -> u64 {
        self.header.offset
    }

    /// Payload bytes written so far.
    pub fn len(&self) -> u64 {
        self.header.payload_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// CRC32C of the payload written so far.
    pub fn crc(&self) -> u32 {
        self.header.payload_crc
    }

    pub(crate) fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// Appends payload bytes; writes each full `SNAPSHOT_WRITE_BYTES` as it fills.
    pub async fn write(&mut self, mut bytes: &[u8]) -> Result<(), WalError> {
        let len = self.header.payload_len + bytes.len() as u64;
        if len > payload_max(self.header.version) {
            return Err(WalError::TooLarge {
                len: usize::try_from(len).unwrap_or(usize::MAX),
                max: usize::try_from(payload_max(self.header.version)).unwrap_or(usize::MAX),
            });
        }
        self.header.payload_len = len;
        self.header.payload_crc = crc32c::crc32c_append(self.header.payload_crc, bytes);
        while !bytes.is_empty() {
            let take = (SNAPSHOT_WRITE_BYTES - self.staged.len()).min(bytes.len());
            self.staged.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.staged.len() == SNAPSHOT_WRITE_BYTES {
                self.flush().await?;
            }
        }
        Ok(())
    }

    /// Writes the staged bytes, zero-padded to a whole block.
    async fn flush(&mut self) -> Result<(), WalError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let file = self.file.as_ref().ok_or(WalError::Closed)?;
        let len = align_up(self.staged.len() as u64) as usize;
        self.check_reserve(len as u64)?;
        let staged = &self.staged;
        files::write_block_at(file, &self.tmp, self.pos, len, |b| {
            b[..staged.len()].copy_from_slice(staged);
            b[staged.len()..].fill(0);
        })
        .await?;
        self.pos += self.staged.len() as u64;
        self.staged.clear();
        Ok(())
    }

    /// Refuses a write of `len` bytes that would leave less than the reserve free.
    fn check_reserve(&self, len: u64) -> Result<(), WalError> {
        if self.reserve == 0 {
            return Ok(());
        }
        let free = free_bytes(&self.tmp).map_err(|e| WalError::std_io("statvfs", &self.tmp, e))?;
        let needed = self.reserve.saturating_add(len);
        if free < needed {
            return Err(WalError::StorageFull {
                path: self.tmp.clone(),
                needed,
                free,
            });
        }
        Ok(())
    }

    /// Finishes the file: last block, header, fdatasync, close. Returns its header; the file
    /// is still `tmp_path`.
    pub(crate) async fn seal(&mut self) -> Result<SnapshotHeader, WalError> {
        self.flush().await?;
        let file = self.file.take().ok_or(WalError::Closed)?;
        let header = self.header;
        let done = async {
            files::write_block_at(&file, &self.tmp, 0, SNAPSHOT_HEADER_BYTES as usize, |b| {
                encode_header(header, b)
            })
            .await?;
            file.fdatasync()
                .await
                .map_err(|e| WalError::io("fdatasync", &self.tmp, e))
        }
        .await;
        let closed = files::close(file, &self.tmp).await;
        done.and(closed)?;
        Ok(header)
    }

    /// Gives the snapshot up: closes and deletes the temp file (best effort: a leftover temp
    /// file is deleted at the next open anyway).
    pub async fn abort(mut self) {
        if let Some(file) = self.file.take() {
            let _ = files::close(file, &self.tmp).await;
        }
        if self.tmp.exists() {
            if let Err(e) = files::remove(&self.tmp).await {
                log::warn!("wal: removing {}: {e}", self.tmp.display());
            }
        }
    }
}
