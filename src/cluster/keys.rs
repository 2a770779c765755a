//! The cluster-level etcd keys (docs/cluster.md, "etcd keys"), under `/smdb/<cluster>/`:
//! `map` (no lease), `migrations/<id>` (no lease, kept) and each group's failover keys under
//! `groups/<group>/` (`control::ha::keys::Keys::group`). The name `/smdb/<cluster>/` is either
//! one standalone failover group's or a cluster's: `standalone_leader` tells them apart.

use crate::control::ha::keys::Keys;

#[derive(Debug, Clone)]
pub struct ClusterKeys {
    cluster: String,
    prefix: String,
}

impl ClusterKeys {
    pub fn new(cluster: &str) -> ClusterKeys {
        ClusterKeys {
            cluster: cluster.to_string(),
            prefix: format!("/smdb/{cluster}/"),
        }
    }

    /// Everything of the cluster (what each member watches).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The slot map (`cluster::map::ClusterMap`).
    pub fn map(&self) -> String {
        format!("{}map", self.prefix)
    }

    /// One move's record (`cluster::map::MigrationRecord`).
    pub fn migration(&self, id: &str) -> String {
        format!("{}migrations/{id}", self.prefix)
    }

    /// Every group's keys.
    pub fn groups_prefix(&self) -> String {
        format!("{}groups/", self.prefix)
    }

    /// The failover keys of `group`.
    pub fn group(&self, group: &str) -> Keys {
        Keys::group(&self.cluster, group)
    }

    /// The leader key of a standalone failover group of this name: while it exists the name
    /// is not a cluster's.
    pub fn standalone_leader(&self) -> String {
        Keys::new(&self.cluster).leader()
    }

    /// `(group, rest)` of a key under `groups/`, None for other keys.
    pub fn split_group<'a>(&self, key: &'a str) -> Option<(&'a str, &'a str)> {
        key.strip_prefix(&self.prefix)?
            .strip_prefix("groups/")?
            .split_once('/')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_keys_and_group_keys_share_the_prefix() {
        let k = ClusterKeys::new("c");
        assert_eq!(k.map(), "/smdb/c/map");
        assert_eq!(k.migration("00ff"), "/smdb/c/migrations/00ff");
        assert_eq!(k.group("g1").leader(), "/smdb/c/groups/g1/leader");
        assert_eq!(k.standalone_leader(), "/smdb/c/leader");
        assert_eq!(
            k.split_group("/smdb/c/groups/g1/members/n1"),
            Some(("g1", "members/n1"))
        );
        assert_eq!(k.split_group("/smdb/c/map"), None);
        assert_eq!(k.split_group("/smdb/other/groups/g/leader"), None);
    }
}
