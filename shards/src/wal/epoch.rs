//! Epoch segments (docs/wal.md "Epoch segments"): the WAL does not read payloads, so the shard
//! says which entry begins an epoch. That entry starts a segment of its own (the committer
//! closes the current one first, or relabels it while it is still empty), and every segment
//! carries the epoch of its entries in its header, so the archive can name it
//! (`archive.rs`) and a restore can follow one chain of epochs.

use super::error::WalError;
use super::shared::EpochBreak;
use super::Wal;

impl Wal {
    /// `append` of the entry that begins epoch `epoch`, which follows epoch `follows` (0:
    /// none): the committer writes it as the first record of a new segment labelled `epoch`,
    /// and later segments keep that label until the next epoch entry.
    pub fn append_epoch(&self, payload: &[u8], epoch: u64, follows: u64) -> Result<u64, WalError> {
        let s = self.shared();
        let offset = s.head.get() + 1;
        s.epoch_breaks.borrow_mut().push_back(EpochBreak {
            offset,
            epoch,
            follows,
        });
        let appended = self.append(payload);
        if appended.is_err() {
            s.epoch_breaks.borrow_mut().pop_back();
        }
        appended
    }
}
