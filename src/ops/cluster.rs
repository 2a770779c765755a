//! The `CLUSTER_*` ops (docs/cluster.md, "Ops"), answered on the front core.
//!
//! `CLUSTER_KEYSLOT` is a pure function of its id, served by every server, standalone included.
//! The seven others need the slot map: a server without `[cluster]` refuses them
//! (`BAD_REQUEST`, `details.cluster: false`). On a cluster member the reads answer from its
//! map copy (`crate::cluster::answers`); `CLUSTER_CREATE` and `CLUSTER_ADD_GROUP` ask the HA
//! thread, the one that talks to etcd (`crate::cluster::admin`), and wait for it at most their
//! `timeout_ms` (≤ `TIMEOUT_MS_MAX`) and a few seconds. `CLUSTER_MOVE_SLOTS` and
//! `CLUSTER_CANCEL_MOVE` go through the same thread; the move itself runs on the source group's primary
//! (`crate::cluster::moves`).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use shards::routing::{routing_key, slot_of};
use shards::{ErrorCode, Rejection};

use super::params::parse;
use crate::cluster::{admin, answers, Cluster, ClusterError};
use crate::protocol::{routes, Op};

/// Longest id `CLUSTER_KEYSLOT` takes, in bytes: the bound of an instance id (docs/protocol.md,
/// "Instances and events"), so every id a server can hold has an answer.
pub const KEYSLOT_ID_BYTES_MAX: usize = 256;

/// Longest wait `CLUSTER_CREATE` and `CLUSTER_ADD_GROUP` take for primaries (`timeout_ms`).
const TIMEOUT_MS_MAX: u64 = 600_000;
/// Their default `timeout_ms`.
const TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// Answers a `CLUSTER_*` op on a member that is in `cluster` (`None`: no `[cluster]`), whose
/// replication role is `role`.
pub async fn answer(
    op: routes::Cluster,
    params: Option<&[u8]>,
    cluster: Option<&Arc<Cluster>>,
    role: &str,
) -> Result<Value, Rejection> {
    use routes::Cluster as C;
    let Some(cluster) = cluster else {
        return match op {
            C::ClusterKeyslot => keyslot(params),
            _ => Err(not_a_cluster(op.op())),
        };
    };
    match op {
        C::ClusterKeyslot => keyslot(params),
        C::ClusterShards => no_params(params).map(|()| answers::shards(cluster)),
        C::ClusterSlots => no_params(params).map(|()| answers::slots(cluster)),
        C::ClusterInfo => no_params(params).map(|()| answers::info(cluster, role)),
        C::ClusterCreate => create(params, cluster).await,
        C::ClusterAddGroup => add_group(params, cluster).await,
        C::ClusterMoveSlots => crate::cluster::moves::ops::move_slots(params, cluster).await,
        C::ClusterCancelMove => crate::cluster::moves::ops::cancel(params, cluster).await,
        // Needs the member's shards: the front answers it (`request::start`).
        C::ClusterImport => Err(Rejection::new(
            ErrorCode::InternalError,
            "CLUSTER_IMPORT is answered with the member's shards",
        )),
    }
}

/// The read ops take `{}` (or nothing).
fn no_params(params: Option<&[u8]>) -> Result<(), Rejection> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Empty {}
    parse::<Empty>(params).map(|_| ())
}

fn timeout_of(ms: Option<u64>) -> Result<Duration, Rejection> {
    match ms.unwrap_or(TIMEOUT_MS_DEFAULT) {
        ms if ms > TIMEOUT_MS_MAX => Err(Rejection::new(
            ErrorCode::BadRequest,
            format!("timeout_ms must be at most {TIMEOUT_MS_MAX}"),
        )),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// `CLUSTER_CREATE {groups?, timeout_ms?}` → the `CLUSTER_SHARDS` object.
async fn create(params: Option<&[u8]>, cluster: &Arc<Cluster>) -> Result<Value, Rejection> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Create {
        groups: Option<Vec<String>>,
        timeout_ms: Option<u64>,
    }
    let p: Create = parse(params)?;
    let timeout = timeout_of(p.timeout_ms)?;
    admin::create(cluster, p.groups, timeout)
        .await
        .map_err(refused)?;
    Ok(answers::shards(cluster))
}

/// `CLUSTER_ADD_GROUP {group, timeout_ms?}` → the `CLUSTER_SHARDS` object and `added`.
async fn add_group(params: Option<&[u8]>, cluster: &Arc<Cluster>) -> Result<Value, Rejection> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct AddGroup {
        group: String,
        timeout_ms: Option<u64>,
    }
    let p: AddGroup = parse(params)?;
    let timeout = timeout_of(p.timeout_ms)?;
    let done = admin::add_group(cluster, &p.group, timeout)
        .await
        .map_err(refused)?;
    let mut shards = answers::shards(cluster);
    shards["added"] = json!(done.added);
    Ok(shards)
}

/// The answer to a refused cluster request (docs/cluster.md, "Ops").
pub fn refused(e: ClusterError) -> Rejection {
    let text = e.to_string();
    match e {
        ClusterError::Exists { map_epoch } => {
            Rejection::new(ErrorCode::BadRequest, text).with("map_epoch", map_epoch)
        }
        ClusterError::NotACluster { .. }
        | ClusterError::NoMap
        | ClusterError::Map(_)
        | ClusterError::BadMove { .. } => Rejection::new(ErrorCode::BadRequest, text),
        ClusterError::MoveDone { id } => Rejection::new(ErrorCode::BadRequest, text)
            .with("id", id)
            .with("state", "done"),
        ClusterError::NoPrimary { groups } => Rejection::new(ErrorCode::ClusterDown, text)
            .with("reason", "no_primary")
            .with("groups", groups),
        ClusterError::Busy { .. } | ClusterError::Contended => {
            Rejection::new(ErrorCode::TryAgain, text)
        }
        ClusterError::Etcd(_) | ClusterError::NoAnswer { .. } => {
            Rejection::new(ErrorCode::InternalError, text)
        }
    }
}

/// `CLUSTER_KEYSLOT {id}` → `{id, slot, routing_key}` (docs/cluster.md, "Slots").
pub fn keyslot(params: Option<&[u8]>) -> Result<Value, Rejection> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn standalone(op: routes::Cluster, raw: &[u8]) -> Result<Value, Rejection> {
        futures_lite::future::block_on(answer(op, Some(raw), None, "standalone"))
    }

    #[test]
    fn keyslot_answers_the_slot_and_routing_key_of_any_id_up_to_the_bound() {
        let v = standalone(routes::Cluster::ClusterKeyslot, br#"{"id":"{o-7}:pay"}"#).unwrap();
        assert_eq!(
            v,
            json!({"id": "{o-7}:pay", "slot": 340, "routing_key": "o-7"})
        );
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(KEYSLOT_ID_BYTES_MAX));
        let v = standalone(routes::Cluster::ClusterKeyslot, long.as_bytes()).unwrap();
        assert_eq!(v["routing_key"].as_str().map(str::len), Some(256));
        let longer = format!(r#"{{"id":"{}"}}"#, "x".repeat(KEYSLOT_ID_BYTES_MAX + 1));
        for raw in [
            longer.as_bytes(),
            b"{}".as_slice(),
            br#"{"id":5}"#.as_slice(),
            br#"{"id":"a","x":1}"#.as_slice(),
        ] {
            let e = keyslot(Some(raw)).unwrap_err();
            assert_eq!(
                e.code,
                ErrorCode::BadRequest,
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn map_ops_are_refused_without_cluster_mode() {
        for &op in Op::ALL {
            let crate::protocol::Routed::Cluster(c) = op.route() else {
                continue;
            };
            if c == routes::Cluster::ClusterKeyslot {
                continue;
            }
            let e = standalone(c, b"{}").unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{op:?}");
            assert_eq!(e.details["cluster"], false, "{op:?}");
        }
    }

    #[test]
    fn a_refused_create_answers_the_documented_codes() {
        let e = refused(ClusterError::Exists { map_epoch: 4 });
        assert_eq!(
            (e.code, &e.details["map_epoch"]),
            (ErrorCode::BadRequest, &json!(4))
        );
        let e = refused(ClusterError::NoPrimary {
            groups: vec!["g2".into()],
        });
        assert_eq!(e.code, ErrorCode::ClusterDown);
        assert_eq!(e.details["groups"], json!(["g2"]));
    }
}
