//! REPLICATION_STATUS.ha (docs/ha.md, "Operations"): what the HA thread last saw.

use std::sync::atomic::Ordering::Relaxed;

use serde_json::{json, Value};

use super::shared::Shared;
use crate::member::clock::boottime_ns;
use crate::member::ReplState;

pub fn json(shared: &Shared, state: &ReplState) -> Value {
    let view = shared.view();
    let until = state.lease_until();
    let remaining_ms = until.saturating_sub(boottime_ns()) / 1_000_000;
    let members: Vec<Value> = (view.members.iter())
        .map(|m| {
            json!({
                "node_id": m.node_id,
                "addr": m.addr,
                "role": m.role,
                "positions_sum": m.positions_sum,
                "lag_entries": m.lag_entries,
            })
        })
        .collect();
    let demotions: u64 = shared.stats.demotions.iter().map(|n| n.load(Relaxed)).sum();
    let mut v = json!({
        "cluster": view.cluster,
        "node_id": view.node_id,
        "epoch": state.epoch(),
        "primary": view.primary,
        "primary_addr": view.primary_addr,
        "lease_remaining_ms": remaining_ms,
        "paused": view.paused,
        "sync_set": view.sync_set,
        "blocked_reason": view.blocked_reason,
        "etcd_reachable": view.etcd_reachable,
        "members": members,
        "failovers": shared.stats.failovers.load(Relaxed),
        "demotions": demotions,
        "etcd_errors": shared.stats.etcd_errors.load(Relaxed),
        "watch_restarts": shared.stats.watch_restarts.load(Relaxed),
        "history": view.history,
    });
    // Cluster mode (docs/cluster.md): the member's group and its copy's map epoch.
    if let Some(c) = &shared.cluster {
        v["group"] = c.group.clone().into();
        v["map_epoch"] = c.view.get().map_epoch().into();
    }
    v
}
