//! One connection of the async client: a writer task that sends queued frames in as few
//! writes as it can, a reader task that hands each response to its caller by id and each push
//! to its subscription's queue. Any number of requests may be in flight (pipelining).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::frame::decode_frame;
use crate::message::{encode_request_numbered, Incoming, Received};
use crate::tls::{client_config, server_name};
use crate::CLIENT_FRAME_BYTES_MAX;

use super::ConnectOptions;

/// Pushes one subscription may have queued on the client before it is dropped from the
/// connection (and resumed from its cursor): a reader is never blocked by one slow consumer.
pub const SUBSCRIPTION_QUEUE_MAX: usize = 4096;
/// Read buffer to start with; grows to the largest frame.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Capacity a request frame starts with (most fit; larger ones grow).
const FRAME_START_BYTES: usize = 256;

/// A response's result as raw JSON text: its caller decodes it straight into its typed result.
pub type RawResult = Result<Box<RawValue>>;

type Reply = oneshot::Sender<RawResult>;

/// A request waiting for its response; a WATCH also carries the queue for its pushes, which
/// the reader registers the moment the response arrives (before any push can follow).
struct Pending {
    /// Taken when the call times out: the entry stays, so that a late response is matched by
    /// its id and dropped instead of being taken for a protocol error.
    reply: Option<Reply>,
    pushes: Option<mpsc::Sender<Value>>,
    /// When the call times out (`ConnectOptions::timeout` after it was queued).
    deadline: Option<Instant>,
    op: Cow<'static, str>,
}

/// How often a connection looks for calls past their deadline, as a fraction of the timeout
/// (a call times out between `timeout` and `timeout * (1 + 1/SWEEPS_PER_TIMEOUT)` after it was
/// queued), and the bounds of that period.
const SWEEPS_PER_TIMEOUT: u32 = 10;
const SWEEP_PERIOD_MIN: Duration = Duration::from_millis(10);
const SWEEP_PERIOD_MAX: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Shared {
    pending: HashMap<u64, Pending>,
    subs: HashMap<String, mpsc::Sender<Value>>,
    /// Why the connection ended, once it has.
    dead: Option<Error>,
}

pub struct Conn {
    out: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Mutex<Shared>>,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    /// Every call's timeout (`ConnectOptions::timeout`), enforced by one sweeper task per
    /// connection instead of a timer per call.
    timeout: Option<Duration>,
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // A panic while holding this lock would be a bug in this module; keep serving regardless.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Conn {
    /// TCP (and TLS) connect, then the reader and writer tasks. No HELLO.
    pub async fn open(addr: &str, opts: &ConnectOptions) -> Result<Arc<Conn>> {
        let connect = TcpStream::connect(addr);
        let tcp = match opts.connect_timeout {
            Some(t) => tokio::time::timeout(t, connect)
                .await
                .map_err(|_| timeout_error("connect", t))??,
            None => connect.await?,
        };
        tcp.set_nodelay(true)?;
        match &opts.tls {
            None => {
                let (r, w) = tcp.into_split();
                Ok(Conn::start(r, w, opts.timeout))
            }
            Some(tls) => {
                let config = client_config(tls).map_err(Error::Config)?;
                let name = rustls::pki_types::ServerName::try_from(server_name(tls, addr))
                    .map_err(|e| Error::Config(format!("TLS server name: {e}")))?;
                let hs = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
                let stream = match opts.connect_timeout {
                    Some(t) => tokio::time::timeout(t, hs)
                        .await
                        .map_err(|_| timeout_error("TLS handshake", t))??,
                    None => hs.await?,
                };
                let (r, w) = tokio::io::split(stream);
                Ok(Conn::start(r, w, opts.timeout))
            }
        }
    }

    fn start<R, W>(r: R, w: W, timeout: Option<Duration>) -> Arc<Conn>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let alive = Arc::new(AtomicBool::new(true));
        tokio::spawn(write_loop(w, rx, shared.clone(), alive.clone()));
        tokio::spawn(read_loop(r, shared.clone(), alive.clone()));
        if let Some(t) = timeout {
            tokio::spawn(sweep_loop(t, shared.clone(), alive.clone()));
        }
        Arc::new(Conn {
            out,
            shared,
            next_id: AtomicU64::new(1),
            alive,
            timeout,
        })
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Queues one request (`params` `None`: no params member); the receiver gets its result,
    /// or the error, or a timeout error once the connection's timeout has passed. `pushes`:
    /// the queue for a WATCH's events.
    pub fn send<P: Serialize + ?Sized>(
        &self,
        op: Cow<'static, str>,
        params: Option<&P>,
        pushes: Option<mpsc::Sender<Value>>,
    ) -> Result<oneshot::Receiver<RawResult>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = Vec::with_capacity(FRAME_START_BYTES);
        encode_request_numbered(&mut frame, id, &op, params)?;
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            reply: Some(reply),
            pushes,
            deadline: self.timeout.map(|t| Instant::now() + t),
            op,
        };
        {
            let mut s = lock(&self.shared);
            if let Some(why) = &s.dead {
                return Err(why.duplicate());
            }
            s.pending.insert(id, pending);
        }
        if self.out.send(frame).is_err() {
            lock(&self.shared).pending.remove(&id);
            return Err(Error::eof("connection closed"));
        }
        Ok(rx)
    }

    /// Stops routing pushes of `subscription_id` (their queue closes).
    pub fn forget(&self, subscription_id: &Value) {
        lock(&self.shared).subs.remove(&subscription_id.to_string());
    }

    /// Ends the connection: both tasks stop, every waiter gets an error.
    pub fn close(&self) {
        let e = Error::eof("connection closed by the client");
        fail_all(&self.shared, &self.alive, e);
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close();
    }
}

fn timeout_error(what: &str, t: Duration) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} not done within {t:?}"),
    ))
}

/// The connection is over: fail every pending call, close every subscription queue.
fn fail_all(shared: &Mutex<Shared>, alive: &AtomicBool, why: Error) {
    alive.store(false, Ordering::Release);
    let (pending, _subs) = {
        let mut s = lock(shared);
        if s.dead.is_none() {
            s.dead = Some(why.duplicate());
        }
        (std::mem::take(&mut s.pending), std::mem::take(&mut s.subs))
    };
    for (_, p) in pending {
        if let Some(reply) = p.reply {
            let _ = reply.send(Err(why.duplicate()));
        }
    }
}

/// Fails the calls whose deadline has passed, every `timeout / SWEEPS_PER_TIMEOUT` (bounded),
/// until the connection ends. A timed-out call's entry stays pending (see `Pending::reply`);
/// the connection itself is fine.
async fn sweep_loop(timeout: Duration, shared: Arc<Mutex<Shared>>, alive: Arc<AtomicBool>) {
    let period = (timeout / SWEEPS_PER_TIMEOUT).clamp(SWEEP_PERIOD_MIN, SWEEP_PERIOD_MAX);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while alive.load(Ordering::Acquire) {
        tick.tick().await;
        let now = Instant::now();
        let mut late = Vec::new();
        for p in lock(&shared).pending.values_mut() {
            if p.deadline.is_some_and(|d| d <= now) {
                if let Some(reply) = p.reply.take() {
                    late.push((reply, p.op.clone()));
                }
            }
        }
        for (reply, op) in late {
            let _ = reply.send(Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{op}: no response within {timeout:?}"),
            ))));
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    shared: Arc<Mutex<Shared>>,
    alive: Arc<AtomicBool>,
) {
    let mut buf = Vec::new();
    while let Some(first) = rx.recv().await {
        buf.clear();
        buf.extend_from_slice(&first);
        // Everything already queued goes in the same write.
        while let Ok(more) = rx.try_recv() {
            buf.extend_from_slice(&more);
        }
        if !alive.load(Ordering::Acquire) {
            break;
        }
        if let Err(e) = w.write_all(&buf).await.and(w.flush().await) {
            fail_all(&shared, &alive, Error::Io(e));
            break;
        }
    }
    let _ = w.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut r: R,
    shared: Arc<Mutex<Shared>>,
    alive: Arc<AtomicBool>,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BUFFER_BYTES);
    let mut start = 0;
    let why = loop {
        let mut handed = false;
        // Hand out every complete frame in the buffer.
        loop {
            match decode_frame(&buf[start..], CLIENT_FRAME_BYTES_MAX) {
                Ok(Some((range, used))) => {
                    let payload = &buf[start + range.start..start + range.end];
                    let handled = Received::parse(payload).and_then(|m| dispatch(&shared, m));
                    start += used;
                    handed = true;
                    if let Err(e) = handled {
                        fail_all(&shared, &alive, e);
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    fail_all(&shared, &alive, Error::Protocol(e.to_string()));
                    return;
                }
            }
        }
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if !alive.load(Ordering::Acquire) {
            return;
        }
        if handed {
            // Let the callers just answered run, and the writer send what they queue, before
            // this task reads again (most likely finding nothing yet): the next requests then
            // leave one system call sooner.
            YieldOnce(false).await;
        }
        let len = buf.len();
        // Reads into the spare capacity, which is not zeroed first (zeroing 64 KiB before
        // every read was 2% of the client's CPU at 8 in flight).
        buf.reserve(READ_BUFFER_BYTES);
        let n = r.read_buf(&mut buf).await;
        match n {
            Ok(0) if len == 0 => break Error::eof("connection closed by the server"),
            Ok(0) => {
                break Error::Protocol(format!(
                    "connection closed by the server in the middle of a frame \
                     ({len} bytes of it received)"
                ))
            }
            Ok(_) => {}
            Err(e) => break Error::Io(e),
        }
    };
    fail_all(&shared, &alive, why);
}

/// Goes to the back of the run queue once. Not `tokio::task::yield_now`: that one holds the
/// wake-up back until the runtime has polled its I/O driver, one more `epoll_wait` per round
/// trip; here the tasks already woken (the callers just answered, then the writer) run first,
/// and nothing else.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// Routes one message: a response to its caller, a push to its subscription's queue.
fn dispatch(shared: &Mutex<Shared>, m: Received) -> Result<()> {
    match m {
        Received::Response { id, result } => {
            let Some(id) = id else {
                // `id: null`: the server refused our bytes and is closing the connection.
                return Err(result.err().unwrap_or_else(|| {
                    Error::Protocol("a response with id null and status ok".into())
                }));
            };
            let mut s = lock(shared);
            let Some(p) = id.parse::<u64>().ok().and_then(|n| s.pending.remove(&n)) else {
                return Err(Error::Protocol(format!(
                    "response for request {id}, which is not pending"
                )));
            };
            if let (Ok(r), Some(q)) = (&result, p.pushes) {
                // A WATCH: its pushes are routed by the subscription id of its result.
                let sub = serde_json::from_str::<Value>(r.get())
                    .map(|v| v["subscription_id"].to_string())
                    .unwrap_or_default();
                s.subs.insert(sub, q);
            }
            drop(s);
            if let Some(reply) = p.reply {
                let _ = reply.send(result);
            }
        }
        Received::Other(Incoming::Event(v)) => push(shared, v),
        Received::Other(lag @ Incoming::Lagged { .. }) => push(shared, lag.into_value()),
        Received::Other(_) => {}
    }
    Ok(())
}

fn push(shared: &Mutex<Shared>, v: Value) {
    let key = v["subscription_id"].to_string();
    let mut s = lock(shared);
    let Some(q) = s.subs.get(&key) else {
        return;
    };
    if q.try_send(v).is_err() {
        // Full (the consumer is SUBSCRIPTION_QUEUE_MAX behind) or dropped: the subscription
        // sees its queue close and resumes from its last delivered cursor.
        s.subs.remove(&key);
    }
}
