//! The etcd keys of one failover group (docs/ha.md, "etcd keys"), all under `/smdb/<cluster>/`
//! (in cluster mode under `/smdb/<cluster>/groups/<group>/`, docs/cluster.md), and the
//! JSON values stored in them.

use serde::{Deserialize, Serialize};

/// Key names of one failover group.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// A standalone failover group: its keys are the cluster's (`/smdb/<cluster>/`).
    pub fn new(cluster: &str) -> Keys {
        Keys {
            prefix: format!("/smdb/{cluster}/"),
        }
    }

    /// The keys of `group` of a cluster in cluster mode: `/smdb/<cluster>/groups/<group>/`.
    pub fn group(cluster: &str, group: &str) -> Keys {
        Keys {
            prefix: format!("/smdb/{cluster}/groups/{group}/"),
        }
    }

    /// Everything of the group (one range read).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Held by the primary, on its lease.
    pub fn leader(&self) -> String {
        format!("{}leader", self.prefix)
    }

    /// The highest epoch handed out (decimal).
    pub fn epoch(&self) -> String {
        format!("{}epoch", self.prefix)
    }

    /// Present while automatic failover is paused (`HA_PAUSE`; no lease: it outlives members).
    pub fn paused(&self) -> String {
        format!("{}paused", self.prefix)
    }

    /// Present during a `SWITCHOVER` (`Switchover`; on a lease of its own, so it goes by
    /// itself at its deadline): only its target may campaign.
    pub fn switchover(&self) -> String {
        format!("{}switchover", self.prefix)
    }

    /// One per term: who led it, from when and from which offsets (`History`). One key per
    /// election, kept (a few hundred bytes each).
    pub fn history(&self, epoch: u64) -> String {
        format!("{}history/{epoch:020}", self.prefix)
    }

    /// Whether `key` is a history key.
    pub fn is_history(&self, key: &str) -> bool {
        key.strip_prefix(&self.prefix)
            .is_some_and(|k| k.starts_with("history/"))
    }

    /// The sync set (`SyncSet`): in sync mode, the members whose acknowledgements count, kept
    /// by the primary (every write guarded by its leader key). No lease: it outlives members.
    pub fn sync(&self) -> String {
        format!("{}sync", self.prefix)
    }

    /// One per live member, on its lease.
    pub fn member(&self, node_id: &str) -> String {
        format!("{}members/{node_id}", self.prefix)
    }

    /// The node id of a member key, None for other keys.
    pub fn member_of<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(&self.prefix)?.strip_prefix("members/")
    }
}

/// A history key's value: the term of `epoch`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct History {
    pub epoch: u64,
    pub node_id: String,
    /// Wall clock when the campaign transaction committed.
    pub started_at_ms: u64,
    /// Per shard, the durable head once the term's epoch records were written (empty until the
    /// new primary has them).
    #[serde(default)]
    pub start_offsets: Vec<u64>,
}

/// The sync key's value (docs/ha.md "The sync set"): in sync mode only the
/// acknowledgements of `members` count toward `replication.sync_replicas`, and only a member of
/// it may be elected, after final positions from |members| - k + 1 of them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct SyncSet {
    /// The term that wrote it.
    pub epoch: u64,
    /// Node ids, sorted.
    pub members: Vec<String>,
}

/// The switchover key's value (`control::ha::handover`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Switchover {
    /// The primary handing over, and the member it hands over to (node ids).
    pub from: String,
    pub to: String,
    /// Wall clock (ms) when the key's lease runs out; shown to people, never compared.
    pub deadline_ms: u64,
    /// Written by the primary's resignation: `to` has acknowledged the primary's head after
    /// writes stopped, so it holds every acknowledged write and may campaign without the
    /// eligibility rules. Before that `to` campaigns only if the rules allow.
    pub caught_up: bool,
}

/// The leader key's value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Leader {
    pub node_id: String,
    /// The process that holds it (random per process).
    pub instance: String,
    /// The client address members follow and clients are sent to.
    pub addr: String,
    pub epoch: u64,
}

/// A member key's value, rewritten at every lease renewal.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Member {
    pub node_id: String,
    pub instance: String,
    pub addr: String,
    /// "primary" or "follower".
    pub role: String,
    /// The highest epoch in its logs.
    pub epoch: u64,
    /// Durable heads per shard.
    pub positions: Vec<u64>,
    /// The primary's heads it last heard of (per shard; empty when none).
    pub primary_heads: Vec<u64>,
    /// Its follower stream runs (it acknowledges a primary).
    pub following: bool,
    pub nofailover: bool,
    /// Its logs refuse writes (one poisoned, or refusing for lack of space): it does not
    /// campaign, and the others do not wait for it as an equal that goes first.
    #[serde(default)]
    pub refuses_writes: bool,
    /// Cluster mode only (absent in a standalone group's keys): `group`, `map_epoch`,
    /// `http_addr`.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<MemberCluster>,
}

/// What a member key adds in cluster mode (docs/cluster.md, "etcd keys").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberCluster {
    pub group: String,
    /// The map epoch of the member's copy (0 before it has read a map).
    pub map_epoch: u64,
    /// Its HTTP address (null when `http.enabled` is false).
    pub http_addr: Option<String>,
}

/// A random instance id for this process (16 hex digits from the kernel's random source).
pub fn instance_id() -> String {
    let b = crate::util::random::random_u64().to_le_bytes();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_under_the_cluster_prefix() {
        let k = Keys::new("c1");
        assert_eq!(k.leader(), "/smdb/c1/leader");
        assert_eq!(k.epoch(), "/smdb/c1/epoch");
        assert_eq!(k.member("n1"), "/smdb/c1/members/n1");
        assert_eq!(k.switchover(), "/smdb/c1/switchover");
        assert_eq!(k.sync(), "/smdb/c1/sync");
        assert_eq!(k.member_of("/smdb/c1/sync"), None);
        assert_eq!(k.member_of("/smdb/c1/members/n1"), Some("n1"));
        assert_eq!(k.member_of("/smdb/c1/leader"), None);
        let g = Keys::group("c1", "g2");
        assert_eq!(g.leader(), "/smdb/c1/groups/g2/leader");
        assert_eq!(g.member("n1"), "/smdb/c1/groups/g2/members/n1");
        assert_eq!(g.member_of("/smdb/c1/groups/g2/members/n1"), Some("n1"));
        assert_eq!(g.member_of("/smdb/c1/members/n1"), None);
        assert!(g.is_history("/smdb/c1/groups/g2/history/00000000000000000001"));
        let (a, b) = (instance_id(), instance_id());
        let mut m = Member {
            node_id: "n1".into(),
            instance: a.clone(),
            addr: "h:1".into(),
            role: "follower".into(),
            epoch: 2,
            positions: vec![3],
            primary_heads: vec![],
            following: true,
            nofailover: false,
            refuses_writes: false,
            cluster: None,
        };
        let text = serde_json::to_string(&m).unwrap();
        assert!(
            !text.contains("group"),
            "a standalone key is as before: {text}"
        );
        assert_eq!(serde_json::from_str::<Member>(&text).unwrap(), m);
        m.cluster = Some(MemberCluster {
            group: "g1".into(),
            map_epoch: 4,
            http_addr: None,
        });
        let text = serde_json::to_string(&m).unwrap();
        assert!(
            text.ends_with(r#""group":"g1","map_epoch":4,"http_addr":null}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Member>(&text).unwrap(), m);
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
    }
}
