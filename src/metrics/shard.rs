//! What one shard reports when scraped (`ShardCall::Stats`): plain data, built on the shard's
//! own executor and moved to the control executor inside the reply. Nothing here is shared.

use shards::engine::EngineStats;
use shards::wal::{Histogram as WalHistogram, WalStats};
use shards::wal::{BATCH_BOUNDS_ENTRIES, DURATION_BOUNDS_SECONDS};

use super::histogram::HistogramSnapshot;

/// Upper bounds (seconds) of `svc_snapshot_duration_seconds`.
pub static SNAPSHOT_BOUNDS_SECONDS: [f64; 13] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Upper bounds (seconds) of `svc_timer_lateness_seconds`.
pub static LATENESS_BOUNDS_SECONDS: [f64; 13] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

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
    /// Instances with an armed durable timer.
    pub timers_pending: u64,
    /// (machine, index path, entries) of every declared index (`Engine::index_sizes`).
    pub index_entries: Vec<(String, String, u64)>,
    /// Seconds from a timer's due time to its fire (empty until the first fire).
    pub timer_lateness: HistogramSnapshot,
    /// Sync replication: write replies that became `SYNC_TIMEOUT` (0 unless sync mode).
    pub sync_timeouts: u64,
    pub log: LogStats,
    /// The first log entry this shard's state did not fit (`shards::engine::Divergence`): the
    /// shard refuses writes, and `/health` names it.
    pub diverged: Option<shards::engine::Divergence>,
    /// Snapshots taken by this process (`shard/snapshot.rs`).
    pub snapshots: SnapshotFigures,
}

/// A shard's snapshot figures.
#[derive(Debug, Clone, Default)]
pub struct SnapshotFigures {
    /// Snapshots completed.
    pub total: u64,
    /// Seconds per snapshot, from the walk's start to the file in place.
    pub duration: HistogramSnapshot,
    /// Payload bytes of the last snapshot completed (0: none yet).
    pub last_bytes: u64,
}

/// One shard's log figures (from `shards::wal::WalStats`).
#[derive(Debug, Clone, PartialEq)]
pub struct LogStats {
    /// Offset of the newest entry (entries are numbered from 1; 0 = empty log).
    pub offset: u64,
    /// Offset up to which entries are on disk.
    pub durable: u64,
    /// Bytes in all segments.
    pub size_bytes: u64,
    pub segments: u64,
    /// Segment writes issued (one per group commit, two when a batch spans a rotation).
    pub writes_total: u64,
    pub fsyncs_total: u64,
    /// Entries appended by this process (entries replayed at recovery are not counted).
    pub entries_total: u64,
    /// Seconds per segment write.
    pub write_duration: HistogramSnapshot,
    /// Seconds per fdatasync.
    pub fsync_duration: HistogramSnapshot,
    /// Entries per group-commit write.
    pub batch_size: HistogramSnapshot,
    /// The first I/O error poisoned the log: every later write fails (STYLE: never retry fsync).
    pub poisoned: bool,
    /// The disk has no room for the log to grow: writes get STORAGE_FULL, reads go on.
    pub storage_full: bool,
    /// Closed segments copied into `storage.archive_dir`, and failed attempts.
    pub archived_segments_total: u64,
    pub archive_failures_total: u64,
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
            write_duration: HistogramSnapshot::empty(&DURATION_BOUNDS_SECONDS),
            fsync_duration: HistogramSnapshot::empty(&DURATION_BOUNDS_SECONDS),
            batch_size: HistogramSnapshot::empty(&BATCH_BOUNDS_ENTRIES),
            poisoned: false,
            storage_full: false,
            archived_segments_total: 0,
            archive_failures_total: 0,
        }
    }
}

impl From<&WalStats> for LogStats {
    fn from(w: &WalStats) -> LogStats {
        LogStats {
            offset: w.offset,
            durable: w.durable,
            size_bytes: w.size_bytes,
            segments: w.segments,
            writes_total: w.writes_total,
            fsyncs_total: w.fsyncs_total,
            entries_total: w.entries_total,
            write_duration: snapshot(&w.write_seconds),
            fsync_duration: snapshot(&w.fsync_seconds),
            batch_size: snapshot(&w.batch_entries),
            poisoned: w.poisoned,
            storage_full: w.storage_full,
            archived_segments_total: w.archived_segments_total,
            archive_failures_total: w.archive_failures_total,
        }
    }
}

/// The log's histogram (bounds plus one overflow bucket, not cumulative) as a snapshot.
pub(crate) fn snapshot(h: &WalHistogram) -> HistogramSnapshot {
    let mut buckets: Vec<(f64, u64)> = h.bounds.iter().copied().zip(h.buckets).collect();
    buckets.push((f64::INFINITY, h.buckets[h.bounds.len()]));
    HistogramSnapshot {
        buckets,
        sum: h.sum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_figures_convert_bucket_for_bucket() {
        let mut write = WalHistogram::new(&DURATION_BOUNDS_SECONDS);
        write.observe(40e-6);
        write.observe(3.0);
        let mut batch = WalHistogram::new(&BATCH_BOUNDS_ENTRIES);
        batch.observe(3.0);
        let w = WalStats {
            offset: 9,
            durable: 8,
            oldest: 1,
            size_bytes: 4096,
            segments: 1,
            pending_entries: 1,
            waiters: 0,
            writes_total: 2,
            bytes_written_total: 8192,
            entries_total: 9,
            batches_total: 2,
            fsyncs_total: 2,
            rotations_total: 0,
            rotations_prezeroed_total: 0,
            write_seconds: write,
            fsync_seconds: WalHistogram::new(&DURATION_BOUNDS_SECONDS),
            batch_entries: batch,
            poisoned: true,
            storage_full: false,
            archived_segments_total: 3,
            archive_failures_total: 1,
        };
        let l = LogStats::from(&w);
        assert_eq!(
            (l.offset, l.durable, l.segments, l.size_bytes),
            (9, 8, 1, 4096)
        );
        assert_eq!((l.writes_total, l.fsyncs_total, l.entries_total), (2, 2, 9));
        assert!(l.poisoned);
        assert_eq!(l.write_duration.count(), 2);
        assert_eq!(l.write_duration.buckets[0], (50e-6, 1));
        assert_eq!(l.write_duration.buckets.last(), Some(&(f64::INFINITY, 1)));
        assert_eq!(
            l.write_duration.buckets.len(),
            DURATION_BOUNDS_SECONDS.len() + 1
        );
        assert_eq!(l.fsync_duration.count(), 0);
        assert_eq!(l.batch_size.buckets[2], (4.0, 1));
    }
}
