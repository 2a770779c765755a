//! Cluster mode, the etcd side (docs/cluster.md): several failover groups on one etcd
//! splitting the 16384 hash slots by one map key. One entry point, `Cluster`: made at boot
//! for a member with `cluster.enabled` (`Cluster::new`), handed to the HA thread, which keeps
//! its map copy (`follow`, a task on that thread's runtime), and to the executors, which read
//! the copy (`Cluster::view`) and ask for changes (`admin::create`, `admin::add_group`) without
//! ever talking to etcd themselves.
//!
//! - `map`: the slot map and the move records (pure: no I/O);
//! - `keys`: the cluster-level etcd keys (`map`, `migrations/<id>`, `groups/<group>/`);
//! - `view`: the map copy every executor reads, swapped whole at each change;
//! - `read`: one consistent read of the map and each group's primary and live members;
//! - `follow`: the loop that keeps the copy within 1 s of etcd (the watch wakes, a read
//!   decides);
//! - `admin`: creating the map and adding a group, run on the HA thread's runtime, and a
//!   move's transactions;
//! - `define`: definitions in every group (PUT_MACHINE forwarded, copies after create and
//!   add-group);
//! - `moves`: moving slots between groups (the ops, the source's run, the target's import,
//!   the clean-up);
//! - `answers`: the replies of the map ops and HELLO's `cluster` object, from the copy;
//! - `serve`: who serves a slot: the ownership check of an instance op (`MOVED`,
//!   `CLUSTERDOWN`);
//! - `counters`: the answers this member gave (`MOVED`, `TRYAGAIN`), for the metrics;
//! - `unique`: a node id is live in one group of the cluster at most;
//! - `error`: what goes wrong, with its context.
//!
//! Elsewhere: the `[cluster]` section (`crate::config::cluster`); each group's failover keys
//! (`crate::control::ha::keys::Keys::group`); the slot function and the answers `MOVED`,
//! `CLUSTERDOWN` (the protocol side).

pub mod admin;
pub mod answers;
pub mod counters;
pub mod define;
mod error;
mod follow;
pub mod keys;
pub mod map;
pub mod moves;
mod read;
pub mod serve;
pub mod unique;
pub mod view;

use std::sync::Arc;

use serde_json::{json, Value};

use crate::config::Config;
pub use counters::Counters;
pub use error::ClusterError;
pub use follow::spawn as spawn_follower;
pub use map::ClusterMap;
pub use view::{MapCopy, View};

/// One member's cluster capability: who it is, its map copy, and the requests waiting for
/// the HA thread.
#[derive(Debug)]
pub struct Cluster {
    /// `ha.cluster`.
    pub name: String,
    /// `cluster.group`.
    pub group: String,
    /// `ha.node_id`.
    pub node_id: String,
    /// The HTTP address clients of this member use (`http_addr` in member keys).
    pub http_addr: Option<String>,
    /// `ha.maximum_lag_on_failover`: a member lagging more is `loading` in CLUSTER_SHARDS.
    pub maximum_lag: u64,
    pub keys: keys::ClusterKeys,
    /// The map copy (read-only outside `follow`).
    pub view: View,
    /// The answers this member gave (`svc_cluster_moved_total`, ...).
    pub counters: Counters,
    /// `[cluster]`'s `move_*` keys.
    pub moves: crate::config::cluster::Cluster,
    /// `network.max_frame_bytes`: a move's chunks stay well under it.
    pub max_frame_bytes: usize,
    /// `replication.mode` is sync: a move's target answers `end` once its sync set holds
    /// it; in async mode once one live follower does (`moves::import`).
    pub sync_mode: bool,
    /// How this member dials another group's primary (the replication link's TLS, token and
    /// PROXY header; docs/cluster.md): None when those settings do not load.
    pub link: Option<crate::control::replication::follower::Settings>,
    /// `CLUSTER_CREATE` and `CLUSTER_ADD_GROUP` waiting for the HA thread.
    pub(crate) requests: admin::Requests,
    /// Starts the follower's next read before its poll (the watch, a request).
    pub(crate) wake: Arc<crate::control::ha::wake::Wake>,
}

impl Cluster {
    /// The capability of a member with `cluster.enabled` (None otherwise). `http_bound` is the
    /// bound HTTP address (None: `http.enabled = false`); `advertise` the client address
    /// other members dial (`ha.advertise_addr`, else the bound one).
    pub fn new(
        config: &Config,
        http_bound: Option<std::net::SocketAddr>,
        advertise: &str,
    ) -> Option<Arc<Cluster>> {
        let group = config.cluster.my_group()?.to_string();
        let name = config.ha.cluster.clone();
        Some(Arc::new(Cluster {
            keys: keys::ClusterKeys::new(&name),
            name,
            group,
            node_id: config.ha.node_id.clone().unwrap_or_default(),
            http_addr: http_bound.map(|b| http_addr(b, advertise)),
            maximum_lag: config.ha.maximum_lag_on_failover,
            view: View::default(),
            counters: Counters::default(),
            moves: config.cluster.clone(),
            max_frame_bytes: config.max_frame_bytes() as usize,
            sync_mode: config.replication.mode == crate::config::ReplicationMode::Sync,
            link: crate::control::replication::follower::Settings::for_upstream(
                config,
                String::new(),
            )
            .ok(),
            requests: admin::Requests::default(),
            wake: Arc::default(),
        }))
    }

    /// INFO's `cluster` object: `{name, group, map_epoch, slots_owned, state}` by this
    /// member's copy (`map_epoch` 0 and `state` "fail" until a map is read).
    pub fn info_json(&self) -> Value {
        let copy = self.view.get();
        json!({
            "name": self.name,
            "group": self.group,
            "map_epoch": copy.map_epoch(),
            "slots_owned": copy.map.as_ref().map_or(0, |m| m.slots_owned(&self.group)),
            "state": if copy.state_ok() { "ok" } else { "fail" },
        })
    }
}

/// The HTTP address in member keys: the bound one, or, when it binds all interfaces, the host
/// of `advertise` with the bound port.
pub fn http_addr(bound: std::net::SocketAddr, advertise: &str) -> String {
    if !bound.ip().is_unspecified() {
        return bound.to_string();
    }
    let host = advertise.rsplit_once(':').map_or(advertise, |(h, _)| h);
    format!("{host}:{}", bound.port())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_http_addr_takes_the_advertised_host_when_http_binds_every_interface() {
        let b = |s: &str| s.parse().unwrap();
        assert_eq!(super::http_addr(b("127.0.0.1:80"), "h:1"), "127.0.0.1:80");
        assert_eq!(super::http_addr(b("0.0.0.0:7480"), "db1:7401"), "db1:7480");
        assert_eq!(
            super::http_addr(b("[::]:7480"), "[fe80::1]:7401"),
            "[fe80::1]:7480"
        );
    }
}
