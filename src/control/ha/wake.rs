//! What starts the HA loop's next iteration before its poll (docs/ha.md, "Inside a member"):
//! a change of the cluster's keys in etcd (`control::ha::watch`), an operator's request queued in
//! `admin`, a decision the driver has carried out, this member's own positions published.
//!
//! A wake only moves the next read earlier. Every decision is still taken from that
//! consistent read (`Term::decide`), never from what woke the loop, so a lost, repeated or
//! reordered wake changes when the loop reads, not what it decides; the poll (`session::POLL`)
//! stays as the fallback.
//!
//! Bound: any number of signals between two waits are one wake (`Notify` keeps at most one
//! permit), so nothing queues up behind a burst of etcd events; and after a wake the loop reads
//! no sooner than `GAP_MIN` after its previous read.

use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The least time between two reads of a woken loop: at most 100 reads a second under a
/// storm of changes (a poll is 200 ms), and a burst of events lands in one read.
pub const GAP_MIN: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
pub struct Wake {
    notify: Notify,
}

impl Wake {
    /// Something may have changed: the loop's next wait (or the current one) ends at once.
    /// Any thread may call it.
    pub fn signal(&self) {
        self.notify.notify_one();
    }

    /// Waits `limit`, less when signalled, and then until `GAP_MIN` after `last_read`.
    /// True when a signal ended it.
    pub async fn wait(&self, limit: Duration, last_read: Instant) -> bool {
        let woken = tokio::time::timeout(limit, self.notify.notified())
            .await
            .is_ok();
        if woken {
            tokio::time::sleep_until(last_read + GAP_MIN).await;
        }
        woken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn signals_before_a_wait_are_one_wake_and_the_poll_still_ends_a_quiet_one() {
        runtime().block_on(async {
            let w = Wake::default();
            for _ in 0..100 {
                w.signal();
            }
            let read = Instant::now() - GAP_MIN;
            assert!(w.wait(Duration::from_secs(5), read).await, "woken at once");
            let started = Instant::now();
            assert!(
                !w.wait(Duration::from_millis(30), read).await,
                "one wake only"
            );
            assert!(started.elapsed() >= Duration::from_millis(30));
        });
    }

    #[test]
    fn a_wake_right_after_a_read_waits_for_the_gap() {
        runtime().block_on(async {
            let w = Wake::default();
            let read = Instant::now();
            w.signal();
            assert!(w.wait(Duration::from_secs(5), read).await);
            assert!(read.elapsed() >= GAP_MIN);
        });
    }

    #[test]
    fn another_thread_wakes_a_waiting_loop() {
        let w = std::sync::Arc::new(Wake::default());
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w2.signal();
        });
        runtime().block_on(async {
            let started = Instant::now();
            assert!(w.wait(Duration::from_secs(5), Instant::now()).await);
            assert!(started.elapsed() < Duration::from_secs(4));
        });
        t.join().unwrap();
    }
}
