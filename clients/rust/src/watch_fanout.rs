//! `WATCH_ALL` over every group of a cluster (docs/cluster.md, "Clients"), the part without a
//! socket: the groups of a `CLUSTER_SHARDS` answer, what each group's pushes are, and the
//! order rule that keeps each instance's events in order across a slot move.
//!
//! A member pushes the events of the slots its group owns. When slots move, the moved
//! instances' events before the switch come from the source group's subscription and those
//! after it from the target's, and the source sends `slots_moved` after its last event of
//! them (one per shard of the source: each shard's after that shard's last event). So an
//! event of a slot this side still holds as another group's is held until that group's
//! `slots_moved` hands the slot over; then the held events go out in the order they came.
//! The tokio driver is `asyncio::watch_fanout`.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::{slot_of, SLOT_COUNT};
use crate::error::Error;
use crate::fanout;
use crate::ops::Event;

/// How often a driver reads the map again to find groups it gained.
pub const MAP_EVERY: Duration = Duration::from_secs(1);
/// How long a reopened group's hand-over of moved slots waits for a live push of their shard
/// (its replay over) before it goes ahead.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(2);

/// What a group's reader tells the merger (both drivers).
pub enum Msg {
    /// Opened again (after a lost connection or a lag): the cursor it resumed from, and the
    /// WATCH answer's.
    Opened {
        from: String,
        answered: String,
    },
    Push(Value),
    Lagged(String),
    Failed(Error),
}

/// The merging side of a fan-out, the same in both drivers: the order rule, each group's
/// cursor as received and as delivered, and the groups reopened whose hand-over waits.
#[derive(Debug)]
pub struct Merge {
    order: Order,
    /// Groups opened again, since when (their hand-over waits at most `HANDOVER_WAIT`).
    reopened: BTreeMap<String, Instant>,
    received: BTreeMap<String, String>,
    /// Kept before a group's first held event.
    cursors: BTreeMap<String, String>,
}

impl Merge {
    /// The merge of subscriptions opened by the map of `groups`.
    pub fn new(groups: &[Group]) -> Merge {
        Merge {
            order: Order::new(groups),
            reopened: BTreeMap::new(),
            received: BTreeMap::new(),
            cursors: BTreeMap::new(),
        }
    }

    /// `group`'s subscription was opened from `from`, and answered `answered`.
    pub fn opened(&mut self, group: &str, from: &str, answered: &str) {
        self.order.opened(group, answered);
        self.received.insert(group.to_string(), from.to_string());
    }

    /// Opened again; `fresh` is a map read just now (a `slots_moved` may have gone with the
    /// lost connection: it says who owns what once the replay is over, `Order::reopened`).
    pub fn reopened(&mut self, group: &str, from: &str, answered: &str, fresh: Option<&[Group]>) {
        self.opened(group, from, answered);
        if let Some(gs) = fresh {
            self.order.reopened(group, gs);
            self.reopened.insert(group.to_string(), Instant::now());
        }
    }

    /// A push of `group`'s subscription: the events it releases, in order, and the group a
    /// `slots_moved` names (to watch, if it is not yet). `Err` for an event it cannot read.
    pub fn push(
        &mut self,
        group: &str,
        push: Value,
    ) -> Result<(Vec<Event>, Option<String>), Error> {
        let mut out = Vec::new();
        if let Some(c) = push["cursor"].as_str() {
            self.received.insert(group.to_string(), c.to_string());
        }
        let shard = push["shard"].as_u64().and_then(|k| u32::try_from(k).ok());
        if let Some(k) = shard.filter(|_| push["replayed"] != true) {
            out.extend(self.order.live(group, k));
        }
        if push["type"] == "slots_moved" {
            if let Some(m) = SlotsMoved::parse(&push) {
                out.extend(self.order.moved(group, &m));
                return Ok((out, Some(m.to)));
            }
        } else if push["type"] == "event" {
            let mut e = serde_json::from_value::<Event>(push)
                .map_err(|e| Error::Protocol(e.to_string()))?;
            // The contract's `group` and `slot`, when the member left them out.
            let slot = slot_of(&e.instance_id);
            e.extra.entry("group").or_insert_with(|| json!(group));
            e.extra.entry("slot").or_insert_with(|| json!(slot));
            out.extend(self.order.event(group, e));
        }
        Ok((out, None))
    }

    /// `group`'s subscription lagged: it resumes from `resume_cursor`; the error to deliver.
    pub fn lagged(&mut self, group: &str, resume_cursor: String) -> Error {
        (self.received).insert(group.to_string(), resume_cursor.clone());
        Error::Lagged {
            subscription_id: json!(group),
            resume_cursor,
        }
    }

    /// The hand-overs of groups reopened `HANDOVER_WAIT` ago or more that are still
    /// pending (their replay is taken as over): the events that releases.
    pub fn expire(&mut self) -> Vec<Event> {
        let due: Vec<String> = (self.reopened.iter())
            .filter(|(_, at)| at.elapsed() >= HANDOVER_WAIT)
            .map(|(g, _)| g.clone())
            .collect();
        let mut out = Vec::new();
        for g in due {
            self.reopened.remove(&g);
            out.extend(self.order.expire(&g));
        }
        out
    }

    /// The combined cursor: each group's as received, but a group with events held keeps
    /// the one before the first of them.
    pub fn cursor(&mut self) -> String {
        for (g, c) in &self.received {
            if !self.order.holds(g) {
                self.cursors.insert(g.clone(), c.clone());
            }
        }
        fanout::encode_cursor(&self.cursors)
    }
}

/// One group of the map: its name, its primary's address and its slot ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub primary: Option<String>,
    pub slots: Vec<(u16, u16)>,
}

/// The map epoch and the groups of a `CLUSTER_SHARDS` result.
pub fn groups(shards: &Value) -> (u64, Vec<Group>) {
    let mut out = Vec::new();
    for g in shards["shards"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let Some(name) = g["group"].as_str() else {
            continue;
        };
        let primary = crate::cluster::primary_addr(g);
        let bound = |r: &Value, i: usize| r[i].as_u64().and_then(|s| u16::try_from(s).ok());
        let slots = (g["slots"].as_array().map(Vec::as_slice).unwrap_or(&[]))
            .iter()
            .filter_map(|r| Some((bound(r, 0)?, bound(r, 1)?)))
            .collect();
        out.push(Group {
            name: name.to_string(),
            primary,
            slots,
        });
    }
    (shards["map_epoch"].as_u64().unwrap_or(0), out)
}

/// A `slots_moved` push: slots `lo..=hi` of the pushing group (its shard `shard`, when the
/// push names one) now belong to group `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotsMoved {
    pub lo: u16,
    pub hi: u16,
    pub to: String,
    pub shard: Option<u32>,
}

impl SlotsMoved {
    pub fn parse(push: &Value) -> Option<SlotsMoved> {
        let bound = |i: usize| {
            push["slots"][i]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
        };
        Some(SlotsMoved {
            lo: bound(0)?,
            hi: bound(1)?,
            to: push["to"].as_str()?.to_string(),
            shard: push["shard"].as_u64().and_then(|s| u32::try_from(s).ok()),
        })
    }
}

/// The number of shard positions in a subscription cursor (`c1-<o0>-<o1>..` or
/// `c2-<e0>.<o0>-..`, in cluster mode followed by `@<group>`): the group's shard count.
/// `None` for anything else.
pub fn cursor_shards(cursor: &str) -> Option<usize> {
    let cursor = cursor.split('@').next().unwrap_or(cursor);
    let rest = cursor
        .strip_prefix("c1-")
        .or_else(|| cursor.strip_prefix("c2-"))?;
    Some(rest.split('-').count())
}

/// Who owns each slot as the streams have told it so far, and the events held until a
/// source's `slots_moved`.
#[derive(Debug)]
pub struct Order {
    /// Group names; `owner` holds indices into it.
    names: Vec<String>,
    /// Each slot's owner by the streams (`None`: no group named it).
    owner: Vec<Option<usize>>,
    /// The groups watched, with their shard count from their WATCH answer's cursor (0: not
    /// known).
    shards: BTreeMap<usize, usize>,
    /// Events held, by group, in the order they came.
    held: BTreeMap<usize, VecDeque<Event>>,
    /// By group reopened: slots to hand over to another group once its replay is over.
    pending: BTreeMap<usize, Vec<(u16, usize)>>,
}

impl Order {
    /// The owners of `groups` (the map the subscriptions were opened by).
    pub fn new(groups: &[Group]) -> Order {
        let mut o = Order {
            names: Vec::new(),
            owner: vec![None; usize::from(SLOT_COUNT)],
            shards: BTreeMap::new(),
            held: BTreeMap::new(),
            pending: BTreeMap::new(),
        };
        for g in groups {
            let i = o.index(&g.name);
            for &(lo, hi) in &g.slots {
                for s in lo..=hi.min(SLOT_COUNT - 1) {
                    o.owner[usize::from(s)] = Some(i);
                }
            }
        }
        o
    }

    fn index(&mut self, name: &str) -> usize {
        match self.names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.names.push(name.to_string());
                self.names.len() - 1
            }
        }
    }

    /// `group`'s subscription was opened, and answered `cursor` (its shard count).
    pub fn opened(&mut self, group: &str, cursor: &str) {
        let i = self.index(group);
        self.shards.insert(i, cursor_shards(cursor).unwrap_or(0));
    }

    /// An event of `group`'s subscription: `Some` to deliver now, `None` when held (its slot
    /// is still another watched group's by the streams).
    pub fn event(&mut self, group: &str, e: Event) -> Option<Event> {
        let i = self.index(group);
        let slot = usize::from(slot_of(&e.instance_id));
        match self.owner[slot] {
            Some(o) if o != i && self.shards.contains_key(&o) => {
                self.held.entry(i).or_default().push_back(e);
                None
            }
            _ => Some(e),
        }
    }

    /// `slots_moved` from `group`: the slots it names (of its shard, when named) pass to the
    /// target; returns the events that releases, in order.
    pub fn moved(&mut self, group: &str, m: &SlotsMoved) -> Vec<Event> {
        let from = self.index(group);
        let to = self.index(&m.to);
        let n = self.shards.get(&from).copied();
        for s in m.lo..=m.hi.min(SLOT_COUNT - 1) {
            let of_shard = match (m.shard, n) {
                (Some(k), Some(n)) if n > 0 => usize::from(s) % n == k as usize,
                _ => true,
            };
            if of_shard && self.owner[usize::from(s)] == Some(from) {
                self.owner[usize::from(s)] = Some(to);
            }
        }
        self.release()
    }

    /// After `group`'s subscription was opened again (a `slots_moved` may have been lost with
    /// its connection): the slots the streams give it but `groups` (a fresh map) give another
    /// are to pass to that one once the reopened stream's replay is over, shard by shard
    /// (`live`), or when the wait for that ends (`expire`). A replay that crosses the switch
    /// carries the source's `slots_moved` (which hands the slots over first); one that has
    /// not reached it may still bring older events of those slots.
    pub fn reopened(&mut self, group: &str, groups: &[Group]) {
        let from = self.index(group);
        let mut moves = Vec::new();
        for g in groups {
            let to = self.index(&g.name);
            for &(lo, hi) in &g.slots {
                for s in lo..=hi.min(SLOT_COUNT - 1) {
                    if self.owner[usize::from(s)] == Some(from) && to != from {
                        moves.push((s, to));
                    }
                }
            }
        }
        self.pending.insert(from, moves);
    }

    /// A live push (not replayed) of `group`'s shard `shard`: that shard's replay is over,
    /// so its slots pending a hand-over pass; returns the events that releases.
    pub fn live(&mut self, group: &str, shard: u32) -> Vec<Event> {
        let from = self.index(group);
        let n = self.shards.get(&from).copied().unwrap_or(0);
        let Some(moves) = self.pending.get_mut(&from) else {
            return Vec::new();
        };
        let (now, later) = moves
            .drain(..)
            .partition(|(s, _)| n == 0 || usize::from(*s) % n == shard as usize);
        *moves = later;
        self.hand_over(from, now)
    }

    /// The wait for `group`'s replay is over: every slot pending a hand-over passes.
    pub fn expire(&mut self, group: &str) -> Vec<Event> {
        let from = self.index(group);
        let moves = self.pending.remove(&from).unwrap_or_default();
        self.hand_over(from, moves)
    }

    /// Whether `group` has slots pending a hand-over.
    pub fn pending(&self, group: &str) -> bool {
        (self.names.iter().position(|n| n == group))
            .and_then(|i| self.pending.get(&i))
            .is_some_and(|m| !m.is_empty())
    }

    fn hand_over(&mut self, from: usize, moves: Vec<(u16, usize)>) -> Vec<Event> {
        if moves.is_empty() {
            return Vec::new();
        }
        for (s, to) in moves {
            let o = &mut self.owner[usize::from(s)];
            if *o == Some(from) {
                *o = Some(to);
            }
        }
        self.release()
    }

    /// The held events whose slot their group now owns, taken out in order.
    fn release(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        for (&g, q) in self.held.iter_mut() {
            let mut keep = VecDeque::new();
            for e in q.drain(..) {
                if self.owner[usize::from(slot_of(&e.instance_id))] == Some(g) {
                    out.push(e);
                } else {
                    keep.push_back(e);
                }
            }
            *q = keep;
        }
        out
    }

    /// Events held now.
    pub fn held(&self) -> usize {
        self.held.values().map(VecDeque::len).sum()
    }

    /// Whether `group` has events held.
    pub fn holds(&self, group: &str) -> bool {
        (self.names.iter().position(|n| n == group))
            .and_then(|i| self.held.get(&i))
            .is_some_and(|q| !q.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(id: &str, n: u64) -> Event {
        serde_json::from_value(
            json!({"subscription_id": 1, "instance_id": id, "machine": "m",
            "version": 1, "event": "e", "from_state": "a", "to_state": "a", "shard": 0,
            "wal_offset": n, "cursor": format!("c1-{n}")}),
        )
        .unwrap()
    }

    fn two() -> Vec<Group> {
        let (_, g) = groups(&json!({"map_epoch": 1, "shards": [
            {"group": "g1", "slots": [[0, 8191]], "primary": "a",
             "nodes": [{"node_id": "a", "addr": "h:1"}]},
            {"group": "g2", "slots": [[8192, 16383]], "primary": null, "nodes": []}]}));
        g
    }

    #[test]
    fn the_groups_of_a_map() {
        let g = two();
        assert_eq!(g[0].primary.as_deref(), Some("h:1"));
        assert_eq!(g[1].primary, None);
        assert_eq!(g[1].slots, vec![(8192, 16383)]);
        assert_eq!(cursor_shards("c1-3-4"), Some(2));
        assert_eq!(cursor_shards("c2-1.3"), Some(1));
        assert_eq!(cursor_shards("c2-1.3-1.9@g-1"), Some(2));
        assert_eq!(cursor_shards("0"), None);
    }

    #[test]
    fn a_moved_slot_s_events_wait_for_the_source_s_slots_moved() {
        // slot("hello") = 866 (g1), slot("foo") = 12182 (g2).
        let mut o = Order::new(&two());
        o.opened("g1", "c1-0-0");
        o.opened("g2", "c1-0");
        assert!(o.event("g1", ev("hello", 1)).is_some());
        assert!(o.event("g2", ev("foo", 1)).is_some());
        // hello's slot moved to g2: g2's events of it wait.
        assert!(o.event("g2", ev("hello", 5)).is_none());
        assert!(o.event("g2", ev("hello", 6)).is_none());
        assert!(o.event("g1", ev("hello", 2)).is_some());
        assert_eq!(o.held(), 2);
        assert!(o.holds("g2") && !o.holds("g1"));
        // Shard 1 of g1's two does not hold slot 866 (866 mod 2 = 0): nothing yet.
        let m = |shard| SlotsMoved {
            lo: 800,
            hi: 900,
            to: "g2".into(),
            shard: Some(shard),
        };
        assert!(o.moved("g1", &m(1)).is_empty());
        let out = o.moved("g1", &m(0));
        let offs: Vec<u64> = out.iter().map(|e| e.wal_offset).collect();
        assert_eq!(offs, vec![5, 6]);
        assert!(o.event("g2", ev("hello", 7)).is_some());
        let push = json!({"type": "slots_moved", "slots": [800, 900], "to": "g2", "shard": 0});
        assert_eq!(SlotsMoved::parse(&push), Some(m(0)));
    }

    #[test]
    fn a_fresh_map_hands_over_slots_once_the_reopened_replay_is_over() {
        let mut o = Order::new(&two());
        o.opened("g1", "c1-0-0");
        o.opened("g2", "c1-0");
        assert!(o.event("g2", ev("hello", 5)).is_none());
        let mut now = two();
        now[0].slots = vec![(0, 799), (901, 8191)];
        now[1].slots = vec![(800, 900), (8192, 16383)];
        o.reopened("g1", &now);
        assert!(o.pending("g1"));
        // g1 replays an older event of hello: it still comes first.
        assert!(o.event("g1", ev("hello", 4)).is_some());
        // A live push of g1's shard 1 hands over nothing of slot 866 (866 mod 2 = 0).
        assert!(o.live("g1", 1).is_empty());
        assert_eq!(o.live("g1", 0).len(), 1);
        assert_eq!(o.held(), 0);
        // Or the wait ends.
        let mut o = Order::new(&two());
        o.opened("g1", "c1-0");
        o.opened("g2", "c1-0");
        assert!(o.event("g2", ev("hello", 5)).is_none());
        o.reopened("g1", &now);
        assert_eq!(o.expire("g1").len(), 1);
        assert!(!o.pending("g1"));
    }
}
