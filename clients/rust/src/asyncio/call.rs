//! A call waiting for its response: its slot in the connection's table of pending calls, and
//! the future its caller awaits. The reader puts the answer in the slot and wakes the caller,
//! which takes it out: no channel per call (what a `oneshot` would allocate and synchronise).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::conn::Link;
use super::reader::Answer;
use crate::error::{Error, Result};

/// Where a pending call stands.
pub(super) enum Slot {
    /// No answer yet; the waker of the caller's last poll.
    Waiting(Option<Waker>),
    /// The answer (or the connection's end), for the caller to take.
    Ready(Result<Answer>),
    /// The call timed out: the caller takes this error and the entry stays, `Abandoned`.
    TimedOut(Error),
    /// Nobody waits any more (timed out, or the caller's future was dropped). The entry stays
    /// so that the late response is matched by its id and dropped instead of being taken for
    /// a protocol error.
    Abandoned,
}

/// What the reader does with a response, given the slot of its call.
pub(super) enum Delivered {
    /// Put in the slot; the caller's waker to wake once the lock is released.
    Wake(Option<Waker>),
    /// Nobody waits for it: the entry is to be removed.
    Dropped,
    /// The slot had its answer already: this response answers no pending call.
    Unexpected,
}

impl Slot {
    /// Hands a response to this slot.
    pub(super) fn deliver(&mut self, a: Result<Answer>) -> Delivered {
        match self {
            Slot::Waiting(w) => {
                let w = w.take();
                *self = Slot::Ready(a);
                Delivered::Wake(w)
            }
            // The caller still takes its timeout error; the response is spent.
            Slot::TimedOut(_) => {
                if let Slot::TimedOut(e) = std::mem::replace(self, Slot::Abandoned) {
                    *self = Slot::Ready(Err(e));
                }
                Delivered::Wake(None)
            }
            Slot::Abandoned => Delivered::Dropped,
            Slot::Ready(_) => Delivered::Unexpected,
        }
    }

    /// Fails a waiting slot with `e`: as its answer when the connection ended, as a timeout
    /// (`timed_out`) that leaves the entry waiting for the late response. The caller's waker.
    pub(super) fn fail(&mut self, e: Error, timed_out: bool) -> Option<Waker> {
        let Slot::Waiting(w) = self else {
            return None;
        };
        let w = w.take();
        *self = match timed_out {
            true => Slot::TimedOut(e),
            false => Slot::Ready(Err(e)),
        };
        w
    }
}

/// The future of one call's answer (made by `Conn::send`).
pub(super) struct Call<'a> {
    link: &'a Link,
    id: u64,
    /// The answer was taken (nothing left to clean up on drop).
    done: bool,
}

impl<'a> Call<'a> {
    pub(super) fn new(link: &'a Link, id: u64) -> Call<'a> {
        Call {
            link,
            id,
            done: false,
        }
    }
}

impl Future for Call<'_> {
    type Output = Result<Answer>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Answer>> {
        let this = self.get_mut();
        if this.done {
            // Polled after it gave its answer (a misuse): the entry is not this call's now.
            return Poll::Ready(Err(Error::eof("connection closed")));
        }
        let mut s = this.link.lock();
        let Some(p) = s.pending.get_mut(&this.id) else {
            // Not reached: the entry stays until this future takes its answer.
            this.done = true;
            return Poll::Ready(Err(Error::eof("connection closed")));
        };
        let answer = match &mut p.slot {
            Slot::Waiting(w) => {
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            Slot::TimedOut(_) => match std::mem::replace(&mut p.slot, Slot::Abandoned) {
                Slot::TimedOut(e) => Err(e),
                _ => Err(Error::eof("connection closed")),
            },
            Slot::Ready(_) => match s.remove(this.id) {
                Some(super::conn::Pending {
                    slot: Slot::Ready(a),
                    ..
                }) => a,
                _ => Err(Error::eof("connection closed")),
            },
            // Not reached: only a call whose caller is gone is abandoned.
            Slot::Abandoned => Err(Error::eof("connection closed")),
        };
        this.done = true;
        Poll::Ready(answer)
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut s = self.link.lock();
        let Some(p) = s.pending.get_mut(&self.id) else {
            return;
        };
        match p.slot {
            // The response is still to come: it finds the entry and is dropped.
            Slot::Waiting(_) => p.slot = Slot::Abandoned,
            // It came (or the connection ended): nothing more will look for this entry.
            Slot::Ready(_) => {
                s.remove(self.id);
            }
            Slot::TimedOut(_) | Slot::Abandoned => p.slot = Slot::Abandoned,
        }
    }
}
