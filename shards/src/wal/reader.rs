//! `read_from`: durable records for subscription replay and replication.
//!
//! Reads only up to the durable offset, so it never decodes bytes the committer may be
//! writing; anything undecodable before that point is corruption.

use super::error::WalError;
use super::record::KIND_ENTRY;
use super::scan::{SegmentScan, Step};
use super::shared::Shared;

enum Stop {
    /// Limits or the durable offset reached.
    Done,
    /// The segment ended; continue with `next`.
    SegmentEnd,
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
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut next = from;
    while next <= durable && max_records > 0 {
        let located = {
            let segs = shared.segments.borrow();
            let i = segs.partition_point(|s| s.first <= next);
            i.checked_sub(1)
                .map(|i| (segs[i].path.clone(), segs[i].start_for(next)))
        };
        let Some((path, (mut expected, start))) = located else {
            return Err(WalError::Trimmed {
                requested: next,
                oldest: shared.oldest(),
            });
        };
        let mut scan = match SegmentScan::open(&path, start).await {
            Ok(s) => s,
            // Compaction deleted it between the lookup and the open.
            Err(_) if next < shared.oldest() => {
                return Err(WalError::Trimmed {
                    requested: next,
                    oldest: shared.oldest(),
                })
            }
            Err(e) => return Err(e),
        };
        let stop = loop {
            match scan.next().await? {
                Step::Record {
                    pos,
                    offset,
                    kind,
                    payload,
                } => {
                    if offset != expected {
                        let reason = format!(
                            "offsets must be contiguous: expected {expected}, got {offset}"
                        );
                        return Err(WalError::corrupt(&path, pos, reason));
                    }
                    if kind != KIND_ENTRY {
                        continue;
                    }
                    expected += 1;
                    if offset < next {
                        continue;
                    }
                    let p = scan.bytes(payload);
                    if !out.is_empty() && bytes + p.len() > max_bytes {
                        break Stop::Done;
                    }
                    bytes += p.len();
                    out.push((offset, p.to_vec()));
                    next = offset + 1;
                    if out.len() >= max_records || offset >= durable {
                        break Stop::Done;
                    }
                }
                Step::End { .. } => break Stop::SegmentEnd,
                Step::Bad { pos, reason } => {
                    let reason = format!("{reason} (before the durable offset {durable})");
                    return Err(WalError::corrupt(&path, pos, reason));
                }
            }
        };
        scan.close().await?;
        match stop {
            Stop::Done => break,
            Stop::SegmentEnd => {
                let continues = shared.segments.borrow().iter().any(|s| s.first == expected);
                if !continues && expected <= durable {
                    let reason = format!("segment ends before the durable offset {durable}");
                    return Err(WalError::corrupt(&path, 0, reason));
                }
                next = next.max(expected);
            }
        }
    }
    Ok(out)
}
