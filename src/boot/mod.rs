//! Process wiring: executors, placement, channels, the listening socket, start-up order and
//! shutdown. See docs/architecture.md.
//!
//! Executors: `S` shards (each owns its instances and log), `F` fronts (accept, decode, route),
//! one control executor (start-up fan-out, the metrics listener, replication). Every front
//! and the control executor hold one request/response channel pair per shard, created here.

use std::io::Write;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::fd::{IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use glommio::channels::shared_channel;
use glommio::{LocalExecutorBuilder, Placement};
use shards::wal::{FsyncPolicy, WalConfig};

use crate::config::{Config, FsyncMode, Role};
use crate::control::metrics::gather::Sources;
use crate::control::metrics::http::MetricsSetup;
use crate::datadir::DataDir;
use crate::front::executor::{FrontSetup, Limits, ServerInfo};
use crate::mesh::router::RouterChannels;
use crate::metrics::{FrontStats, SubsStats};
use crate::security::Live;
use crate::shard::runtime::{ClientChannels, ShardSetup};
use crate::shard::SHARD_QUEUE_DEPTH_MAX;
use crate::timers_pause::TimersPause;

/// How long start-up waits for shards to recover and report ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long start-up retries a bind that fails with "address in use": a killed process's
/// listening socket lingers briefly while the kernel tears down its io_uring.
const BIND_RETRY_FOR: Duration = Duration::from_secs(10);
/// Pause between bind attempts.
const BIND_RETRY_EVERY: Duration = Duration::from_millis(50);
/// How often main checks for a second signal while the fronts drain.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// Where each executor runs.
#[derive(Debug, Clone)]
pub struct Placements {
    pub shards: Vec<usize>,
    pub fronts: Vec<usize>,
    pub control: usize,
}

/// Default placement: fronts and control from core 0 up, shards on the remaining cores (wrapping
/// when there are more executors than cores). `shards.cores` overrides the shard cores.
pub fn placements(config: &Config, cpus: usize) -> Placements {
    let cpus = cpus.max(1);
    let shard_count = config.shard_count(cpus) as usize;
    let fronts_n = config.network.acceptor_cores as usize;
    let fronts: Vec<usize> = (0..fronts_n).map(|i| i % cpus).collect();
    let shards = match &config.shards.cores {
        Some(c) => c.clone(),
        None => (0..shard_count).map(|i| (fronts_n + i) % cpus).collect(),
    };
    Placements {
        shards,
        fronts,
        control: 0,
    }
}

/// Runs the server until SIGTERM/SIGINT; SIGHUP reloads `auth` and `tls` from `config_path`.
/// Returns a one-line error on start-up failure. Start-up order: the replication settings
/// (a new replica adopts its primary's layout), the data dir, every listening socket (bound
/// exclusively here, so a second server fails at once), the shards (recovered), the control
/// executor, then the fronts; the announcement on stdout comes last.
pub fn run(mut config: Config, config_path: Option<PathBuf>) -> Result<(), String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let repl_settings = replication_settings(&mut config)?;
    let place = placements(&config, cpus);
    let shard_count = place.shards.len() as u32;
    let data_dir = DataDir::open(&config.storage.data_dir, shard_count)?;
    // Before any shard builds an engine: every instance table of this process hashes with the
    // data dir's key (restarts load and replay in table order, docs/wal.md "Recovery").
    if !shards::engine::set_index_key(data_dir.index_key.0, data_dir.index_key.1) {
        log::warn!("instance tables were built before the data dir's index key was read");
    }
    let timers_pause = timers_pause(&data_dir);
    let mut listeners = Listeners::bind(&config)?;
    let mut signals = Signals::install()?;
    let live = Live::new(&config, config_path)?;
    crate::security::reload_on_sighup(live.clone())?;
    let repl = Arc::new(match config.ha.enabled {
        true => crate::member::ReplState::new_ha(),
        false => crate::member::ReplState::new(config.replication.role),
    });
    let ha = start_ha(&config, &repl, listeners.local)?;
    let shared = Shared {
        repl,
        draining: Arc::new(crate::member::Draining::default()),
        peers: Arc::new(crate::front::peer::Peers::default()),
        live,
        started: Instant::now(),
        stats: FrontFigures::new(place.fronts.len(), shard_count),
        timers_pause,
    };
    let (shard_ends, mut client_ends) = make_channels(shard_count as usize, place.fronts.len() + 1);
    let mut handles = Vec::new();
    let (ready_tx, ready_rx) = mpsc::channel();
    spawn_shards(
        &config,
        &place,
        &data_dir,
        shard_ends,
        &shared,
        &ready_tx,
        &mut handles,
    )?;
    wait_ready(&ready_rx, shard_count as usize, "shards")?;
    let (relay_fronts, relay_control) = relay_channels(repl_settings.is_some(), place.fronts.len());
    let control = ControlParts {
        channels: client_ends.pop().unwrap_or_default(),
        replication: repl_settings.map(|settings| crate::control::replication::hub::HubSetup {
            fronts: relay_control.unwrap_or_default(),
            state: shared.repl.clone(),
            settings,
            ha,
        }),
        metrics: listeners.metrics.take(),
    };
    let ctl_shutdown = spawn_control(&config, &place, control, &shared, &ready_tx, &mut handles)?;
    wait_ready(&ready_rx, 1, "control")?;
    let channels = client_ends.into_iter().zip(relay_fronts).collect();
    let (mut shutdowns, drained) =
        spawn_fronts(&config, &place, &listeners, channels, &shared, &mut handles)?;
    announce(&config, &listeners.bound(), shard_count, &place);
    drop(listeners);

    signals.wait(None);
    let network = &config.network;
    shut_down(
        &mut signals,
        &shared.draining,
        &mut shutdowns,
        &drained,
        Duration::from_millis(network.drain_grace_ms),
        Duration::from_millis(network.drain_timeout_ms),
    );
    let mut ctl_shutdown = ctl_shutdown;
    let _ = ctl_shutdown.write_all(b"x");
    for h in handles {
        h.join().map_err(|e| format!("executor failed: {e}"))?;
    }
    drop(data_dir);
    log::info!("stopped");
    Ok(())
}

/// What every executor of the process shares, made once in `run`.
struct Shared {
    repl: Arc<crate::member::ReplState>,
    draining: Arc<crate::member::Draining>,
    peers: Arc<crate::front::peer::Peers>,
    live: Arc<Live>,
    started: Instant,
    stats: FrontFigures,
    /// The data dir's `timers.paused` marker (`crate::timers_pause`).
    timers_pause: Arc<TimersPause>,
}

/// Whether the data dir starts with its timers paused; says so once when it does.
fn timers_pause(data_dir: &DataDir) -> Arc<TimersPause> {
    let pause = TimersPause::detect(&data_dir.path);
    if pause.paused() {
        log::warn!(
            "timers: paused by {}; none fires until `smdb-cli timers resume`",
            pause.marker().display()
        );
    }
    Arc::new(pause)
}

/// Each front's counters, shared with the metrics scrape.
struct FrontFigures {
    fronts: Vec<Arc<FrontStats>>,
    subs: Vec<Arc<SubsStats>>,
}

impl FrontFigures {
    fn new(fronts: usize, shards: u32) -> FrontFigures {
        FrontFigures {
            fronts: (0..fronts)
                .map(|_| Arc::new(FrontStats::default()))
                .collect(),
            subs: (0..fronts)
                .map(|_| Arc::new(SubsStats::new(shards)))
                .collect(),
        }
    }
}

/// Replication settings from the config (None without a role or failover). A replica whose data dir is
/// empty mirrors its primary's layout: it adopts the primary's shard count.
fn replication_settings(
    config: &mut Config,
) -> Result<Option<crate::control::replication::hub::Settings>, String> {
    if config.replication.role.is_none() && !config.ha.enabled {
        return Ok(None);
    }
    let settings = crate::control::replication::hub::Settings::from_config(config)?;
    if let Some(follower) = settings.follower.as_ref() {
        if !DataDir::has_data(&config.storage.data_dir) {
            let n = crate::control::replication::preflight::primary_shard_count(follower);
            log::info!("replication: new replica: adopting the primary's {n} shard(s)");
            config.shards.count = Some(n);
            config.shards.cores = None;
        }
    }
    Ok(Some(settings))
}

/// The listening sockets, bound exclusively before any executor starts.
struct Listeners {
    client: StdListener,
    local: SocketAddr,
    metrics: Option<StdListener>,
    metrics_addr: Option<SocketAddr>,
    http: Option<(StdListener, Arc<crate::front::http::Settings>)>,
}

impl Listeners {
    fn bind(config: &Config) -> Result<Listeners, String> {
        let client = bind_exclusive("network.bind_addr", &config.network.bind_addr)?;
        let local = client.local_addr().map_err(|e| e.to_string())?;
        let metrics = match config.metrics.enabled {
            true => Some(bind_exclusive(
                "metrics.bind_addr",
                &config.metrics.bind_addr,
            )?),
            false => None,
        };
        let metrics_addr = (metrics.as_ref().map(StdListener::local_addr))
            .transpose()
            .map_err(|e| e.to_string())?;
        let http = bind_http(config)?;
        Ok(Listeners {
            client,
            local,
            metrics,
            metrics_addr,
            http,
        })
    }

    fn bound(&self) -> Bound {
        Bound {
            addr: self.local,
            metrics: self.metrics_addr,
            http: self.http.as_ref().map(|(_, settings)| settings.bound),
        }
    }
}

/// The replication relay between the fronts and the control executor (a role is set).
fn relay_channels(
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

type Handles = Vec<glommio::ExecutorJoinHandle<()>>;

fn spawn_shards(
    config: &Config,
    place: &Placements,
    data_dir: &DataDir,
    ends: ShardEnds,
    shared: &Shared,
    ready: &mpsc::Sender<Result<(), String>>,
    handles: &mut Handles,
) -> Result<(), String> {
    for (i, (cpu, ends)) in place.shards.iter().zip(ends).enumerate() {
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
            ready: ready.clone(),
        };
        let io_memory = config.shards.io_memory_bytes;
        handles.push(spawn(&format!("shard{i}"), *cpu, io_memory, move || {
            crate::shard::runtime::run(setup)
        })?);
    }
    Ok(())
}

/// What the control executor gets beside what every executor shares.
struct ControlParts {
    channels: RouterChannels,
    replication: Option<crate::control::replication::hub::HubSetup>,
    metrics: Option<StdListener>,
}

/// Starts the control executor; returns the socket that stops it.
fn spawn_control(
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
        shutdown_fd: ctl_fd.into_raw_fd(),
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
fn front_limits(config: &Config) -> Limits {
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

/// Starts the fronts, each on a duplicate of every listening socket; returns their stop
/// sockets and the channel each reports on when it has drained.
fn spawn_fronts(
    config: &Config,
    place: &Placements,
    listeners: &Listeners,
    channels: Vec<(RouterChannels, Option<crate::mesh::relay::FrontEnds>)>,
    shared: &Shared,
    handles: &mut Handles,
) -> Result<(Vec<StdUnixStream>, mpsc::Receiver<()>), String> {
    let info = Arc::new(ServerInfo {
        started: shared.started,
        replication: shared.repl.clone(),
        acceptor_cores: place.fronts.len() as u32,
        timers_pause: shared.timers_pause.clone(),
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
                .map(IntoRawFd::into_raw_fd)
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
            shutdown_fd: stop_fd.into_raw_fd(),
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
        let io_memory = config.shards.io_memory_bytes;
        handles.push(spawn(&format!("front{i}"), *cpu, io_memory, move || {
            crate::front::executor::run(setup)
        })?);
    }
    Ok((shutdowns, drained_rx))
}

/// Failover (docs/ha.md): starts the HA thread before any executor, with the address other
/// members and clients reach this one at (`ha.advertise_addr`, else the bound client address).
/// Returns what the control executor's driver needs.
fn start_ha(
    config: &Config,
    repl: &Arc<crate::member::ReplState>,
    local: SocketAddr,
) -> Result<Option<HaParts>, String> {
    if !config.ha.enabled {
        return Ok(None);
    }
    let addr = config
        .ha
        .advertise_addr
        .clone()
        .unwrap_or_else(|| local.to_string());
    let follow =
        crate::control::replication::follower::Settings::for_upstream(config, addr.clone())?;
    let shared = crate::control::ha::start(config, repl.clone(), addr)?;
    Ok(Some((shared, follow)))
}

type HaParts = (
    Arc<crate::control::ha::shared::Shared>,
    crate::control::replication::follower::Settings,
);

/// The SIGTERM drain (docs/protocol.md, "Behind a load balancer", `drain` module): `/health` 503 at once, serve on for
/// `grace`, then the fronts stop accepting and drain; a second signal or `timeout` (counted
/// from the first signal) makes them close every connection at once. Returns when every front
/// has finished.
fn shut_down(
    signals: &mut Signals,
    draining: &crate::member::Draining,
    fronts: &mut [StdUnixStream],
    drained: &mpsc::Receiver<()>,
    grace: Duration,
    timeout: Duration,
) {
    let first = Instant::now();
    draining.begin();
    log::info!(
        "shutting down: /health answers 503; serving for {} ms, then draining (at most {} ms)",
        grace.as_millis(),
        timeout.as_millis()
    );
    let tell = |fronts: &mut [StdUnixStream], byte: u8| {
        for s in fronts.iter_mut() {
            let _ = s.write_all(&[byte]);
        }
    };
    let mut now = signals.wait(Some(grace));
    if now {
        log::info!("second signal: stopping at once");
    } else {
        log::info!("draining: no longer accepting; answering SHUTTING_DOWN to new requests");
    }
    tell(fronts, crate::front::drain::STOP_DRAIN);
    let mut left = fronts.len();
    while left > 0 {
        if !now && signals.wait(Some(DRAIN_POLL)) {
            log::info!("second signal: closing every connection now");
            now = true;
        }
        if !now && first.elapsed() >= timeout {
            log::warn!(
                "drain not finished after network.drain_timeout_ms = {} ms: closing every connection now",
                timeout.as_millis()
            );
            now = true;
        }
        if now {
            tell(fronts, crate::front::drain::STOP_NOW);
            // Fronts finish within crate::front::drain::STOP_NOW_WAIT of it; no further signal matters.
            while left > 0 && drained.recv().is_ok() {
                left -= 1;
            }
            break;
        }
        while left > 0 && drained.try_recv().is_ok() {
            left -= 1;
        }
    }
    log::info!("drained in {} ms", first.elapsed().as_millis());
}

/// The log configuration of shard `shard` from `storage.*`.
fn wal_config(config: &Config, dir: std::path::PathBuf, shard: u32) -> WalConfig {
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

/// Binds `http.bind_addr` (when `http.enabled`) and makes the settings every front shares.
/// A listener on every interface with no `http.allowed_hosts` answers every request 421
/// (no `Host` names it): said once at start-up.
fn bind_http(
    config: &Config,
) -> Result<Option<(StdListener, Arc<crate::front::http::Settings>)>, String> {
    if !config.http.enabled {
        return Ok(None);
    }
    let listener = bind_exclusive("http.bind_addr", &config.http.bind_addr)?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    if bound.ip().is_unspecified() && config.http.allowed_hosts.is_empty() {
        log::warn!(
            "http.bind_addr {bound} listens on every interface: list the names clients use in \
             http.allowed_hosts, or every request is refused (421)"
        );
    }
    Ok(Some((
        listener,
        crate::front::http::Settings::new(bound, &config.http),
    )))
}

/// The addresses the server listens on.
struct Bound {
    addr: SocketAddr,
    metrics: Option<SocketAddr>,
    http: Option<SocketAddr>,
}

/// Prints the bound addresses on stdout (tests and scripts read them when binding port 0):
/// `smdb-server listening on ADDR shards=N metrics=MADDR http=HADDR` (no ` metrics=` or
/// ` http=` when disabled); with `logging.format = "json"`, one JSON line with the message
/// `smdb-server listening` and the fields `addr`, `shards`, `metrics_addr` and `http_addr`
/// (absent when disabled).
fn announce(config: &Config, bound: &Bound, shards: u32, place: &Placements) {
    let (addr, metrics, http) = (&bound.addr, bound.metrics, bound.http);
    match config.logging.format {
        crate::config::LogFormat::Text => {
            let metrics = metrics.map(|m| format!(" metrics={m}")).unwrap_or_default();
            let http = http.map(|h| format!(" http={h}")).unwrap_or_default();
            println!("smdb-server listening on {addr} shards={shards}{metrics}{http}");
        }
        crate::config::LogFormat::Json => {
            let mut line = serde_json::json!({
                "timestamp": crate::logging::now_rfc3339(),
                "level": "INFO",
                "target": "smdb::server",
                "message": "smdb-server listening",
                "addr": addr.to_string(),
                "shards": shards,
            });
            if let Some(m) = metrics {
                line["metrics_addr"] = m.to_string().into();
            }
            if let Some(h) = http {
                line["http_addr"] = h.to_string().into();
            }
            println!("{line}");
        }
    }
    let _ = std::io::stdout().flush();
    log::info!(
        "listening on {addr}: {shards} shard(s) on cores {:?}, {} front(s) on cores {:?}",
        place.shards,
        place.fronts.len(),
        place.fronts
    );
}

/// Binds without SO_REUSEPORT (glommio's own bind sets it, letting a second server silently
/// share the port: docs/glommio.md pitfall 2), so a busy port fails with "address in use".
///
/// "Address in use" is retried every `BIND_RETRY_EVERY` for `BIND_RETRY_FOR` (logged once):
/// right after a SIGKILL the old process's socket lingers while its io_uring is torn down.
fn bind_exclusive(key: &str, addr: &str) -> Result<StdListener, String> {
    let resolved = crate::config::resolve_addr(key, addr).map_err(|e| e.0)?;
    let started = Instant::now();
    loop {
        match StdListener::bind(resolved) {
            Ok(l) => {
                if started.elapsed() > BIND_RETRY_EVERY {
                    log::info!(
                        "{key}: bound {addr} after {} ms",
                        started.elapsed().as_millis()
                    );
                }
                return Ok(l);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if started.elapsed() >= BIND_RETRY_FOR {
                    return Err(format!(
                        "cannot listen on {addr} ({key}): address in use after retrying for {} s ({e})",
                        BIND_RETRY_FOR.as_secs()
                    ));
                }
                if started.elapsed() < BIND_RETRY_EVERY {
                    log::warn!(
                        "{key}: {addr} is in use; retrying for up to {} s",
                        BIND_RETRY_FOR.as_secs()
                    );
                }
                std::thread::sleep(BIND_RETRY_EVERY);
            }
            Err(e) => return Err(format!("cannot listen on {addr} ({key}): {e}")),
        }
    }
}

type ShardEnds = Vec<Vec<ClientChannels>>;

/// One bounded request channel and one bounded response channel per (client, shard).
fn make_channels(shards: usize, clients: usize) -> (ShardEnds, Vec<RouterChannels>) {
    let mut shard_ends: ShardEnds = (0..shards).map(|_| Vec::new()).collect();
    let mut client_ends: Vec<RouterChannels> = (0..clients).map(|_| Vec::new()).collect();
    for ends in client_ends.iter_mut() {
        for shard in shard_ends.iter_mut() {
            let (req_tx, req_rx) = shared_channel::new_bounded(SHARD_QUEUE_DEPTH_MAX);
            let (resp_tx, resp_rx) = shared_channel::new_bounded(SHARD_QUEUE_DEPTH_MAX);
            shard.push((req_rx, resp_tx));
            ends.push((req_tx, resp_rx));
        }
    }
    (shard_ends, client_ends)
}

fn spawn<G, F, T>(
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

fn wait_ready(rx: &mpsc::Receiver<Result<(), String>>, n: usize, what: &str) -> Result<(), String> {
    for _ in 0..n {
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("{what} did not start within {STARTUP_TIMEOUT:?}")),
        }
    }
    Ok(())
}

fn socket_pair() -> Result<(StdUnixStream, OwnedFd), String> {
    let (a, b) = StdUnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    Ok((a, OwnedFd::from(b)))
}

/// SIGTERM/SIGINT delivery to the main thread: the handler writes a byte to a socketpair
/// (signal-hook's async-signal-safe pipe handler) and `wait` blocks reading it (the pattern
/// docs/glommio.md §6 measured working).
struct Signals(StdUnixStream);

impl Signals {
    fn install() -> Result<Signals, String> {
        let err = |e: std::io::Error| format!("cannot install signal handlers: {e}");
        let (read, write) = StdUnixStream::pair().map_err(err)?;
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            let w = write.try_clone().map_err(err)?;
            signal_hook::low_level::pipe::register(sig, w).map_err(err)?;
        }
        Ok(Signals(read))
    }

    /// Waits for a signal, at most `limit` (`None`: forever). True when one arrived.
    fn wait(&mut self, limit: Option<Duration>) -> bool {
        use std::io::Read;
        // A zero timeout is refused by the socket; wait 1 ms at least.
        let limit = limit.map(|d| d.max(Duration::from_millis(1)));
        if self.0.set_read_timeout(limit).is_err() {
            return false;
        }
        let deadline = limit.map(|d| Instant::now() + d);
        let mut byte = [0u8; 1];
        loop {
            match self.0.read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return false
                }
                Ok(_) => break,
                Err(_) => return false,
            }
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() || self.0.set_read_timeout(Some(left)).is_err() {
                    return false;
                }
            }
        }
        log::info!("received SIGTERM or SIGINT");
        true
    }
}
