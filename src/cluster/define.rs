//! Definitions across groups (docs/cluster.md, "Definitions across groups"): every group of
//! the map holds every machine definition. `put_machine` is PUT_MACHINE on a cluster member:
//! decided by its group's primary (a follower refuses it first, as always), then forwarded to
//! every other group's primary, and answered once every group holds it. `spread` copies this
//! group's definitions to every other group (after `CLUSTER_CREATE` and `CLUSTER_ADD_GROUP`).
//! Members call each other with `CLUSTER_IMPORT {step: "define"}` on the move's link
//! (`moves::link`: `replication.auth_token`, scope `replicate`).

use std::time::Duration;

use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::moves::link::Link;
use super::Cluster;
use crate::mesh::fanout;
use crate::mesh::router::{Reply, Router};
use crate::shard::{ReplyBody, ShardCall};

/// How long one group's primary may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// PUT_MACHINE on a cluster member: here first, then every other group of the map. `created`
/// is true if any group created it; a group without a primary (or out of reach) is
/// `CLUSTERDOWN` with `details.groups` (repeating the PUT is safe); a different definition in
/// any group is `MACHINE_VERSION_EXISTS`.
pub async fn put_machine(router: &Router, cluster: &Cluster, params: Option<Vec<u8>>) -> Reply {
    let definition: Value = (params.as_deref())
        .and_then(|p| serde_json::from_slice(p).ok())
        .unwrap_or(Value::Null);
    let local = fanout::put_machine(router, params).await?;
    let ReplyBody::Json(bytes) = local else {
        return Ok(local);
    };
    let mut result: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let mut created = result["created"] == true;
    let mut missing = Vec::new();
    for group in others(cluster) {
        match define_at(cluster, &group, vec![definition.clone()]).await {
            Ok(v) => created |= v["created"] == true,
            Err(e) if e.code == ErrorCode::MachineVersionExists => {
                return Err(e.with("group", group.as_str()))
            }
            Err(e) => {
                log::warn!("cluster: PUT_MACHINE to group {group}: {}", e.message);
                missing.push(group);
            }
        }
    }
    if !missing.is_empty() {
        return Err(Rejection::new(
            ErrorCode::ClusterDown,
            format!(
                "the definition is not yet in group(s) {}: no primary answered; repeat the PUT",
                missing.join(", ")
            ),
        )
        .with("reason", "no_primary")
        .with("groups", missing));
    }
    result["created"] = json!(created);
    Ok(ReplyBody::Json(
        serde_json::to_vec(&result).unwrap_or(bytes),
    ))
}

/// Copies every definition this member's group holds to every other group of the map.
pub async fn spread(router: &Router, cluster: &Cluster) -> Result<(), Rejection> {
    let definitions = held(router).await?;
    if definitions.is_empty() {
        return Ok(());
    }
    for group in others(cluster) {
        define_at(cluster, &group, definitions.clone()).await?;
    }
    Ok(())
}

/// Every definition this member holds, as PUT_MACHINE params (`{machine, version,
/// definition}`): what `spread` and a move's `begin` carry.
pub async fn held(router: &Router) -> Result<Vec<Value>, Rejection> {
    let ReplyBody::Entries(entries) = router.call(0, ShardCall::MachineEntries).await? else {
        return Ok(Vec::new());
    };
    let params = |e: &shards::engine::Entry| match e {
        shards::engine::Entry::PutMachine {
            machine,
            version,
            definition,
            ..
        } => Some(json!({"machine": machine, "version": version, "definition": definition})),
        _ => None,
    };
    Ok(entries.iter().filter_map(params).collect())
}

/// The map's groups but this member's, by its copy.
fn others(cluster: &Cluster) -> Vec<String> {
    let copy = cluster.view.get();
    (copy.map.iter())
        .flat_map(|m| m.groups.iter())
        .filter(|g| **g != cluster.group)
        .cloned()
        .collect()
}

/// Puts `definitions` on `group`'s primary: its answer `{created}`.
async fn define_at(
    cluster: &Cluster,
    group: &str,
    definitions: Vec<Value>,
) -> Result<Value, Rejection> {
    let down = |why: String| {
        Rejection::new(ErrorCode::ClusterDown, why)
            .with("reason", "no_primary")
            .with("groups", vec![group.to_string()])
    };
    let addr = (cluster.view.get().groups.get(group))
        .and_then(|g| g.primary.as_ref())
        .map(|p| p.addr.clone())
        .ok_or_else(|| down(format!("group {group} has no primary")))?;
    let template = (cluster.link.as_ref())
        .ok_or_else(|| down("this member has no link settings (replication TLS)".into()))?;
    let mut link = (Link::open(template, &addr).await)
        .map_err(|e| down(format!("group {group} at {addr}: {e}")))?;
    let params = json!({"step": "define", "definitions": definitions});
    match link.import(params, ANSWER_WITHIN).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(rejection(&e)),
        Err(e) => Err(down(format!("group {group} at {addr}: {e}"))),
    }
}

/// A member's error object as a rejection (its code, message and details).
fn rejection(e: &Value) -> Rejection {
    let code = e["code"]
        .as_str()
        .and_then(ErrorCode::parse)
        .unwrap_or(ErrorCode::InternalError);
    let mut r = Rejection::new(code, e["message"].as_str().unwrap_or("").to_string());
    if let Some(details) = e["details"].as_object() {
        for (k, v) in details {
            r = r.with(k, v.clone());
        }
    }
    r
}
