//! Starting the executors: the channels between them, then the shards, the control executor
//! and the fronts, each pinned to its core with its setup; start-up waits for each to be ready.
//! File descriptors cross to an executor as `OwnedFd`s, which it takes over.

use super::listen::Listeners;
use super::placement::Placements;
use super::Shared;
use crate::config::{Config, FsyncMode, Role};
use crate::control::metrics::gather::Sources;
use crate::control::metrics::http::MetricsSetup;
use crate::datadir::DataDir;
use crate::front::executor::{FrontSetup, Limits, ServerInfo};
use crate::mesh::router::RouterChannels;
use crate::shard::runtime::{ClientChannels, ShardSetup};
use crate::shard::SHARD_QUEUE_DEPTH_MAX;
use glommio::channels::shared_channel;
use glommio::{LocalExecutorBuilder, Placement};
use shards::routing::Routing;
use shards::wal::{FsyncPolicy, WalConfig};
use std::net::TcpListener as StdListener;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// How long start-up waits for shards to recover and report ready.
pub(super) const STARTUP_TIMEOUT: Duration = Duration::from_secs(600);

/// The replication relay between the fronts and the control executor (a role is set).
pub(super) fn relay_channels(
    replicating: bool,
    fronts: usize,
) -> (
    Vec<Option<crate::mesh::relay::FrontEnds>>,
    Option<Vec<crate::mesh::relay::ControlEnds>>,
) {
    if !replicating {
        return ((0..fronts).map(|_| None).collect(), None);
    }
    let (f, c) = crate::mesh::relay::channels(fronts);
    (f.into_iter().map(Some).collect(), Some(c))
}

pub(super) type Handles = Vec<glommio::ExecutorJoinHandle<()>>;

/// Starts the shards. With `network.fronts_on_shards` each shard's executor also waits for its
/// front's setup (`boot/colocate.rs`): returns where `spawn_fronts` hands them over.
pub(super) fn spawn_shards(
    config: &Config,
    place: &Placements,
    data_dir: &DataDir,
    ends: ShardEnds,
    shared: &Shared,
    ready: &mpsc::Sender<Result<(), String>>,
    handles: &mut Handles,
) -> Result<Option<Vec<mpsc::Sender<FrontSetup>>>, String> {
    let (front_slots, fronts) =
        super::colocate::slots(config.network.fronts_on_shards, place.shards.len());
    let each = place.shards.iter().zip(ends).zip(fronts);
    for (i, ((cpu, ends), front)) in each.enumerate() {
        let setup = ShardSetup {
            index: i as u32,
            clients: ends,
            wal: wal_config(config, data_dir.shard_dir(i as u32), i as u32),
            snapshot_every: config.storage.snapshot_every_entries,
            // Replicas never fire timers (docs/protocol.md, "Timed transitions"); a promoted
            // one re-arms them from state. Under failover every member starts as a follower
            // (docs/ha.md).
            fires_timers: config.replication.role != Some(Role::Replica) && !config.ha.enabled,
            timers_paused: shared.timers_pause.paused(),
            sync: crate::shard::sync::SyncSetup::from_config(
                &config.replication,
                config.ha.enabled,
            ),
            member: shared.repl.clone(),
            cluster_group: (config.cluster.enabled)
                .then(|| config.cluster.group.clone())
                .flatten(),
            ready: ready.clone(),
        };
        let io_memory = config.shards.io_memory_bytes;
        handles.push(spawn(&format!("shard{i}"), *cpu, io_memory, move || {
            super::colocate::run(setup, front)
        })?);
    }
    Ok(front_slots)
}

/// What the control executor gets beside what every executor shares.
pub(super) struct ControlParts {
    pub(super) channels: RouterChannels,
    pub(super) replication: Option<crate::control::replication::hub::HubSetup>,
    pub(super) metrics: Option<StdListener>,
}

/// Starts the control executor; returns the socket that stops it.
pub(super) fn spawn_control(
    config: &Config,
    place: &Placements,
    parts: ControlParts,
    shared: &Shared,
    ready: &mpsc::Sender<Result<(), String>>,
    handles: &mut Handles,
) -> Result<StdUnixStream, String> {
    let (ctl_shutdown, ctl_fd) = socket_pair()?;
    let ha = (parts.replication.as_ref())
        .and_then(|r| r.ha.as_ref())
        .map(|(ha, _)| crate::control::metrics::gather::HaSource {
            shared: ha.clone(),
            maximum_lag: config.ha.maximum_lag_on_failover,
        });
    let control = crate::control::ControlSetup {
        channels: parts.channels,
        shutdown_fd: ctl_fd,
        definitions_dir: config.storage.definitions_dir.clone(),
        ready: ready.clone(),
        replication: parts.replication,
        metrics: parts.metrics.map(|listener| MetricsSetup {
            listener,
            sources: Sources {
                fronts: shared.stats.fronts.clone(),
                subs: shared.stats.subs.clone(),
                connections_limit: u64::from(config.network.max_connections),
                replication: shared.repl.clone(),
                started: shared.started,
                draining: shared.draining.clone(),
                ha,
                cluster: shared.cluster.clone(),
            },
        }),
    };
    let io_memory = config.shards.io_memory_bytes;
    handles.push(spawn("control", place.control, io_memory, move || {
        crate::control::run(control)
    })?);
    Ok(ctl_shutdown)
}

/// The limits every front enforces.
pub(super) fn front_limits(config: &Config) -> Limits {
    let network = &config.network;
    Limits {
        max_frame_bytes: config.max_frame_bytes(),
        max_inflight: network.max_inflight_per_connection as usize,
        max_connections: u64::from(network.max_connections),
        idle_timeout: (network.idle_timeout_secs > 0)
            .then(|| Duration::from_secs(network.idle_timeout_secs)),
        subscription_queue_max: config.subscriptions.queue_max as usize,
        proxy_protocol: network.proxy_protocol,
    }
}

/// Starts the fronts, each on a duplicate of every listening socket: on executors of their own,
/// or handed to the shards' executors through `on_shards` (`network.fronts_on_shards`).
/// Returns their stop sockets and the channel each reports on when it has drained.
pub(super) fn spawn_fronts(
    config: &Config,
    place: &Placements,
    listeners: &Listeners,
    channels: Vec<(RouterChannels, Option<crate::mesh::relay::FrontEnds>)>,
    shared: &Shared,
    on_shards: Option<Vec<mpsc::Sender<FrontSetup>>>,
    handles: &mut Handles,
) -> Result<(Vec<StdUnixStream>, mpsc::Receiver<()>), String> {
    let info = Arc::new(ServerInfo {
        started: shared.started,
        replication: shared.repl.clone(),
        acceptor_cores: place.fronts.len() as u32,
        timers_pause: shared.timers_pause.clone(),
        cluster: shared.cluster.clone(),
    });
    let limits = front_limits(config);
    let active = Arc::new(AtomicU64::new(0));
    let mut shutdowns = Vec::new();
    let (drained_tx, drained_rx) = mpsc::channel();
    let stats = shared.stats.fronts.iter().zip(&shared.stats.subs);
    for (i, ((cpu, (channels, relay)), (stats, subs_stats))) in
        place.fronts.iter().zip(channels).zip(stats).enumerate()
    {
        let dup = |l: &StdListener, what: &str| {
            l.try_clone()
                .map(OwnedFd::from)
                .map_err(|e| format!("dup {what}: {e}"))
        };
        let (stop, stop_fd) = socket_pair()?;
        shutdowns.push(stop);
        let http = match &listeners.http {
            Some((listener, settings)) => Some(crate::front::http::FrontHttp {
                listener_fd: dup(listener, "http listener")?,
                settings: settings.clone(),
            }),
            None => None,
        };
        let setup = FrontSetup {
            index: i as u32,
            listener_fd: dup(&listeners.client, "listener")?,
            shutdown_fd: stop_fd,
            channels,
            relay,
            limits: limits.clone(),
            stats: stats.clone(),
            subs_stats: subs_stats.clone(),
            active: active.clone(),
            info: info.clone(),
            live: shared.live.clone(),
            peers: shared.peers.clone(),
            drained: drained_tx.clone(),
            http,
        };
        if let Some(shard) = on_shards.as_ref().and_then(|s| s.get(i)) {
            shard
                .send(setup)
                .map_err(|_| format!("shard {i} stopped before its front could start"))?;
            continue;
        }
        let io_memory = config.shards.io_memory_bytes;
        handles.push(spawn(&format!("front{i}"), *cpu, io_memory, move || {
            crate::front::executor::run(setup)
        })?);
    }
    Ok((shutdowns, drained_rx))
}

/// The log configuration of shard `shard` from `storage.*`.
pub(super) fn wal_config(config: &Config, dir: std::path::PathBuf, shard: u32) -> WalConfig {
    let st = &config.storage;
    let fsync = match st.fsync {
        FsyncMode::Always => FsyncPolicy::Always,
        FsyncMode::Interval => FsyncPolicy::Interval(Duration::from_millis(st.fsync_interval_ms)),
        FsyncMode::Never => FsyncPolicy::Never,
    };
    WalConfig {
        dir,
        shard,
        segment_bytes: st.segment_bytes,
        fsync,
        retain_bytes: st.retain_bytes,
        sync_writes: true,
        reserve_bytes: st.reserve_bytes,
        archive_dir: st.archive_dir.clone(),
        archive_timeout: st.archive_timeout_ms.map(Duration::from_millis),
    }
}

pub(super) type ShardEnds = Vec<Vec<ClientChannels>>;

/// One bounded request channel and one bounded response channel per (client, shard): the
/// clients are the fronts and the control executor, and every one routes ids with `routing`.
pub(super) fn make_channels(
    place: &Placements,
    routing: Routing,
) -> (ShardEnds, Vec<RouterChannels>) {
    let (shards, clients) = (place.shards.len(), place.fronts.len() + 1);
    let mut shard_ends: ShardEnds = (0..shards).map(|_| Vec::new()).collect();
    let mut client_ends: Vec<RouterChannels> = (0..clients)
        .map(|_| RouterChannels {
            shards: Vec::new(),
            routing,
        })
        .collect();
    for ends in client_ends.iter_mut() {
        for shard in shard_ends.iter_mut() {
            let (req_tx, req_rx) = shared_channel::new_bounded(SHARD_QUEUE_DEPTH_MAX);
            let (resp_tx, resp_rx) = shared_channel::new_bounded(SHARD_QUEUE_DEPTH_MAX);
            shard.push((req_rx, resp_tx));
            ends.shards.push((req_tx, resp_rx));
        }
    }
    (shard_ends, client_ends)
}

pub(super) fn spawn<G, F, T>(
    name: &str,
    cpu: usize,
    io_memory: usize,
    f: G,
) -> Result<glommio::ExecutorJoinHandle<T>, String>
where
    G: FnOnce() -> F + Send + 'static,
    F: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    LocalExecutorBuilder::new(Placement::Fixed(cpu))
        .name(name)
        .io_memory(io_memory)
        .spawn(f)
        .map_err(|e| format!("cannot start executor {name} on cpu {cpu}: {e}"))
}

pub(super) fn wait_ready(
    rx: &mpsc::Receiver<Result<(), String>>,
    n: usize,
    what: &str,
) -> Result<(), String> {
    for _ in 0..n {
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("{what} did not start within {STARTUP_TIMEOUT:?}")),
        }
    }
    Ok(())
}

pub(super) fn socket_pair() -> Result<(StdUnixStream, OwnedFd), String> {
    let (a, b) = StdUnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    Ok((a, OwnedFd::from(b)))
}
