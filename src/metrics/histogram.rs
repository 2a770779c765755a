//! Histogram figures as plain data: what an executor hands over when scraped (inside a
//! message or read from its atomics), and what the exposition encodes.

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

#[cfg(test)]
mod tests {
    use super::*;

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
