//! What a member answers about the cluster from its map copy alone (docs/cluster.md, "Ops"):
//! `CLUSTER_SHARDS`, `CLUSTER_SLOTS`, `CLUSTER_INFO` and HELLO's `cluster` object. Pure reads
//! of one `MapCopy`: no etcd, no shard; each answer's size is bounded by the map (at most
//! 16384 ranges) and the live members.

use serde_json::{json, Value};

use super::map::{MigrationState, SLOTS};
use super::view::{GroupView, MapCopy};
use super::Cluster;

/// Finished moves `CLUSTER_SHARDS` lists, newest first.
const FINISHED_LISTED: usize = 10;

/// HELLO's `cluster` object: `{name, group, map_epoch, slots}`.
pub fn hello(cluster: &Cluster) -> Value {
    json!({
        "name": cluster.name,
        "group": cluster.group,
        "map_epoch": cluster.view.get().map_epoch(),
        "slots": SLOTS,
    })
}

/// `CLUSTER_SHARDS`: every group of the map (and this member's own) in name order, with its
/// slot ranges, primary and live members; the running moves.
pub fn shards(cluster: &Cluster) -> Value {
    let copy = cluster.view.get();
    shards_of(cluster, &copy)
}

fn shards_of(cluster: &Cluster, copy: &MapCopy) -> Value {
    let mut names: Vec<&String> = copy.groups.keys().collect();
    if let Some(map) = &copy.map {
        names.extend(map.groups.iter());
    }
    names.sort();
    names.dedup();
    let empty = GroupView::default();
    let shards: Vec<Value> = names
        .into_iter()
        .map(|g| group_json(cluster, copy, g, copy.groups.get(g).unwrap_or(&empty)))
        .collect();
    // The running moves (the map's), then the 10 newest finished ones (their records).
    let mut migrations: Vec<Value> = (copy.map.iter())
        .flat_map(|m| m.migrations.iter())
        .map(|m| {
            json!({"id": m.id, "slots": [m.lo, m.hi], "from": m.from, "to": m.to,
                   "state": "running", "reason": null, "started_at": m.started_at_ms,
                   "finished_at": null})
        })
        .collect();
    let finished = (copy.migrations.iter())
        .filter(|r| r.state != MigrationState::Running)
        .take(FINISHED_LISTED)
        .map(|r| {
            json!({"id": r.id, "slots": [r.lo, r.hi], "from": r.from, "to": r.to,
                   "state": r.state, "reason": r.reason, "started_at": r.started_at_ms,
                   "finished_at": r.finished_at_ms})
        });
    migrations.extend(finished);
    json!({
        "cluster": cluster.name,
        "map_epoch": copy.map_epoch(),
        "shards": shards,
        "migrations": migrations,
    })
}

fn group_json(cluster: &Cluster, copy: &MapCopy, group: &str, view: &GroupView) -> Value {
    let ranges: Vec<[u16; 2]> = (copy.map.iter())
        .flat_map(|m| m.ranges_of(group))
        .map(|(lo, hi)| [lo, hi])
        .collect();
    let nodes: Vec<Value> = (view.nodes.iter())
        .map(|n| {
            let role = match n.role.as_str() {
                "primary" => "primary",
                _ => "replica",
            };
            let health = match n.lag_entries > cluster.maximum_lag {
                true => "loading",
                false => "online",
            };
            json!({"node_id": n.node_id, "addr": n.addr, "http_addr": n.http_addr,
                   "role": role, "health": health, "lag_entries": n.lag_entries})
        })
        .collect();
    json!({
        "group": group,
        "slots": ranges,
        "primary": view.primary.as_ref().map(|p| &p.node_id),
        "epoch": view.primary.as_ref().map_or(0, |p| p.epoch),
        "nodes": nodes,
    })
}

/// `CLUSTER_SLOTS`: each range of the map, ordered by `lo`, with its group's primary address
/// (null without one) and its followers' addresses.
pub fn slots(cluster: &Cluster) -> Value {
    let copy = cluster.view.get();
    let empty = GroupView::default();
    let ranges: Vec<Value> = (copy.map.iter())
        .flat_map(|m| m.slots.iter())
        .map(|(lo, hi, g)| {
            let view = copy.groups.get(g).unwrap_or(&empty);
            let primary = view.primary.as_ref().map(|p| &p.addr);
            let replicas: Vec<&String> = (view.nodes.iter())
                .filter(|n| Some(&n.node_id) != view.primary.as_ref().map(|p| &p.node_id))
                .map(|n| &n.addr)
                .collect();
            json!([lo, hi, primary, replicas])
        })
        .collect();
    json!({"map_epoch": copy.map_epoch(), "slots": ranges})
}

/// `CLUSTER_INFO`: the cluster's state as this member sees it; `role` is this member's
/// (`primary`, `replica`).
pub fn info(cluster: &Cluster, role: &str) -> Value {
    let copy = cluster.view.get();
    let has_primary = |g: &str| copy.groups.get(g).is_some_and(|v| v.primary.is_some());
    let (mut assigned, mut ok) = (0u32, 0u32);
    for (lo, hi, g) in copy.map.iter().flat_map(|m| m.slots.iter()) {
        let n = u32::from(*hi) - u32::from(*lo) + 1;
        assigned += n;
        if has_primary(g) {
            ok += n;
        }
    }
    let mine: Vec<[u16; 2]> = (copy.map.iter())
        .flat_map(|m| m.ranges_of(&cluster.group))
        .map(|(lo, hi)| [lo, hi])
        .collect();
    json!({
        "state": if copy.state_ok() { "ok" } else { "fail" },
        "cluster": cluster.name,
        "map_epoch": copy.map_epoch(),
        "slots_assigned": assigned,
        "slots_ok": ok,
        "slots_fail": assigned - ok,
        "groups": copy.map.as_ref().map_or(0, |m| m.groups.len()),
        "my_group": cluster.group,
        "my_node_id": cluster.node_id,
        "my_role": role,
        "my_slots": mine,
        "migrations_running": copy.map.as_ref().map_or(0, |m| m.migrations.len()),
        "cleanup_pending": cluster.counters.cleanup_pending.load(std::sync::atomic::Ordering::Relaxed),
    })
}
