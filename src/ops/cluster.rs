//! The `CLUSTER_*` ops (docs/cluster.md, "Ops"), answered on the front core.
//!
//! `CLUSTER_KEYSLOT` is a pure function of its id, served by every server, standalone included.
//! The seven others need the slot map: a server without `[cluster]` refuses them
//! (`BAD_REQUEST`, `details.cluster: false`), and a cluster member answers them through
//! `map_op`, the one entry point the slot map's side fills in. Nothing here holds state or
//! touches a shard, etcd or the network; a request's whole cost is bounded by its params (an id
//! of at most `KEYSLOT_ID_BYTES_MAX` bytes).

use serde::Deserialize;
use serde_json::{json, Value};
use shards::routing::{routing_key, slot_of, SLOT_COUNT};
use shards::{ErrorCode, Rejection};

use super::params::parse;
use crate::protocol::{routes, Op};

/// Longest id `CLUSTER_KEYSLOT` takes, in bytes: the bound of an instance id (docs/protocol.md,
/// "Instances and events"), so every id a server can hold has an answer.
pub const KEYSLOT_ID_BYTES_MAX: usize = 256;

/// This member's place in a cluster (`[cluster]` on): what HELLO says and the map ops need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `ha.cluster`: the cluster's name (its etcd prefix).
    pub name: String,
    /// `cluster.group`: the HA group this member belongs to.
    pub group: String,
}

impl Member {
    /// The member of `config`'s cluster, or `None` without `[cluster]`.
    pub fn of(config: &crate::config::Config) -> Option<Member> {
        let group = config.cluster.my_group()?;
        Some(Member {
            name: config.ha.cluster.clone(),
            group: group.to_owned(),
        })
    }

    /// HELLO's `cluster` object. `map_epoch` is this member's copy of the map's epoch: 0 until
    /// the map's side reads one.
    pub fn hello(&self) -> Value {
        json!({
            "name": self.name,
            "group": self.group,
            "map_epoch": 0,
            "slots": SLOT_COUNT,
        })
    }
}

/// Answers a `CLUSTER_*` op on a member that is in `cluster` (`None`: no `[cluster]`).
pub fn answer(
    op: routes::Cluster,
    params: Option<&[u8]>,
    cluster: Option<&Member>,
) -> Result<Value, Rejection> {
    use routes::Cluster as C;
    match (op, cluster) {
        (C::ClusterKeyslot, _) => keyslot(params),
        (
            C::ClusterShards
            | C::ClusterSlots
            | C::ClusterInfo
            | C::ClusterCreate
            | C::ClusterAddGroup
            | C::ClusterMoveSlots
            | C::ClusterCancelMove,
            None,
        ) => Err(not_a_cluster(op.op())),
        (_, Some(member)) => map_op(op, params, member),
    }
}

/// `CLUSTER_KEYSLOT {id}` → `{id, slot, routing_key}` (docs/cluster.md, "Slots").
fn keyslot(params: Option<&[u8]>) -> Result<Value, Rejection> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Keyslot {
        id: String,
    }
    let p: Keyslot = parse(params)?;
    if p.id.len() > KEYSLOT_ID_BYTES_MAX {
        return Err(Rejection::new(
            ErrorCode::BadRequest,
            format!("id is longer than {KEYSLOT_ID_BYTES_MAX} bytes"),
        )
        .with("bytes", p.id.len()));
    }
    Ok(json!({
        "id": p.id,
        "slot": slot_of(&p.id),
        "routing_key": routing_key(&p.id),
    }))
}

/// The refusal of a map op on a server without `[cluster]`.
fn not_a_cluster(op: Op) -> Rejection {
    Rejection::new(
        ErrorCode::BadRequest,
        format!("{} needs cluster mode ([cluster] enabled)", op.as_str()),
    )
    .with("cluster", false)
}

/// The one entry point of the ops that need the slot map (`CLUSTER_SHARDS`, `CLUSTER_SLOTS`,
/// `CLUSTER_INFO`, `CLUSTER_CREATE`, `CLUSTER_ADD_GROUP`, `CLUSTER_MOVE_SLOTS`,
/// `CLUSTER_CANCEL_MOVE`) on a cluster member. The slot map's side (the map in etcd and this
/// member's copy, docs/cluster.md "etcd keys") fills it in; until then no member has read a
/// map, and each answers as docs/cluster.md says a member without one does: `CLUSTERDOWN`,
/// reason `no_map`, `map_epoch` 0.
pub fn map_op(
    op: routes::Cluster,
    _params: Option<&[u8]>,
    member: &Member,
) -> Result<Value, Rejection> {
    Err(Rejection::new(
        ErrorCode::ClusterDown,
        format!(
            "{}: this member (group {}) has not read the cluster's slot map",
            op.op().as_str(),
            member.group
        ),
    )
    .with("reason", "no_map")
    .with("map_epoch", 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member() -> Member {
        Member {
            name: "c".into(),
            group: "g1".into(),
        }
    }

    #[test]
    fn keyslot_answers_the_slot_and_routing_key_of_any_id_up_to_the_bound() {
        let v = answer(
            routes::Cluster::ClusterKeyslot,
            Some(br#"{"id":"{o-7}:pay"}"#),
            None,
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"id": "{o-7}:pay", "slot": 340, "routing_key": "o-7"})
        );
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(KEYSLOT_ID_BYTES_MAX));
        let v = answer(routes::Cluster::ClusterKeyslot, Some(long.as_bytes()), None).unwrap();
        assert_eq!(v["routing_key"].as_str().map(str::len), Some(256));
        let longer = format!(r#"{{"id":"{}"}}"#, "x".repeat(KEYSLOT_ID_BYTES_MAX + 1));
        let some = Some(member());
        for (raw, m) in [
            (longer.as_bytes(), None),
            (b"{}".as_slice(), None),
            (br#"{"id":5}"#.as_slice(), some.as_ref()),
            (br#"{"id":"a","x":1}"#.as_slice(), None),
        ] {
            let e = answer(routes::Cluster::ClusterKeyslot, Some(raw), m).unwrap_err();
            assert_eq!(
                e.code,
                ErrorCode::BadRequest,
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn map_ops_are_refused_without_cluster_mode_and_down_without_a_map() {
        for &op in Op::ALL {
            let crate::protocol::Routed::Cluster(c) = op.route() else {
                continue;
            };
            if c == routes::Cluster::ClusterKeyslot {
                continue;
            }
            let e = answer(c, None, None).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{op:?}");
            assert_eq!(e.details["cluster"], false, "{op:?}");
            let e = answer(c, None, Some(&member())).unwrap_err();
            assert_eq!(e.code, ErrorCode::ClusterDown, "{op:?}");
            assert_eq!(e.details["reason"], "no_map", "{op:?}");
            assert_eq!(e.details["map_epoch"], 0, "{op:?}");
        }
    }
}
