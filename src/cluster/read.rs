//! One consistent read of what the map copy holds (docs/cluster.md, "The copy"): the map
//! key, and for each group asked for its leader key and its live member keys, in one etcd
//! transaction of gets (one revision), and the copy made of it (`copy`, pure).
//!
//! Bound: a transaction carries at most `GROUPS_PER_TXN` groups (two gets each, plus the map:
//! well inside etcd's default 128 operations per transaction); a cluster with more groups is
//! read in several transactions, each consistent in itself.

use std::collections::BTreeMap;

use etcd_client::{GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};

use super::keys::ClusterKeys;
use super::map::{ClusterMap, MigrationRecord};
use super::view::{GroupView, MapCopy, MapState, Node, Primary};
use crate::control::ha::etcd::Etcd;
use crate::control::ha::keys::{Leader, Member};
use crate::control::ha::HaError;

/// Groups read per transaction.
const GROUPS_PER_TXN: usize = 60;
/// Move records read, newest first: the running ones and the newest finished ones
/// (`CLUSTER_SHARDS` lists 10), with room for moves running at once.
pub const MIGRATIONS_READ: i64 = 32;
/// etcd's default `--max-txn-ops`.
const TXN_OPS_MAX: usize = 128;
const _: () = assert!(
    2 * GROUPS_PER_TXN < TXN_OPS_MAX,
    "two gets a group, and the map"
);

/// What one read saw.
#[derive(Debug, Default)]
pub struct Read {
    /// The map key's value and `mod_revision`.
    pub map: Option<(Vec<u8>, i64)>,
    /// Per group asked for: its leader key and member keys.
    pub groups: BTreeMap<String, GroupKeys>,
    /// The newest `migrations/<id>` records (by their last change).
    pub migrations: Vec<MigrationRecord>,
}

/// One group's leader key (value, `create_revision`) and live member keys.
pub type GroupKeys = (Option<(Leader, i64)>, Vec<Member>);

/// Reads the map and `groups`' leader and member keys.
pub async fn read(etcd: &Etcd, keys: &ClusterKeys, groups: &[String]) -> Result<Read, HaError> {
    let mut out = Read::default();
    let chunks: Vec<&[String]> = match groups.is_empty() {
        true => vec![&[]],
        false => groups.chunks(GROUPS_PER_TXN).collect(),
    };
    for (i, chunk) in chunks.into_iter().enumerate() {
        let mut ops = Vec::with_capacity(1 + 2 * chunk.len());
        if i == 0 {
            ops.push(TxnOp::get(keys.map(), None));
            let newest = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Mod, SortOrder::Descend)
                .with_limit(MIGRATIONS_READ);
            ops.push(TxnOp::get(keys.migration(""), Some(newest)));
        }
        for g in chunk {
            let k = keys.group(g);
            ops.push(TxnOp::get(k.leader(), None));
            let members = k.member("");
            ops.push(TxnOp::get(members, Some(GetOptions::new().with_prefix())));
        }
        let resp = etcd.txn("cluster read", Txn::new().and_then(ops)).await?;
        let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        });
        if i == 0 {
            let map = gets.next().and_then(|g| g.kvs().first().cloned());
            out.map = map.map(|kv| (kv.value().to_vec(), kv.mod_revision()));
            let records = gets.next().map(|g| g.kvs().to_vec()).unwrap_or_default();
            out.migrations = (records.iter())
                .filter_map(|kv| serde_json::from_slice(kv.value()).ok())
                .collect();
        }
        for g in chunk {
            let leader = gets.next().and_then(|r| r.kvs().first().cloned());
            let leader = leader.and_then(|kv| {
                let l = serde_json::from_slice::<Leader>(kv.value()).ok()?;
                Some((l, kv.create_revision()))
            });
            let members = (gets.next().map(|r| r.kvs().to_vec()).unwrap_or_default())
                .iter()
                .filter_map(|kv| serde_json::from_slice::<Member>(kv.value()).ok())
                .collect();
            out.groups.insert(g.clone(), (leader, members));
        }
    }
    Ok(out)
}

/// The copy a read makes: the map checked (one that breaks a rule is reported, never
/// served), each group read with its primary and live members.
pub fn copy(read: &Read) -> MapCopy {
    let (state, map, map_rev) = match &read.map {
        None => (MapState::NoMap, None, 0),
        Some((bytes, rev)) => match ClusterMap::parse(bytes) {
            Ok(map) => (MapState::Valid, Some(map), *rev),
            Err(e) => (MapState::Invalid(e.to_string()), None, *rev),
        },
    };
    let groups = (read.groups.iter())
        .map(|(name, (leader, members))| (name.clone(), group_view(leader, members)))
        .collect();
    MapCopy {
        state,
        map,
        map_rev,
        groups,
        migrations: read.migrations.clone(),
    }
}

fn group_view(leader: &Option<(Leader, i64)>, members: &[Member]) -> GroupView {
    let heads: u64 = (members.iter())
        .map(|m| m.primary_heads.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    let mut nodes: Vec<Node> = (members.iter())
        .map(|m| {
            let part = m.cluster.as_ref();
            Node {
                node_id: m.node_id.clone(),
                addr: m.addr.clone(),
                http_addr: part.and_then(|c| c.http_addr.clone()),
                role: m.role.clone(),
                map_epoch: part.map_or(0, |c| c.map_epoch),
                lag_entries: heads.saturating_sub(m.positions.iter().sum()),
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    GroupView {
        primary: leader.as_ref().map(|(l, rev)| Primary {
            node_id: l.node_id.clone(),
            addr: l.addr.clone(),
            epoch: l.epoch,
            create_rev: *rev,
        }),
        nodes,
    }
}

/// The groups a copy of `map` reads: the map's and `own`, in name order.
pub fn groups_to_read(map: Option<&ClusterMap>, own: &str) -> Vec<String> {
    let mut groups: Vec<String> = map.map_or(Vec::new(), |m| m.groups.clone());
    groups.push(own.to_string());
    groups.sort();
    groups.dedup();
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_that_breaks_a_rule_is_reported_not_served() {
        let read = Read {
            map: Some((br#"{"map_epoch":1,"groups":["a"],"slots":[]}"#.to_vec(), 5)),
            ..Read::default()
        };
        let c = copy(&read);
        assert!(matches!(c.state, MapState::Invalid(ref why) if why.contains("slot 0")));
        assert!(c.map.is_none());
        assert_eq!(c.map_rev, 5);
        assert_eq!(copy(&Read::default()).state, MapState::NoMap);
        let m = ClusterMap::create(&["b".into(), "a".into()]).unwrap();
        assert_eq!(groups_to_read(Some(&m), "c"), vec!["a", "b", "c"]);
        assert_eq!(groups_to_read(None, "c"), vec!["c"]);
    }
}
