//! One connection of the async client: callers encode their request frames straight into the
//! connection's output buffer, a writer task sends what has piled up in as few writes as it
//! can, a reader task (`reader`) hands each response to its caller by id and each push to its
//! subscription's queue. Any number of requests may be in flight (pipelining).

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::call::{Call, Slot};
use super::reader::{read_loop, Answer, Expect};
use super::write::{encode_request, Params};
use crate::error::{Error, Result};
use crate::tls::{client_config, server_name};

use super::ConnectOptions;

/// Pushes one subscription may have queued on the client before it is dropped from the
/// connection (and resumed from its cursor): a reader is never blocked by one slow consumer.
pub const SUBSCRIPTION_QUEUE_MAX: usize = 4096;
/// Pending calls a connection's table keeps room for at least (see `Shared::remove`).
const PENDING_KEPT: usize = 64;
/// An output buffer the writer keeps between writes at most (a burst's larger one is freed).
const OUT_KEPT_BYTES: usize = 1024 * 1024;

/// A request waiting for its response; a WATCH also carries the queue for its pushes, which
/// the reader registers the moment the response arrives (before any push can follow).
pub(super) struct Pending {
    pub(super) slot: Slot,
    pub(super) pushes: Option<mpsc::Sender<Value>>,
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

/// What the callers and the connection's tasks share, under one lock.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) pending: HashMap<u64, Pending, BuildHasherDefault<IdHasher>>,
    pub(super) subs: HashMap<String, mpsc::Sender<Value>>,
    /// Request frames not yet taken by the writer, in the order they were queued.
    out: Vec<u8>,
    /// Why the connection ended, once it has.
    dead: Option<Error>,
}

/// The hash of a request id: ids are this client's own counter, so SipHash's defence against
/// chosen keys buys nothing; a multiply by an odd constant (Fibonacci hashing) spreads
/// consecutive ids over the table's low bits and mixes them into its high ones.
#[derive(Default, Clone, Copy)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used for `u64` keys (`write_u64`); kept correct for any other.
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Shared {
    /// Takes the entry of call `id` out of the table. A table left mostly empty by a burst
    /// (a pipeline of thousands) is shrunk: a large one spreads the few calls in flight over
    /// cold cache lines, and each insert then waits for one.
    pub(super) fn remove(&mut self, id: u64) -> Option<Pending> {
        let p = self.pending.remove(&id);
        let (len, capacity) = (self.pending.len(), self.pending.capacity());
        if capacity > PENDING_KEPT && len * 8 < capacity {
            self.pending.shrink_to(len * 2);
        }
        p
    }
}

/// The state of one connection, shared by its `Conn` and its tasks.
#[derive(Default)]
pub(super) struct Link {
    pub(super) shared: Mutex<Shared>,
    pub(super) alive: AtomicBool,
    /// Wakes the writer: frames were queued into an empty `out`, or the connection ended.
    wake_writer: Notify,
}

impl Link {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // A panic while holding this lock would be a bug in this module; keep serving
        // regardless.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// The connection is over: fail every pending call, close every subscription queue, stop
    /// the writer.
    pub(super) fn fail_all(&self, why: Error) {
        self.alive.store(false, Ordering::Release);
        let mut wake = Vec::new();
        let _subs = {
            let mut s = self.lock();
            if s.dead.is_none() {
                s.dead = Some(why.duplicate());
            }
            s.out = Vec::new();
            // Answered and timed-out calls keep their entry until their caller takes it.
            s.pending.retain(|_, p| {
                wake.extend(p.slot.fail(why.duplicate(), false));
                !matches!(p.slot, Slot::Abandoned)
            });
            std::mem::take(&mut s.subs)
        };
        self.wake_writer.notify_one();
        wake.into_iter().for_each(Waker::wake);
    }
}

pub struct Conn {
    link: Arc<Link>,
    next_id: AtomicU64,
    /// Every call's timeout (`ConnectOptions::timeout`), enforced by one sweeper task per
    /// connection instead of a timer per call.
    timeout: Option<Duration>,
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

    pub(super) fn start<R, W>(r: R, w: W, timeout: Option<Duration>) -> Arc<Conn>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let link = Arc::new(Link::default());
        link.alive.store(true, Ordering::Release);
        tokio::spawn(write_loop(w, link.clone()));
        tokio::spawn(read_loop(r, link.clone()));
        if let Some(t) = timeout {
            tokio::spawn(sweep_loop(t, link.clone()));
        }
        Arc::new(Conn {
            link,
            next_id: AtomicU64::new(1),
            timeout,
        })
    }

    pub fn is_alive(&self) -> bool {
        self.link.is_alive()
    }

    /// Queues one request (`params` `None`: no params member); the future gives its result,
    /// or the error, or a timeout error once the connection's timeout has passed. `pushes`:
    /// the queue for a WATCH's events; `expect`: what the result is decoded into.
    pub(super) fn send<P: Params + ?Sized>(
        &self,
        op: Cow<'static, str>,
        params: Option<&P>,
        pushes: Option<mpsc::Sender<Value>>,
        expect: Expect,
    ) -> Result<Call<'_>> {
        self.queue(op, params, pushes, expect, None)
    }

    /// `send` and wait: the waker is registered with the request, under the same lock (one
    /// lock less per call than polling the future of `send`).
    pub(super) async fn call<P: Params + ?Sized>(
        &self,
        op: Cow<'static, str>,
        params: Option<&P>,
        pushes: Option<mpsc::Sender<Value>>,
        expect: Expect,
    ) -> Result<Answer> {
        let mut request = Some((op, pushes));
        let mut call: Option<Call<'_>> = None;
        std::future::poll_fn(|cx| {
            if let Some(c) = call.as_mut() {
                return Pin::new(c).poll(cx);
            }
            let Some((op, pushes)) = request.take() else {
                // Not reached: the request is queued on the first poll, then `call` is set.
                return Poll::Ready(Err(Error::eof("connection closed")));
            };
            match self.queue(op, params, pushes, expect, Some(cx.waker())) {
                // The reader wakes the waker just registered when the answer comes.
                Ok(c) => {
                    call = Some(c);
                    Poll::Pending
                }
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await
    }

    fn queue<P: Params + ?Sized>(
        &self,
        op: Cow<'static, str>,
        params: Option<&P>,
        pushes: Option<mpsc::Sender<Value>>,
        expect: Expect,
        waker: Option<&Waker>,
    ) -> Result<Call<'_>> {
        let id = expect.id(self.next_id.fetch_add(1, Ordering::Relaxed));
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let wake = {
            let mut s = self.link.lock();
            if let Some(why) = &s.dead {
                return Err(why.duplicate());
            }
            // The frame goes straight into the output buffer (no frame of its own to queue);
            // a params value that does not serialize leaves nothing of it behind.
            let start = s.out.len();
            if let Err(e) = encode_request(&mut s.out, id, &op, params) {
                s.out.truncate(start);
                return Err(e);
            }
            let pending = Pending {
                slot: Slot::Waiting(waker.cloned()),
                pushes,
                deadline,
                op,
            };
            s.pending.insert(id, pending);
            // The writer takes the whole buffer when it runs: only the first frame of a batch
            // needs to wake it.
            start == 0
        };
        if wake {
            self.link.wake_writer.notify_one();
        }
        Ok(Call::new(&self.link, id))
    }

    /// Stops routing pushes of `subscription_id` (their queue closes).
    pub fn forget(&self, subscription_id: &Value) {
        self.link.lock().subs.remove(&subscription_id.to_string());
    }

    /// Ends the connection: both tasks stop, every waiter gets an error.
    pub fn close(&self) {
        let e = Error::eof("connection closed by the client");
        self.link.fail_all(e);
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

/// Fails the calls whose deadline has passed, every `timeout / SWEEPS_PER_TIMEOUT` (bounded),
/// until the connection ends. A timed-out call's entry stays pending (see `Slot::TimedOut`);
/// the connection itself is fine.
async fn sweep_loop(timeout: Duration, link: Arc<Link>) {
    let period = (timeout / SWEEPS_PER_TIMEOUT).clamp(SWEEP_PERIOD_MIN, SWEEP_PERIOD_MAX);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while link.is_alive() {
        tick.tick().await;
        let now = Instant::now();
        let mut wake = Vec::new();
        for p in link.lock().pending.values_mut() {
            if p.deadline.is_some_and(|d| d <= now) && matches!(p.slot, Slot::Waiting(_)) {
                let e = Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{}: no response within {timeout:?}", p.op),
                ));
                wake.extend(p.slot.fail(e, true));
            }
        }
        wake.into_iter().for_each(Waker::wake);
    }
}

/// Sends what the callers queued, everything queued since the last write in one write, until
/// the connection ends.
async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, link: Arc<Link>) {
    let mut buf = Vec::new();
    loop {
        link.wake_writer.notified().await;
        if !link.is_alive() {
            break;
        }
        // Swapped, not copied: the callers go on filling the buffer this write emptied.
        std::mem::swap(&mut link.lock().out, &mut buf);
        if buf.is_empty() {
            continue;
        }
        if let Err(e) = w.write_all(&buf).await.and(w.flush().await) {
            link.fail_all(Error::Io(e));
            break;
        }
        buf.clear();
        if buf.capacity() > OUT_KEPT_BYTES {
            buf = Vec::new();
        }
    }
    let _ = w.shutdown().await;
}
