//! Automatic failover on etcd (docs/ha.md). One entry point, `start`: a plain `std::thread`
//! with a current-thread tokio runtime (etcd-client is tokio-only), started before the glommio
//! executors. It holds this member's etcd lease, claims its member key, follows or campaigns
//! for the leader key, and publishes what it decides:
//!
//! - the role, the epoch and the lease deadline (CLOCK_BOOTTIME) to every executor through
//!   `member::ReplState`, which the op table's follower gate and the shards read at run
//!   time: shards never wait on etcd, the commit path only reads an atomic;
//! - a `Want` (follow this address, lead this epoch, fence) to the control executor, whose
//!   `driver` carries it out (follower stream, epoch records, timers) and reports positions.
//!
//! - `keys`: etcd key names and values; `elect`: who may campaign (pure); `etcd`: the
//!   endpoints, their health and the pinned one; `session`: one etcd session; `term`: the
//!   decisions; `shared`: the thread ↔ executor exchange; `driver`: the executor's side;
//!   `admin`: the operator's requests to the thread; `switchover` (the op) and `handover`
//!   (its etcd steps): a planned handover; `syncset`: the sync set a sync-mode primary keeps;
//!   `error`: what goes wrong, with its context; `watch`: the etcd watch that, like the driver and `admin`, wakes the thread early
//!   (`wake`): it reads and decides at once instead of at its next poll; `own_key`: this
//!   member's own member key.
//! - In cluster mode (`crate::cluster`) the group's keys live under
//!   `/smdb/<cluster>/groups/<group>/`, and the thread's runtime also keeps the map copy.
//! - Elsewhere: the `[ha]` section (`crate::config::ha`), the lease clock and the fence
//!   (`crate::member`).

pub mod admin;
pub mod driver;
pub mod elect;
mod error;
pub mod etcd;
mod handover;
pub mod keys;
mod own_key;
mod session;
pub mod shared;
pub mod status;
pub mod switchover;
mod syncset;
mod term;
mod tls;
pub mod wake;
pub(crate) mod watch;

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::member::ReplState;
pub use error::HaError;
use shared::Shared;

/// Everything the HA thread works with.
pub struct Ctx {
    pub cfg: crate::config::ha::Ha,
    pub keys: keys::Keys,
    pub node_id: String,
    /// Random per process: keys written by an earlier process are never trusted.
    pub instance: String,
    /// The client address in this member's keys.
    pub addr: String,
    pub state: Arc<ReplState>,
    pub shared: Arc<Shared>,
    pub rules: elect::Rules,
    pub margin: Duration,
}

/// Starts the HA thread for a member whose clients reach it at `addr` (and, in cluster mode,
/// the map copy of `cluster` on its runtime). Returns what the control executor's driver
/// needs.
pub fn start(
    config: &Config,
    state: Arc<ReplState>,
    addr: String,
    cluster: Option<Arc<crate::cluster::Cluster>>,
) -> Result<Arc<Shared>, HaError> {
    let cfg = config.ha.clone();
    let node_id = cfg.node_id.clone().ok_or(HaError::Config(
        "ha.node_id is required when ha.enabled = true",
    ))?;
    let keys = match &cluster {
        Some(c) => c.keys.group(&c.group),
        None => keys::Keys::new(&cfg.cluster),
    };
    let shared = Arc::new(Shared::new(cluster));
    shared.update_view(|v| {
        v.cluster.clone_from(&cfg.cluster);
        v.node_id.clone_from(&node_id);
    });
    let ctx = Ctx {
        keys,
        node_id,
        instance: keys::instance_id(),
        addr,
        state,
        shared: shared.clone(),
        rules: elect::Rules {
            mode: config.replication.mode,
            sync_replicas: config.replication.sync_replicas,
            maximum_lag: cfg.maximum_lag_on_failover,
        },
        margin: Duration::from_millis(cfg.safety_margin_ms),
        cfg,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| HaError::Thread {
            what: "tokio runtime",
            source,
        })?;
    log::info!(
        "ha: member {} of cluster {:?} at {}, etcd {:?}",
        ctx.node_id,
        ctx.cfg.cluster,
        ctx.addr,
        ctx.cfg.etcd_endpoints
    );
    std::thread::Builder::new()
        .name("ha".into())
        .spawn(move || runtime.block_on(session::run(ctx)))
        .map_err(|source| HaError::Thread {
            what: "spawning the control thread",
            source,
        })?;
    Ok(shared)
}
