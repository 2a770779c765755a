//! A node id is live in one group of a cluster at most (docs/cluster.md, "Unique node
//! ids"). Within a group, the member key itself does it (docs/ha.md: a second live process
//! with the same `node_id` exits 1). Across groups the keys differ (`groups/<g>/members/<id>`),
//! so once this process holds its own key it looks for the same id in the other groups: a
//! key there that was created before its own (a smaller `create_revision`: that process came
//! first) and that keeps being renewed (its `mod_revision` moves within half a TTL: members
//! rewrite their key every sixth of one) belongs to a live process that came first, and this
//! one exits 1. One that stays unchanged belongs to a dead process (it goes with its lease);
//! one created after this process's key is the newcomer's, which makes the same check and
//! exits.

use std::time::Duration;

use etcd_client::GetOptions;

use super::keys::ClusterKeys;
use crate::control::ha::etcd::Etcd;
use crate::control::ha::HaError;

/// The group of a live process that holds `node_id` in another group and came first, if any.
/// `group` is this member's; its own member key must exist already.
pub async fn live_elsewhere(
    etcd: &Etcd,
    keys: &ClusterKeys,
    group: &str,
    node_id: &str,
    ttl_ms: u64,
) -> Result<Option<String>, HaError> {
    let own = keys.group(group).member(node_id);
    let resp = etcd
        .get("get own member key", own, GetOptions::new())
        .await?;
    let Some(mine) = resp.kvs().first().map(|kv| kv.create_revision()) else {
        return Ok(None);
    };
    let opts = GetOptions::new().with_prefix().with_keys_only();
    let resp = etcd
        .get("cluster member keys", keys.groups_prefix(), opts)
        .await?;
    let wanted = format!("members/{node_id}");
    let earlier: Vec<(String, String, i64)> = (resp.kvs().iter())
        .filter(|kv| kv.create_revision() < mine)
        .filter_map(|kv| {
            let key = kv.key_str().ok()?;
            let (g, rest) = keys.split_group(key)?;
            (g != group && rest == wanted)
                .then(|| (g.to_string(), key.to_string(), kv.mod_revision()))
        })
        .collect();
    if earlier.is_empty() {
        return Ok(None);
    }
    tokio::time::sleep(Duration::from_millis(ttl_ms / 2)).await;
    for (g, key, rev) in earlier {
        let resp = etcd
            .get("cluster member key", key, GetOptions::new())
            .await?;
        if resp
            .kvs()
            .first()
            .is_some_and(|kv| kv.mod_revision() != rev)
        {
            return Ok(Some(g));
        }
    }
    Ok(None)
}
