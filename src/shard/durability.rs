//! The shard's log position: where entries get offsets and when they count as durable.
//!
//! Until the WAL lands this is memory only: an entry is "durable" as soon as it has an offset.
//! The runtime already waits on `wait_durable`, so the WAL replaces this without touching ops.

use std::cell::Cell;

use shards::{ErrorCode, Rejection};

use crate::metrics::LogStats;

pub struct Durability {
    head: Cell<u64>,
}

impl Durability {
    pub fn memory() -> Self {
        Durability { head: Cell::new(0) }
    }

    /// Records one entry and returns its offset (contiguous from 1).
    pub fn append(&self, _payload: &[u8]) -> Result<u64, Rejection> {
        let next = self.head.get() + 1;
        self.head.set(next);
        Ok(next)
    }

    pub fn head(&self) -> u64 {
        self.head.get()
    }

    pub fn durable(&self) -> u64 {
        self.head.get()
    }

    /// Figures for metrics: a memory log has offsets and entries, no bytes, segments or I/O.
    pub fn stats(&self) -> LogStats {
        LogStats {
            offset: self.head(),
            durable: self.durable(),
            entries_total: self.head(),
            ..LogStats::default()
        }
    }

    pub async fn wait_durable(&self, offset: u64) -> Result<(), Rejection> {
        if offset <= self.durable() {
            Ok(())
        } else {
            Err(Rejection::new(
                ErrorCode::InternalError,
                "offset beyond the log head",
            ))
        }
    }
}
