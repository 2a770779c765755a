//! `cluster rebalance`'s planner (docs/cli.md, "Cluster mode"): a pure function of the map as
//! `CLUSTER_SHARDS` shows it. Each of the n groups ends with ⌊16384/n⌋ or ⌈16384/n⌉ slots, the
//! extra ones to the first groups in name order; the highest slots of groups above their share
//! (donors in name order) go to the first groups below theirs, one range per move, each range
//! owned by its source when its move runs. A map where every group already owns ⌊16384/n⌋ or
//! ⌈16384/n⌉ slots is balanced: nothing moves. The server's `ClusterMap::rebalance_plan` has
//! the same rule; the CLI does not link the server crate, so it is written again here.

use serde_json::Value;
use smdb_protocol::slot::SLOT_COUNT;

/// All slots, as a count.
const SLOTS: u32 = SLOT_COUNT as u32;

/// One move of a plan: slots `lo..=hi` from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub lo: u16,
    pub hi: u16,
    pub from: String,
    pub to: String,
}

/// The map as ranges `(lo, hi, group)` sorted by `lo`, plus every group (name order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owners {
    pub groups: Vec<String>,
    pub ranges: Vec<(u16, u16, String)>,
}

impl Owners {
    /// The owners of a `CLUSTER_SHARDS` result (`shards: [{group, slots: [[lo, hi], ..]}]`).
    pub fn from_shards(shards: &Value) -> Owners {
        let mut groups = Vec::new();
        let mut ranges = Vec::new();
        for g in shards["shards"].as_array().into_iter().flatten() {
            let Some(name) = g["group"].as_str() else {
                continue;
            };
            groups.push(name.to_string());
            for r in g["slots"].as_array().into_iter().flatten() {
                let bound = |i: usize| r[i].as_u64().and_then(|s| u16::try_from(s).ok());
                if let (Some(lo), Some(hi)) = (bound(0), bound(1)) {
                    ranges.push((lo, hi, name.to_string()));
                }
            }
        }
        groups.sort();
        ranges.sort_by_key(|r| r.0);
        Owners { groups, ranges }
    }

    /// How many slots `group` owns.
    pub fn owned(&self, group: &str) -> u32 {
        (self.ranges.iter())
            .filter(|r| r.2 == group)
            .map(|r| u32::from(r.1) - u32::from(r.0) + 1)
            .sum()
    }

    /// Each group's share, in name order: ⌊16384/n⌋, plus one for the first 16384 mod n.
    pub fn shares(&self) -> Vec<(String, u32)> {
        let n = self.groups.len() as u32;
        (self.groups.iter().enumerate())
            .map(|(i, g)| (g.clone(), SLOTS / n + u32::from((i as u32) < SLOTS % n)))
            .collect()
    }

    /// Whether every group owns ⌊16384/n⌋ or ⌈16384/n⌉ slots (no group at all counts too).
    pub fn is_balanced(&self) -> bool {
        let n = self.groups.len() as u32;
        if n == 0 {
            return true;
        }
        let (low, high) = (SLOTS / n, SLOTS.div_ceil(n));
        (self.groups.iter()).all(|g| (low..=high).contains(&self.owned(g)))
    }

    /// The map with `lo..=hi` owned by `to` (ranges split, adjacent ones of a group merged).
    pub fn with_moved(&self, lo: u16, hi: u16, to: &str) -> Owners {
        let mut out: Vec<(u16, u16, String)> = Vec::new();
        for (a, b, g) in &self.ranges {
            if *b < lo || *a > hi {
                out.push((*a, *b, g.clone()));
                continue;
            }
            if *a < lo {
                out.push((*a, lo - 1, g.clone()));
            }
            if *b > hi {
                out.push((hi + 1, *b, g.clone()));
            }
        }
        out.push((lo, hi, to.to_string()));
        out.sort_by_key(|r| r.0);
        let mut merged: Vec<(u16, u16, String)> = Vec::new();
        for r in out {
            match merged.last_mut() {
                Some(last) if last.2 == r.2 && u32::from(last.1) + 1 == u32::from(r.0) => {
                    last.1 = r.1
                }
                _ => merged.push(r),
            }
        }
        Owners {
            groups: self.groups.clone(),
            ranges: merged,
        }
    }
}

/// The moves that bring every group to its share, in the order they are to run; empty when
/// the map is balanced.
pub fn rebalance_plan(map: &Owners) -> Vec<Move> {
    if map.is_balanced() {
        return Vec::new();
    }
    let shares = map.shares();
    let mut work = map.clone();
    let mut plan = Vec::new();
    for (donor, share) in &shares {
        while work.owned(donor) > *share {
            let excess = work.owned(donor) - share;
            let Some((taker, taker_share)) = shares.iter().find(|(g, s)| work.owned(g) < *s) else {
                break; // cannot happen: the shares sum to 16384, as a whole map's slots do
            };
            let want = excess.min(taker_share - work.owned(taker));
            let Some(&(lo, hi, _)) = work.ranges.iter().rev().find(|r| &r.2 == donor) else {
                break; // cannot happen: the donor owns more than its share, so some range
            };
            let len = u32::from(hi) - u32::from(lo) + 1;
            // `want` < `len` here, and `len` ≤ 16384, so `want - 1` fits a slot number.
            let lo = if len > want {
                hi - (want - 1) as u16
            } else {
                lo
            };
            work = work.with_moved(lo, hi, taker);
            plan.push(Move {
                lo,
                hi,
                from: donor.clone(),
                to: taker.clone(),
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn two_then_a_third() -> Owners {
        Owners::from_shards(&json!({"shards": [
            {"group": "g0", "slots": [[0, 8191]]},
            {"group": "g1", "slots": [[8192, 16383]]},
            {"group": "g2", "slots": []}]}))
    }

    fn apply(m: &Owners, plan: &[Move]) -> Owners {
        let mut m = m.clone();
        for step in plan {
            for r in m.ranges.iter().filter(|r| r.0 <= step.hi && r.1 >= step.lo) {
                assert!(
                    r.2 == step.from && r.0 <= step.lo && r.1 >= step.hi,
                    "{step:?}"
                );
            }
            m = m.with_moved(step.lo, step.hi, &step.to);
        }
        m
    }

    #[test]
    fn a_new_group_gets_the_highest_slots_of_the_others() {
        let m = two_then_a_third();
        let plan = rebalance_plan(&m);
        let mv = |lo, hi, from: &str| Move {
            lo,
            hi,
            from: from.into(),
            to: "g2".into(),
        };
        // Shares: g0 5462, g1 5461, g2 5461 (the extra one to the first name).
        assert_eq!(plan, vec![mv(5462, 8191, "g0"), mv(13653, 16383, "g1")]);
        let done = apply(&m, &plan);
        assert_eq!(done.owned("g0"), 5462);
        assert_eq!(done.owned("g2"), 5461);
        assert!(rebalance_plan(&done).is_empty());
    }

    #[test]
    fn a_created_map_is_balanced() {
        let three = Owners::from_shards(&json!({"shards": [
            {"group": "a", "slots": [[0, 5460]]},
            {"group": "b", "slots": [[5461, 10922]]},
            {"group": "c", "slots": [[10923, 16383]]}]}));
        assert!(three.is_balanced());
        assert!(rebalance_plan(&three).is_empty());
        assert!(rebalance_plan(&Owners::from_shards(&json!({}))).is_empty());
    }

    #[test]
    fn scattered_ranges_end_at_every_share() {
        let m = Owners::from_shards(&json!({"shards": [
            {"group": "a", "slots": [[0, 99], [200, 12000]]},
            {"group": "b", "slots": [[100, 199], [12001, 16000]]},
            {"group": "c", "slots": [[16001, 16383]]},
            {"group": "d", "slots": []}]}));
        let plan = rebalance_plan(&m);
        assert!(!plan.is_empty());
        let done = apply(&m, &plan);
        for (g, share) in done.shares() {
            assert_eq!(done.owned(&g), share, "{g}: {plan:?}");
        }
        let total: u32 = done.groups.iter().map(|g| done.owned(g)).sum();
        assert_eq!(total, SLOTS);
    }

    #[test]
    fn moving_merges_adjacent_ranges() {
        let m = two_then_a_third().with_moved(8192, 9000, "g0");
        assert_eq!(m.ranges[0], (0, 9000, "g0".to_string()));
        assert_eq!(m.ranges[1], (9001, 16383, "g1".to_string()));
    }
}
