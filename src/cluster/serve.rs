//! Who serves a slot (docs/cluster.md, "Who serves a slot"): the ownership check an instance
//! op passes on a cluster member, by the member's map copy alone. The checks run in this
//! order: params, `CROSS_SLOT` (atomic batches), ownership here (`MOVED` naming the owning
//! group's primary, `CLUSTERDOWN` when it has none or no map is read), then the role gate
//! (`READ_ONLY_MODE` / `NO_PRIMARY`), then the op. One lock and one `Arc` copy per request;
//! each `MOVED` also counts once in `Cluster::counters` (`svc_cluster_moved_total`).
//!
//! The listings (LIST_INSTANCES, FIND_INSTANCES, SCAN_INSTANCES) follow the same rule per
//! item: `Owned` keeps the instances of the slots this member's group owns by its copy, so
//! the data of slots moved away, until the settling purges it, is never listed.

use shards::routing::slot_of;
use shards::{ErrorCode, Rejection};

use super::Cluster;

/// Ok when this member's group owns the slot of `id` by its copy; else the answer.
pub fn check(cluster: &Cluster, id: &str) -> Result<(), Rejection> {
    let slot = slot_of(id);
    let copy = cluster.view.get();
    let map_epoch = copy.map_epoch();
    match copy.route(slot) {
        Some((group, _)) if group == cluster.group => Ok(()),
        Some((group, Some(primary))) => {
            let http_addr = (copy.groups.get(group).into_iter())
                .flat_map(|g| g.nodes.iter())
                .find(|n| n.node_id == primary.node_id)
                .and_then(|n| n.http_addr.clone());
            cluster.counters.count_moved();
            Err(Rejection::new(
                ErrorCode::Moved,
                format!(
                    "slot {slot} is served by group {group}: send it to {}",
                    primary.addr
                ),
            )
            .with("slot", slot)
            .with("group", group)
            .with("addr", primary.addr.as_str())
            .with("http_addr", http_addr)
            .with("map_epoch", map_epoch))
        }
        Some((group, None)) => Err(Rejection::new(
            ErrorCode::ClusterDown,
            format!("slot {slot} belongs to group {group}, which has no primary"),
        )
        .with("slot", slot)
        .with("group", group)
        .with("map_epoch", map_epoch)
        .with("reason", "no_primary")),
        None => Err(no_map(slot, map_epoch)),
    }
}

/// The slots this member's group owns by its map copy: what its listings may show. Without
/// a valid map the group owns nothing (instance ops answer `CLUSTERDOWN` meanwhile).
#[derive(Debug, Clone, Default)]
pub struct Owned {
    /// Sorted, disjoint ranges (the map's own order).
    ranges: Vec<(u16, u16)>,
}

impl Owned {
    /// What `cluster`'s group owns by the copy in force now.
    pub fn now(cluster: &Cluster) -> Owned {
        let copy = cluster.view.get();
        let ranges = (copy.map.as_ref())
            .map(|m| m.ranges_of(&cluster.group))
            .unwrap_or_default();
        Owned { ranges }
    }

    /// Whether the instance `id` lies in a slot owned here.
    pub fn holds(&self, id: &str) -> bool {
        let slot = slot_of(id);
        (self.ranges.iter()).any(|&(lo, hi)| lo <= slot && slot <= hi)
    }
}

/// `CLUSTERDOWN` before a map is read (or while none exists).
fn no_map(slot: u16, map_epoch: u64) -> Rejection {
    Rejection::new(
        ErrorCode::ClusterDown,
        "this member has no slot map (the cluster is not created, or its map is not read yet)",
    )
    .with("slot", slot)
    .with("map_epoch", map_epoch)
    .with("reason", "no_map")
}

#[cfg(test)]
mod tests {
    use super::Owned;

    #[test]
    fn owned_holds_the_ids_of_its_ranges_only() {
        // slot("hello") = 866, slot("foo") = 12182, slot("{o-7}:pay") = 340.
        let owned = Owned {
            ranges: vec![(0, 340), (800, 8191)],
        };
        assert!(owned.holds("hello"));
        assert!(owned.holds("{o-7}:pay"));
        assert!(!owned.holds("foo"));
        assert!(!Owned::default().holds("hello"), "no map: nothing owned");
    }
}
