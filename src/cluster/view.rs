//! The map copy (docs/cluster.md, "The copy"): what this member last read of the map and,
//! for each group of it, the primary and the live members, so the executors answer
//! `CLUSTER_SHARDS`, `CLUSTER_SLOTS` and `MOVED` without etcd. One writer (`cluster::follow`,
//! on the HA thread) swaps the whole copy at each change; readers take an `Arc` of the copy
//! in force (one lock held for a pointer copy) and may keep it while `version` is unchanged,
//! so a hot path pays one atomic load per request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::map::{ClusterMap, MigrationRecord};

/// Where the copy's map stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MapState {
    /// Nothing read yet in this process.
    #[default]
    NotRead,
    /// Read: etcd holds no map (the cluster is not created).
    NoMap,
    /// Read: the key holds a map that breaks a rule (why); it is reported, never served.
    Invalid(String),
    /// Read and valid: `MapCopy::map`.
    Valid,
}

/// One group's primary, from its leader key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    pub node_id: String,
    /// Its client address.
    pub addr: String,
    pub epoch: u64,
    /// The leader key's `create_revision` (the term; a move compares it).
    pub create_rev: i64,
}

/// One live member of a group, from its member key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub node_id: String,
    pub addr: String,
    pub http_addr: Option<String>,
    /// "primary" or "follower".
    pub role: String,
    /// The map epoch of its own copy (0: none yet).
    pub map_epoch: u64,
    /// Entries it lacks of its primary's last known heads (summed over shards).
    pub lag_entries: u64,
}

/// One group as the copy sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupView {
    pub primary: Option<Primary>,
    /// Live members by node id, the primary included.
    pub nodes: Vec<Node>,
}

/// The copy: one consistent read of etcd.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MapCopy {
    pub state: MapState,
    /// The map when `state` is `Valid`.
    pub map: Option<ClusterMap>,
    /// The map key's `mod_revision` (0: no key).
    pub map_rev: i64,
    /// Each group of the map (and this member's own), by name.
    pub groups: BTreeMap<String, GroupView>,
    /// The newest move records, newest first (`cluster::read::MIGRATIONS_READ`).
    pub migrations: Vec<MigrationRecord>,
}

impl MapCopy {
    /// The copy's `map_epoch` (0 without a valid map).
    pub fn map_epoch(&self) -> u64 {
        self.map.as_ref().map_or(0, |m| m.map_epoch)
    }

    /// The primary of the group owning `slot`: `(group, primary)`; None without a valid map.
    pub fn route(&self, slot: u16) -> Option<(&str, Option<&Primary>)> {
        let group = self.map.as_ref()?.owner(slot)?;
        let primary = self.groups.get(group).and_then(|g| g.primary.as_ref());
        Some((group, primary))
    }

    /// The record of move `id`, if the copy holds it.
    pub fn migration(&self, id: &str) -> Option<&MigrationRecord> {
        self.migrations.iter().find(|m| m.id == id)
    }

    /// CLUSTER_INFO's and INFO's `state` is "ok": a valid map is read and every group that
    /// owns a slot has a primary.
    pub fn state_ok(&self) -> bool {
        let Some(map) = &self.map else {
            return false;
        };
        (map.slots.iter()).all(|(_, _, g)| self.groups.get(g).is_some_and(|v| v.primary.is_some()))
    }
}

/// The shared handle: the copy in force and its version.
#[derive(Debug, Default)]
pub struct View {
    current: Mutex<Arc<MapCopy>>,
    /// Grows at each change of the copy (0: never published).
    version: AtomicU64,
}

impl View {
    /// The copy in force.
    pub fn get(&self) -> Arc<MapCopy> {
        self.current
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// Changes whenever the copy does: a reader holding a copy of this version has the
    /// newest.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Publishes `copy` if it differs from the one in force; whether it did.
    pub(crate) fn publish(&self, copy: MapCopy) -> bool {
        let mut current = match self.current.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if **current == copy {
            return false;
        }
        *current = Arc::new(copy);
        self.version.fetch_add(1, Ordering::AcqRel);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_published_only_when_it_changes() {
        let v = View::default();
        assert_eq!(v.get().state, MapState::NotRead);
        assert!(!v.publish(MapCopy::default()));
        assert_eq!(v.version(), 0);
        let mut c = MapCopy {
            state: MapState::Valid,
            map: Some(ClusterMap::create(&["a".into(), "b".into()]).unwrap()),
            map_rev: 7,
            groups: BTreeMap::new(),
            migrations: Vec::new(),
        };
        assert!(v.publish(c.clone()));
        assert_eq!(v.version(), 1);
        assert_eq!(v.get().map_epoch(), 1);
        assert!(!v.get().state_ok(), "no primaries known");
        assert_eq!(v.get().route(0), Some(("a", None)));
        let p = Primary {
            node_id: "n1".into(),
            addr: "h:1".into(),
            epoch: 3,
            create_rev: 9,
        };
        for g in ["a", "b"] {
            let view = GroupView {
                primary: Some(p.clone()),
                nodes: Vec::new(),
            };
            c.groups.insert(g.into(), view);
        }
        assert!(v.publish(c));
        assert!(v.get().state_ok());
        assert_eq!(v.version(), 2);
    }
}
