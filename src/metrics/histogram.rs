//! Histogram figures as plain data: what an executor hands over when scraped, and what the
//! exposition encodes. `LocalHistogram` is the executor-local recorder (no atomics: only its
//! own executor touches it, the snapshot crosses cores inside a message).

use std::cell::{Cell, RefCell};

/// Upper bounds (seconds) for log write and fsync latencies: 10 µs to 5 s. A DMA write plus
/// fdatasync costs 30–150 µs on a VM and 0.5–5 ms on an SSD without power-loss protection.
pub const WAL_WRITE_SECONDS_BUCKETS: [f64; 16] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 1.0, 5.0,
];

/// Upper bounds for log entries per group commit: powers of two up to 4096.
pub const BATCH_SIZE_BUCKETS: [f64; 13] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// A histogram read at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations in this bucket alone)`, ascending. Counts are not
    /// cumulative; the last bound is `f64::INFINITY` and takes everything above the others.
    pub buckets: Vec<(f64, u64)>,
    /// Sum of all observed values.
    pub sum: f64,
}

impl HistogramSnapshot {
    /// An empty histogram over `bounds` (finite, ascending), plus the +Inf bucket.
    pub fn empty(bounds: &[f64]) -> Self {
        let mut buckets: Vec<(f64, u64)> = bounds.iter().map(|b| (*b, 0)).collect();
        buckets.push((f64::INFINITY, 0));
        HistogramSnapshot { buckets, sum: 0.0 }
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(_, n)| n).sum()
    }

    /// Adds `other` into `self`. Buckets of `other` whose bound `self` lacks go to the smallest
    /// bound of `self` above them (so quantiles can only be overestimated, never lost).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        if self.buckets.is_empty() {
            *self = other.clone();
            return;
        }
        for (bound, n) in &other.buckets {
            let i = self
                .buckets
                .iter()
                .position(|(b, _)| *b >= *bound)
                .unwrap_or(self.buckets.len() - 1);
            self.buckets[i].1 += n;
        }
        self.sum += other.sum;
    }
}

/// An executor-local histogram with fixed bounds.
pub struct LocalHistogram {
    bounds: &'static [f64],
    counts: RefCell<Vec<u64>>,
    sum: Cell<f64>,
}

impl LocalHistogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        LocalHistogram {
            bounds,
            counts: RefCell::new(vec![0; bounds.len() + 1]),
            sum: Cell::new(0.0),
        }
    }

    pub fn observe(&self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts.borrow_mut()[i] += 1;
        self.sum.set(self.sum.get() + v);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts = self.counts.borrow();
        let mut buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .copied()
            .zip(counts.iter().copied())
            .collect();
        buckets.push((f64::INFINITY, counts[self.bounds.len()]));
        HistogramSnapshot {
            buckets,
            sum: self.sum.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_histogram_counts_each_value_in_its_bucket() {
        let h = LocalHistogram::new(&BATCH_SIZE_BUCKETS);
        for v in [1.0, 1.0, 3.0, 5000.0] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum, 5005.0);
        assert_eq!(s.buckets[0], (1.0, 2));
        assert_eq!(s.buckets[2], (4.0, 1));
        assert_eq!(s.buckets.last(), Some(&(f64::INFINITY, 1)));
        assert_eq!(s.buckets.len(), BATCH_SIZE_BUCKETS.len() + 1);
    }

    #[test]
    fn merge_adds_matching_buckets_and_rebuckets_others_upwards() {
        let mut a = HistogramSnapshot::empty(&[1.0, 10.0]);
        let mut b = HistogramSnapshot::empty(&[1.0, 10.0]);
        b.buckets[0].1 = 2;
        b.buckets[2].1 = 1;
        b.sum = 20.0;
        a.merge(&b);
        a.merge(&b);
        assert_eq!(a.buckets, vec![(1.0, 4), (10.0, 0), (f64::INFINITY, 2)]);
        assert_eq!(a.sum, 40.0);
        let odd = HistogramSnapshot {
            buckets: vec![(5.0, 3), (f64::INFINITY, 0)],
            sum: 9.0,
        };
        a.merge(&odd);
        assert_eq!(a.buckets[1], (10.0, 3), "5.0 goes to the next bound up");
        let mut none = HistogramSnapshot::default();
        none.merge(&odd);
        assert_eq!(none, odd);
    }
}
