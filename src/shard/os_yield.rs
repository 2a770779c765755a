//! Letting the kernel's log-write completion run on the shard's core.
//!
//! On a disk with a volatile write cache and no FUA (`/sys/block/*/queue/fua` = 0, the usual
//! virtual disk), an `O_DSYNC` log write completes in two steps: the data write, then a cache
//! flush that the kernel issues from a `dio` kworker on the core that took the disk's
//! interrupt. When that core is the shard's, the kworker waits until the shard thread leaves
//! the CPU, and a busy shard leaves it only when all its queues have run dry. Every reply
//! waiting on that commit waits with it. Measured under atomic batches of 10 at 16x8
//! (`perf sched timehist`, 1 s): the kworker waited 0.032–0.098 ms mean and 2.2–3.6 ms at
//! most. With a `sched_yield(2)` every `OS_YIELD_EVERY` of the shard's time it waited
//! 0.009–0.013 ms mean and 0.38 ms at most, and batches/s rose by a median 9% over 10
//! alternated pairs (benches/RESULTS.md, session 16). When nothing else is runnable on the
//! core the call returns at once; it costs one system call per `OS_YIELD_EVERY` at most.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Shard time between two yields to the kernel.
pub const OS_YIELD_EVERY: Duration = Duration::from_micros(100);

/// When the shard last offered its core; one per shard, shared by its client tasks.
pub struct OsYield {
    last: Cell<Instant>,
}

impl Default for OsYield {
    fn default() -> Self {
        OsYield {
            last: Cell::new(Instant::now()),
        }
    }
}

impl OsYield {
    /// Offers the core to whatever else is runnable on it (above all the log's completion
    /// worker) once `OS_YIELD_EVERY` has passed since the last offer. Called before each
    /// request the shard runs.
    pub fn tick(&self) {
        if self.due(Instant::now()) {
            // SAFETY: sched_yield takes no arguments and touches no memory of this process;
            // it cannot fail on Linux (it always returns 0).
            unsafe { libc::sched_yield() };
            self.last.set(Instant::now());
        }
    }

    fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last.get()) >= OS_YIELD_EVERY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yield_is_due_only_once_the_period_has_passed() {
        let y = OsYield::default();
        let last = y.last.get();
        assert!(!y.due(last));
        assert!(!y.due(last + OS_YIELD_EVERY / 2));
        assert!(y.due(last + OS_YIELD_EVERY));
        y.last.set(last + OS_YIELD_EVERY);
        assert!(!y.due(last + OS_YIELD_EVERY + OS_YIELD_EVERY / 2));
    }

    #[test]
    fn a_tick_past_the_period_moves_the_mark() {
        let y = OsYield::default();
        let last = y.last.get();
        std::thread::sleep(OS_YIELD_EVERY * 2);
        y.tick();
        assert!(y.last.get() >= last + OS_YIELD_EVERY * 2);
    }
}
