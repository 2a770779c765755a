//! `read_from`: durable records for subscription replay and replication.
//!
//! Reads only up to the durable offset, so it never decodes bytes the committer may be
//! writing; anything undecodable before that point is corruption.

use std::path::{Path, PathBuf};

use super::error::WalError;
use super::record::KIND_ENTRY;
use super::scan::{ReadSize, SegmentScan, Step};
use super::shared::Shared;

/// What one call collects, and its limits.
struct Collector {
    out: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    max_records: usize,
    max_bytes: usize,
    /// Next offset wanted.
    next: u64,
    durable: u64,
}

impl Collector {
    /// Takes the entry if the limits allow; false once nothing more should be read.
    fn take(&mut self, offset: u64, payload: &[u8]) -> bool {
        if !self.out.is_empty() && self.bytes + payload.len() > self.max_bytes {
            return false;
        }
        self.bytes += payload.len();
        self.out.push((offset, payload.to_vec()));
        self.next = offset + 1;
        self.out.len() < self.max_records && offset < self.durable
    }

    fn wants_more(&self) -> bool {
        self.next <= self.durable && self.out.len() < self.max_records
    }
}

pub(crate) async fn read_from(
    shared: &Shared,
    from: u64,
    max_records: usize,
    max_bytes: usize,
) -> Result<Vec<(u64, Vec<u8>)>, WalError> {
    let from = from.max(1);
    let oldest = shared.oldest();
    if from < oldest {
        return Err(WalError::Trimmed {
            requested: from,
            oldest,
        });
    }
    let durable = shared.durable.get();
    let mut c = Collector {
        out: Vec::new(),
        bytes: 0,
        max_records,
        max_bytes,
        next: from,
        durable,
    };
    while c.wants_more() {
        let (path, start_offset, start_pos) = locate(shared, c.next)?;
        let ended_at = read_segment(shared, &path, start_offset, start_pos, &mut c).await?;
        let Some(expected) = ended_at else { break };
        // The segment ended: the next one must continue it, unless nothing more is durable.
        let continues = shared.segments.borrow().iter().any(|s| s.first == expected);
        if !continues && expected <= durable {
            let reason = format!("segment ends before the durable offset {durable}");
            return Err(WalError::corrupt(&path, 0, reason));
        }
        c.next = c.next.max(expected);
    }
    Ok(c.out)
}

/// The segment holding `offset`, and the `(offset, byte)` to start scanning from.
fn locate(shared: &Shared, offset: u64) -> Result<(PathBuf, u64, u64), WalError> {
    let segs = shared.segments.borrow();
    let i = segs.partition_point(|s| s.first <= offset);
    match i.checked_sub(1) {
        Some(i) => {
            let (o, pos) = segs[i].start_for(offset);
            Ok((segs[i].path.clone(), o, pos))
        }
        None => Err(WalError::Trimmed {
            requested: offset,
            oldest: shared.oldest(),
        }),
    }
}

/// Collects entries from one segment, starting at byte `pos` where entry `expected` is.
/// Returns `Some(next expected offset)` if the segment ended, `None` if the collector is done.
async fn read_segment(
    shared: &Shared,
    path: &Path,
    mut expected: u64,
    pos: u64,
    c: &mut Collector,
) -> Result<Option<u64>, WalError> {
    let mut scan = match SegmentScan::open(path, pos, ReadSize::Reader).await {
        Ok(s) => s,
        // Compaction deleted it between the lookup and the open.
        Err(_) if c.next < shared.oldest() => {
            return Err(WalError::Trimmed {
                requested: c.next,
                oldest: shared.oldest(),
            })
        }
        Err(e) => return Err(e),
    };
    let res = loop {
        match scan.next().await? {
            Step::Record {
                pos,
                offset,
                kind,
                payload,
            } => {
                if offset != expected {
                    let reason =
                        format!("offsets must be contiguous: expected {expected}, got {offset}");
                    break Err(WalError::corrupt(path, pos, reason));
                }
                if kind != KIND_ENTRY {
                    continue;
                }
                expected += 1;
                if offset >= c.next && !c.take(offset, scan.bytes(payload)) {
                    break Ok(None);
                }
            }
            Step::End { .. } => break Ok(Some(expected)),
            Step::Bad { pos, reason } => {
                let reason = format!("{reason} (before the durable offset {})", c.durable);
                break Err(WalError::corrupt(path, pos, reason));
            }
        }
    };
    scan.close().await?;
    res
}
