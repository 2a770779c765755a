//! Per-front-executor request and connection counters.
//!
//! Each front executor owns one `FrontStats` and is its only writer, so updates are a relaxed
//! load and store (no locked instruction, no shared cache line with other cores). The metrics
//! executor reads them when scraped.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use shards::ErrorCode;

use crate::protocol::Op;

const OPS: usize = Op::ALL.len();
const CODES: usize = ErrorCode::ALL.len();

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
