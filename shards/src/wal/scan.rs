//! Sequential reading of a segment's records in large chunks, for recovery and `read_from`.
//!
//! Reads with a `DmaStreamReader` (buffer size and read-ahead per `ReadSize`) into a window that
//! keeps at most one partial record between chunks; `next` decodes one record at a time from it.

use std::ops::Range;
use std::path::{Path, PathBuf};

use glommio::io::{DmaStreamReader, DmaStreamReaderBuilder};

use super::error::WalError;
use super::files;
use super::limits::{MARKER_BYTES, READ_AHEAD_BUFFERS, READ_CHUNK_BYTES};
use super::limits::{RECOVERY_READ_AHEAD_BUFFERS, RECOVERY_READ_CHUNK_BYTES};
use super::record::{self, Decoded};

/// One step through a segment.
#[derive(Debug)]
pub(crate) enum Step {
    /// A record starting at byte `pos`; `payload` indexes `SegmentScan::bytes`, valid until the
    /// next call to `next`.
    Record {
        pos: u64,
        offset: u64,
        kind: u8,
        payload: Range<usize>,
    },
    /// A zero length (or only zeros up to the end of the file) at `pos`: the data ends here.
    End { pos: u64 },
    /// Something at `pos` that is not a record.
    Bad { pos: u64, reason: String },
}

/// What lies after the end of the valid data in a segment.
#[derive(Debug, Default)]
pub(crate) struct Rest {
    /// The valid sync marker with the highest `synced_through`: `(byte pos, synced_through)`.
    pub marker: Option<(u64, u64)>,
    /// One past the last non-zero byte, if any.
    pub nonzero_end: Option<u64>,
}

/// How a scan reads its file.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReadSize {
    /// Recovery at open: large buffers, deep read-ahead.
    Recovery,
    /// Readers serving `read_from` while the shard runs: small buffers.
    Reader,
}

impl ReadSize {
    /// (buffer bytes, buffers of read-ahead)
    pub(crate) fn chunks(self) -> (usize, usize) {
        match self {
            ReadSize::Recovery => (RECOVERY_READ_CHUNK_BYTES, RECOVERY_READ_AHEAD_BUFFERS),
            ReadSize::Reader => (READ_CHUNK_BYTES, READ_AHEAD_BUFFERS),
        }
    }
}

pub(crate) struct SegmentScan {
    path: PathBuf,
    chunk: usize,
    reader: DmaStreamReader,
    window: Vec<u8>,
    /// File position of `window[0]`.
    window_pos: u64,
    cursor: usize,
    eof: bool,
}

impl SegmentScan {
    pub async fn open(path: &Path, start: u64, size: ReadSize) -> Result<SegmentScan, WalError> {
        let (chunk, ahead) = size.chunks();
        let file = files::open_read(path).await?;
        let reader = DmaStreamReaderBuilder::new(file)
            .with_start_pos(start)
            .with_buffer_size(chunk)
            .with_read_ahead(ahead)
            .build();
        Ok(SegmentScan {
            path: path.to_path_buf(),
            chunk,
            reader,
            window: Vec::with_capacity(2 * chunk),
            window_pos: start,
            cursor: 0,
            eof: false,
        })
    }

    pub async fn close(self) -> Result<(), WalError> {
        let path = self.path;
        self.reader
            .close()
            .await
            .map_err(|e| WalError::io("close", &path, e))
    }

    pub fn bytes(&self, r: Range<usize>) -> &[u8] {
        &self.window[r]
    }

    /// File position of the next unread byte.
    pub fn pos(&self) -> u64 {
        self.window_pos + self.cursor as u64
    }

    /// Drops the bytes before the cursor and appends the next chunk; false at end of file.
    async fn fill(&mut self) -> Result<bool, WalError> {
        if self.cursor > 0 {
            self.window.drain(..self.cursor);
            self.window_pos += self.cursor as u64;
            self.cursor = 0;
        }
        if self.eof {
            return Ok(false);
        }
        let buf = self
            .reader
            .get_buffer_aligned(self.chunk as u64)
            .await
            .map_err(|e| WalError::io("read", &self.path, e))?;
        if buf.is_empty() {
            self.eof = true;
            return Ok(false);
        }
        self.window.extend_from_slice(&buf);
        Ok(true)
    }

    pub async fn next(&mut self) -> Result<Step, WalError> {
        loop {
            let pos = self.pos();
            match record::decode(&self.window[self.cursor..]) {
                Decoded::Record(h) => {
                    let at = self.cursor;
                    self.cursor += h.size;
                    let payload = at + h.payload.start..at + h.payload.end;
                    return Ok(Step::Record {
                        pos,
                        offset: h.offset,
                        kind: h.kind,
                        payload,
                    });
                }
                Decoded::End => return Ok(Step::End { pos }),
                Decoded::Bad(reason) => return Ok(Step::Bad { pos, reason }),
                Decoded::Incomplete(need) => {
                    if !self.fill().await? {
                        let rest = &self.window[self.cursor..];
                        if rest.iter().all(|&b| b == 0) {
                            return Ok(Step::End { pos });
                        }
                        let reason = format!(
                            "torn record: needs {need} bytes, the file ends after {}",
                            rest.len()
                        );
                        return Ok(Step::Bad { pos, reason });
                    }
                }
            }
        }
    }

    /// Reads the rest of the file from the current position (where the valid data ended):
    /// sync markers in it and the extent of non-zero bytes.
    pub async fn scan_rest(&mut self) -> Result<Rest, WalError> {
        let mut rest = Rest::default();
        // File positions up to which markers / non-zero bytes have been examined.
        let mut marker_done = self.pos();
        let mut nonzero_done = self.pos();
        loop {
            let len = self.window.len();
            let abs = |i: usize| self.window_pos + i as u64;
            let idx = |p: u64| (p - self.window_pos) as usize;
            let nz_from = idx(nonzero_done);
            if let Some(i) = last_nonzero(&self.window[nz_from..]) {
                rest.nonzero_end = Some(abs(nz_from + i + 1));
            }
            nonzero_done = abs(len);
            // Markers must lie wholly in the window; the last few bytes wait for the next chunk.
            let limit = if self.eof {
                len
            } else {
                len.saturating_sub(MARKER_BYTES - 1)
            };
            let m_from = idx(marker_done);
            if limit > m_from {
                if let Some((i, synced)) =
                    record::max_marker_in(&self.window[m_from..], limit - m_from)
                {
                    if rest.marker.is_none_or(|(_, s)| synced > s) {
                        rest.marker = Some((abs(m_from + i), synced));
                    }
                }
                marker_done = abs(limit);
            }
            if self.eof {
                return Ok(rest);
            }
            self.cursor = idx(marker_done);
            self.fill().await?;
        }
    }
}

/// Index of the last non-zero byte, checking whole blocks with a vectorizable OR first.
fn last_nonzero(buf: &[u8]) -> Option<usize> {
    const STEP: usize = 4096;
    let mut end = buf.len();
    while end > 0 {
        let start = end.saturating_sub(STEP);
        let chunk = &buf[start..end];
        if chunk.iter().fold(0u8, |a, &b| a | b) != 0 {
            return chunk.iter().rposition(|&b| b != 0).map(|i| start + i);
        }
        end = start;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::last_nonzero;

    #[test]
    fn wal_last_nonzero_finds_the_last_byte() {
        let mut v = vec![0u8; 10_000];
        assert_eq!(last_nonzero(&v), None);
        v[5] = 1;
        v[8191] = 2;
        assert_eq!(last_nonzero(&v), Some(8191));
    }
}
