//! Cluster-mode fixtures (docs/cluster.md): members of several groups of one cluster on one
//! etcd, each group's primary found, and the map created.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::etcd::Etcd;
use super::ha::{member_config, one_primary};
use super::{temp_dir, Server};

/// A member `node` of `group` in `cluster` (failover on, async mode, one shard).
pub fn member(etcd: &Etcd, cluster: &str, node: &str, group: &str) -> String {
    member_config(etcd, cluster, node, "async")
        + &format!("[cluster]\nenabled = true\ngroup = \"{group}\"\n")
}

/// Starts `per_group` members of each of `groups` (group by group: member i of group g is
/// `members[g * per_group + i]`, node id `<group><i>`) and waits for each group's one
/// primary; returns the temp dirs (kept first so they outlive the servers), the members and
/// each group's primary as an index into `members`.
pub fn start_groups(
    etcd: &Etcd,
    cluster: &str,
    groups: &[&str],
    per_group: usize,
) -> (Vec<tempfile::TempDir>, Vec<Server>, Vec<usize>) {
    let n = groups.len() * per_group;
    let dirs: Vec<_> = (0..n).map(|_| temp_dir()).collect();
    let members: Vec<Server> = (0..n)
        .map(|i| {
            let group = groups[i / per_group];
            let cfg = member(etcd, cluster, &format!("{group}{}", i % per_group), group);
            Server::start_in(dirs[i].path(), &cfg).expect("a member starts")
        })
        .collect();
    let primaries = (0..groups.len())
        .map(|g| {
            let of: Vec<&Server> = members[g * per_group..(g + 1) * per_group].iter().collect();
            g * per_group + one_primary(&of, Duration::from_secs(20))
        })
        .collect();
    (dirs, members, primaries)
}

/// `CLUSTER_CREATE` on `members[0]`, then waits until every member's `CLUSTER_INFO` is `ok`
/// (at most `within` from the answer); returns the answer.
pub fn create(members: &[Server], within: Duration) -> Value {
    let created = (members[0].client())
        .call("CLUSTER_CREATE", json!({"timeout_ms": 10000}))
        .expect("CLUSTER_CREATE");
    let since = Instant::now();
    for m in members {
        loop {
            let info = m.client().call("CLUSTER_INFO", json!({})).expect("info");
            if info["state"] == "ok" && info["map_epoch"] == created["map_epoch"] {
                break;
            }
            assert!(since.elapsed() < within, "{}: {info}", m.addr);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    created
}
