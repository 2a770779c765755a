//! One shard's replay: from the offset after the backup's cut, each next offset is taken from
//! an archived segment labelled with the chain epoch that owns it (`chain::Bounds`), until the
//! archive ends, `--until` stops it, or a gap is found (an error naming the shard and the first
//! missing offset).

use std::path::Path;

use shards::engine::{entry_time_of, Record};
use smdb_format::segment::SegmentEpoch;

use super::chain::Bounds;
use super::error::RestoreError;
use super::segments::{list, Archived, SegmentData};
use super::target::SegmentWriter;

/// Where one shard's replay stops, at the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// All the archive holds.
    None,
    /// The last entry whose time is at or before this (epoch milliseconds).
    Time(u64),
    /// This offset.
    Offset(u64),
}

/// Why a shard's replay stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The archive holds nothing after the position reached.
    EndOfArchive,
    /// The next entry's time is after `--until`.
    Time { next_at_ms: u64 },
    /// `--until-offset` reached.
    Offset,
}

/// What one shard's replay did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub shard: u32,
    /// The backup's position.
    pub from: u64,
    /// The last offset the restored log holds.
    pub reached: u64,
    pub entries: u64,
    pub segments: usize,
    /// The epochs of the segments read, in order.
    pub epochs: Vec<u64>,
    pub stop: Stop,
}

/// Replays shard `shard` of `archive` after `backup_pos` along `bounds` into `out`.
pub fn shard(
    archive: &Path,
    shard: u32,
    backup_pos: u64,
    bounds: &Bounds,
    limit: Limit,
    out: &mut SegmentWriter,
) -> Result<Outcome, RestoreError> {
    let segs = list(archive, shard)?;
    let mut o = Outcome {
        shard,
        from: backup_pos,
        reached: backup_pos,
        entries: 0,
        segments: 0,
        epochs: Vec::new(),
        stop: Stop::EndOfArchive,
    };
    loop {
        let next = o.reached + 1;
        if limit == Limit::Offset(o.reached) {
            o.stop = Stop::Offset;
            break;
        }
        let want = bounds.epoch_at(next);
        let Some(seg) = segs
            .iter()
            .filter(|a| a.name.epoch == want && a.name.first <= next && next <= a.name.last)
            .max_by_key(|a| a.name.last)
        else {
            if let Some(later) = segs.iter().find(|a| usable_after(a, next, bounds)) {
                let why = format!(
                    "the archive has no segment holding offset {next} of epoch {want} (a gap: \
                     {} holds later entries of this timeline)",
                    later.path.display()
                );
                return Err(RestoreError::shard(shard, why));
            }
            break;
        };
        let data = SegmentData::read(seg, shard)?;
        let mut end = seg.name.last;
        if let Some(s) = bounds.next_start(next) {
            end = end.min(s - 1);
        }
        if let Limit::Offset(l) = limit {
            end = end.min(l);
        }
        let label = SegmentEpoch {
            starts: data.epoch.starts && next == seg.name.first,
            ..data.epoch
        };
        out.begin(next, label)?;
        o.segments += 1;
        if o.epochs.last() != Some(&seg.name.epoch) {
            o.epochs.push(seg.name.epoch);
        }
        for (offset, payload) in data.from(next).take_while(|(off, _)| *off <= end) {
            if let Limit::Time(until) = limit {
                if let Some(at) = entry_time(payload, shard, offset)? {
                    if at > until {
                        o.stop = Stop::Time { next_at_ms: at };
                        out.close()?;
                        return Ok(o);
                    }
                }
            }
            out.push(offset, payload)?;
            o.reached = offset;
            o.entries += 1;
        }
        if o.reached < end {
            let why = format!(
                "{} ends at offset {}, its name says {}",
                seg.path.display(),
                o.reached,
                seg.name.last
            );
            return Err(RestoreError::shard(shard, why));
        }
    }
    out.close()?;
    Ok(o)
}

/// Whether `a` holds an offset above `next` that its epoch owns on this timeline.
fn usable_after(a: &Archived, next: u64, bounds: &Bounds) -> bool {
    let mut at = a.name.first.max(next + 1);
    while at <= a.name.last {
        if bounds.epoch_at(at) == a.name.epoch {
            return true;
        }
        match bounds.next_start(at) {
            Some(s) => at = s,
            None => return false,
        }
    }
    false
}

/// The time an entry carries (none for an epoch record).
pub fn entry_time(payload: &[u8], shard: u32, offset: u64) -> Result<Option<u64>, RestoreError> {
    match Record::decode(payload) {
        Ok(Record::Event(ev)) => Ok(Some(ev.at_ms)),
        Ok(Record::Entry(e)) => Ok(entry_time_of(&e)),
        Err(e) => Err(RestoreError::shard(
            shard,
            format!("the entry at offset {offset} does not decode: {e}"),
        )),
    }
}

/// The time of the last entry of the backup's log for `shard` (None: no entry, or none that
/// carries a time, after the snapshot).
pub fn backup_last_time(data_dir: &Path, shard: u32) -> Result<Option<(u64, u64)>, RestoreError> {
    let wal = data_dir.join(format!("shard-{shard}")).join("wal");
    let listing =
        smdb_format::segment::list_segments(&wal).map_err(|e| RestoreError::io(&wal, e))?;
    for (_, path) in listing.files.iter().rev() {
        let data = SegmentData::read_plain(path)?;
        if let Some((offset, payload)) = data.last() {
            return Ok(entry_time(payload, shard, offset)?.map(|t| (offset, t)));
        }
    }
    Ok(None)
}
