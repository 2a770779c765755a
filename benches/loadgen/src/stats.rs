//! Per-op counters and HDR latency histograms, merged across threads, and their summaries.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::workload::OpKind;

/// Highest latency the histograms track exactly, in nanoseconds: one minute. Slower responses
/// are clamped to it (a run that sees them has bigger problems than the p99.9).
const LATENCY_NS_MAX: u64 = 60_000_000_000;
/// Significant decimal digits kept: 3 gives 0.1% resolution at every magnitude.
const LATENCY_SIGFIG: u8 = 3;

fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that satisfy the constructor's only rules (low >= 1,
    // high >= 2 * low, sigfig <= 5), so this cannot fail.
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// Counters of one op kind.
#[derive(Debug, Clone)]
pub struct OpStats {
    /// Successful responses received inside the measurement window.
    pub ok: u64,
    /// Error responses (and requests lost with their connection) inside the window.
    pub errors: u64,
    /// Latency of the successful responses, send to receive, in nanoseconds.
    pub hist: Histogram<u64>,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            ok: 0,
            errors: 0,
            hist: new_histogram(),
        }
    }
}

impl OpStats {
    pub fn record_ok(&mut self, latency: Duration) {
        self.ok += 1;
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.hist.saturating_record(ns.max(1));
    }

    pub fn merge(&mut self, other: &OpStats) {
        self.ok += other.ok;
        self.errors += other.errors;
        // Both histograms have the same bounds, so `add` cannot fail; on a mismatch the
        // clamped per-value copy below still keeps every count.
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }
}

/// Everything one load thread (or a whole run, once merged) counted.
#[derive(Debug, Clone, Default)]
pub struct RunCounts {
    pub per_op: [OpStats; OpKind::COUNT],
    /// Errors inside the window by code (server codes, or `IO_ERROR`, `PROTOCOL_ERROR`,
    /// `CONNECTION_CLOSED`, `DRAIN_TIMEOUT` raised by the generator).
    pub errors: BTreeMap<String, u64>,
    /// Errors during warm-up or the drain after the window; not in `errors`.
    pub errors_outside_window: u64,
    /// Requests sent, from the start of warm-up to the end of the window.
    pub sent: u64,
}

impl RunCounts {
    pub fn merge(&mut self, other: &RunCounts) {
        for (a, b) in self.per_op.iter_mut().zip(other.per_op.iter()) {
            a.merge(b);
        }
        for (code, n) in &other.errors {
            *self.errors.entry(code.clone()).or_default() += n;
        }
        self.errors_outside_window += other.errors_outside_window;
        self.sent += other.sent;
    }

    /// All ops together.
    pub fn total(&self) -> OpStats {
        let mut all = OpStats::default();
        for s in &self.per_op {
            all.merge(s);
        }
        all
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_recorded_latencies() {
        let mut s = OpStats::default();
        for us in 1..=1000u64 {
            s.record_ok(Duration::from_micros(us));
        }
        let l = Latency::of(&s.hist);
        assert!((l.p50 - 500.0).abs() < 1.0, "{l:?}");
        assert!((l.p99 - 990.0).abs() < 1.0, "{l:?}");
        assert!((l.max - 1000.0).abs() < 1.0, "{l:?}");
    }

    #[test]
    fn merge_adds_counts_and_histograms() {
        let mut a = RunCounts::default();
        let mut b = RunCounts::default();
        a.per_op[0].record_ok(Duration::from_micros(10));
        b.per_op[0].record_ok(Duration::from_micros(20));
        b.errors.insert("X".into(), 2);
        a.merge(&b);
        assert_eq!(a.per_op[0].ok, 2);
        assert_eq!(a.per_op[0].hist.len(), 2);
        assert_eq!(a.error_count(), 2);
        assert_eq!(a.total().ok, 2);
    }

    #[test]
    fn huge_latency_is_clamped_not_lost() {
        let mut s = OpStats::default();
        s.record_ok(Duration::from_secs(3600));
        assert_eq!(s.hist.len(), 1);
    }
}
