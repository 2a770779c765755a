//! What this member did in cluster mode (docs/cluster.md, "Metrics"): one relaxed atomic per
//! kind of answer or move figure, bumped by whichever executor makes it and read at scrape
//! time (`control::metrics::gather`), and the freeze attempts' histogram under one lock taken
//! once per attempt. Bound: a fixed number of `u64`s per process (eleven buckets); they wrap
//! only past 2^64. Counted where the answer is made: `serve::check` for `MOVED`, the shard's
//! move check for `TRYAGAIN`, the move itself for the rest.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use crate::metrics::cluster::FREEZE_BOUNDS;
use crate::metrics::histogram::HistogramSnapshot;

/// `TRYAGAIN` answers the shards gave (they hold no `Cluster`): one per process, which is
/// one member.
pub static TRYAGAIN_GIVEN: AtomicU64 = AtomicU64::new(0);

/// Answers given and move figures since this member started.
#[derive(Debug, Default)]
pub struct Counters {
    /// `MOVED` answers (`svc_cluster_moved_total`).
    pub moved: AtomicU64,
    /// `TRYAGAIN` answers (`svc_cluster_tryagain_total`).
    pub tryagain: AtomicU64,
    /// Instance images shipped out (source) and staged in (target)
    /// (`svc_cluster_migration_entries_total{direction}`).
    pub entries_out: AtomicU64,
    pub entries_in: AtomicU64,
    /// Moves this member ran as the source's primary, by result
    /// (`svc_cluster_migrations_total{result}`).
    pub done: AtomicU64,
    pub aborted: AtomicU64,
    /// Slots whose data this member's settling has still to delete (CLUSTER_INFO's
    /// `cleanup_pending`; `cluster::moves::tidy`).
    pub cleanup_pending: AtomicU64,
    freezes: Mutex<Option<HistogramSnapshot>>,
}

impl Counters {
    /// Counts one `MOVED`.
    pub fn count_moved(&self) {
        self.moved.fetch_add(1, Relaxed);
    }

    /// Counts one `TRYAGAIN`.
    pub fn count_tryagain(&self) {
        self.tryagain.fetch_add(1, Relaxed);
    }

    /// `(moved, tryagain)` now.
    pub fn read(&self) -> (u64, u64) {
        let tryagain = self.tryagain.load(Relaxed) + TRYAGAIN_GIVEN.load(Relaxed);
        (self.moved.load(Relaxed), tryagain)
    }

    /// One move ended on this source: switched or aborted.
    pub fn count_migration(&self, switched: bool) {
        let c = if switched { &self.done } else { &self.aborted };
        c.fetch_add(1, Relaxed);
    }

    /// One freeze attempt lasted `d`.
    pub fn observe_freeze(&self, d: Duration) {
        let mut h = self.freezes.lock().unwrap_or_else(|p| p.into_inner());
        let h = h.get_or_insert_with(|| HistogramSnapshot::empty(&FREEZE_BOUNDS));
        let secs = d.as_secs_f64();
        let i = (h.buckets.iter())
            .position(|(b, _)| secs <= *b)
            .unwrap_or(h.buckets.len() - 1);
        h.buckets[i].1 += 1;
        h.sum += secs;
    }

    /// The freeze attempts so far.
    pub fn freezes(&self) -> HistogramSnapshot {
        let h = self.freezes.lock().unwrap_or_else(|p| p.into_inner());
        h.clone()
            .unwrap_or_else(|| HistogramSnapshot::empty(&FREEZE_BOUNDS))
    }
}
