//! Several waiters on one executor for a condition that another task of that executor makes
//! true: each waits with `until(cond)`, the task that may have made `cond` true calls
//! `notify_all`. Executor-local (`Cell`/`RefCell`), never across threads. `Notify` is the
//! single-waiter version.
//!
//! Bound: one registered waker per `Until` future alive (it removes its own when it resolves
//! or is dropped, as after a timeout), so a condition that never comes true costs nothing once
//! its waiters gave up.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Waiters {
    next_id: Cell<u64>,
    wakers: RefCell<Vec<(u64, Waker)>>,
}

impl Waiters {
    /// Wakes every waiter; each checks its condition again.
    pub fn notify_all(&self) {
        // Taken first: a woken task only gets scheduled, but keep no borrow across `wake`.
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for (_, w) in wakers {
            w.wake();
        }
    }

    /// Resolves once `cond()` is true, checked now and after every `notify_all`.
    pub fn until<F: Fn() -> bool + Unpin>(&self, cond: F) -> Until<'_, F> {
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        Until {
            waiters: self,
            cond,
            id,
        }
    }

    /// Wakers registered now (tests).
    #[cfg(test)]
    fn registered(&self) -> usize {
        self.wakers.borrow().len()
    }
}

pub struct Until<'a, F> {
    waiters: &'a Waiters,
    cond: F,
    id: u64,
}

impl<F: Fn() -> bool + Unpin> Future for Until<'_, F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut wakers = this.waiters.wakers.borrow_mut();
        if (this.cond)() {
            wakers.retain(|(id, _)| *id != this.id);
            return Poll::Ready(());
        }
        match wakers.iter_mut().find(|(id, _)| *id == this.id) {
            Some((_, w)) => w.clone_from(cx.waker()),
            None => wakers.push((this.id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl<F> Drop for Until<'_, F> {
    fn drop(&mut self) {
        // `notify_all` never holds the borrow while user code runs, so this cannot clash.
        if let Ok(mut wakers) = self.waiters.wakers.try_borrow_mut() {
            wakers.retain(|(id, _)| *id != self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use std::time::Duration;

    #[test]
    fn every_waiter_wakes_and_a_timed_out_one_leaves_no_waker() {
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).io_memory(1 << 20);
        let done = ex.spawn(|| async {
            let w = Rc::new(Waiters::default());
            let level = Rc::new(Cell::new(0u64));
            let waiter = |at: u64| {
                let (w, level) = (w.clone(), level.clone());
                glommio::spawn_local(async move { w.until(|| level.get() >= at).await })
            };
            let (a, b) = (waiter(1), waiter(2));
            glommio::timer::sleep(Duration::from_millis(5)).await;
            assert_eq!(w.registered(), 2);
            level.set(2);
            w.notify_all();
            a.await;
            b.await;
            assert_eq!(w.registered(), 0);
            // Given up after a timeout: its waker goes with it.
            let never = futures_lite::future::or(
                async {
                    w.until(|| false).await;
                    true
                },
                async {
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                    false
                },
            );
            assert!(!never.await);
            assert_eq!(w.registered(), 0);
        });
        done.expect("spawn executor")
            .join()
            .expect("executor panicked");
    }
}
