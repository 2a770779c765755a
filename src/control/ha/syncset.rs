//! The sync set (docs/ha.md "The sync set"): in sync mode the primary keeps
//! `/smdb/<cluster>/sync` `{epoch, members}` in etcd, and only the acknowledgements of its
//! members count toward `replication.sync_replicas`. An election in sync mode asks final
//! positions of |S| - k + 1 of them (`elect`), so the set must always be one whose every
//! such subset holds every write answered `ok`:
//!
//! - a term starts with S = {its primary} (the campaign transaction writes it): the primary
//!   holds everything answered `ok` in earlier terms, nobody else is known to;
//! - a replica joins once it has acknowledged everything answered `ok` so far (and the term's
//!   epoch records): written to etcd first, counted by the hub after;
//! - a member leaves (the primary itself, or a replica whose stream is gone) only once every
//!   remaining member has acknowledged everything answered `ok`, and never below k members:
//!   no longer counted first, written to etcd after. The check and the end of its counting
//!   happen under the lock the hub counts under (`shared::SyncCount`), so no `ok` slips
//!   between them.
//!
//! `next` is the rule (pure, unit-tested); `maintain` runs it once per poll on the primary.

use std::collections::{BTreeSet, HashMap};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::error::HaError;
use super::keys::SyncSet;
use super::session::{Session, Snapshot};
use super::Ctx;

/// What the rule looks at.
pub struct Inputs<'a> {
    /// The primary's node id.
    pub me: &'a str,
    /// The sync key's members now.
    pub current: &'a [String],
    /// Per shard, an offset at or above everything answered `ok` so far.
    pub required: &'a [u64],
    /// Per replica with a stream, what it has acknowledged.
    pub acked: &'a HashMap<String, Vec<u64>>,
    /// `replication.sync_replicas`.
    pub k: usize,
}

/// Whether `node` has acknowledged every offset in `required`.
fn caught_up(acked: &HashMap<String, Vec<u64>>, node: &str, required: &[u64]) -> bool {
    acked.get(node).is_some_and(|a| {
        (required.iter().enumerate()).all(|(shard, r)| a.get(shard).copied().unwrap_or(0) >= *r)
    })
}

/// The next sync set and whether it drops members (they must stop counting before the key
/// is written). Sorted.
pub fn next(i: &Inputs) -> (Vec<String>, bool) {
    let mut joined: BTreeSet<String> = i.current.iter().cloned().collect();
    for node in i.acked.keys() {
        if node != i.me && caught_up(i.acked, node, i.required) {
            joined.insert(node.clone());
        }
    }
    let leaving: BTreeSet<&String> = (joined.iter())
        .filter(|n| n.as_str() == i.me || !i.acked.contains_key(n.as_str()))
        .collect();
    let remaining: Vec<String> = (joined.iter())
        .filter(|n| !leaving.contains(n))
        .cloned()
        .collect();
    let may_leave = !leaving.is_empty()
        && remaining.len() >= i.k.max(1)
        && (remaining.iter()).all(|n| caught_up(i.acked, n, i.required));
    match may_leave {
        true => (remaining, true),
        false => (joined.into_iter().collect(), false),
    }
}

/// The sync set a term starts with: its primary alone.
pub fn first(ctx: &Ctx, epoch: u64) -> SyncSet {
    SyncSet {
        epoch,
        members: vec![ctx.node_id.clone()],
    }
}

/// What this term's primary holds of the sync set.
#[derive(Debug, Default)]
pub struct Kept {
    /// The members last written (or read) for this term.
    pub members: Vec<String>,
    /// The term's epoch records are durable at these heads (empty until then: nobody joins
    /// before, as nobody could have acknowledged them).
    pub start: Vec<u64>,
}

/// One poll on a sync-mode primary: joins and leaves by `next`, the key written when the set
/// changed, guarded by the leader key's revision `leader_rev`.
pub async fn maintain(
    kept: &mut Kept,
    ctx: &Ctx,
    s: &mut Session,
    snap: &Snapshot,
    epoch: u64,
    leader_rev: i64,
) -> Result<(), HaError> {
    if kept.start.is_empty() {
        return Ok(());
    }
    let stored = snap.sync.as_ref().filter(|(v, _)| v.epoch == epoch);
    if let Some((v, _)) = stored {
        kept.members.clone_from(&v.members);
    }
    let k = ctx.rules.sync_replicas.max(1) as usize;
    let me = ctx.node_id.as_str();
    let decided = ctx.shared.with_sync(|c| {
        let required: Vec<u64> = (kept.start.iter().enumerate())
            .map(|(shard, st)| (*st).max(c.synced.get(shard).copied().unwrap_or(0)))
            .collect();
        let (members, drops) = next(&Inputs {
            me,
            current: &kept.members,
            required: &required,
            acked: &c.acked,
            k,
        });
        if drops {
            // Before the key is written: from here on only the remaining members count.
            let counting = (c.counting.clone().unwrap_or_default().into_iter())
                .filter(|n| members.contains(n))
                .collect();
            c.set_counting(Some(counting));
        }
        members
    });
    let Some(members) = decided else {
        return Ok(());
    };
    if members == kept.members {
        return Ok(());
    }
    let value = SyncSet { epoch, members };
    let bytes = serde_json::to_vec(&value)?;
    let sync_key = ctx.keys.sync();
    let unchanged = match snap.sync.as_ref() {
        Some((_, rev)) => Compare::mod_revision(sync_key.clone(), CompareOp::Equal, *rev),
        None => Compare::create_revision(sync_key.clone(), CompareOp::Equal, 0),
    };
    let txn = Txn::new()
        .when([
            Compare::mod_revision(ctx.keys.leader(), CompareOp::Equal, leader_rev),
            unchanged,
        ])
        .and_then([TxnOp::put(sync_key, bytes, None)]);
    if !s.etcd.txn("put sync set", txn).await?.succeeded() {
        return Ok(()); // the next read shows what changed
    }
    log::info!(
        "ha: sync set of epoch {epoch}: {:?} (was {:?})",
        value.members,
        kept.members
    );
    ctx.shared
        .with_sync(|c| c.set_counting(Some(counting_of(&value.members, me))));
    kept.members = value.members;
    Ok(())
}

/// The members whose acknowledgements count: the set without the primary.
pub fn counting_of(members: &[String], me: &str) -> BTreeSet<String> {
    (members.iter()).filter(|n| *n != me).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn acks(v: &[(&str, &[u64])]) -> HashMap<String, Vec<u64>> {
        v.iter().map(|(n, a)| (n.to_string(), a.to_vec())).collect()
    }

    fn run(current: &[&str], required: &[u64], acked: &[(&str, &[u64])], k: usize) -> Vec<String> {
        let (current, acked) = (ids(current), acks(acked));
        next(&Inputs {
            me: "p",
            current: &current,
            required,
            acked: &acked,
            k,
        })
        .0
    }

    #[test]
    fn a_term_hands_the_set_from_its_primary_to_caught_up_replicas() {
        // Nobody caught up yet: the primary stays alone.
        assert_eq!(run(&["p"], &[10], &[("a", &[9])], 1), ids(&["p"]));
        // a holds everything: it joins and the primary leaves in one write.
        assert_eq!(
            run(&["p"], &[10], &[("a", &[10]), ("b", &[3])], 1),
            ids(&["a"])
        );
        // k = 2: the primary stays until two replicas hold everything.
        assert_eq!(run(&["p"], &[10], &[("a", &[10])], 2), ids(&["a", "p"]));
        let both = [("a", &[10u64][..]), ("b", &[11][..])];
        assert_eq!(run(&["a", "p"], &[10], &both, 2), ids(&["a", "b"]));
    }

    #[test]
    fn members_leave_only_when_the_rest_hold_every_ok() {
        // b's stream is gone, a holds everything: b leaves.
        assert_eq!(run(&["a", "b"], &[7, 7], &[("a", &[7, 8])], 1), ids(&["a"]));
        // a lacks an `ok` on shard 1: b stays (a lagging member with a stream stays too).
        assert_eq!(
            run(&["a", "b"], &[7, 7], &[("a", &[7, 6])], 1),
            ids(&["a", "b"])
        );
        // Never below k.
        assert_eq!(run(&["a", "b"], &[7], &[("a", &[7])], 2), ids(&["a", "b"]));
        // A member that returned and caught up joins again.
        assert_eq!(
            run(&["a"], &[5], &[("a", &[5]), ("b", &[5])], 1),
            ids(&["a", "b"])
        );
    }
}
