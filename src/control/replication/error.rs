//! What ends a replication stream or keeps it from starting, with its context: the shard and
//! what was being done to it, the step of the connection, the setting. `Display` gives the
//! text logged (`replica ...: disconnecting: ...`) and told to the replica in an `error` frame,
//! or the reason start-up gives up (`promote::start_up`), word for word as before these types.
//! The replica's side has its own: `follower::FollowError`.

use std::fmt;

/// An error of the primary's side of a replication stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplError {
    /// The link was stopped (the replica went, shutdown, failover).
    Stopped,
    /// The front that holds the replica's connection is gone.
    FrontGone,
    /// The replica left `fanout_max` entries unacknowledged for `ms` milliseconds.
    TooSlow { fanout_max: u64, ms: u128 },
    /// Shard `shard`'s log or snapshot could not give what the replica needs.
    Shard { shard: usize, why: String },
    /// Start-up: the shards could not say their log positions.
    Positions(String),
    /// Start-up: shard `shard` could not write the primary's epoch record `epoch`.
    Epoch {
        shard: usize,
        epoch: u64,
        why: String,
    },
}

impl ReplError {
    pub fn shard(shard: usize, why: impl Into<String>) -> ReplError {
        let why = why.into();
        ReplError::Shard { shard, why }
    }
}

impl fmt::Display for ReplError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplError::Stopped => f.write_str("stopped"),
            ReplError::FrontGone => f.write_str("front gone"),
            ReplError::TooSlow { fanout_max, ms } => write!(
                f,
                "too slow: {fanout_max} entries (replication.fanout_max) unacknowledged for {ms} ms"
            ),
            ReplError::Shard { shard, why } => write!(f, "shard {shard}: {why}"),
            ReplError::Positions(why) => f.write_str(why),
            ReplError::Epoch { shard, epoch, why } => {
                write!(f, "shard {shard}: writing epoch {epoch}: {why}")
            }
        }
    }
}

impl std::error::Error for ReplError {}

/// Lets the control executor's start-up, whose errors are text, keep its `String` error.
impl From<ReplError> for String {
    fn from(e: ReplError) -> String {
        e.to_string()
    }
}
