//! Subscription counters of one front executor (its subscriptions, `front::subscriptions`).
//!
//! Like `FrontStats`, each front executor owns one `SubsStats` and is its only writer, so an
//! update is a relaxed load and store. A scrape sums the fronts:
//! `svc_subscriptions_active` = Σ `active`, `svc_events_broadcast_total` = Σ `broadcast`, and
//! the per-shard gauge of queued pushes = Σ `queued[shard]`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct SubsStats {
    /// Subscriptions set up and not yet ended.
    pub active: AtomicU64,
    /// Pushes handed to a subscriber's socket (one per push sent; lag notices not counted).
    pub broadcast: AtomicU64,
    /// Subscriptions ended with `subscription_lagged`.
    pub lagged: AtomicU64,
    /// Pushes waiting in subscription queues, by the shard they came from.
    pub queued: Vec<AtomicU64>,
}

impl SubsStats {
    pub fn new(shards: u32) -> SubsStats {
        SubsStats {
            active: AtomicU64::new(0),
            broadcast: AtomicU64::new(0),
            lagged: AtomicU64::new(0),
            queued: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub fn sub(c: &AtomicU64, n: u64) {
        c.store(c.load(Relaxed).saturating_sub(n), Relaxed);
    }

    /// Adds `n` pushes from `shard` to the queued gauge.
    pub fn queued_add(&self, shard: u32, n: u64) {
        if let Some(c) = self.queued.get(shard as usize) {
            Self::add(c, n);
        }
    }

    pub fn queued_sub(&self, shard: u32, n: u64) {
        if let Some(c) = self.queued.get(shard as usize) {
            Self::sub(c, n);
        }
    }
}
