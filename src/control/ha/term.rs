//! The HA thread's decisions in one session (docs/ha.md, "Election"): follow the leader key's
//! holder, fence when there is none, campaign when the rules (`elect`) allow, and step down
//! when the lease or the key is lost. What it decides goes to the control executor as a
//! `Want` (`shared`); the lease deadline goes straight to `ReplState`, which shards read.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::elect::{self, Blocked, Seen};
use super::error::HaError;
use super::keys::{History, Leader};
use super::session::{Session, Snapshot};
use super::shared::{Demotion, MemberView, Want};
use super::Ctx;
use crate::config::ReplicationMode;
use crate::member::clock::boottime_ns;

/// This member's part in the current term.
pub struct Term {
    /// Holds the leader key on this session's lease.
    pub leading: bool,
    pub epoch: u64,
    /// This session's lease deadline (CLOCK_BOOTTIME ns, margin subtracted).
    pub lease_deadline: u64,
    /// The read revision at which the leader key was first seen missing.
    absent_since: Option<i64>,
    /// Why this member does not campaign now.
    blocked: Option<String>,
    /// Tickets of `PROMOTE {force: true}` waiting for this member to campaign (`admin`).
    forcing: Vec<u64>,
    /// This term's history key has its start offsets.
    history_done: bool,
    /// When this member's current term began (wall clock, ms).
    started_at_ms: u64,
    /// A `SWITCHOVER` under way (writes stopped; `handover`).
    pub(super) handover: Option<super::handover::Handover>,
    /// Since when a shard's log has refused appends for lack of space (`log_health`).
    full_since: Option<Instant>,
    /// Sync mode, leading: this term's sync set (`syncset`).
    sync: super::syncset::Kept,
    /// Leading past the lease deadline on a lease etcd still holds (`past_deadline`), said.
    kept_past_deadline: bool,
}

impl Term {
    pub fn new() -> Term {
        Term {
            leading: false,
            epoch: 0,
            lease_deadline: 0,
            absent_since: None,
            blocked: None,
            forcing: Vec::new(),
            history_done: false,
            started_at_ms: 0,
            handover: None,
            full_since: None,
            sync: Default::default(),
            kept_past_deadline: false,
        }
    }

    /// A renewal succeeded: the primary's deadline moves on (not while a switchover keeps
    /// writes stopped). A primary whose deadline had passed takes writes again: etcd kept its
    /// lease, so nobody else can have been elected meanwhile (docs/ha.md, "Self-fencing").
    pub fn renewed(&mut self, ctx: &Ctx, deadline: u64) {
        if self.leading && self.kept_past_deadline {
            log::warn!(
                "ha: the lease of epoch {} renewed after its deadline had passed; writes resume",
                self.epoch
            );
        }
        self.kept_past_deadline = false;
        self.lease_deadline = deadline;
        if self.leading && self.handover.is_none() {
            ctx.state.set_lease_until(deadline);
        }
    }

    /// Leaves the primary role (if held): writes stop at once, the driver demotes.
    ///
    /// A member that is not primary never names itself as the primary: it forgets the
    /// primary's address (its writes answer `NO_PRIMARY` until a read shows the holder) and
    /// its view stops naming it.
    pub fn step_down(&mut self, ctx: &Ctx, kind: Demotion, reason: &str) {
        ctx.state.set_lease_until(0);
        ctx.state.set_primary(None);
        ctx.shared.update_view(|v| {
            if v.primary.as_deref() == Some(ctx.node_id.as_str()) {
                v.primary = None;
                v.primary_addr = None;
            }
        });
        self.handover = None;
        if self.leading {
            self.leading = false;
            ctx.shared.stats.demotions[kind as usize].fetch_add(1, Relaxed);
            if let Ok(mut why) = ctx.shared.demoted_for.lock() {
                *why = super::shared::DEMOTION_REASONS[kind as usize];
            }
            log::info!("ha: giving up the lease of epoch {}: {reason}", self.epoch);
        }
        ctx.shared.decide(Want::Fence);
    }

    /// Past the lease deadline without a renewal this member appends and acknowledges nothing
    /// (`ReplState::fenced`), but while a read shows the leader key on its lease the lease is
    /// alive in etcd (an etcd leader change extends every lease): it keeps the term and renews
    /// on, and gives it up only at `give_up_at` or when the key is gone.
    fn past_deadline(&mut self, ctx: &Ctx, s: &Session, snap: &Snapshot) {
        let ours = (snap.leader.as_ref()).is_some_and(|(l, lease, _)| holds(ctx, s, l, *lease));
        if !ours || boottime_ns() >= self.give_up_at(ctx) {
            self.step_down(
                ctx,
                Demotion::LeaseExpired,
                "the lease deadline passed without a renewal",
            );
        } else if !self.kept_past_deadline {
            self.kept_past_deadline = true;
            log::warn!(
                "ha: the lease deadline of epoch {} passed without a renewal; writes stop until \
                 one succeeds (etcd still holds the lease and this member's leader key)",
                self.epoch
            );
        }
    }

    /// When a session that cannot renew ends: two TTLs past the lease deadline. Until then a
    /// primary stays fenced in its term, so a renewal that gets through (etcd electing a new
    /// leader of its own takes most of a TTL) costs no election.
    pub fn give_up_at(&self, ctx: &Ctx) -> u64 {
        let ttl_ns = ctx.cfg.ttl_ms.saturating_mul(1_000_000);
        self.lease_deadline.saturating_add(2 * ttl_ns)
    }

    /// One poll's decision from the cluster's keys.
    pub async fn decide(
        &mut self,
        ctx: &Ctx,
        s: &mut Session,
        snap: Snapshot,
    ) -> Result<(), HaError> {
        self.publish_view(ctx, &snap);
        let asked = ctx.shared.admin.take(|a| *a == super::admin::Ask::Force);
        self.forcing
            .extend(asked.into_iter().map(|(ticket, _)| ticket));
        if let Some((leader, _, _)) = &snap.leader {
            self.refuse_forcing(ctx, leader);
        }
        if self.leading && boottime_ns() >= self.lease_deadline {
            self.past_deadline(ctx, s, &snap);
        }
        if self.log_health(ctx, s, &snap).await? {
            return Ok(()); // resigned: the next read shows the cluster without this member
        }
        super::handover::carry_out(self, ctx, s, &snap).await;
        match snap.leader.clone() {
            Some((leader, lease, rev)) if leader.node_id == ctx.node_id => {
                if holds(ctx, s, &leader, lease) && self.leading {
                    return self.keep_leading(ctx, s, &snap, rev).await;
                }
                // An earlier process (or session) of this node: never trusted, removed.
                self.step_down(
                    ctx,
                    Demotion::LeaderKeyLost,
                    "the leader key is from an earlier process",
                );
                if s.delete_if(ctx.keys.leader(), rev).await? {
                    log::warn!(
                        "ha: removed a stale leader key of this node (epoch {})",
                        leader.epoch
                    );
                }
                Ok(())
            }
            Some((leader, _, _)) => {
                self.absent_since = None;
                if self.leading {
                    let why = format!("{} holds the leader key", leader.node_id);
                    self.step_down(ctx, Demotion::LeaderKeyLost, &why);
                }
                ctx.state.see_epoch(leader.epoch);
                ctx.state.set_primary(Some(leader.addr.clone()));
                ctx.shared.decide(Want::Follow {
                    addr: leader.addr,
                    epoch: leader.epoch,
                });
                Ok(())
            }
            None => self.no_leader(ctx, s, snap).await,
        }
    }

    /// docs/wal.md "Poisoning" and "A full disk": a primary whose log is poisoned gives up its lease at once, one whose
    /// log has refused appends for lack of space for longer than `ttl_ms` hands it over (the
    /// leader key is deleted so another member campaigns at once). True when it resigned.
    async fn log_health(
        &mut self,
        ctx: &Ctx,
        s: &mut Session,
        snap: &Snapshot,
    ) -> Result<bool, HaError> {
        let report = ctx.shared.report();
        let full_for = match report.storage_full {
            true => self.full_since.get_or_insert_with(Instant::now).elapsed(),
            false => {
                self.full_since = None;
                Duration::ZERO
            }
        };
        if !self.leading {
            return Ok(false);
        }
        let (kind, why) = if report.log_poisoned {
            (
                Demotion::WalPoisoned,
                "a shard's log is poisoned (an I/O error)".to_string(),
            )
        } else if full_for > Duration::from_millis(ctx.cfg.ttl_ms) {
            let ms = full_for.as_millis();
            (
                Demotion::StorageFull,
                format!("writes refused for lack of space for {ms} ms"),
            )
        } else {
            return Ok(false);
        };
        self.step_down(ctx, kind, &why);
        if let Some((leader, lease, rev)) = &snap.leader {
            if leader.instance == ctx.instance && *lease == s.lease {
                s.delete_if(ctx.keys.leader(), *rev).await?;
            }
        }
        Ok(true)
    }

    /// Leading: the driver carries out `Lead`; if it failed, resign.
    async fn keep_leading(
        &mut self,
        ctx: &Ctx,
        s: &mut Session,
        snap: &Snapshot,
        rev: i64,
    ) -> Result<(), HaError> {
        let gen = ctx.shared.decide(Want::Lead { epoch: self.epoch });
        let report = ctx.shared.report();
        if report.done == gen && report.leading && !report.lead_failed && !self.history_done {
            // The epoch records are durable: the term's start offsets go into its history key.
            let history = History {
                epoch: self.epoch,
                node_id: ctx.node_id.clone(),
                started_at_ms: self.started_at_ms,
                start_offsets: report.positions.clone(),
            };
            let value = serde_json::to_vec(&history)?;
            (s.etcd)
                .put("put history", ctx.keys.history(self.epoch), value, None)
                .await?;
            self.history_done = true;
            self.sync.start.clone_from(&report.positions);
        }
        if self.history_done && ctx.rules.mode == ReplicationMode::Sync {
            super::syncset::maintain(&mut self.sync, ctx, s, snap, self.epoch, rev).await?;
        }
        if report.done == gen && report.lead_failed {
            self.step_down(
                ctx,
                Demotion::LeadFailed,
                "the term's epoch records could not be written",
            );
            s.delete_if(ctx.keys.leader(), rev).await?;
        }
        Ok(())
    }

    /// No leader key: fence, publish final positions, campaign when allowed.
    async fn no_leader(
        &mut self,
        ctx: &Ctx,
        s: &mut Session,
        snap: Snapshot,
    ) -> Result<(), HaError> {
        if self.leading {
            self.step_down(ctx, Demotion::LeaderKeyLost, "the leader key is gone");
        }
        ctx.state.set_primary(None);
        let gen = ctx.shared.decide(Want::Fence);
        let since = *self.absent_since.get_or_insert(snap.revision);
        let report = ctx.shared.report();
        if report.done != gen || report.following || !report.positions_fresh {
            return Ok(()); // the stream is still stopping
        }
        let mine = snap.members.iter().find(|(m, _)| m.node_id == ctx.node_id);
        let published = mine.is_some_and(|(m, rev)| *rev > since && !m.following);
        if !published {
            s.put_member(ctx, &self.member(ctx)).await?;
            ctx.shared.wake.signal(); // decide on the next read, at once: it shows them
            return Ok(());
        }
        if !self.forcing.is_empty() {
            log::warn!("ha: PROMOTE {{force: true}}: campaigning without the eligibility rules");
            return self.campaign(ctx, s, &snap).await;
        }
        match self.may_campaign(ctx, &snap, since, &report) {
            Ok(()) => self.campaign(ctx, s, &snap).await,
            Err(why) => {
                self.block(why);
                Ok(())
            }
        }
    }

    /// Whether this member may campaign now, or why not (docs/ha.md, "Election").
    fn may_campaign(
        &self,
        ctx: &Ctx,
        snap: &Snapshot,
        since: i64,
        report: &super::shared::Report,
    ) -> Result<(), Blocked> {
        if report.log_poisoned || report.storage_full {
            let poisoned = report.log_poisoned;
            return Err(Blocked::LogRefuses { poisoned });
        }
        if let Some((sw, _)) = &snap.switchover {
            match (sw.to == ctx.node_id, sw.caught_up) {
                (true, true) => {
                    log::warn!("ha: taking over from {} (SWITCHOVER)", sw.from);
                    return Ok(());
                }
                (true, false) => {} // its primary went before it resigned: the usual rules
                (false, _) => {
                    let (from, to) = (sw.from.clone(), sw.to.clone());
                    return Err(Blocked::Switchover { from, to });
                }
            }
        }
        if snap.paused {
            return Err(Blocked::Paused);
        }
        let me = self.seen_me(ctx);
        let others: Vec<Seen> = snap
            .members
            .iter()
            .filter(|(m, _)| m.node_id != ctx.node_id)
            .map(|(m, rev)| Seen {
                node_id: m.node_id.clone(),
                positions: m.positions.clone(),
                // Final positions: written after the leader key went, with its stream stopped,
                // and known (a member just restarted publishes none until its shards report).
                fresh: *rev > since && !m.following && !m.positions.is_empty(),
                nofailover: m.nofailover || m.refuses_writes,
            })
            .collect();
        let heads = primary_heads(&snap.members, &me.positions);
        let sync_set = sync_set_in_force(snap);
        elect::may_campaign(&me, &others, &heads, ctx.rules, sync_set)
    }

    fn seen_me(&self, ctx: &Ctx) -> Seen {
        Seen {
            node_id: ctx.node_id.clone(),
            positions: ctx.shared.report().positions,
            fresh: true,
            nofailover: ctx.cfg.nofailover,
        }
    }

    fn block(&mut self, why: Blocked) {
        let why = why.to_string();
        if self.blocked.as_deref() != Some(why.as_str()) {
            log::info!("ha: not campaigning: {why}");
            self.blocked = Some(why);
        }
    }

    /// The campaign transaction: the leader key (on this lease) and the next epoch, only if no
    /// key exists and the epoch key is unchanged since the read.
    async fn campaign(
        &mut self,
        ctx: &Ctx,
        s: &mut Session,
        snap: &Snapshot,
    ) -> Result<(), HaError> {
        if boottime_ns() >= self.lease_deadline {
            return Ok(());
        }
        let members_max = snap.members.iter().map(|(m, _)| m.epoch).max().unwrap_or(0);
        let own = ctx.shared.report().last_epoch.max(ctx.state.epoch());
        let epoch = snap.epoch.0.max(members_max).max(own) + 1;
        let leader = Leader {
            node_id: ctx.node_id.clone(),
            instance: ctx.instance.clone(),
            addr: ctx.addr.clone(),
            epoch,
        };
        let value = serde_json::to_vec(&leader)?;
        let started_at_ms = crate::util::time::now_ms();
        let history = History {
            epoch,
            node_id: ctx.node_id.clone(),
            started_at_ms,
            start_offsets: Vec::new(),
        };
        let history = serde_json::to_vec(&history)?;
        let sync = ctx.rules.mode == ReplicationMode::Sync;
        let first_set = super::syncset::first(ctx, epoch);
        let first_set_bytes = serde_json::to_vec(&first_set)?;
        // Sync mode: the term starts with its primary alone in the sync set (`syncset`).
        let sync_put = sync.then(|| TxnOp::put(ctx.keys.sync(), first_set_bytes, None));
        let txn = Txn::new()
            .when([
                Compare::create_revision(ctx.keys.leader(), CompareOp::Equal, 0),
                Compare::mod_revision(ctx.keys.epoch(), CompareOp::Equal, snap.epoch.1),
            ])
            .and_then(
                [
                    TxnOp::put(
                        ctx.keys.leader(),
                        value,
                        Some(PutOptions::new().with_lease(s.lease)),
                    ),
                    TxnOp::put(ctx.keys.epoch(), epoch.to_string(), None),
                    TxnOp::put(ctx.keys.history(epoch), history, None),
                    // A new term ends any switchover.
                    TxnOp::delete(ctx.keys.switchover(), None),
                ]
                .into_iter()
                .chain(sync_put)
                .collect::<Vec<_>>(),
            );
        if !s.etcd.txn("campaign txn", txn).await?.succeeded() {
            return Ok(()); // someone else moved first: the next read shows who
        }
        // Until replicas join the set nobody's acknowledgements count (async: everybody's).
        ctx.shared
            .with_sync(|c| c.set_counting(sync.then(std::collections::BTreeSet::new)));
        self.sync = super::syncset::Kept {
            members: first_set.members,
            start: Vec::new(),
        };
        self.leading = true;
        self.epoch = epoch;
        self.started_at_ms = started_at_ms;
        self.history_done = false;
        self.blocked = None;
        ctx.state.set_lease_until(self.lease_deadline);
        // Until the driver has written the term's epoch records and flipped the role, writes
        // here answer `NO_PRIMARY` (retry soon), never `READ_ONLY_MODE` naming this member.
        ctx.state.set_primary(None);
        ctx.shared.stats.failovers.fetch_add(1, Relaxed);
        ctx.shared.decide(Want::Lead { epoch });
        log::info!("ha: won the election: epoch {epoch}");
        for ticket in self.forcing.drain(..) {
            ctx.shared
                .admin
                .finish(ticket, Ok(super::admin::Done::epoch(epoch)));
        }
        Ok(())
    }

    /// A member holds the leader key: forced promotions waiting here are answered (this
    /// member's own key: done; another's: refused, a forced promotion never takes a held key).
    fn refuse_forcing(&mut self, ctx: &Ctx, leader: &Leader) {
        for ticket in self.forcing.drain(..) {
            let outcome = match leader.node_id == ctx.node_id && self.leading {
                true => Ok(super::admin::Done::epoch(leader.epoch)),
                false => Err(HaError::Refused(format!(
                    "{} holds the leader key (epoch {}); a forced promotion takes it only when \
                     no member does",
                    leader.node_id, leader.epoch
                ))),
            };
            ctx.shared.admin.finish(ticket, outcome);
        }
    }

    fn publish_view(&self, ctx: &Ctx, snap: &Snapshot) {
        let heads: u64 = primary_heads(&snap.members, &[]).iter().sum();
        let members = (snap.members.iter())
            .map(|(m, _)| {
                let sum: u64 = m.positions.iter().sum();
                MemberView {
                    node_id: m.node_id.clone(),
                    addr: m.addr.clone(),
                    role: m.role.clone(),
                    positions_sum: sum,
                    lag_entries: heads.saturating_sub(sum),
                }
            })
            .collect();
        let blocked = self.blocked.clone().filter(|_| snap.leader.is_none());
        // A key naming this node is its own only while it leads with a valid lease (else it
        // is an earlier process's, or this term's lease has run out): never shown as primary.
        let leads = self.leading && boottime_ns() < self.lease_deadline;
        let leader = (snap.leader.as_ref())
            .map(|(l, _, _)| l)
            .filter(|l| l.node_id != ctx.node_id || leads);
        ctx.shared.update_view(|v| {
            v.primary = leader.map(|l| l.node_id.clone());
            v.primary_addr = leader.map(|l| l.addr.clone());
            v.blocked_reason = blocked;
            v.members = members;
            v.etcd_reachable = true;
            v.paused = snap.paused;
            let skip = snap
                .history
                .len()
                .saturating_sub(super::shared::HISTORY_SHOWN);
            v.history = snap.history[skip..].to_vec();
            v.sync_set = (snap.sync.as_ref())
                .filter(|_| ctx.rules.mode == ReplicationMode::Sync)
                .map(|(set, _)| set.members.clone())
                .unwrap_or_default();
        });
    }
}

/// The sync key's members when it belongs to the newest term (every sync-mode campaign writes
/// it; a key of an older term means the newest one did not keep one, as in async mode).
fn sync_set_in_force(snap: &Snapshot) -> Option<&[String]> {
    (snap.sync.as_ref())
        .filter(|(set, _)| set.epoch == snap.epoch.0)
        .map(|(set, _)| &set.members[..])
}

/// The primary's heads as last known: the highest any member heard of, else `own`.
fn primary_heads(members: &[(super::keys::Member, i64)], own: &[u64]) -> Vec<u64> {
    members
        .iter()
        .map(|(m, _)| &m.primary_heads)
        .max_by_key(|h| h.iter().sum::<u64>())
        .cloned()
        .unwrap_or_else(|| own.to_vec())
}

/// Whether the leader key `leader` on `lease` is this process's, on this session's lease.
fn holds(ctx: &Ctx, s: &Session, leader: &Leader, lease: i64) -> bool {
    leader.node_id == ctx.node_id && leader.instance == ctx.instance && lease == s.lease
}
