//! Counters and fixed-bucket histograms the log exposes through `Wal::stats`.

/// Upper bounds, in seconds, of the duration histogram buckets.
pub const DURATION_BOUNDS_SECONDS: [f64; 13] = [
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0,
];

/// Upper bounds, in entries, of the batch size histogram buckets.
pub const BATCH_BOUNDS_ENTRIES: [f64; 13] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0,
];

/// A fixed-bucket histogram. `buckets[i]` counts observations `<= bounds[i]` and greater than
/// the previous bound (not cumulative); `buckets[13]` counts those above every bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Histogram {
    pub bounds: &'static [f64; 13],
    pub buckets: [u64; 14],
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    pub const fn new(bounds: &'static [f64; 13]) -> Histogram {
        Histogram {
            bounds,
            buckets: [0; 14],
            count: 0,
            sum: 0.0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum += v;
    }

    /// Cumulative counts per bound (Prometheus `le` buckets), the last being `+Inf`.
    pub fn cumulative(&self) -> [u64; 14] {
        let mut out = self.buckets;
        for i in 1..out.len() {
            out[i] += out[i - 1];
        }
        out
    }

    /// Smallest bucket bound at or below which a fraction `q` of observations fall (`None` if
    /// empty; `f64::INFINITY` for the overflow bucket). A coarse quantile for logs and tests.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let cum = self.cumulative();
        let i = cum.iter().position(|&c| c >= want).unwrap_or(13);
        Some(self.bounds.get(i).copied().unwrap_or(f64::INFINITY))
    }
}

/// A point-in-time view of one shard's log.
#[derive(Debug, Clone, PartialEq)]
pub struct WalStats {
    /// Highest appended offset (head).
    pub offset: u64,
    /// Highest durable offset.
    pub durable: u64,
    /// Oldest offset `read_from` can still serve.
    pub oldest: u64,
    /// Bytes of log in use over all segments (headers and records, not preallocated space).
    pub size_bytes: u64,
    pub segments: u64,
    /// Entries appended but not yet written.
    pub pending_entries: u64,
    /// Tasks waiting in `wait_durable`.
    pub waiters: u64,
    /// `write_at` calls on segments.
    pub writes_total: u64,
    pub bytes_written_total: u64,
    /// Entries written.
    pub entries_total: u64,
    /// Group commits (batches taken by the committer).
    pub batches_total: u64,
    /// fdatasync calls on segments that completed successfully.
    pub fsyncs_total: u64,
    /// Segments started by rotation, and how many of them were pre-zeroed spares.
    pub rotations_total: u64,
    pub rotations_prezeroed_total: u64,
    pub write_seconds: Histogram,
    pub fsync_seconds: Histogram,
    pub batch_entries: Histogram,
    pub poisoned: bool,
    /// The disk has no room for the next segment or the spare: appends are refused until it
    /// has (`WalError::StorageFull`).
    pub storage_full: bool,
    /// Closed segments copied into the archive, and failed attempts (`archive.rs`).
    pub archived_segments_total: u64,
    pub archive_failures_total: u64,
}

/// The mutable counters behind `WalStats`.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    pub writes_total: u64,
    pub bytes_written_total: u64,
    pub entries_total: u64,
    pub batches_total: u64,
    pub fsyncs_total: u64,
    pub rotations_total: u64,
    pub rotations_prezeroed_total: u64,
    pub write_seconds: Histogram,
    pub fsync_seconds: Histogram,
    pub batch_entries: Histogram,
    pub archived_segments_total: u64,
    pub archive_failures_total: u64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            writes_total: 0,
            bytes_written_total: 0,
            entries_total: 0,
            batches_total: 0,
            fsyncs_total: 0,
            rotations_total: 0,
            rotations_prezeroed_total: 0,
            write_seconds: Histogram::new(&DURATION_BOUNDS_SECONDS),
            fsync_seconds: Histogram::new(&DURATION_BOUNDS_SECONDS),
            batch_entries: Histogram::new(&BATCH_BOUNDS_ENTRIES),
            archived_segments_total: 0,
            archive_failures_total: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_histogram_buckets() {
        let mut h = Histogram::new(&DURATION_BOUNDS_SECONDS);
        h.observe(40e-6);
        h.observe(50e-6);
        h.observe(3e-3);
        h.observe(5.0);
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[6], 1);
        assert_eq!(h.buckets[13], 1);
        assert_eq!(h.cumulative()[13], 4);
        assert_eq!(h.quantile_bound(0.5), Some(50e-6));
        assert_eq!(h.quantile_bound(1.0), Some(f64::INFINITY));
    }
}
