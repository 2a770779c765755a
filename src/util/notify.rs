//! A single-waiter, executor-local wake-up flag: `notify()` sets it and wakes the waiter,
//! `wait().await` returns once it is set (and clears it). Used between two tasks of one
//! executor (reader → writer, shard receive loop → outbox), never across threads.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Notify {
    set: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl Notify {
    pub fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Forgets a notification nobody waited for (a new waiter starts clean).
    pub fn clear(&self) {
        self.set.set(false);
    }

    pub fn wait(&self) -> Wait<'_> {
        Wait { notify: self }
    }
}

pub struct Wait<'a> {
    notify: &'a Notify,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.set.replace(false) {
            Poll::Ready(())
        } else {
            self.notify.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        }
    }
}
