//! Replication epochs (docs/replication.md): each primary term writes an `Entry::Epoch` into every
//! shard's log when it begins. `apply` records `(epoch, offset)` here, so the history is rebuilt
//! by recovery, kept in snapshots, and identical on every member holding the same log.
//!
//! The offset of an epoch entry is the first offset written under that epoch; everything up to
//! the next epoch entry belongs to it. Entries before the first epoch entry belong to epoch 0.

use serde_json::{json, Value};

use super::Engine;

impl Engine {
    /// Records the epoch entry `epoch` at `offset`. Epochs only grow along a log; an entry that
    /// does not raise the epoch is skipped and recorded as a divergence.
    pub(super) fn apply_epoch(&mut self, epoch: u64, offset: u64) -> Value {
        let (last, at) = self.epochs.last().copied().unwrap_or((0, 0));
        if epoch > last && offset > at {
            self.epochs.push((epoch, offset));
        } else {
            let reason = format!("epoch entry {epoch} does not rise: epoch {last} began at {at}");
            self.diverge(offset, reason);
        }
        json!({})
    }

    /// The newest epoch in the log (0 when there is none).
    pub fn last_epoch(&self) -> u64 {
        self.epochs.last().map_or(0, |&(e, _)| e)
    }

    /// `(epoch, offset of its epoch entry)`, ascending in both.
    pub fn epochs(&self) -> &[(u64, u64)] {
        &self.epochs
    }

    /// The epoch that wrote `offset`: the newest epoch whose entry is at or before it (0 for
    /// offsets before the first epoch entry, as on a server that never replicated).
    pub fn epoch_of(&self, offset: u64) -> u64 {
        let i = self.epochs.partition_point(|&(_, at)| at <= offset);
        i.checked_sub(1).map_or(0, |i| self.epochs[i].0)
    }

    /// The last offset written under an epoch `<= e`: one before the first epoch entry of an
    /// epoch above `e`, or `head` when there is none. This is where a log that has seen epoch
    /// `e` as its newest agrees with this one (Kafka's leader-epoch end offset).
    pub fn epoch_end(&self, e: u64, head: u64) -> u64 {
        let i = self.epochs.partition_point(|&(epoch, _)| epoch <= e);
        self.epochs.get(i).map_or(head, |&(_, offset)| offset - 1)
    }

    /// Replaces the history (snapshot restore).
    pub(super) fn set_epochs(&mut self, epochs: Vec<(u64, u64)>) -> Result<(), String> {
        let ascending = epochs
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        if !ascending || epochs.iter().any(|&(e, o)| e == 0 || o == 0) {
            return Err(format!(
                "snapshot epoch history is not ascending: {epochs:?}"
            ));
        }
        self.epochs = epochs;
        Ok(())
    }
}
