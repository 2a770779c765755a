//! REPLICATION_STATUS.ha (docs/ha.md, "Operations"): what the HA thread last saw.

use serde_json::{json, Value};

use super::clock::boottime_ns;
use super::shared::Shared;
use crate::replication::ReplState;

pub fn json(shared: &Shared, state: &ReplState) -> Value {
    let view = shared.view();
    let until = state.lease_until();
    let remaining_ms = until.saturating_sub(boottime_ns()) / 1_000_000;
    let members: Vec<Value> = view
        .members
        .iter()
        .map(|(node_id, addr, role, sum)| {
            json!({"node_id": node_id, "addr": addr, "role": role, "positions_sum": sum})
        })
        .collect();
    json!({
        "epoch": state.epoch(),
        "primary": view.primary,
        "primary_addr": view.primary_addr,
        "lease_remaining_ms": remaining_ms,
        "blocked_reason": view.blocked_reason,
        "etcd_reachable": view.etcd_reachable,
        "members": members,
        "failovers": shared.stats.failovers.load(std::sync::atomic::Ordering::Relaxed),
        "demotions": shared.stats.demotions.load(std::sync::atomic::Ordering::Relaxed),
        "etcd_errors": shared.stats.etcd_errors.load(std::sync::atomic::Ordering::Relaxed),
    })
}
