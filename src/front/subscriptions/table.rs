//! The subscriptions of one front executor by id, so the router's pump can hand each push to
//! its subscription without waiting for anything (`Pushes`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use super::sub::Sub;
use crate::mesh::router::Pushes;
use crate::shard::subs::{PushMsg, SubsEnded};

/// Owned by the `Front`, shared with its `Router`'s pumps. A subscription is in here from its WATCH until the connection
/// writer has written its last frame (or the connection closed).
#[derive(Default)]
pub struct Table {
    subs: RefCell<HashMap<u64, Rc<Sub>>>,
    next_id: Cell<u64>,
}

impl Table {
    /// A new subscription id, unique on this front executor.
    pub fn next_id(&self) -> u64 {
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        id
    }

    pub fn insert(&self, sub: Rc<Sub>) {
        self.subs.borrow_mut().insert(sub.id, sub);
    }

    pub fn remove(&self, id: u64) {
        self.subs.borrow_mut().remove(&id);
    }
}

impl Pushes for Table {
    /// A push from a shard, for each subscription it names (one shared body). Never waits: a
    /// full subscription ends with a lag notice; a push for a subscription that has ended is
    /// dropped.
    fn deliver(&self, p: PushMsg) {
        let body: Rc<[u8]> = p.body.into();
        for id in &p.subs {
            let sub = self.subs.borrow().get(id).cloned();
            if let Some(sub) = sub {
                sub.deliver(p.shard, p.epoch, p.offset, &body);
            }
        }
    }

    /// A shard ends subscriptions it named: its log was rewound to `diverged_at` (each one
    /// that went past it ends with a `diverged` lag notice, the others go on), or their pushes
    /// could not be held for sync acknowledgement (each ends lagged after what it delivered).
    fn ended(&self, m: SubsEnded) {
        for id in &m.subs {
            let sub = self.subs.borrow().get(id).cloned();
            let Some(sub) = sub else { continue };
            match m.diverged_at {
                Some((epoch, offset)) => {
                    sub.diverge(&[(m.shard, epoch, offset)]);
                }
                None => sub.end(super::sub::End::Lagged),
            }
        }
    }
}

impl Table {
    /// The WATCH response of `id` was written: its pushes may follow.
    pub fn announce(&self, id: u64) {
        let sub = self.subs.borrow().get(&id).cloned();
        if let Some(sub) = sub {
            sub.announce();
        }
    }

    pub fn len(&self) -> usize {
        self.subs.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
