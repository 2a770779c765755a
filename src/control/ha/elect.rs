//! Who may become primary (docs/ha.md, "Who may become primary"): pure rules over what the
//! member keys say, so they are tested without etcd.
//!
//! Async mode: a member whose lag behind the primary's last known heads is at most
//! `ha.maximum_lag_on_failover`. Sync mode: a member of the sync set S (the sync key, which
//! the primary keeps), only after fresh final positions (published after the member stopped
//! following) from |S| - k + 1 members of S, k = `replication.sync_replicas`; members outside
//! S are not asked and do not count (they hold nothing answered `ok` that S lacks). Without a
//! sync key (a cluster that never had a sync-mode primary of this build) S is every live
//! member. In both modes no member that counts may be ahead, and among equals the smallest
//! node id goes first.
//!
//! Why S keeps every `ok`: a write is answered `ok` once k members of S hold it; members join
//! S only once they hold everything answered `ok` so far, and leave it only once every other
//! member does. So any |S| - k + 1 members of S include one that holds every `ok`, and the
//! candidate, with none of them ahead of it, holds it too.

use std::fmt;

use crate::config::ReplicationMode;

/// One member as the candidate sees it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub node_id: String,
    pub positions: Vec<u64>,
    /// Its positions were published after the leader key went, with its stream stopped.
    pub fresh: bool,
    pub nofailover: bool,
}

/// The rules' inputs besides the members.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub mode: ReplicationMode,
    pub sync_replicas: u32,
    pub maximum_lag: u64,
}

/// Why this member may not campaign now. `Display` gives the text logged (`ha: not
/// campaigning: ...`) and shown as REPLICATION_STATUS's `ha.blocked_reason`, word for word as
/// before this type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// `ha.nofailover` is set on this member.
    NoFailover,
    /// Sync mode: this member is not in the sync set `set`.
    NotInSyncSet { set: Vec<String> },
    /// Member `ahead` holds an entry this one lacks.
    Behind { ahead: String },
    /// Member `first` is as far as this one and goes first (its node id is smaller).
    NotFirst { first: String },
    /// Async mode: `lag` entries behind the primary's heads, over `ha.maximum_lag_on_failover`.
    Lagging { lag: u64, max: u64 },
    /// Sync mode: final positions from `have` of the `members` (of the sync set `set`, when
    /// there is a sync key); `need` are needed with `k` = `replication.sync_replicas`.
    TooFewFinal {
        have: usize,
        members: usize,
        set: Option<Vec<String>>,
        need: usize,
        k: usize,
    },
    /// This member's log refuses writes: `poisoned` by an I/O error, else the disk is full.
    LogRefuses { poisoned: bool },
    /// A switchover from `from` to another member, `to`, is under way.
    Switchover { from: String, to: String },
    /// Automatic failover is paused (HA_PAUSE).
    Paused,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocked::NoFailover => f.write_str("ha.nofailover is set on this member"),
            Blocked::NotInSyncSet { set } => write!(
                f,
                "sync mode: this member is not in the sync set {set:?}; an acknowledged write \
                 could be missing from it"
            ),
            Blocked::Behind { ahead } => write!(f, "member {ahead} is ahead of this one"),
            Blocked::NotFirst { first } => write!(f, "member {first} is as far and goes first"),
            Blocked::Lagging { lag, max } => write!(
                f,
                "lag {lag} entries exceeds ha.maximum_lag_on_failover {max}"
            ),
            Blocked::TooFewFinal {
                have,
                members,
                set,
                need,
                k,
            } => write!(
                f,
                "sync mode: final positions from {have} of {}, {need} needed (|S| - k + 1 with \
                 k = {k}); an acknowledged write could be missing",
                members_text(*members, set.as_deref())
            ),
            Blocked::LogRefuses { poisoned } => write!(
                f,
                "this member's log refuses writes ({})",
                match poisoned {
                    true => "poisoned by an I/O error: restart it",
                    false => "the disk is full",
                }
            ),
            Blocked::Switchover { from, to } => write!(
                f,
                "a switchover from {from} to {to} is under way: only {to} may campaign until its \
                 key expires"
            ),
            Blocked::Paused => {
                f.write_str("automatic failover is paused (HA_PAUSE; HA_RESUME restarts it)")
            }
        }
    }
}

/// "the sync set's 2 members [..]", or "2 members" without a sync key.
fn members_text(members: usize, set: Option<&[String]>) -> String {
    match set {
        Some(set) => format!("the sync set's {members} members {set:?}"),
        None => format!("{members} members"),
    }
}

impl std::error::Error for Blocked {}

/// True when `a` holds an entry `b` lacks on some shard.
fn ahead(a: &[u64], b: &[u64]) -> bool {
    a.iter()
        .enumerate()
        .any(|(i, x)| *x > b.get(i).copied().unwrap_or(0))
}

fn sum(p: &[u64]) -> u64 {
    p.iter().sum()
}

/// Whether `me` may campaign now; Err says why not (`blocked_reason`). `others` are the other
/// live members; `primary_heads` the primary's last known heads; `sync_set` the sync key's
/// members (sync mode; None when there is no key).
pub fn may_campaign(
    me: &Seen,
    others: &[Seen],
    primary_heads: &[u64],
    rules: Rules,
    sync_set: Option<&[String]>,
) -> Result<(), Blocked> {
    if me.nofailover {
        return Err(Blocked::NoFailover);
    }
    let set = sync_set.filter(|_| rules.mode == ReplicationMode::Sync);
    let in_set: Vec<Seen>;
    let others = match set {
        Some(set) => {
            if !set.contains(&me.node_id) {
                let set = set.to_vec();
                return Err(Blocked::NotInSyncSet { set });
            }
            in_set = (others.iter())
                .filter(|o| set.contains(&o.node_id))
                .cloned()
                .collect();
            &in_set[..]
        }
        None => others,
    };
    if let Some(o) = others.iter().find(|o| ahead(&o.positions, &me.positions)) {
        let ahead = o.node_id.clone();
        return Err(Blocked::Behind { ahead });
    }
    let equal_first = others
        .iter()
        .filter(|o| o.fresh && !o.nofailover && o.positions == me.positions)
        .find(|o| o.node_id < me.node_id);
    if let Some(o) = equal_first {
        let first = o.node_id.clone();
        return Err(Blocked::NotFirst { first });
    }
    match rules.mode {
        ReplicationMode::Async => {
            let lag = sum(primary_heads).saturating_sub(sum(&me.positions));
            if lag > rules.maximum_lag {
                let max = rules.maximum_lag;
                return Err(Blocked::Lagging { lag, max });
            }
        }
        ReplicationMode::Sync => {
            let s = set.map_or(others.len() + 1, |set| set.len());
            let k = rules.sync_replicas.max(1) as usize;
            let need = (s + 1).saturating_sub(k).max(1);
            let have = 1 + others.iter().filter(|o| o.fresh).count();
            if have < need {
                return Err(Blocked::TooFewFinal {
                    have,
                    members: s,
                    set: set.map(<[String]>::to_vec),
                    need,
                    k,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, p: &[u64], fresh: bool) -> Seen {
        Seen {
            node_id: id.into(),
            positions: p.to_vec(),
            fresh,
            nofailover: false,
        }
    }

    const SYNC: Rules = Rules {
        mode: ReplicationMode::Sync,
        sync_replicas: 1,
        maximum_lag: 10,
    };
    const ASYNC: Rules = Rules {
        mode: ReplicationMode::Async,
        ..SYNC
    };

    #[test]
    fn the_most_advanced_member_goes_first() {
        let b = m("b", &[10, 5], true);
        let c = m("c", &[10, 4], true);
        assert!(may_campaign(&b, std::slice::from_ref(&c), &[], SYNC, None).is_ok());
        assert!(may_campaign(&c, &[b], &[], SYNC, None)
            .unwrap_err()
            .to_string()
            .contains("member b is ahead"));
    }

    #[test]
    fn equals_go_by_node_id() {
        let (a, b) = (m("a", &[3], true), m("b", &[3], true));
        assert!(may_campaign(&a, std::slice::from_ref(&b), &[], SYNC, None).is_ok());
        assert!(may_campaign(&b, &[a], &[], SYNC, None).is_err());
    }

    #[test]
    fn sync_mode_waits_for_final_positions_of_enough_members() {
        // S = {b, c}, k = 1: both final positions are needed.
        let b = m("b", &[10], true);
        let stale_c = m("c", &[9], false);
        let why = may_campaign(&b, std::slice::from_ref(&stale_c), &[], SYNC, None)
            .unwrap_err()
            .to_string();
        assert!(why.contains("1 of 2 members, 2 needed"), "{why}");
        // k = 2: |S| - k + 1 = 1, this member's own positions are enough.
        let k2 = Rules {
            sync_replicas: 2,
            ..SYNC
        };
        assert!(may_campaign(&b, &[stale_c], &[], k2, None).is_ok());
    }

    fn set(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sync_mode_asks_only_the_sync_set() {
        // S = {a, b}, k = 1: the primary and b are gone; a alone must not be elected, however
        // far it is, since b may hold writes answered `ok` that a lacks.
        let a = m("a", &[10], true);
        let s = set(&["a", "b"]);
        let why = may_campaign(&a, &[], &[], SYNC, Some(&s))
            .unwrap_err()
            .to_string();
        assert!(why.contains("1 of the sync set's 2 members"), "{why}");
        // b back with its final positions: both may be asked, b is ahead and goes.
        let b = m("b", &[12], true);
        assert!(may_campaign(&b, std::slice::from_ref(&a), &[], SYNC, Some(&s)).is_ok());
        assert!(may_campaign(&a, std::slice::from_ref(&b), &[], SYNC, Some(&s)).is_err());
        // A member outside S never campaigns, and is not asked: c ahead does not block b.
        let c = m("c", &[13], true);
        let why = (may_campaign(&c, &[a.clone(), b.clone()], &[], SYNC, Some(&s)).unwrap_err())
            .to_string();
        assert!(why.contains("not in the sync set"), "{why}");
        assert!(may_campaign(&b, &[a, c], &[], SYNC, Some(&s)).is_ok());
        // S = {b} alone: b's own positions are enough.
        let only_b = set(&["b"]);
        let b = m("b", &[12], true);
        assert!(may_campaign(&b, &[], &[], SYNC, Some(&only_b)).is_ok());
        // Async mode ignores the set.
        assert!(may_campaign(&m("c", &[5], true), &[], &[5], ASYNC, Some(&only_b)).is_ok());
    }

    #[test]
    fn the_blocked_reason_is_the_text_shown_before_the_type() {
        let too_few = |set: Option<Vec<String>>| Blocked::TooFewFinal {
            have: 1,
            members: 2,
            set,
            need: 2,
            k: 1,
        };
        assert_eq!(
            too_few(Some(set(&["a", "b"]))).to_string(),
            "sync mode: final positions from 1 of the sync set's 2 members [\"a\", \"b\"], 2 \
             needed (|S| - k + 1 with k = 1); an acknowledged write could be missing"
        );
        assert_eq!(
            too_few(None).to_string(),
            "sync mode: final positions from 1 of 2 members, 2 needed (|S| - k + 1 with k = 1); \
             an acknowledged write could be missing"
        );
        let not_in = Blocked::NotInSyncSet { set: set(&["a"]) };
        assert_eq!(
            not_in.to_string(),
            "sync mode: this member is not in the sync set [\"a\"]; an acknowledged write could \
             be missing from it"
        );
        let (from, to) = ("a".to_string(), "b".to_string());
        assert_eq!(
            Blocked::Switchover { from, to }.to_string(),
            "a switchover from a to b is under way: only b may campaign until its key expires"
        );
        assert_eq!(
            Blocked::LogRefuses { poisoned: false }.to_string(),
            "this member's log refuses writes (the disk is full)"
        );
        assert_eq!(
            Blocked::Paused.to_string(),
            "automatic failover is paused (HA_PAUSE; HA_RESUME restarts it)"
        );
    }

    #[test]
    fn async_mode_bounds_the_lag() {
        let b = m("b", &[5], false);
        assert!(may_campaign(&b, &[], &[15], ASYNC, None).is_ok());
        assert!(may_campaign(&b, &[], &[16], ASYNC, None)
            .unwrap_err()
            .to_string()
            .contains("maximum_lag_on_failover"));
        let mut nf = b.clone();
        nf.nofailover = true;
        assert!(may_campaign(&nf, &[], &[], ASYNC, None).is_err());
    }
}
