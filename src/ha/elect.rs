//! Who may become primary (docs/ha.md, "Who may become primary"): pure rules over what the
//! member keys say, so they are tested without etcd.
//!
//! Async mode: a member whose lag behind the primary's last known heads is at most
//! `ha.maximum_lag_on_failover`. Sync mode: only after fresh final positions (published after
//! the member stopped following) from |S| - k + 1 members of S, where S is every live member
//! (this build keeps no sync-set key yet: every live member counts, which asks for at least
//! as many as the sync set would) and k is `replication.sync_replicas`. In both modes no
//! member with fresh positions may be ahead, and among equals the smallest node id goes first.

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

/// True when `a` holds an entry `b` lacks on some shard.
fn ahead(a: &[u64], b: &[u64]) -> bool {
    a.iter()
        .enumerate()
        .any(|(i, x)| *x > b.get(i).copied().unwrap_or(0))
}

fn sum(p: &[u64]) -> u64 {
    p.iter().sum()
}

/// Whether `me` may campaign now; Err names why not (`blocked_reason`). `others` are the other
/// live members; `primary_heads` the primary's last known heads.
pub fn may_campaign(
    me: &Seen,
    others: &[Seen],
    primary_heads: &[u64],
    rules: Rules,
) -> Result<(), String> {
    if me.nofailover {
        return Err("ha.nofailover is set on this member".into());
    }
    if let Some(o) = others.iter().find(|o| ahead(&o.positions, &me.positions)) {
        return Err(format!("member {} is ahead of this one", o.node_id));
    }
    let equal_first = others
        .iter()
        .filter(|o| o.fresh && !o.nofailover && o.positions == me.positions)
        .find(|o| o.node_id < me.node_id);
    if let Some(o) = equal_first {
        return Err(format!("member {} is as far and goes first", o.node_id));
    }
    match rules.mode {
        ReplicationMode::Async => {
            let lag = sum(primary_heads).saturating_sub(sum(&me.positions));
            if lag > rules.maximum_lag {
                return Err(format!(
                    "lag {lag} entries exceeds ha.maximum_lag_on_failover {}",
                    rules.maximum_lag
                ));
            }
        }
        ReplicationMode::Sync => {
            let s = others.len() + 1;
            let k = rules.sync_replicas.max(1) as usize;
            let need = (s + 1).saturating_sub(k).max(1);
            let have = 1 + others.iter().filter(|o| o.fresh).count();
            if have < need {
                return Err(format!(
                    "sync mode: final positions from {have} of {s} members, {need} needed \
                     (|S| - k + 1 with k = {k}); an acknowledged write could be missing"
                ));
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
        assert!(may_campaign(&b, std::slice::from_ref(&c), &[], SYNC).is_ok());
        assert!(may_campaign(&c, &[b], &[], SYNC)
            .unwrap_err()
            .contains("member b is ahead"));
    }

    #[test]
    fn equals_go_by_node_id() {
        let (a, b) = (m("a", &[3], true), m("b", &[3], true));
        assert!(may_campaign(&a, std::slice::from_ref(&b), &[], SYNC).is_ok());
        assert!(may_campaign(&b, &[a], &[], SYNC).is_err());
    }

    #[test]
    fn sync_mode_waits_for_final_positions_of_enough_members() {
        // S = {b, c}, k = 1: both final positions are needed.
        let b = m("b", &[10], true);
        let stale_c = m("c", &[9], false);
        let why = may_campaign(&b, std::slice::from_ref(&stale_c), &[], SYNC).unwrap_err();
        assert!(why.contains("1 of 2 members, 2 needed"), "{why}");
        // k = 2: |S| - k + 1 = 1, this member's own positions are enough.
        let k2 = Rules {
            sync_replicas: 2,
            ..SYNC
        };
        assert!(may_campaign(&b, &[stale_c], &[], k2).is_ok());
    }

    #[test]
    fn async_mode_bounds_the_lag() {
        let b = m("b", &[5], false);
        assert!(may_campaign(&b, &[], &[15], ASYNC).is_ok());
        assert!(may_campaign(&b, &[], &[16], ASYNC)
            .unwrap_err()
            .contains("maximum_lag_on_failover"));
        let mut nf = b.clone();
        nf.nofailover = true;
        assert!(may_campaign(&nf, &[], &[], ASYNC).is_err());
    }
}
