//! The answers this member gave in cluster mode (docs/cluster.md, "Metrics"): one relaxed
//! atomic per kind of answer, bumped by whichever executor answers and read at scrape time
//! (`control::metrics::gather`). Bound: a fixed number of `u64`s per process; they wrap only
//! past 2^64 answers. Policy: counted where the answer is made (`serve::check` for MOVED),
//! never for answers a move gives (TRYAGAIN), which stays 0 until moves exist.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Answers given by this member since it started.
#[derive(Debug, Default)]
pub struct Counters {
    /// `MOVED` answers (`svc_cluster_moved_total`).
    pub moved: AtomicU64,
    /// `TRYAGAIN` answers (`svc_cluster_tryagain_total`); 0 until moves exist.
    pub tryagain: AtomicU64,
}

impl Counters {
    /// Counts one `MOVED`.
    pub fn count_moved(&self) {
        self.moved.fetch_add(1, Relaxed);
    }

    /// `(moved, tryagain)` now.
    pub fn read(&self) -> (u64, u64) {
        (self.moved.load(Relaxed), self.tryagain.load(Relaxed))
    }
}
