//! Wake-ups inside one executor: the doorbell `append` rings for the committer, and the
//! tasks waiting for an offset to become durable.
//!
//! Bounds: the doorbell holds one bit. The waiter map holds one entry per pending
//! `wait_durable` future (the caller bounds those by its own in-flight limits); a future
//! removes its entry when dropped, so cancelled waits leave nothing behind.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A single-bit wake-up for one consumer task.
#[derive(Default)]
pub(crate) struct Doorbell {
    rung: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Doorbell {
    pub fn ring(&self) {
        self.rung.set(true);
        let waker = self.waker.borrow_mut().take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Resolves once the bell has rung since the last wait, and clears it.
    pub fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.rung.replace(false) {
                Poll::Ready(())
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    }
}

/// Tasks waiting for offsets, keyed by `(offset, waiter id)`.
#[derive(Default)]
pub(crate) struct Waiters {
    next_id: u64,
    map: BTreeMap<(u64, u64), Waker>,
}

impl Waiters {
    pub fn register(&mut self, offset: u64, id: Option<u64>, waker: &Waker) -> u64 {
        let id = id.unwrap_or_else(|| {
            self.next_id += 1;
            self.next_id
        });
        self.map.insert((offset, id), waker.clone());
        id
    }

    pub fn remove(&mut self, offset: u64, id: u64) {
        self.map.remove(&(offset, id));
    }

    /// Removes and returns the wakers of every waiter at or below `offset`.
    pub fn take_through(&mut self, offset: u64) -> Vec<Waker> {
        let rest = self.map.split_off(&(offset.saturating_add(1), 0));
        let done = std::mem::replace(&mut self.map, rest);
        done.into_values().collect()
    }

    pub fn take_all(&mut self) -> Vec<Waker> {
        std::mem::take(&mut self.map).into_values().collect()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// A future polling `check` until it is ready, registering in `waiters` meanwhile and
/// deregistering on drop.
pub(crate) struct WaitFor<'a, F> {
    pub waiters: &'a RefCell<Waiters>,
    pub offset: u64,
    pub id: Option<u64>,
    pub check: F,
}

impl<T, F: FnMut() -> Option<T> + Unpin> Future for WaitFor<'_, F> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        if let Some(out) = (self.check)() {
            if let Some(id) = self.id.take() {
                self.waiters.borrow_mut().remove(self.offset, id);
            }
            return Poll::Ready(out);
        }
        let id = self
            .waiters
            .borrow_mut()
            .register(self.offset, self.id, cx.waker());
        self.id = Some(id);
        Poll::Pending
    }
}

impl<F> Drop for WaitFor<'_, F> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.waiters.borrow_mut().remove(self.offset, id);
        }
    }
}

pub(crate) fn wake_all(wakers: Vec<Waker>) {
    for w in wakers {
        w.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn wal_waiters_wake_through_offset_only() {
        let flags: Vec<_> = (0..3)
            .map(|_| Arc::new(Flag(std::sync::atomic::AtomicBool::new(false))))
            .collect();
        let mut w = Waiters::default();
        for (i, f) in flags.iter().enumerate() {
            w.register(10 + i as u64, None, &Waker::from(f.clone()));
        }
        wake_all(w.take_through(11));
        let woke: Vec<bool> = flags
            .iter()
            .map(|f| f.0.load(std::sync::atomic::Ordering::SeqCst))
            .collect();
        assert_eq!(woke, [true, true, false]);
        assert_eq!(w.len(), 1);
    }
}
