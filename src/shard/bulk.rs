//! MIGRATE_INSTANCES and DELETE_INSTANCES on a shard (docs/lifecycle.md): a walk over the
//! machine's instances in id order from the caller's place, in slices of `BULK_SLICE` with a
//! yield between them. Each selected instance is decided, logged and applied on its own
//! (`Shard::log_and_apply`: one entry per instance, so a crash leaves every instance either
//! moved or not), and pushes and timers follow as for any entry. A dry run decides and counts
//! without logging, over the whole machine.
//!
//! Bound: a call examines at most its `budget` (the front splits the request's `limit`, at most
//! `BULK_LIMIT_MAX`, between the shards); a slice holds the shard for `BULK_SLICE` decisions
//! and appends (~0.5 ms), and the next slice begins once this one is durable, so the walk's
//! entries never swell one fsync by more than a slice.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;

use shards::engine::{Entry, Selector, Step};
use shards::routing::slot_of;
use shards::Rejection;

use super::message::{ReplyBody, ShardResponse};
use super::outbox::Outbox;
use super::runtime::{Needs, Outcome, Shard};
use super::sync::Gate;
use crate::cluster::serve::Owned;
use crate::ops::lifecycle::BulkOp;
use crate::util::time::now_ms;

/// Instances examined between two yields when writing (each may append one entry).
pub const BULK_SLICE: usize = 256;
/// Instances examined between two yields in a dry run (reads only).
pub const BULK_DRY_SLICE: usize = 2_000;

/// One shard's part of a bulk call.
#[derive(Debug, Clone)]
pub struct BulkPart {
    pub op: BulkOp,
    pub dry_run: bool,
    /// The last id this shard examined in an earlier call (None: from its start).
    pub after: Option<String>,
    /// Instances to examine at most (a dry run examines every one).
    pub budget: usize,
    /// Cluster mode: the member's capability, whose map copy says which slots the walk may
    /// touch (read again at each slice). None: every instance (standalone, HA).
    pub cluster: Option<std::sync::Arc<crate::cluster::Cluster>>,
}

/// What one shard did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BulkDone {
    /// Instances migrated or deleted (a dry run: that would be).
    pub written: u64,
    /// A dry run: those per state they are in.
    pub by_state: BTreeMap<String, u64>,
    /// Selected but left, per reason.
    pub skipped: BTreeMap<String, u64>,
    pub examined: u64,
    /// The last id examined when more remain (None: this shard is done).
    pub through: Option<String>,
    /// The machine's instances on this shard now (the `remaining` estimate), those of slots
    /// the group does not own left out.
    pub machine_instances: u64,
    /// The walk stopped before an instance of a slot a move freezes: `(slot, move id)` for
    /// the `TRYAGAIN`; `through` is the last id before it, and the shard is not done.
    pub frozen: Option<(u16, u64)>,
}

impl Shard {
    /// `ShardCall::Bulk`, run as a task of its own so the client's other requests on this
    /// shard go on between its slices; its reply joins the outbox when the walk ends (in sync
    /// mode it then waits for replicas like any write's: `gate`).
    pub(super) fn bulk_later(
        self: &Rc<Self>,
        token: u32,
        part: Box<BulkPart>,
        outbox: &Rc<Outbox>,
        gate: Option<Gate>,
    ) {
        let (shard, outbox) = (self.clone(), outbox.clone());
        glommio::spawn_local(async move {
            let outcome = match shard.follower_refuses(std::iter::once(part.op.op())) {
                Some((_, rejection)) => (Err(rejection), Needs::NOTHING),
                None => shard.bulk(&part).await,
            };
            let queued = gate.and_then(|g| g.after(&shard, &outcome));
            let (result, needs) = outcome;
            outbox.push(needs, ShardResponse { token, result }, queued);
        })
        .detach();
    }

    /// One call's walk (module doc).
    async fn bulk(&self, part: &BulkPart) -> Outcome {
        let done = self.bulk_walk(part).await;
        // A refusal too waits for what the walk logged before it.
        (done.map(ReplyBody::Bulk), Needs::durable(self.log.head()))
    }

    async fn bulk_walk(&self, part: &BulkPart) -> Result<BulkDone, Rejection> {
        let selection = part.op.selection();
        let selector = Selector::new(selection)?;
        if let BulkOp::Migrate(plan) = &part.op {
            self.engine.borrow().check_migration(plan)?;
        }
        let mut done = BulkDone::default();
        let mut after = part.after.clone();
        // Instances walked, owned or not: what the budget bounds.
        let mut walked = 0usize;
        let slice = if part.dry_run {
            BULK_DRY_SLICE
        } else {
            BULK_SLICE
        };
        loop {
            // A backup's barrier holds the walk between slices as it holds requests.
            self.pause.wait().await;
            self.still_writable(part)?;
            let left = match part.dry_run {
                true => slice,
                false => slice.min(part.budget.saturating_sub(walked)),
            };
            let ids = self
                .engine
                .borrow()
                .bulk_slice(selection, after.as_deref(), left);
            // Read at each slice: a move's switch lifts its freeze only once the copy shows
            // it, so a slot unfrozen here is either still owned or already left out.
            let owned = part.cluster.as_deref().map(Owned::now);
            for id in &ids.ids {
                walked += 1;
                if owned.as_ref().is_some_and(|o| !o.holds(id)) {
                    after = Some(id.clone());
                    continue;
                }
                if !self.bulk_step(part, &selector, id, &mut done)? {
                    done.through = after;
                    return Ok(self.bulk_counted(part, done));
                }
                done.examined += 1;
                after = Some(id.clone());
            }
            after = ids.through;
            let more = after.is_some();
            let spent = !part.dry_run && walked >= part.budget;
            if !more || spent {
                done.through = after;
                break;
            }
            if !part.dry_run {
                // Paced by the log: the next slice waits until this one is durable, so one
                // fsync carries at most a slice of the walk's entries beside the clients'
                // writes, whose waits it would otherwise lengthen (benches/RESULTS.md).
                self.log.wait_durable(self.log.head()).await?;
            }
            futures_lite::future::yield_now().await;
        }
        Ok(self.bulk_counted(part, done))
    }

    /// `done` with the machine's instances here for the `remaining` estimate: in cluster
    /// mode, while the settling has slots left to purge, those of slots not owned left out (a
    /// walk over the machine's instances, as the purge's own).
    fn bulk_counted(&self, part: &BulkPart, mut done: BulkDone) -> BulkDone {
        let machine = &part.op.selection().machine;
        let engine = self.engine.borrow();
        let mut n = engine.machine_instances(machine);
        if let Some(cluster) = part.cluster.as_deref() {
            if cluster.counters.cleanup_pending.load(Relaxed) > 0 {
                let owned = Owned::now(cluster);
                n = n.saturating_sub(
                    engine.machine_instances_refused(machine, |id| owned.holds(id)),
                );
            }
        }
        done.machine_instances = n;
        done
    }

    /// A walk that writes stops, between two slices, once this member may no longer append a
    /// client's write: demoted to follower (a replica's log takes only its primary's entries),
    /// or fenced by its lease (docs/ha.md). It answers as the write gate would; the cursor the
    /// client holds goes on against the new primary.
    fn still_writable(&self, part: &BulkPart) -> Result<(), Rejection> {
        let member = &*self.member;
        if part.dry_run || !(member.is_replica() || member.fenced()) {
            return Ok(());
        }
        Err(crate::member::gate::read_only(member, part.op.op()))
    }

    /// Decides what happens to instance `id`, and logs it unless this is a dry run. False
    /// (nothing done) when it would change an instance of a slot a move freezes: the walk
    /// stops before it, as a client's write there gets `TRYAGAIN` (`done.frozen`).
    fn bulk_step(
        &self,
        part: &BulkPart,
        selector: &Selector<'_>,
        id: &str,
        done: &mut BulkDone,
    ) -> Result<bool, Rejection> {
        let now = now_ms();
        let step = match &part.op {
            BulkOp::Migrate(plan) => self.engine.borrow().decide_migrate(id, plan, selector, now),
            BulkOp::Delete(_) => self.engine.borrow().decide_bulk_delete(id, selector, now),
        };
        match step {
            Step::Unselected => {}
            Step::Skipped(reason) => *done.skipped.entry(reason.to_owned()).or_default() += 1,
            Step::Write(entry) if part.dry_run => {
                done.written += 1;
                let state = match &entry {
                    Entry::Migrate { from_state, .. } => from_state.clone(),
                    _ => (self.engine.borrow().instance(id))
                        .map_or_else(String::new, |i| i.state.to_string()),
                };
                *done.by_state.entry(state).or_default() += 1;
            }
            Step::Write(entry) => {
                let slot = slot_of(id);
                if let Some(move_id) = self.frozen.covers(slot) {
                    done.frozen = Some((slot, move_id));
                    return Ok(false);
                }
                self.log_and_apply(entry)?;
                done.written += 1;
            }
        }
        Ok(true)
    }
}
