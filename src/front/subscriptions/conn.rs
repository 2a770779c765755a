//! The subscriptions of one connection, as its writer task sees them: frames to interleave
//! between responses, and clean-up when the connection closes.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use glommio::sync::Gate;

use super::sub::{End, Framing, Sub};

use super::table::Table;
use crate::util::notify::Notify;

/// Bytes of push frames the writer takes per write, so responses are not held behind a long
/// run of pushes.
pub const PUSH_WRITE_BYTES_MAX: usize = 256 * 1024;
/// How long a closing connection waits for its subscriptions' shard registrations to go.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct ConnSubs {
    subs: RefCell<Vec<Rc<Sub>>>,
    /// The connection's codec: how its subscriptions' frames are written.
    pub framing: Framing,
    /// Wakes the connection writer: a subscription queued a frame or ended.
    pub ready: Notify,
    /// Driver tasks (set-up, replay, unsubscribe), awaited when the connection closes.
    pub(super) drivers: Gate,
}

impl Default for ConnSubs {
    fn default() -> Self {
        ConnSubs::new(Framing::Rcp1)
    }
}

impl ConnSubs {
    /// The subscriptions of a connection speaking `framing`.
    pub fn new(framing: Framing) -> ConnSubs {
        ConnSubs {
            subs: RefCell::new(Vec::new()),
            framing,
            ready: Notify::default(),
            drivers: Gate::new(),
        }
    }

    /// No subscription left (every one ended and written out, or none was made).
    pub fn is_empty(&self) -> bool {
        self.subs.borrow().is_empty()
    }

    /// Some subscription ended by lag (its notice may still be queued).
    pub fn any_lagged(&self) -> bool {
        self.subs.borrow().iter().any(|s| s.is_lagged())
    }

    pub(super) fn add(&self, sub: Rc<Sub>) {
        self.subs.borrow_mut().push(sub);
    }

    pub(super) fn find(&self, id: u64) -> Option<Rc<Sub>> {
        self.subs.borrow().iter().find(|s| s.id == id).cloned()
    }

    pub(super) fn len(&self) -> usize {
        self.subs.borrow().len()
    }

    /// Whether some subscription is still running (a subscriber may stay silent: the idle
    /// timeout does not apply then).
    pub fn any_active(&self) -> bool {
        self.subs.borrow().iter().any(|s| !s.is_ended())
    }

    /// Moves queued push frames of announced subscriptions into `out` (at most about
    /// `PUSH_WRITE_BYTES_MAX`), and forgets subscriptions that ended and have nothing left.
    pub fn drain_into(&self, out: &mut Vec<u8>, table: &Table) {
        if self.subs.borrow().is_empty() {
            return;
        }
        let limit = out.len() + PUSH_WRITE_BYTES_MAX;
        let mut more = false;
        self.subs.borrow_mut().retain(|sub| {
            if sub.is_announced() {
                more |= sub.take_frames(out, limit);
            }
            let done = sub.is_finished();
            if done {
                table.remove(sub.id);
            }
            !done
        });
        if more {
            self.ready.notify();
        }
    }

    /// Ends every subscription as UNWATCH would (nothing more is written for them), keeping the
    /// connection able to subscribe again: a re-AUTH whose token lacks the read scope.
    pub fn end_all(&self, table: &Table) {
        for sub in std::mem::take(&mut *self.subs.borrow_mut()) {
            sub.end(End::Unwatched);
            table.remove(sub.id);
        }
        self.ready.notify();
    }

    /// The connection closed: ends every subscription and waits (bounded) for their shard
    /// registrations to be removed.
    pub async fn close(&self, table: &Table) {
        let subs = std::mem::take(&mut *self.subs.borrow_mut());
        for sub in subs {
            sub.end(End::Closed);
            table.remove(sub.id);
        }
        let closed = glommio::timer::timeout(CLOSE_TIMEOUT, async {
            let _ = self.drivers.close().await;
            Ok(())
        })
        .await;
        if closed.is_err() {
            log::warn!("subscriptions of a closed connection still busy after {CLOSE_TIMEOUT:?}");
        }
    }
}
