//! The idle limit (`network.idle_timeout_secs`): a connection whose client sent nothing for that
//! long is closed quietly, unless it has an active subscription (a subscriber may listen in
//! silence for hours).
//!
//! One watchdog timer per connection, not a timeout on every read: glommio arms an io_uring
//! timeout with each read of a socket that has a read timeout and cancels it when the read
//! completes, two extra submissions per read on the front's hot path (benches/RESULTS.md,
//! "Session 6"). Here the reader only stamps the time of its last read; the watchdog sleeps
//! until that stamp plus the limit, looks again, and ends the read only if nothing came since.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::util::notify::Notify;

/// Per connection: when its client last sent bytes, and the signal that the limit passed.
pub struct Idle {
    last: Cell<Instant>,
    expired: Notify,
}

impl Default for Idle {
    fn default() -> Self {
        Idle {
            last: Cell::new(Instant::now()),
            expired: Notify::default(),
        }
    }
}

impl Idle {
    /// The client sent bytes (called by the reader after every read).
    pub fn touch(&self) {
        self.last.set(Instant::now());
    }

    /// Resolves once the watchdog found the connection idle (the reader's only waiter).
    pub async fn expired(&self) {
        self.expired.wait().await
    }

    /// The watchdog: runs until the connection has been idle for `limit` with no active
    /// subscription (`subscribed` is asked only then), signals `expired`, and returns. The
    /// connection cancels it when it ends first.
    pub async fn watch(&self, limit: Duration, subscribed: impl Fn() -> bool) {
        loop {
            let due = self.last.get() + limit;
            let now = Instant::now();
            if now < due {
                glommio::timer::sleep(due - now).await;
                continue;
            }
            if subscribed() {
                self.last.set(now); // spared: look again one limit from now
                continue;
            }
            self.expired.notify();
            return;
        }
    }
}
