//! One scrape's figures: plain data, gathered on the control executor
//! (`control::metrics::gather`); `families.rs` turns it into metrics.

use super::front::FrontTotals;
use super::shard::ShardStats;
use crate::config::Role;

/// Everything one exposition shows.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub fronts: FrontTotals,
    /// In shard order.
    pub shards: Vec<ShardStats>,
    pub connections_limit: u64,
    pub uptime_seconds: f64,
    pub memory_used_bytes: u64,
    /// Summed over the fronts' `SubsStats`.
    pub subscriptions_active: u64,
    pub events_broadcast: u64,
    /// Pushes queued for subscribers, by source shard.
    pub pushes_queued: Vec<u64>,
    pub replication: Option<ReplicationStats>,
    /// Failover figures (None when `ha.enabled` is false).
    pub ha: Option<crate::metrics::ha::HaFigures>,
    /// Cluster figures (None outside cluster mode).
    pub cluster: Option<crate::metrics::cluster::ClusterFigures>,
}

/// Replication figures by role (values arrive with the replication issue; zero until then).
#[derive(Debug, Clone, PartialEq)]
pub enum ReplicationStats {
    Primary(PrimaryStats),
    Replica(ReplicaStats),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PrimaryStats {
    pub connected_replicas: u64,
    pub entries_sent: u64,
    pub sync_timeouts: u64,
    pub slow_replica_disconnects: u64,
    pub replicas: Vec<ReplicaPosition>,
    /// Entries dropped from this member's log when it rejoined as a replica.
    pub truncated_entries: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaPosition {
    pub replica_id: String,
    pub lag_entries: u64,
    pub last_acked_sequence: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaStats {
    pub lag_entries: u64,
    pub lag_seconds: f64,
    pub truncated_entries: u64,
}

impl ReplicationStats {
    /// Empty figures for `role` (None: standalone, no replication metrics at all).
    pub fn for_role(role: Option<Role>) -> Option<ReplicationStats> {
        match role? {
            Role::Primary => Some(ReplicationStats::Primary(PrimaryStats::default())),
            Role::Replica => Some(ReplicationStats::Replica(ReplicaStats::default())),
        }
    }
}
