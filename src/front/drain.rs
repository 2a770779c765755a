//! The SIGTERM drain (docs/protocol.md, "Behind a load balancer"), as a front and its connections see it.
//!
//! `boot::run` drives the phases: `/health` goes 503 at once (`Draining`), the server serves on
//! for `network.drain_grace_ms`, then tells every front to stop (`STOP_DRAIN`): the front drops
//! its listener, and each connection answers the requests it already dispatched, answers every
//! later request `SHUTTING_DOWN` (retryable: it was not executed), and closes once its client has
//! been quiet for `DRAIN_QUIET` (or closes itself). A second SIGTERM or `network.drain_timeout_ms`
//! sends `STOP_NOW`: open sockets are shut down at once. Shards then sync and stop, so every
//! acknowledged write is durable either way.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncReadExt};
use shards::{ErrorCode, Rejection};

use super::connection::{completed, Conn, Pending};
use super::executor::Front;
use crate::protocol::{encode_error, parse_request, Op};

/// Byte on a front's shutdown socket: stop accepting and drain.
pub const STOP_DRAIN: u8 = b'd';
/// Byte on a front's shutdown socket: close every connection now.
pub const STOP_NOW: u8 = b'x';
/// A draining connection closes after its client sent nothing for this long: enough for
/// requests already on the wire to arrive after the client saw its first `SHUTTING_DOWN`.
pub const DRAIN_QUIET: Duration = Duration::from_millis(200);
/// After `STOP_NOW`, the longest a front waits for its connection tasks to end.
pub const STOP_NOW_WAIT: Duration = Duration::from_secs(1);

/// One front's drain state: set when the front stops accepting; wakes every connection reader
/// waiting for bytes so it can start its quiet timer.
#[derive(Default)]
pub struct FrontDrain {
    stopping: Cell<bool>,
    waiters: RefCell<HashMap<u64, Waker>>,
    next: Cell<u64>,
}

impl FrontDrain {
    pub fn stopping(&self) -> bool {
        self.stopping.get()
    }

    pub fn begin(&self) {
        self.stopping.set(true);
        for (_, w) in self.waiters.borrow_mut().drain() {
            w.wake();
        }
    }

    /// Resolves once the drain has begun (at once if it has).
    pub async fn stopped(&self) {
        self.wait().await
    }

    fn wait(&self) -> StopWait<'_> {
        let key = self.next.get();
        self.next.set(key + 1);
        StopWait { drain: self, key }
    }
}

/// Resolves once the front stops; unregisters its waker when dropped (so the waiter map holds
/// at most one entry per blocked reader).
struct StopWait<'a> {
    drain: &'a FrontDrain,
    key: u64,
}

impl Future for StopWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.drain.stopping.get() {
            return Poll::Ready(());
        }
        let waker = cx.waker().clone();
        self.drain.waiters.borrow_mut().insert(self.key, waker);
        Poll::Pending
    }
}

impl Drop for StopWait<'_> {
    fn drop(&mut self) {
        self.drain.waiters.borrow_mut().remove(&self.key);
    }
}

/// What a connection's read came to.
pub enum Read {
    Data(std::io::Result<usize>),
    /// The front started draining while the reader waited: read again (with the quiet timer).
    Stopping,
    /// Draining, and the client sent nothing for `DRAIN_QUIET`: close.
    Quiet,
}

/// A connection's read, cut short by the drain.
pub async fn read<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8], drain: &FrontDrain) -> Read {
    let data = async { Read::Data(r.read(buf).await) };
    if drain.stopping() {
        let quiet = async {
            glommio::timer::sleep(DRAIN_QUIET).await;
            Read::Quiet
        };
        futures_lite::future::or(data, quiet).await
    } else {
        let stop = async {
            drain.wait().await;
            Read::Stopping
        };
        futures_lite::future::or(data, stop).await
    }
}

/// Answers a request read while draining with `SHUTTING_DOWN` (it is not executed, so a retry
/// elsewhere is safe). Returns true for BYE, which is still honoured.
pub fn refuse(payload: &[u8], conn: &Rc<Conn>, front: &Front) -> bool {
    let started = Instant::now();
    let (id, op) = match parse_request(payload) {
        Ok(r) => (
            Some(r.id.to_string()),
            Op::parse(&r.op).unwrap_or(Op::Unknown),
        ),
        Err(bad) => (bad.id.map(str::to_string), Op::Unknown),
    };
    if op == Op::Bye {
        let mut out = Vec::new();
        crate::protocol::encode_ok(&mut out, id.as_deref().unwrap_or("null"), b"{}");
        completed(front, op, None, started, None);
        conn.push(Pending::Frame(out));
        conn.push(Pending::Close);
        return true;
    }
    let rej = Rejection::new(
        ErrorCode::ShuttingDown,
        "server is shutting down; retry on a new connection",
    );
    let mut out = Vec::new();
    encode_error(&mut out, id.as_deref(), &rej);
    completed(front, op, None, started, Some(rej.code));
    conn.push(Pending::Frame(out));
    false
}
