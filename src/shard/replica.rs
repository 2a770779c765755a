//! Replication on the shard (CONTRACT §10, the storage side): the log position a replication
//! sender or follower needs.

use super::message::ReplyBody;
use super::runtime::Shard;

impl Shard {
    /// `ShardCall::LogPosition`.
    pub(super) fn position(&self) -> ReplyBody {
        let engine = self.engine.borrow();
        let wal = self.log.wal();
        ReplyBody::Position {
            head: wal.head_offset(),
            durable: wal.durable_offset(),
            oldest: wal.oldest_offset(),
            last_epoch: engine.last_epoch(),
            epochs: engine.epochs().to_vec(),
            handle: wal.handle(),
        }
    }
}
