//! The slot map (docs/cluster.md, "The map"): which group owns each of the 16384 hash
//! slots, the groups of the cluster, and the moves under way. Pure: no I/O, no clock. The
//! value is the etcd key `/smdb/<cluster>/map` byte for byte (`serde_json`); a map read from
//! etcd is checked (`ClusterMap::parse`) and one that fails the check is reported, never
//! served. Every change here returns a new map; the caller writes it in one transaction that
//! compares the key's `mod_revision` (`cluster::admin`).

use serde::{Deserialize, Serialize};

use crate::config::cluster::is_group_name;

/// The number of hash slots.
pub const SLOTS: u32 = shards::routing::SLOT_COUNT as u32;
/// The highest slot.
pub const SLOT_MAX: u16 = (SLOTS - 1) as u16;

/// `[lo, hi, group]`: slots `lo..=hi` belong to `group`.
pub type SlotRange = (u16, u16, String);

/// The value of the `map` key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Grows by exactly one at every change of `slots` or `groups`.
    pub map_epoch: u64,
    /// Every group of the cluster (one may own no slot).
    pub groups: Vec<String>,
    /// Sorted, covering 0..=16383 once, adjacent ranges of one group merged.
    pub slots: Vec<SlotRange>,
    /// The running moves only.
    #[serde(default)]
    pub migrations: Vec<Migration>,
}

/// A running move, as the map lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// 16 lowercase hex digits.
    pub id: String,
    pub lo: u16,
    pub hi: u16,
    pub from: String,
    pub to: String,
    /// The `create_revision` of each group's leader key when the move started (its term).
    pub from_rev: i64,
    pub to_rev: i64,
    /// Each group's epoch when the move started.
    pub from_epoch: u64,
    pub to_epoch: u64,
    pub started_at_ms: u64,
}

/// Where a move stands (`migrations/<id>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationState {
    Running,
    Done,
    Aborted,
}

/// The value of a `migrations/<id>` key: written in the same transaction as each map change
/// of its move, and kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationRecord {
    pub id: String,
    pub lo: u16,
    pub hi: u16,
    pub from: String,
    pub to: String,
    pub state: MigrationState,
    /// Why it was aborted (null otherwise).
    #[serde(default)]
    pub reason: Option<String>,
    pub started_at_ms: u64,
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
    #[serde(default)]
    pub instances: u64,
    #[serde(default)]
    pub entries: u64,
    #[serde(default)]
    pub freeze_ms: u64,
    #[serde(default)]
    pub attempts: u32,
    /// Bytes of instance images the source shipped.
    #[serde(default)]
    pub bytes: u64,
}

/// One step of a rebalance: move `lo..=hi` from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub lo: u16,
    pub hi: u16,
    pub from: String,
    pub to: String,
}

/// Why a map is refused, or a change of it cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapError {
    /// The value is not the map's JSON.
    Decode(String),
    /// No group at all.
    NoGroups,
    /// A group name that is not 1-64 of `[A-Za-z0-9._-]`.
    BadGroupName(String),
    /// A group listed twice.
    DuplicateGroup(String),
    /// The ranges leave `slot` unassigned (or start past it).
    Gap { slot: u32 },
    /// A range with `lo > hi`, or one that overlaps or precedes the one before it.
    Overlap { lo: u16, hi: u16 },
    /// Two adjacent ranges of `group` are not merged (the second starts at `at`).
    NotMerged { group: String, at: u16 },
    /// A range or move names a group not in `groups`.
    UnknownGroup(String),
    /// A slot range past 16383 or with `lo > hi`.
    BadRange { lo: u32, hi: u32 },
}

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MapError::Decode(e) => write!(f, "the map is not valid JSON of its shape: {e}"),
            MapError::NoGroups => f.write_str("the map names no group"),
            MapError::BadGroupName(g) => {
                write!(f, "group name {g:?} is not 1-64 of [A-Za-z0-9._-]")
            }
            MapError::DuplicateGroup(g) => write!(f, "group {g:?} is listed twice"),
            MapError::Gap { slot } => write!(f, "slot {slot} is not assigned"),
            MapError::Overlap { lo, hi } => {
                write!(
                    f,
                    "range [{lo}, {hi}] is empty or overlaps the one before it"
                )
            }
            MapError::NotMerged { group, at } => write!(
                f,
                "adjacent ranges of group {group:?} are not merged (at slot {at})"
            ),
            MapError::UnknownGroup(g) => write!(f, "group {g:?} is not in the map's groups"),
            MapError::BadRange { lo, hi } => {
                write!(
                    f,
                    "slot range [{lo}, {hi}] is not within 0..=16383 with lo <= hi"
                )
            }
        }
    }
}

impl std::error::Error for MapError {}

fn check_groups(groups: &[String]) -> Result<(), MapError> {
    if groups.is_empty() {
        return Err(MapError::NoGroups);
    }
    for (i, g) in groups.iter().enumerate() {
        if !is_group_name(g) {
            return Err(MapError::BadGroupName(g.clone()));
        }
        if groups[..i].contains(g) {
            return Err(MapError::DuplicateGroup(g.clone()));
        }
    }
    Ok(())
}

/// Merges adjacent ranges of one group (the input is sorted and contiguous).
fn merged(slots: Vec<SlotRange>) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::with_capacity(slots.len());
    for r in slots {
        match out.last_mut() {
            Some(last) if last.2 == r.2 && u32::from(last.1) + 1 == u32::from(r.0) => last.1 = r.1,
            _ => out.push(r),
        }
    }
    out
}

impl ClusterMap {
    /// A map read from etcd: decoded and checked (`validate`).
    pub fn parse(bytes: &[u8]) -> Result<ClusterMap, MapError> {
        let map: ClusterMap =
            serde_json::from_slice(bytes).map_err(|e| MapError::Decode(e.to_string()))?;
        map.validate()?;
        Ok(map)
    }

    /// The map's JSON (the `map` key's value).
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Checks the rules a served map keeps: groups named and unique; slots sorted, covering
    /// 0..=16383 exactly once, adjacent ranges of one group merged, each owned by a group of
    /// `groups`; each move within range, between groups of `groups`.
    pub fn validate(&self) -> Result<(), MapError> {
        check_groups(&self.groups)?;
        let mut next: u32 = 0;
        let mut prev: Option<&SlotRange> = None;
        for r in &self.slots {
            let (lo, hi, g) = (u32::from(r.0), u32::from(r.1), &r.2);
            if lo > next {
                return Err(MapError::Gap { slot: next });
            }
            if lo < next || lo > hi || hi > u32::from(SLOT_MAX) {
                return Err(MapError::Overlap { lo: r.0, hi: r.1 });
            }
            if !self.groups.contains(g) {
                return Err(MapError::UnknownGroup(g.clone()));
            }
            if prev.is_some_and(|p| p.2 == *g) {
                return Err(MapError::NotMerged {
                    group: g.clone(),
                    at: r.0,
                });
            }
            prev = Some(r);
            next = hi + 1;
        }
        if next != SLOTS {
            return Err(MapError::Gap { slot: next });
        }
        for m in &self.migrations {
            check_range(u32::from(m.lo), u32::from(m.hi))?;
            for g in [&m.from, &m.to] {
                if !self.groups.contains(g) {
                    return Err(MapError::UnknownGroup(g.clone()));
                }
            }
        }
        Ok(())
    }

    /// The first map of a cluster, Redis's split: group i of n starts at slot `16384·i/n`
    /// rounded to the nearest (halves up) and ends where the next starts, `map_epoch` 1,
    /// groups in the order given. 3 groups: 0-5460, 5461-10922, 10923-16383 (flooring
    /// instead would give 5461-10921, 10922-16383).
    pub fn create(groups: &[String]) -> Result<ClusterMap, MapError> {
        check_groups(groups)?;
        let n = groups.len() as u64;
        let bound = |i: u64| ((2 * u64::from(SLOTS) * i + n) / (2 * n)) as u32;
        let slots = (0..n)
            .filter(|&i| bound(i + 1) > bound(i)) // more groups than slots: the rest get none
            .map(|i| {
                let (lo, hi) = (bound(i) as u16, (bound(i + 1) - 1) as u16);
                (lo, hi, groups[i as usize].clone())
            })
            .collect();
        Ok(ClusterMap {
            map_epoch: 1,
            groups: groups.to_vec(),
            slots,
            migrations: Vec::new(),
        })
    }

    /// The group that owns `slot` (None past 16383, or in a map that fails `validate`).
    pub fn owner(&self, slot: u16) -> Option<&str> {
        let i = self.slots.partition_point(|r| r.1 < slot);
        (self.slots.get(i))
            .filter(|r| r.0 <= slot && slot <= r.1)
            .map(|r| r.2.as_str())
    }

    /// The ranges `group` owns, in slot order (empty for a group that owns none).
    pub fn ranges_of(&self, group: &str) -> Vec<(u16, u16)> {
        (self.slots.iter())
            .filter(|r| r.2 == group)
            .map(|r| (r.0, r.1))
            .collect()
    }

    /// How many slots `group` owns.
    pub fn slots_owned(&self, group: &str) -> u32 {
        (self.slots.iter())
            .filter(|r| r.2 == group)
            .map(|r| u32::from(r.1) - u32::from(r.0) + 1)
            .sum()
    }

    /// The map with `group` added, owning no slot (`map_epoch` + 1), and true; the map as it
    /// is and false when the group is there already.
    pub fn with_group_added(&self, group: &str) -> Result<(ClusterMap, bool), MapError> {
        if self.groups.iter().any(|g| g == group) {
            return Ok((self.clone(), false));
        }
        if !is_group_name(group) {
            return Err(MapError::BadGroupName(group.to_string()));
        }
        let mut next = self.clone();
        next.groups.push(group.to_string());
        next.map_epoch += 1;
        Ok((next, true))
    }

    /// The map with slots `lo..=hi` owned by `to` (adjacent ranges merged, `map_epoch` + 1).
    /// The moves listed stay as they are: ending a move is its caller's business.
    pub fn with_range_moved(&self, lo: u16, hi: u16, to: &str) -> Result<ClusterMap, MapError> {
        check_range(u32::from(lo), u32::from(hi))?;
        if !self.groups.iter().any(|g| g == to) {
            return Err(MapError::UnknownGroup(to.to_string()));
        }
        let mut slots = Vec::with_capacity(self.slots.len() + 2);
        let mut placed = false;
        for (a, b, g) in &self.slots {
            if *b < lo || *a > hi {
                slots.push((*a, *b, g.clone()));
                continue;
            }
            if *a < lo {
                slots.push((*a, lo - 1, g.clone()));
            }
            if !placed {
                slots.push((lo, hi, to.to_string()));
                placed = true;
            }
            if *b > hi {
                slots.push((hi + 1, *b, g.clone()));
            }
        }
        let mut next = self.clone();
        next.slots = merged(slots);
        next.map_epoch += 1;
        Ok(next)
    }

    /// Each group's fair share, in name order: ⌊16384/n⌋ or ⌈16384/n⌉ slots, the extra ones
    /// to the first groups in name order.
    pub fn shares(&self) -> Vec<(String, u32)> {
        let mut names = self.groups.clone();
        names.sort();
        let n = names.len() as u32;
        names
            .into_iter()
            .enumerate()
            .map(|(i, g)| (g, SLOTS / n + u32::from((i as u32) < SLOTS % n)))
            .collect()
    }

    /// Whether every group owns ⌊16384/n⌋ or ⌈16384/n⌉ slots (a created map does, whichever
    /// groups got the extra ones).
    pub fn is_balanced(&self) -> bool {
        let n = self.groups.len() as u32;
        let (low, high) = (SLOTS / n, SLOTS.div_ceil(n));
        (self.groups.iter()).all(|g| (low..=high).contains(&self.slots_owned(g)))
    }

    /// The moves that bring every group to its share (`shares`): the highest slots of groups
    /// above their share go to groups below it, donors and takers in name order, each move
    /// one range owned by its `from` when it runs (in the order listed). Empty when balanced
    /// (`is_balanced`).
    pub fn rebalance_plan(&self) -> Vec<Move> {
        if self.is_balanced() {
            return Vec::new();
        }
        let shares = self.shares();
        let mut work = self.clone();
        let mut plan = Vec::new();
        for (donor, share) in &shares {
            while work.slots_owned(donor) > *share {
                let excess = work.slots_owned(donor) - share;
                let taker = shares.iter().find(|(g, s)| work.slots_owned(g) < *s);
                let Some((taker, taker_share)) = taker else {
                    break; // cannot happen: the shares sum to 16384, as the slots do
                };
                let want = excess.min(taker_share - work.slots_owned(taker));
                let Some(&(lo, hi)) = work.ranges_of(donor).last() else {
                    break;
                };
                let len = u32::from(hi) - u32::from(lo) + 1;
                let lo = if len > want {
                    hi - (want - 1) as u16
                } else {
                    lo
                };
                let step = Move {
                    lo,
                    hi,
                    from: donor.clone(),
                    to: taker.clone(),
                };
                match work.with_range_moved(lo, hi, taker) {
                    Ok(next) => work = next,
                    Err(_) => break, // the taker is a group of the map: cannot happen
                }
                plan.push(step);
            }
        }
        plan
    }
}

fn check_range(lo: u32, hi: u32) -> Result<(), MapError> {
    match lo <= hi && hi <= u32::from(SLOT_MAX) {
        true => Ok(()),
        false => Err(MapError::BadRange { lo, hi }),
    }
}

#[cfg(test)]
mod tests;
