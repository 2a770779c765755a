//! Process wiring: executors, placement, channels, the listening socket, start-up order and
//! shutdown. See docs/architecture.md.
//!
//! Executors: `S` shards (each owns its instances and log), `F` fronts (accept, decode, route),
//! one control executor (start-up fan-out, the metrics listener, replication). Every front
//! and the control executor hold one request/response channel pair per shard, created here.

mod colocate;
mod listen;
mod placement;
mod shutdown;
mod spawn;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::datadir::DataDir;
use crate::metrics::{FrontStats, SubsStats};
use crate::security::Live;
use crate::timers_pause::TimersPause;
use listen::{announce, Listeners};
pub use placement::{placements, Placements};
use shutdown::{shut_down, Signals};
use spawn::{
    make_channels, relay_channels, spawn_control, spawn_fronts, spawn_shards, wait_ready,
    ControlParts,
};

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
    let routing = config.cluster.routing();
    let data_dir = DataDir::open(&config.storage.data_dir, shard_count, routing)?;
    // Before any shard builds an engine: every instance table of this process hashes with the
    // data dir's key (restarts load and replay in table order, docs/wal.md "Recovery").
    if !shards::engine::set_index_key(data_dir.index_key.0, data_dir.index_key.1) {
        log::warn!("instance tables were built before the data dir's index key was read");
    }
    if let Some(group) = config.cluster.my_group() {
        crate::front::subscriptions::cursor::set_group(group);
    }
    let timers_pause = timers_pause(&data_dir);
    let mut listeners = Listeners::bind(&config)?;
    let mut signals = Signals::install()?;
    let live = Live::new(&config, config_path)?;
    crate::security::reload_on_sighup(live.clone())?;
    let repl = repl_state(&config);
    let ha = start_ha(&config, &repl, &listeners)?;
    let cluster = ha.as_ref().and_then(|(ha, _)| ha.cluster.clone());
    let stats = FrontFigures::new(place.fronts.len(), shard_count);
    let shared = Shared::new(repl, live, stats, timers_pause, cluster);
    let (shard_ends, mut client_ends) = make_channels(&place, routing);
    let mut handles = Vec::new();
    let (ready_tx, ready_rx) = mpsc::channel();
    let front_slots = spawn_shards(
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
    let repl_parts = (repl_settings, relay_control.unwrap_or_default(), ha);
    let control = control_parts(client_ends.pop(), repl_parts, &shared, &mut listeners);
    let ctl_shutdown = spawn_control(&config, &place, control, &shared, &ready_tx, &mut handles)?;
    wait_ready(&ready_rx, 1, "control")?;
    let channels = client_ends.into_iter().zip(relay_fronts).collect();
    let (shutdowns, drained) = spawn_fronts(
        &config,
        &place,
        &listeners,
        channels,
        &shared,
        front_slots,
        &mut handles,
    )?;
    announce(&config, &listeners.bound(), shard_count, &place);
    drop(listeners);

    signals.wait(None);
    let running = Running {
        handles,
        control: ctl_shutdown,
        fronts: shutdowns,
        drained,
    };
    for h in stop(&config, &mut signals, &shared, running) {
        h.join().map_err(|e| format!("executor failed: {e}"))?;
    }
    drop(data_dir);
    log::info!("stopped");
    Ok(())
}

/// What the control executor is started with: its channels to the shards, replication (with
/// the fronts' relay ends and the failover parts) when a role is set, the metrics listener.
fn control_parts(
    channels: Option<crate::mesh::router::RouterChannels>,
    (repl_settings, relay, ha): ReplParts,
    shared: &Shared,
    listeners: &mut Listeners,
) -> ControlParts {
    ControlParts {
        channels: channels.unwrap_or_default(),
        replication: repl_settings.map(|settings| crate::control::replication::hub::HubSetup {
            fronts: relay,
            state: shared.repl.clone(),
            settings,
            ha,
        }),
        metrics: listeners.metrics.take(),
    }
}

/// The member's replication role, shared by every executor: decided by the failover thread
/// under `[ha]`, else fixed by `replication.role`.
fn repl_state(config: &Config) -> Arc<crate::member::ReplState> {
    Arc::new(match config.ha.enabled {
        true => crate::member::ReplState::new_ha(),
        false => crate::member::ReplState::new(config.replication.role),
    })
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
    /// Cluster mode: the map copy and this member's group (`crate::cluster`).
    cluster: Option<Arc<crate::cluster::Cluster>>,
}

impl Shared {
    fn new(
        repl: Arc<crate::member::ReplState>,
        live: Arc<Live>,
        stats: FrontFigures,
        timers_pause: Arc<TimersPause>,
        cluster: Option<Arc<crate::cluster::Cluster>>,
    ) -> Shared {
        Shared {
            repl,
            draining: Arc::new(crate::member::Draining::default()),
            peers: Arc::new(crate::front::peer::Peers::default()),
            live,
            started: Instant::now(),
            stats,
            timers_pause,
            cluster,
        }
    }
}

/// The running executors, and the sockets that stop the control executor and the fronts.
struct Running {
    handles: spawn::Handles,
    control: std::os::unix::net::UnixStream,
    fronts: Vec<std::os::unix::net::UnixStream>,
    drained: mpsc::Receiver<()>,
}

/// After the first SIGTERM or SIGINT: the drain (`shut_down`), then the control executor is
/// told to stop. Returns the executors to join (shards sync and stop once their clients hung
/// up).
fn stop(
    config: &Config,
    signals: &mut Signals,
    shared: &Shared,
    mut running: Running,
) -> spawn::Handles {
    let network = &config.network;
    shut_down(
        signals,
        &shared.draining,
        &mut running.fronts,
        &running.drained,
        Duration::from_millis(network.drain_grace_ms),
        Duration::from_millis(network.drain_timeout_ms),
    );
    let _ = running.control.write_all(b"x");
    running.handles
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

/// Failover (docs/ha.md): starts the HA thread before any executor, with the address other
/// members and clients reach this one at (`ha.advertise_addr`, else the bound client address)
/// and, in cluster mode, the cluster capability whose map copy it keeps (docs/cluster.md).
/// Returns what the control executor's driver needs.
fn start_ha(
    config: &Config,
    repl: &Arc<crate::member::ReplState>,
    listeners: &Listeners,
) -> Result<Option<HaParts>, String> {
    if !config.ha.enabled {
        return Ok(None);
    }
    let addr = advertised(config, listeners.local);
    let cluster = crate::cluster::Cluster::new(config, listeners.bound().http, &addr);
    let follow =
        crate::control::replication::follower::Settings::for_upstream(config, addr.clone())?;
    let shared = crate::control::ha::start(config, repl.clone(), addr, cluster)?;
    Ok(Some((shared, follow)))
}

/// The client address other members and clients reach this one at: `ha.advertise_addr`,
/// else the bound client address.
fn advertised(config: &Config, local: SocketAddr) -> String {
    (config.ha.advertise_addr.clone()).unwrap_or_else(|| local.to_string())
}

/// The control executor's replication parts: the settings (None without a role), the fronts'
/// relay ends, the failover parts.
type ReplParts = (
    Option<crate::control::replication::hub::Settings>,
    Vec<crate::mesh::relay::ControlEnds>,
    Option<HaParts>,
);

type HaParts = (
    Arc<crate::control::ha::shared::Shared>,
    crate::control::replication::follower::Settings,
);
