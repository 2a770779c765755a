//! What one shard reports when scraped (`ShardCall::Stats`): plain data, built on the shard's
//! own executor and moved to the control executor inside the reply. Nothing here is shared.

use shards::engine::EngineStats;

use super::histogram::{HistogramSnapshot, BATCH_SIZE_BUCKETS, WAL_WRITE_SECONDS_BUCKETS};

/// One shard's figures at one moment.
#[derive(Debug, Clone, Default)]
pub struct ShardStats {
    pub shard: u32,
    /// Events applied, transitions and instances by state, kept by the engine's `apply`.
    pub engine: EngineStats,
    pub instances: u64,
    /// Machine definition versions (every shard holds all of them).
    pub machines: u64,
    /// Replies waiting in the shard's outboxes for the log to become durable.
    pub queue_depth: u64,
    pub log: LogStats,
}

/// One shard's log figures. A memory-only log fills offsets and entries and leaves the rest 0.
#[derive(Debug, Clone, PartialEq)]
pub struct LogStats {
    /// Offset of the newest entry (entries are numbered from 1; 0 = empty log).
    pub offset: u64,
    /// Offset up to which entries are on disk.
    pub durable: u64,
    /// Bytes in all segments.
    pub size_bytes: u64,
    pub segments: u64,
    /// Group-commit writes issued (one per batch).
    pub writes_total: u64,
    pub fsyncs_total: u64,
    /// Entries appended by this process (entries replayed at recovery are not counted).
    pub entries_total: u64,
    /// Seconds per write (write plus its fdatasync when the policy syncs).
    pub write_duration: HistogramSnapshot,
    /// Entries per group-commit write.
    pub batch_size: HistogramSnapshot,
    /// The first I/O error poisoned the log: every later write fails (STYLE: never retry fsync).
    pub poisoned: bool,
}

impl Default for LogStats {
    fn default() -> Self {
        LogStats {
            offset: 0,
            durable: 0,
            size_bytes: 0,
            segments: 0,
            writes_total: 0,
            fsyncs_total: 0,
            entries_total: 0,
            write_duration: HistogramSnapshot::empty(&WAL_WRITE_SECONDS_BUCKETS),
            batch_size: HistogramSnapshot::empty(&BATCH_SIZE_BUCKETS),
            poisoned: false,
        }
    }
}
