//! One request's way from its op and params to the slot its reply lands in, the same for every
//! codec: an RCP1 frame (`session.rs`) and an HTTP request (`crate::front::http`) both end here, so
//! authorization, the follower gate, routing to the owning shard, fan-outs and the control
//! executor's ops run one code path (docs/architecture.md, "The path of one APPLY_EVENT" and
//! "The path of one HTTP request").
//!
//! What stays with each codec: its framing, HELLO and AUTH (RCP1 sessions), the bearer header
//! (HTTP), and subscriptions, whose pushes go out in the codec's own framing.

use std::rc::Rc;

use serde_json::json;
use shards::{ErrorCode, Rejection};

use super::executor::Front;
use crate::auth::SessionAuth;
use crate::mesh::fanout;
use crate::mesh::router::{Reply, ReplySlot};
use crate::ops::batch::BatchMode;
use crate::ops::route::route_key;
use crate::protocol::{routes, Op, Routed};
use crate::shard::{ReplyBody, ShardCall, ShardOp};
use crate::util::slot::Slot;

/// How an instance op's reply comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The result alone (RCP1).
    Untagged,
    /// The result with the instance's version, `(epoch, wal_offset)` (HTTP's `ETag`); with
    /// `if_match`, the op runs only if the log's entry at that offset is of that epoch.
    Tagged { if_match: Option<(u64, u64)> },
}

/// The checks every request passes after its codec's own (a known op; RCP1: HELLO first), in
/// order: authorization (`SessionAuth::check`, the one check), then the follower gate.
pub fn admit(op: Op, auth: &SessionAuth, front: &Front) -> Result<(), Rejection> {
    auth.check(op)?;
    if front.info.cluster.is_some() && matches!(op.route(), Routed::Instance(_)) {
        return Ok(()); // cluster mode: the gate runs after the ownership check (`start`)
    }
    crate::member::gate::check(&front.info.replication, op)
}

/// Starts an admitted op that shards, a fan-out or the control executor answer (every route
/// but `Session`, `Subscriptions` and REPLICATE, which belong to the codec); returns the slot
/// its reply lands in and sets `instance_id` to the instance the op names, if any (for its
/// log line).
pub async fn start(
    op: Op,
    params: Option<&[u8]>,
    front: &Rc<Front>,
    auth: &SessionAuth,
    version: Version,
    instance_id: &mut Option<Box<str>>,
) -> Result<ReplySlot, Rejection> {
    let router = &front.router;
    let owned = || params.map(<[u8]>::to_vec);
    match op.route() {
        Routed::Instance(op) => {
            let id = route_key(params)?;
            let reply = instance(op, &id, owned(), front, version).await;
            *instance_id = Some(id.into());
            reply
        }
        Routed::Batch(routes::Batch::Batch) => {
            // The batch's ops, typed, parsed once; each passes the session's check.
            let batch = crate::ops::batch::parse_batch(params)?;
            let ops = || batch.ops.iter().map(|item| item.op.op());
            auth.check_each(ops())?;
            // Cluster mode: one slot per atomic batch, checked before the member's role
            // (docs/cluster.md, "Who serves a slot").
            super::batch::check_slots(front, &batch)?;
            // Cluster mode: a best-effort batch's ops pass the gate one by one, after their
            // ownership (`batch::start`).
            let each = front.info.cluster.is_some() && batch.mode == BatchMode::BestEffort;
            if !each {
                crate::member::gate::check_batch(&front.info.replication, ops())?;
            }
            super::batch::start(front, batch).await
        }
        Routed::Definitions(op) => {
            let call = ShardCall::Op {
                op: ShardOp::Definitions(op),
                params: owned(),
            };
            Ok(router.start(fanout::DEFINITIONS_SHARD, call).await)
        }
        Routed::AllShards(op) => Ok(all_shards(op, owned(), front)),
        Routed::Control(op) => Ok(control(op, params, front).await),
        Routed::Cluster(routes::Cluster::ClusterImport) => Ok(filled(import(params, front).await)),
        Routed::Cluster(op) => {
            let role = front.info.replication.role_name();
            let cluster = front.info.cluster.as_ref();
            let mut answer = crate::ops::cluster::answer(op, params, cluster, role).await;
            // A created map or an added group: this group's definitions to every group.
            let spreads = matches!(
                op,
                routes::Cluster::ClusterCreate | routes::Cluster::ClusterAddGroup
            );
            if let (true, Ok(_), Some(c)) = (spreads, &answer, cluster) {
                if let Err(e) = crate::cluster::define::spread(&front.router, c).await {
                    answer = Err(e);
                }
            }
            Ok(filled(answer.map(|v| {
                ReplyBody::Json(serde_json::to_vec(&v).unwrap_or_default())
            })))
        }
        // The codec's own routes (`session.rs`, the HTTP stream), and labels, which never
        // parse from a request.
        Routed::Session(_) | Routed::Subscriptions(_) | Routed::Stream(_) | Routed::Label(_) => {
            Err(no_dispatcher())
        }
    }
}

/// On a cluster member: Ok when this member serves the slot of `id` for `op`, ownership
/// first, then the role (docs/cluster.md, "Who serves a slot"), else the op's answer. A server
/// without `[cluster]` has nothing to check here (its gate ran in `admit`).
pub(super) fn served_here(front: &Front, op: routes::Instance, id: &str) -> Result<(), Rejection> {
    if let Some(cluster) = &front.info.cluster {
        crate::cluster::serve::check(cluster, id)?;
        crate::member::gate::check(&front.info.replication, op.op())?;
    }
    Ok(())
}

/// An instance op for `id`: on a cluster member `served_here`; then to the owning shard.
async fn instance(
    op: routes::Instance,
    id: &str,
    params: Option<Vec<u8>>,
    front: &Front,
    version: Version,
) -> Result<ReplySlot, Rejection> {
    served_here(front, op, id)?;
    let call = match version {
        Version::Untagged => ShardCall::Op {
            op: ShardOp::Instance(op),
            params,
        },
        Version::Tagged { if_match } => ShardCall::Versioned {
            op,
            params,
            if_match,
        },
    };
    Ok(front.router.start(front.router.shard_of(id), call).await)
}

/// The ops every shard answers, merged on the front by a task of their own.
fn all_shards(op: routes::AllShards, params: Option<Vec<u8>>, front: &Rc<Front>) -> ReplySlot {
    use routes::AllShards as A;
    match op {
        // Cluster mode: every group of the map gets it (docs/cluster.md).
        A::PutMachine => spawn_fanout(front, params, |f, p| async move {
            match &f.info.cluster {
                Some(cluster) => crate::cluster::define::put_machine(&f.router, cluster, p).await,
                None => fanout::put_machine(&f.router, p).await,
            }
        }),
        A::ListInstances => spawn_fanout(front, params, |f, p| async move {
            fanout::list_instances(&f.router, p, owned(&f)).await
        }),
        A::FindInstances => spawn_fanout(front, params, |f, p| async move {
            fanout::find_instances(&f.router, p, owned(&f)).await
        }),
        A::ScanInstances => spawn_fanout(front, params, |f, p| async move {
            fanout::scan_instances(&f.router, p, owned(&f)).await
        }),
        A::MigrateInstances => spawn_fanout(front, params, |f, p| async move {
            crate::mesh::bulk::migrate_instances(&f.router, f.info.cluster.clone(), p).await
        }),
        A::DeleteInstances => spawn_fanout(front, params, |f, p| async move {
            crate::mesh::bulk::delete_instances(&f.router, f.info.cluster.clone(), p).await
        }),
        A::MachineStats => spawn_fanout(front, params, |f, p| async move {
            fanout::machine_stats(&f.router, p).await
        }),
        A::Info => spawn_fanout(front, params, |f, _| async move { info(&f).await }),
        A::TimersResume => spawn_fanout(front, params, |f, _| async move {
            fanout::timers_resume(&f.router, &f.info.timers_pause).await
        }),
    }
}

/// Cluster mode: whether a listed instance lies in a slot this member's group owns, by the map
/// copy read at the first question (after the shards answered; `cluster::serve::Owned`).
fn owned(front: &Front) -> Option<impl Fn(&str) -> bool + '_> {
    let cluster = front.info.cluster.as_deref()?;
    let owned = std::cell::OnceCell::new();
    Some(move |id: &str| {
        (owned.get_or_init(|| crate::cluster::serve::Owned::now(cluster))).holds(id)
    })
}

/// REPLICATION_STATUS, PROMOTE, HA_PAUSE, HA_RESUME and SWITCHOVER: relayed to the control
/// executor. Without a replication role: REPLICATION_STATUS says so, the others are refused.
async fn control(op: routes::Control, params: Option<&[u8]>, front: &Front) -> ReplySlot {
    match &front.relay {
        Some(relay) => relay.call(op, params).await,
        None => {
            let slot = Slot::new();
            slot.fill(match op {
                routes::Control::ReplicationStatus => Ok(ReplyBody::Json(
                    br#"{"role":"standalone","replicas":[]}"#.to_vec(),
                )),
                routes::Control::Promote
                | routes::Control::HaPause
                | routes::Control::HaResume
                | routes::Control::Switchover => Err(crate::front::relay::not_running()),
            });
            slot
        }
    }
}

/// `CLUSTER_IMPORT`: a move's step on its target (`cluster::moves::import`), which needs this
/// front's shards.
async fn import(params: Option<&[u8]>, front: &Front) -> Reply {
    let answer = match &front.info.cluster {
        Some(cluster) => {
            let replication = &front.info.replication;
            crate::cluster::moves::import::answer(params, &front.router, cluster, replication).await
        }
        None => Err(Rejection::new(
            ErrorCode::BadRequest,
            "CLUSTER_IMPORT needs cluster mode ([cluster] enabled)",
        )
        .with("cluster", false)),
    };
    answer.map(|v| ReplyBody::Json(serde_json::to_vec(&v).unwrap_or_default()))
}

/// A slot already holding `reply` (an op answered on the front).
fn filled(reply: Reply) -> ReplySlot {
    let slot = Slot::new();
    slot.fill(reply);
    slot
}

/// An op whose route has no code to run it: a bug, answered as one.
pub fn no_dispatcher() -> Rejection {
    Rejection::new(ErrorCode::InternalError, "op has no dispatcher")
}

/// Runs a multi-shard op as its own task; its result lands in the returned slot.
fn spawn_fanout<F, Fut>(front: &Rc<Front>, params: Option<Vec<u8>>, f: F) -> ReplySlot
where
    F: FnOnce(Rc<Front>, Option<Vec<u8>>) -> Fut,
    Fut: std::future::Future<Output = Reply> + 'static,
{
    let slot = Slot::new();
    let fill = slot.clone();
    let fut = f(front.clone(), params);
    glommio::spawn_local(async move { fill.fill(fut.await) }).detach();
    slot
}

async fn info(front: &Front) -> Reply {
    let shards = fanout::shard_infos(&front.router).await?;
    let sum = |k: &str| shards.iter().filter_map(|s| s[k].as_u64()).sum::<u64>();
    let l = &front.limits;
    let mut body = json!({
        "server_name": "smdb",
        "server_version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": front.info.started.elapsed().as_secs(),
        "role": front.info.replication.role_name(),
        "shards": front.router.shard_count(),
        "acceptor_cores": front.info.acceptor_cores,
        "timers_paused": front.info.timers_pause.paused(),
        "limits": {
            "max_connections": l.max_connections,
            "max_frame_bytes": l.max_frame_bytes,
            "max_inflight_per_connection": l.max_inflight,
            "idle_timeout_secs": l.idle_timeout.map_or(0, |d| d.as_secs()),
        },
        "connections": front.peers.info(l.proxy_protocol),
        "instances": sum("instances"),
        "machines": shards.first().and_then(|s| s["machines"].as_u64()).unwrap_or(0),
        "wal": { "offset": sum("wal_offset"), "durable_offset": sum("wal_durable_offset") },
        "shard_details": shards,
    });
    if let Some(c) = &front.info.cluster {
        body["cluster"] = c.info_json();
    }
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}
