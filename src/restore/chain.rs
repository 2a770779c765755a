//! The timeline a restore follows (docs/backup.md "Timelines"): the archive's
//! history files say which epoch followed which and at which offset each began on each shard.
//! A restore picks the newest epoch whose ancestry holds the backup's epoch and, per shard,
//! takes each offset from the chain epoch that owned it, so a deposed primary's tail (entries
//! of an epoch past the offset where the next epoch of the chain began) is never replayed.

use std::collections::BTreeMap;
use std::path::Path;

use smdb_format::archive::{History, HISTORY_DIR};

use super::error::RestoreError;

/// One epoch chain, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The epoch that owns every offset below the first `from` of `epochs` (the oldest
    /// epoch's `follows`, or the backup's epoch when the archive has no history).
    pub root: u64,
    /// The chain's epochs after the root, oldest first, with their history files.
    pub epochs: Vec<History>,
}

impl Chain {
    /// Reads `ARCHIVE/history/*.json` and picks the chain for a backup taken at `backup_epoch`.
    pub fn load(archive: &Path, backup_epoch: u64) -> Result<Chain, RestoreError> {
        let all = read_histories(archive)?;
        Ok(Chain::pick(&all, backup_epoch))
    }

    /// The chain of the highest epoch whose ancestry (itself included) holds `backup_epoch`;
    /// just the backup's epoch when none does.
    pub fn pick(all: &BTreeMap<u64, History>, backup_epoch: u64) -> Chain {
        for &tip in all.keys().rev() {
            let mut epochs = Vec::new();
            let mut at = Some(tip);
            let mut holds = false;
            while let Some(e) = at {
                if e == backup_epoch {
                    holds = true;
                }
                match all.get(&e) {
                    // `follows` below the epoch itself, so the walk ends.
                    Some(h) if h.follows < e => {
                        epochs.push(h.clone());
                        at = Some(h.follows);
                    }
                    Some(h) => {
                        epochs.push(h.clone());
                        at = None;
                    }
                    None => at = None,
                }
                if at.is_none() {
                    break;
                }
            }
            let root = epochs.last().map_or(tip, |h| h.follows);
            if holds || root == backup_epoch {
                epochs.reverse();
                // Epochs at or below the backup's are owned by the backup already: keep them
                // (their `from` still bounds the offsets), the chain reads them as any other.
                return Chain { root, epochs };
            }
        }
        Chain {
            root: backup_epoch,
            epochs: Vec::new(),
        }
    }

    /// The chain's epochs, root first.
    pub fn names(&self) -> Vec<u64> {
        let mut v = vec![self.root];
        v.extend(self.epochs.iter().map(|h| h.epoch));
        v.dedup();
        v
    }

    /// Per shard, where each chain epoch began: `(from, epoch)` ascending, the root at 0.
    /// An epoch of the chain that does not say where it began on `shard` is an error: the
    /// previous epoch's entries on that shard could not be bounded.
    pub fn bounds(&self, shard: u32) -> Result<Bounds, RestoreError> {
        let key = shard.to_string();
        let mut starts = vec![(0u64, self.root)];
        for h in &self.epochs {
            let Some(&from) = h.from.get(&key) else {
                let why = format!(
                    "{HISTORY_DIR}/{}.json does not say where epoch {} began on this shard, so \
                     the end of epoch {} there is unknown (restore with --until-offset, or once \
                     the archive has caught up)",
                    h.epoch, h.epoch, h.follows
                );
                return Err(RestoreError::shard(shard, why));
            };
            if let Some(&(prev, _)) = starts.last() {
                if from < prev {
                    let why = format!(
                        "epoch {} began at offset {from}, before the epoch it follows ({prev})",
                        h.epoch
                    );
                    return Err(RestoreError::shard(shard, why));
                }
            }
            starts.push((from, h.epoch));
        }
        Ok(Bounds { starts })
    }
}

/// One shard's view of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    starts: Vec<(u64, u64)>,
}

impl Bounds {
    /// The chain epoch that owns `offset` on this shard.
    pub fn epoch_at(&self, offset: u64) -> u64 {
        let i = self.starts.partition_point(|&(from, _)| from <= offset);
        self.starts[i.saturating_sub(1)].1
    }

    /// The first offset above `offset` owned by another epoch (None: the last epoch's).
    pub fn next_start(&self, offset: u64) -> Option<u64> {
        self.starts
            .iter()
            .map(|&(from, _)| from)
            .find(|&from| from > offset)
    }
}

fn read_histories(archive: &Path) -> Result<BTreeMap<u64, History>, RestoreError> {
    let dir = archive.join(HISTORY_DIR);
    let mut out = BTreeMap::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(RestoreError::io(&dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| RestoreError::io(&dir, e))?;
        let name = entry.file_name();
        let Some(epoch) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let bytes = std::fs::read(&path).map_err(|e| RestoreError::io(&path, e))?;
        let h: History = serde_json::from_slice(&bytes)
            .map_err(|e| RestoreError::file(&path, format!("not a history file: {e}")))?;
        if h.epoch != epoch {
            let why = format!("says epoch {}, its name {epoch}", h.epoch);
            return Err(RestoreError::file(&path, why));
        }
        out.insert(epoch, h);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(epoch: u64, follows: u64, from: &[(u32, u64)]) -> (u64, History) {
        let from = from.iter().map(|&(s, o)| (s.to_string(), o)).collect();
        (
            epoch,
            History {
                epoch,
                follows,
                from,
            },
        )
    }

    #[test]
    fn the_newest_epoch_descending_from_the_backup_wins_and_abandoned_branches_do_not() {
        // 1 -> 2 -> 3 (abandoned), 2 -> 4.
        let all: BTreeMap<_, _> = [
            h(1, 0, &[(0, 1)]),
            h(2, 1, &[(0, 50)]),
            h(3, 2, &[(0, 90)]),
            h(4, 2, &[(0, 80)]),
        ]
        .into_iter()
        .collect();
        let c = Chain::pick(&all, 1);
        assert_eq!(c.names(), vec![0, 1, 2, 4]);
        let b = c.bounds(0).unwrap();
        assert_eq!(b.epoch_at(0), 0);
        assert_eq!(b.epoch_at(1), 1);
        assert_eq!(b.epoch_at(79), 2);
        assert_eq!(b.epoch_at(80), 4);
        assert_eq!(b.epoch_at(95), 4);
        assert_eq!(b.next_start(60), Some(80));
        assert_eq!(b.next_start(80), None);
        // A backup on the abandoned branch follows that branch.
        assert_eq!(Chain::pick(&all, 3).names(), vec![0, 1, 2, 3]);
        // No history: the backup's epoch owns everything.
        let none = Chain::pick(&BTreeMap::new(), 5);
        assert_eq!(none.names(), vec![5]);
        assert_eq!(none.bounds(3).unwrap().epoch_at(1_000), 5);
    }

    #[test]
    fn an_epoch_that_does_not_say_where_it_began_on_a_shard_is_refused_for_that_shard() {
        let all: BTreeMap<_, _> = [h(1, 0, &[(0, 1), (1, 1)]), h(2, 1, &[(0, 30)])]
            .into_iter()
            .collect();
        let c = Chain::pick(&all, 1);
        assert!(c.bounds(0).is_ok());
        let e = c.bounds(1).unwrap_err().to_string();
        assert!(e.contains("shard 1") && e.contains("2.json"), "{e}");
    }
}
