//! A shard's part in moving slots between cluster groups (docs/cluster.md, "Moving slots"):
//! one `ShardCall::Move` per step, served here, and the two checks a move adds to client
//! requests: a frozen slot (on the source, during a freeze) refuses writes and timer fires
//! with `TRYAGAIN`, and a slot whose moved-in instances are still staged (on the target, from
//! the switch until its `move_in` entry is applied) refuses every op with `TRYAGAIN`.
//!
//! Source: `Begin` (the ids of the slots' live instances and the cut), `Images` (instances
//! as they are, once the head is durable), `Freeze`. Target: `Import` (staged, logged),
//! `MoveIn` / `Drop` (the switch or the abort, logged, replicated like any entry); the
//! source's `Moved` after the switch logs `slots_moved_out` (likewise replicated). Either
//! group: `Staged` (what the shard stages) and `Purge` (deleting instances of slots its group
//! does not own, logged as deletes of reason `moved`, never pushed).

use std::cell::RefCell;
use std::sync::Arc;

use shards::engine::{DeleteReason, Entry, StagedMove};
use shards::routing::slot_of;
use shards::{ErrorCode, Rejection};

use super::runtime::{Needs, Outcome, Shard};
use crate::protocol::Op;
use crate::util::time::now_ms;

/// Milliseconds a `TRYAGAIN` tells the client to wait.
const RETRY_AFTER_MS: u64 = 50;

/// One step of a move on this shard.
pub enum MoveCall {
    /// Source: the ids of the live instances of `lo..=hi` and the head, the cut.
    Begin { lo: u16, hi: u16 },
    /// Source: each id's image (None: not here any more), answered once the head is durable.
    Images { ids: Vec<String> },
    /// Source: freeze `lo..=hi` for move `move_id` (writes and timer fires get `TRYAGAIN`), or
    /// lift its freeze (`on` false); answered with the head once it is durable, so every write
    /// decided before the freeze is in the log the catch-up reads.
    Freeze {
        move_id: u64,
        lo: u16,
        hi: u16,
        on: bool,
    },
    /// Target: stage these images of move `move_id` (logged, one entry each).
    Import {
        move_id: u64,
        lo: u16,
        hi: u16,
        images: Vec<(String, Option<String>)>,
    },
    /// Target: the move switched: its staged instances go live (logged).
    MoveIn {
        move_id: u64,
        lo: u16,
        hi: u16,
        map_epoch: u64,
    },
    /// Target: the move aborted: its staged instances are dropped (logged).
    Drop { move_id: u64 },
    /// The moves this shard stages.
    Staged,
    /// Source, after the switch: logs `Entry::SlotsMovedOut` (replicated; the engine leaves
    /// the slots' instances out of its counts from then on), and subscriptions covering the
    /// slots hear `slots_moved` as the entry is published, here and on every follower.
    Moved(super::subs::SlotsMoved),
    /// Deletes up to `max` live instances whose slot lies outside `owned` (sorted ranges).
    Purge {
        owned: Arc<Vec<(u16, u16)>>,
        max: usize,
    },
}

impl MoveCall {
    /// A step that logs: its reply waits like a client write's (sync replicas, the lease).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            MoveCall::Import { .. }
                | MoveCall::MoveIn { .. }
                | MoveCall::Drop { .. }
                | MoveCall::Purge { .. }
                | MoveCall::Moved(_)
        )
    }
}

/// What a move step answers.
#[derive(Debug)]
pub enum MoveReply {
    Begun {
        ids: Vec<String>,
        head: u64,
    },
    Images(Vec<(String, Option<String>)>),
    Head(u64),
    Staged(Vec<StagedMove>),
    /// Instances deleted by a purge.
    Purged(usize),
    Done,
}

/// The slot ranges frozen on this shard: `(lo, hi, move_id)`.
#[derive(Default)]
pub struct Frozen(RefCell<Vec<(u16, u16, u64)>>);

impl Frozen {
    /// The move freezing `slot`, if any (a branch when nothing is frozen).
    pub fn covers(&self, slot: u16) -> Option<u64> {
        let f = self.0.borrow();
        if f.is_empty() {
            return None;
        }
        f.iter()
            .find(|(lo, hi, _)| *lo <= slot && slot <= *hi)
            .map(|m| m.2)
    }

    fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }
}

/// `TRYAGAIN` for `slot`, held by move `move_id` (16 hex digits, as etcd names it).
pub fn try_again(slot: u16, move_id: u64, why: &str) -> Rejection {
    use std::sync::atomic::Ordering::Relaxed;
    crate::cluster::counters::TRYAGAIN_GIVEN.fetch_add(1, Relaxed);
    Rejection::new(
        ErrorCode::TryAgain,
        format!("slot {slot} is {why} by move {move_id:016x}; try again"),
    )
    .with("slot", slot)
    .with("migration", format!("{move_id:016x}"))
    .with("retry_after_ms", RETRY_AFTER_MS)
}

impl Shard {
    /// `ShardCall::Move`.
    pub(super) fn move_step(&self, call: MoveCall) -> Outcome {
        let durable = |reply, at| (Ok(super::ReplyBody::Move(reply)), Needs::durable(at));
        match call {
            MoveCall::Begin { lo, hi } => {
                let ids = self.engine.borrow().ids_in_slots(lo, hi);
                let head = self.log.head();
                durable(MoveReply::Begun { ids, head }, head)
            }
            MoveCall::Images { ids } => {
                let engine = self.engine.borrow();
                let images = (ids.into_iter())
                    .map(|id| {
                        let image = engine.export_image(&id);
                        (id, image)
                    })
                    .collect();
                durable(MoveReply::Images(images), self.log.head())
            }
            MoveCall::Freeze {
                move_id,
                lo,
                hi,
                on,
            } => {
                let mut f = self.frozen.0.borrow_mut();
                f.retain(|m| m.2 != move_id);
                if on {
                    f.push((lo, hi, move_id));
                }
                drop(f);
                let head = self.log.head();
                durable(MoveReply::Head(head), head)
            }
            MoveCall::Import {
                move_id,
                lo,
                hi,
                images,
            } => self.import(move_id, lo, hi, images),
            MoveCall::MoveIn {
                move_id,
                lo,
                hi,
                map_epoch,
            } => self.move_in(move_id, lo, hi, map_epoch),
            MoveCall::Drop { move_id } => {
                let entry = Entry::DropStaged {
                    move_id,
                    at_ms: now_ms(),
                };
                self.logged(entry)
            }
            MoveCall::Staged => {
                let staged = self.engine.borrow().staged_moves();
                (
                    Ok(super::ReplyBody::Move(MoveReply::Staged(staged))),
                    Needs::NOTHING,
                )
            }
            MoveCall::Purge { owned, max } => self.purge(&owned, max),
            MoveCall::Moved(moved) => self.logged(Entry::SlotsMovedOut {
                lo: moved.lo,
                hi: moved.hi,
                to: moved.to,
                map_epoch: moved.map_epoch,
                at_ms: now_ms(),
            }),
        }
    }

    fn import(
        &self,
        move_id: u64,
        lo: u16,
        hi: u16,
        images: Vec<(String, Option<String>)>,
    ) -> Outcome {
        let mut last = self.log.head();
        for (id, image) in images {
            let entry = Entry::Import {
                move_id,
                lo,
                hi,
                id,
                image,
                at_ms: now_ms(),
            };
            match self.log_and_apply(entry) {
                Ok((_, offset)) => last = offset,
                Err(rej) => return (Err(rej), Needs::NOTHING),
            }
        }
        (
            Ok(super::ReplyBody::Move(MoveReply::Done)),
            Needs::durable(last),
        )
    }

    /// The switch on the target: the staged instances go live and their timers are armed
    /// from their state entry (due times unchanged; overdue ones fire at once).
    fn move_in(&self, move_id: u64, lo: u16, hi: u16, map_epoch: u64) -> Outcome {
        let ids = self.engine.borrow().staged_ids(move_id);
        let entry = Entry::MoveIn {
            move_id,
            lo,
            hi,
            map_epoch,
            at_ms: now_ms(),
        };
        let outcome = self.logged(entry);
        if outcome.0.is_ok() {
            self.timers
                .arm_at_entry(&mut self.engine.borrow_mut(), &ids);
        }
        outcome
    }

    fn logged(&self, entry: Entry) -> Outcome {
        match self.log_and_apply(entry) {
            Ok((_, offset)) => (
                Ok(super::ReplyBody::Move(MoveReply::Done)),
                Needs::durable(offset),
            ),
            Err(rej) => (Err(rej), Needs::NOTHING),
        }
    }

    /// Deletes up to `max` live instances of slots outside `owned` (the clean-up after a
    /// move, and of a crash in the middle of one).
    fn purge(&self, owned: &[(u16, u16)], max: usize) -> Outcome {
        let ids = self.engine.borrow().ids_outside(owned, max);
        let mut last = self.log.head();
        let n = ids.len();
        for id in ids {
            let machine = (self.engine.borrow().instance(&id)).map(|i| i.machine.to_string());
            let entry = Entry::Delete {
                id,
                at_ms: now_ms(),
                machine,
                reason: Some(DeleteReason::Moved),
            };
            match self.log_and_apply(entry) {
                Ok((_, offset)) => last = offset,
                Err(rej) => return (Err(rej), Needs::NOTHING),
            }
        }
        (
            Ok(super::ReplyBody::Move(MoveReply::Purged(n))),
            Needs::durable(last),
        )
    }

    /// `TRYAGAIN` when a move holds the slot of the instance `params` names: frozen for a
    /// write (source), or staged (target). Nothing is parsed while no move touches the shard.
    pub(super) fn moving_refuses(&self, op: Op, params: Option<&[u8]>) -> Option<Rejection> {
        let staged = self.engine.borrow().has_staged();
        if self.frozen.is_empty() && !staged {
            return None;
        }
        let id = crate::ops::route::route_key(params).ok()?;
        let slot = slot_of(&id);
        if let Some(m) = staged
            .then(|| self.engine.borrow().staged_covers(slot))
            .flatten()
        {
            return Some(try_again(slot, m, "being moved in"));
        }
        let m = self.frozen.covers(slot)?;
        op.facts().writes().then(|| try_again(slot, m, "frozen"))
    }
}
