//! Per-front-executor request and connection counters.
//!
//! Each front executor owns one `FrontStats` and is its only writer, so updates are a relaxed
//! load and store (no locked instruction, no shared cache line with other cores). The metrics
//! executor reads them when scraped.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use shards::ErrorCode;

use super::histogram::HistogramSnapshot;
use crate::protocol::Op;

const OPS: usize = Op::COUNT;
const CODES: usize = ErrorCode::COUNT;

/// Upper bounds (seconds) of the request duration histogram: 25 µs to 10 s.
pub const DURATION_BUCKETS: [f64; 16] = [
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3,
    1.0, 2.5, 10.0,
];
const BUCKETS: usize = DURATION_BUCKETS.len();

/// A histogram with fixed buckets (non-cumulative counts; the last slot is +Inf).
pub struct Histogram {
    pub counts: [AtomicU64; BUCKETS + 1],
    pub sum_nanos: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = DURATION_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS);
        bump(&self.counts[i], 1);
        bump(&self.sum_nanos, d.as_nanos() as u64);
    }

    /// The figures now, in seconds (read from another core: each value is exact, the set is
    /// not one atomic cut, which a scrape tolerates).
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut s = HistogramSnapshot::empty(&DURATION_BUCKETS);
        for (b, c) in s.buckets.iter_mut().zip(&self.counts) {
            b.1 = c.load(Relaxed);
        }
        s.sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        s
    }
}

pub struct FrontStats {
    pub requests: [AtomicU64; OPS],
    pub errors: [[AtomicU64; CODES]; OPS],
    pub durations: [Histogram; OPS],
    pub connections_active: AtomicU64,
    pub connections_total: AtomicU64,
    pub connections_rejected: AtomicU64,
}

impl Default for FrontStats {
    fn default() -> Self {
        FrontStats {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            errors: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            durations: std::array::from_fn(|_| Histogram::default()),
            connections_active: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            connections_rejected: AtomicU64::new(0),
        }
    }
}

impl FrontStats {
    pub fn record_ok(&self, op: Op, took: Duration) {
        bump(&self.requests[op.index()], 1);
        self.durations[op.index()].observe(took);
    }

    pub fn record_failure(&self, op: Op, code: ErrorCode, took: Duration) {
        self.record_ok(op, took);
        self.record_error(op, code);
    }

    /// An error that is not a completed request (a frame error): counted in errors only.
    pub fn record_error(&self, op: Op, code: ErrorCode) {
        bump(&self.errors[op.index()][code.index()], 1);
    }

    pub fn connection_opened(&self) {
        bump(&self.connections_active, 1);
        bump(&self.connections_total, 1);
    }

    pub fn connection_closed(&self) {
        self.connections_active.store(
            self.connections_active.load(Relaxed).saturating_sub(1),
            Relaxed,
        );
    }

    pub fn connection_rejected(&self) {
        bump(&self.connections_rejected, 1);
    }
}

/// Single-writer increment: the owning executor is the only writer of these counters.
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// The sum of every front's counters, read at scrape time.
#[derive(Debug, Clone)]
pub struct FrontTotals {
    pub requests: [u64; OPS],
    pub errors: [[u64; CODES]; OPS],
    pub durations: Vec<HistogramSnapshot>,
    pub connections_active: u64,
    pub connections_total: u64,
    pub connections_rejected: u64,
}

impl FrontTotals {
    pub fn sum(fronts: &[std::sync::Arc<FrontStats>]) -> FrontTotals {
        let mut t = FrontTotals {
            requests: [0; OPS],
            errors: [[0; CODES]; OPS],
            durations: (0..OPS)
                .map(|_| HistogramSnapshot::empty(&DURATION_BUCKETS))
                .collect(),
            connections_active: 0,
            connections_total: 0,
            connections_rejected: 0,
        };
        for f in fronts {
            for op in 0..OPS {
                t.requests[op] += f.requests[op].load(Relaxed);
                for code in 0..CODES {
                    t.errors[op][code] += f.errors[op][code].load(Relaxed);
                }
                t.durations[op].merge(&f.durations[op].snapshot());
            }
            t.connections_active += f.connections_active.load(Relaxed);
            t.connections_total += f.connections_total.load(Relaxed);
            t.connections_rejected += f.connections_rejected.load(Relaxed);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_every_front() {
        let a = std::sync::Arc::new(FrontStats::default());
        let b = std::sync::Arc::new(FrontStats::default());
        a.record_ok(Op::Ping, Duration::from_micros(30));
        b.record_failure(
            Op::ApplyEvent,
            ErrorCode::GuardFailed,
            Duration::from_millis(2),
        );
        b.record_error(Op::Frame, ErrorCode::InvalidFrame);
        a.connection_opened();
        b.connection_opened();
        b.connection_closed();
        b.connection_rejected();
        let t = FrontTotals::sum(&[a, b]);
        assert_eq!(t.requests[Op::Ping.index()], 1);
        assert_eq!(t.requests[Op::ApplyEvent.index()], 1);
        assert_eq!(
            t.requests[Op::Frame.index()],
            0,
            "frame errors are not requests"
        );
        assert_eq!(
            t.errors[Op::ApplyEvent.index()][ErrorCode::GuardFailed.index()],
            1
        );
        assert_eq!(
            t.errors[Op::Frame.index()][ErrorCode::InvalidFrame.index()],
            1
        );
        let ping = &t.durations[Op::Ping.index()];
        assert_eq!(ping.count(), 1);
        assert_eq!(
            ping.buckets[1],
            (50e-6, 1),
            "30 µs lands in the 50 µs bucket"
        );
        assert!((ping.sum - 30e-6).abs() < 1e-12);
        assert_eq!((t.connections_active, t.connections_total), (1, 2));
        assert_eq!(t.connections_rejected, 1);
    }
}
