//! A front executor: accepts connections on the shared listening socket, enforces the
//! connection limit, serves each connection, and drains on shutdown.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream, UnixStream};
use glommio::sync::Gate;
use shards::{ErrorCode, Rejection};

use super::connection;
use super::drain::{self, FrontDrain};
use super::peer::{self, Peers};
use crate::mesh::router::{Router, RouterChannels};
use crate::metrics::{FrontStats, SubsStats};
use crate::protocol::encode_error;
use crate::security::Live;
use crate::tls::ServerTls;

/// How long a rejected connection gets to receive its CONNECTION_LIMIT frame.
const REJECT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_frame_bytes: u32,
    pub max_inflight: usize,
    pub max_connections: u64,
    pub idle_timeout: Option<Duration>,
    /// `subscriptions.queue_max`: pushes one subscription may have queued.
    pub subscription_queue_max: usize,
    /// `network.proxy_protocol`: read a PROXY header before anything else.
    pub proxy_protocol: bool,
}

/// Facts about the whole server, shared read-only by every executor.
#[derive(Debug)]
pub struct ServerInfo {
    pub started: Instant,
    /// The replication role (a replica becomes a primary on PROMOTE) and epoch.
    pub replication: Arc<crate::member::ReplState>,
    pub acceptor_cores: u32,
    /// The data dir's `timers.paused` pause (INFO's `timers_paused`, TIMERS_RESUME).
    pub timers_pause: Arc<crate::timers_pause::TimersPause>,
    /// This member's cluster and group (`None`: no `[cluster]`; docs/cluster.md).
    pub cluster: Option<crate::ops::cluster::Member>,
}

pub struct FrontSetup {
    pub index: u32,
    /// A dup of the listening socket, owned by this executor.
    /// A dup of the bound, listening client socket, owned by this front.
    pub listener_fd: OwnedFd,
    /// One end of a socketpair made at boot for this front alone (`drain::STOP_*` bytes).
    pub shutdown_fd: OwnedFd,
    pub channels: RouterChannels,
    /// This front's replication relay channels (when `replication.role` is set).
    pub relay: Option<crate::mesh::relay::FrontEnds>,
    pub limits: Limits,
    pub stats: Arc<FrontStats>,
    /// This front's subscription counters (read by the metrics scrape).
    pub subs_stats: Arc<SubsStats>,
    /// Connections open across all fronts (the limit is global).
    pub active: Arc<AtomicU64>,
    pub info: Arc<ServerInfo>,
    /// The settings SIGHUP reloads (auth, TLS).
    pub live: Arc<Live>,
    /// Connections per client address, across fronts (INFO).
    pub peers: Arc<Peers>,
    /// Told (once) when this front has finished draining.
    pub drained: std::sync::mpsc::Sender<()>,
    /// The HTTP listener's socket for this front and the `[http]` settings (`http.enabled`).
    pub http: Option<crate::front::http::FrontHttp>,
}

/// What every connection task on this executor shares.
pub struct Front {
    pub router: Rc<Router>,
    /// This executor's subscriptions; the router's pumps deliver pushes to them.
    pub subs: Rc<crate::front::subscriptions::Table>,
    /// Relays REPLICATE connections and replication ops to the control executor.
    pub relay: Option<Rc<crate::front::relay::Relay>>,
    pub limits: Limits,
    pub stats: Arc<FrontStats>,
    pub info: Arc<ServerInfo>,
    /// Subscription counters of this front (`metrics::subs`).
    pub subs_stats: Arc<SubsStats>,
    /// The settings SIGHUP reloads: read per new connection and per AUTH.
    pub live: Arc<Live>,
    /// Connections per client address, across fronts.
    pub peers: Arc<Peers>,
    /// Set when this front stops accepting (SIGTERM drain).
    pub drain: FrontDrain,
    /// The HTTP API's settings (`None`: `http.enabled = false`).
    pub http: Option<Arc<crate::front::http::Settings>>,
    active: Arc<AtomicU64>,
    open: RefCell<HashMap<u64, RawFd>>,
    next_conn: Cell<u64>,
}

impl Front {
    /// The TLS settings a connection accepted now handshakes with (`None`: plaintext): the
    /// ones in force since the last SIGHUP reload.
    pub fn tls_for_new_connection(&self) -> Option<ServerTls> {
        self.live.current().tls.clone()
    }

    /// Records an accepted connection's socket (shut down by the stop-now path; the drain
    /// waits until none is left). Returns its key for `untrack`.
    pub fn track(&self, fd: RawFd) -> u64 {
        let id = self.next_conn.get();
        self.next_conn.set(id + 1);
        self.open.borrow_mut().insert(id, fd);
        id
    }

    /// The connection `id` is closing.
    pub fn untrack(&self, id: u64) {
        self.open.borrow_mut().remove(&id);
    }

    /// Ends the reading of every open connection (`demotion`): each answers what it had
    /// received, then closes. Returns how many there were.
    pub fn shutdown_reads(&self) -> usize {
        let open = self.open.borrow();
        for fd in open.values() {
            // SAFETY: fd belongs to a live connection on this executor (removed from `open`
            // before its stream is dropped); shutdown(2) does not close it.
            unsafe {
                libc::shutdown(*fd, libc::SHUT_RD);
            }
        }
        open.len()
    }
}

pub async fn run(setup: FrontSetup) {
    let subs = Rc::new(crate::front::subscriptions::Table::default());
    let router = Router::connect(setup.channels, subs.clone()).await;
    let relay = match setup.relay {
        Some(ends) => Some(crate::front::relay::Relay::connect(ends, setup.index).await),
        None => None,
    };
    let listener: TcpListener = crate::util::fd::adopt(setup.listener_fd);
    let mut shutdown: UnixStream = crate::util::fd::adopt(setup.shutdown_fd);
    let front = Rc::new(Front {
        router,
        subs,
        relay,
        limits: setup.limits,
        stats: setup.stats,
        info: setup.info,
        subs_stats: setup.subs_stats,
        live: setup.live,
        peers: setup.peers,
        drain: FrontDrain::default(),
        http: setup.http.as_ref().map(|h| h.settings.clone()),
        active: setup.active,
        open: RefCell::new(HashMap::new()),
        next_conn: Cell::new(0),
    });
    let gate = Gate::new();
    glommio::spawn_local(super::demotion::watch(front.clone())).detach();
    if let Some(http) = setup.http {
        let accept = crate::front::http::listen::run(front.clone(), http.listener_fd, gate.clone());
        glommio::spawn_local(accept).detach();
    }
    let stop = accept(&front, &gate, listener, &mut shutdown, setup.index).await;
    front.drain.begin();
    drain_connections(&front, &gate, &mut shutdown, stop).await;
    let _ = setup.drained.send(());
    front.router.close();
    log::debug!("front {} stopped", setup.index);
}

/// Accepts and admits RCP1 connections until main writes a stop byte on the shutdown
/// socket; returns that byte. The listener is closed on return.
async fn accept(
    front: &Rc<Front>,
    gate: &Gate,
    listener: TcpListener,
    shutdown: &mut UnixStream,
    index: u32,
) -> u8 {
    let stop = loop {
        let accepted = futures_lite::future::or(async { Ok(listener.accept().await) }, async {
            let mut b = [drain::STOP_NOW; 1];
            let _ = shutdown.read(&mut b).await;
            Err(b[0])
        })
        .await;
        match accepted {
            Err(byte) => break byte,
            Ok(Ok(stream)) => {
                let limit = ConnLimit {
                    active: &front.active,
                    max: front.limits.max_connections,
                };
                let refused = "cannot serve connection during shutdown";
                admit(front, gate, stream, limit, serve_stream, reject, refused);
            }
            Ok(Err(e)) => {
                log::warn!("front {index}: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    drop(listener);
    stop
}

/// After accepting stopped: unless `stop` is `drain::STOP_NOW`, waits until every connection
/// closed or main says stop now; then closes the gate (shutting every socket down first when
/// stopping now).
async fn drain_connections(front: &Front, gate: &Gate, shutdown: &mut UnixStream, mut stop: u8) {
    if stop != drain::STOP_NOW {
        // Drain until every connection closed, or until main says stop now.
        // (Polls the open set: a `gate.close()` future must not be dropped while tasks run.)
        let emptied = async {
            while !front.open.borrow().is_empty() {
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            false
        };
        let now = futures_lite::future::or(emptied, async {
            let mut b = [drain::STOP_NOW; 1];
            let _ = shutdown.read(&mut b).await;
            true
        });
        stop = if now.await { drain::STOP_NOW } else { stop };
    }
    if stop == drain::STOP_NOW {
        close_all(front, gate).await;
    } else {
        let _ = gate.close().await;
    }
}

/// One listener's connection limit: the count of its open connections (across fronts) and
/// the most it may reach.
pub(crate) struct ConnLimit<'a> {
    pub active: &'a Arc<AtomicU64>,
    pub max: u64,
}

/// Admits one accepted connection (RCP1 or HTTP): over `limit`, counts a rejection and sends
/// `reject`'s refusal; otherwise counts it open, tracks it for the drain, and serves it in the
/// gate (`serve` after `peer::identify`), counting it closed when it ends. `refused` is the
/// warning logged when the gate is closed (shutdown).
pub(crate) fn admit<S, SF, R, RF>(
    front: &Rc<Front>,
    gate: &Gate,
    stream: TcpStream,
    limit: ConnLimit<'_>,
    serve: S,
    reject: R,
    refused: &'static str,
) where
    S: FnOnce(TcpStream, Rc<Front>, SocketAddr) -> SF + 'static,
    SF: Future<Output = ()>,
    R: FnOnce(TcpStream, u64, Option<ServerTls>) -> RF,
    RF: Future<Output = ()> + 'static,
{
    let _ = stream.set_nodelay(true);
    let now = limit.active.fetch_add(1, Ordering::Relaxed) + 1;
    if now > limit.max {
        limit.active.fetch_sub(1, Ordering::Relaxed);
        front.stats.connection_rejected();
        let tls = front.tls_for_new_connection();
        glommio::spawn_local(reject(stream, limit.max, tls)).detach();
        return;
    }
    front.stats.connection_opened();
    let id = front.track(stream.as_raw_fd());
    let f = front.clone();
    let active = limit.active.clone();
    let spawned = gate.spawn(async move {
        let mut stream = stream;
        if let Some(client) = peer::identify(&mut stream, &f).await {
            serve(stream, f.clone(), client.addr).await;
        }
        f.untrack(id);
        active.fetch_sub(1, Ordering::Relaxed);
        f.stats.connection_closed();
    });
    match spawned {
        Ok(task) => drop(task.detach()),
        Err(e) => log::warn!("{refused}: {e}"),
    }
}

/// Serves one accepted connection: with TLS on, the handshake first (in this connection's
/// task, bounded by the handshake timeout); a failed handshake closes this connection only.
/// `client` is the connection's client (from the PROXY header when there is one).
async fn serve_stream(stream: TcpStream, front: Rc<Front>, client: SocketAddr) {
    let Some(tls) = front.tls_for_new_connection() else {
        return connection::serve(stream, front).await;
    };
    match tls.accept(stream).await {
        Ok(tls_stream) => connection::serve(tls_stream, front).await,
        Err(e) => log::debug!("TLS handshake with {client} failed: {e}"),
    }
}

/// Sends one CONNECTION_LIMIT error frame and closes (over TLS when it is on, so the client
/// can read it).
async fn reject(stream: TcpStream, limit: u64, tls: Option<ServerTls>) {
    let _ = stream.set_write_timeout(Some(REJECT_WRITE_TIMEOUT));
    let rej = Rejection::new(ErrorCode::ConnectionLimit, "connection limit reached")
        .with("max_connections", limit);
    let mut out = Vec::new();
    encode_error(&mut out, None, &rej);
    send_refusal(stream, tls, &out).await;
}

/// Sends `bytes` and closes, over TLS when it is on (so the client can read them): a
/// connection refused at accept (RCP1 and HTTP alike).
pub(crate) async fn send_refusal(stream: TcpStream, tls: Option<ServerTls>, bytes: &[u8]) {
    match tls {
        None => send_and_close(stream, bytes).await,
        Some(tls) => {
            if let Ok(s) = tls.accept(stream).await {
                send_and_close(s, bytes).await;
            }
        }
    }
}

async fn send_and_close<S: futures_lite::AsyncWrite + Unpin>(mut stream: S, bytes: &[u8]) {
    let _ = stream.write_all(bytes).await;
    let _ = stream.flush().await;
    let _ = stream.close().await;
}

/// Drain cut short (second SIGTERM or `network.drain_timeout_ms`): shuts every open socket
/// down (readers see EOF, writes fail), then waits at most `drain::STOP_NOW_WAIT` for the
/// connection tasks. Responses not yet written are lost; their writes, if any, are durable
/// (nothing is acknowledged before its log entry is).
async fn close_all(front: &Front, gate: &Gate) {
    for fd in front.open.borrow().values() {
        // SAFETY: fd belongs to a live connection on this executor (removed from `open` before
        // its stream is dropped); shutdown(2) does not close it.
        unsafe {
            libc::shutdown(*fd, libc::SHUT_RDWR);
        }
    }
    let closed =
        glommio::timer::timeout(drain::STOP_NOW_WAIT, async { Ok(gate.close().await) }).await;
    if closed.is_err() {
        log::warn!(
            "shutdown: connections still open after {:?}",
            drain::STOP_NOW_WAIT
        );
    }
}
