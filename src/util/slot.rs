//! An executor-local one-shot slot: a producer fills it once, one consumer awaits it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

pub struct Slot<T> {
    value: RefCell<Option<T>>,
    waker: Cell<Option<Waker>>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            value: RefCell::new(None),
            waker: Cell::new(None),
        }
    }
}

impl<T> Slot<T> {
    pub fn new() -> Rc<Self> {
        Rc::new(Slot::default())
    }

    pub fn fill(&self, value: T) {
        *self.value.borrow_mut() = Some(value);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    pub fn is_filled(&self) -> bool {
        self.value.borrow().is_some()
    }

    /// Takes the value if present (non-blocking).
    pub fn take(&self) -> Option<T> {
        self.value.borrow_mut().take()
    }

    /// Waits for the value.
    pub fn wait(self: &Rc<Self>) -> SlotWait<T> {
        SlotWait { slot: self.clone() }
    }

    /// Resolves once the slot is filled, leaving the value in it.
    pub fn filled(self: &Rc<Self>) -> SlotFilled<T> {
        SlotFilled { slot: self.clone() }
    }
}

pub struct SlotFilled<T> {
    slot: Rc<Slot<T>>,
}

impl<T> Future for SlotFilled<T> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.slot.is_filled() {
            Poll::Ready(())
        } else {
            self.slot.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        }
    }
}

pub struct SlotWait<T> {
    slot: Rc<Slot<T>>,
}

impl<T> Future for SlotWait<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.slot.take() {
            Some(v) => Poll::Ready(v),
            None => {
                self.slot.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}
