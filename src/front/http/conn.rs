//! One HTTP connection, shaped like an RCP1 one (`front::connection`): a reader task parses
//! requests and starts their ops, a writer task answers them strictly in request order
//! (pipelined requests run concurrently; their responses never overtake each other), and an
//! event stream, once started, owns the writer until it ends.
//!
//! Limits (docs/http.md, "Limits and hardening"): a head within `HEAD_READ_TIMEOUT` of its
//! first byte and at most `parse::HEAD_BYTES_MAX`; a body within `BODY_READ_TIMEOUT` and at
//! most `network.max_frame_bytes` (413, checked on the header before any byte is buffered);
//! `network.max_inflight_per_connection` requests outstanding (the reader stops reading);
//! `network.idle_timeout_secs` between requests. Any framing error answers and closes.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use shards::ErrorCode;

use super::chunked::{ChunkError, Chunked};
use super::parse::{parse_head, Framing, Head, HeadError};
use super::reply::Waiting;
use super::response::{plain, Response};
use super::{BODY_READ_TIMEOUT, HEAD_READ_TIMEOUT};
use crate::front::connection::completed;
use crate::front::drain;
use crate::front::executor::Front;
use crate::front::idle::Idle;
use crate::front::subscriptions::sub::Framing as SubFraming;
use crate::front::subscriptions::ConnSubs;
use crate::protocol::Op;
use crate::util::notify::Notify;

/// Read buffer to start with; it grows to hold one request (head and body) when needed.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// A response being produced, in request order.
pub(super) enum Pending {
    /// An encoded response; `close`: the connection closes after it.
    Ready { bytes: Vec<u8>, close: bool },
    /// `100 Continue`: the client waits for it before sending its body.
    Continue,
    /// An op's reply, to be made into a response when it lands.
    Reply(Box<Waiting>),
    /// A WATCH: on success the connection becomes an event stream until it ends.
    Stream(Box<Waiting>),
}

/// State shared by the reader and writer tasks of one connection.
pub(super) struct Conn {
    queue: RefCell<VecDeque<Pending>>,
    pub(super) writer_wake: Notify,
    space: Notify,
    pub(super) reader_done: Cell<bool>,
    writer_done: Cell<bool>,
    /// The writer ended (an event stream closed, a write failed): the reader stops waiting
    /// for a client that may never send again, so the connection and its queues go at once.
    writer_gone: Notify,
    idle: Idle,
    pub(super) subs: Rc<ConnSubs>,
    /// HTTPS: the scheme the `Origin` check expects.
    pub(super) tls: bool,
}

impl Conn {
    pub(super) fn push(&self, p: Pending) {
        self.queue.borrow_mut().push_back(p);
        self.writer_wake.notify();
    }

    fn len(&self) -> usize {
        self.queue.borrow().len()
    }
}

/// What the reader does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    Close,
    /// An event stream started: read nothing more (only watch for the client leaving).
    Stream,
}

/// Serves one HTTP connection until the client leaves, a framing error, `Connection: close`,
/// the end of an event stream, or shutdown.
pub async fn serve<S>(stream: S, front: Rc<Front>, tls: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (reader, writer) = futures_lite::io::split(stream);
    let conn = Rc::new(Conn {
        queue: RefCell::new(VecDeque::new()),
        writer_wake: Notify::default(),
        space: Notify::default(),
        reader_done: Cell::new(false),
        writer_done: Cell::new(false),
        writer_gone: Notify::default(),
        idle: Idle::default(),
        subs: Rc::new(ConnSubs::new(SubFraming::Sse)),
        tls,
    });
    let writer_task = glommio::spawn_local(write_loop(writer, conn.clone(), front.clone()));
    // Cancelled (dropped) when the reader ends first.
    let _watchdog = front.limits.idle_timeout.map(|limit| {
        let c = conn.clone();
        glommio::spawn_local(async move { c.idle.watch(limit, || c.subs.any_active()).await })
    });
    read_loop(reader, &conn, &front).await;
    conn.reader_done.set(true);
    conn.writer_wake.notify();
    conn.subs.close(&front.subs).await;
    writer_task.await;
}

/// The read buffer: bytes `lo..hi` of `data` are read and not yet consumed.
struct Buf {
    data: Vec<u8>,
    lo: usize,
    hi: usize,
}

impl Buf {
    fn filled(&self) -> &[u8] {
        &self.data[self.lo..self.hi]
    }

    fn consume(&mut self, n: usize) {
        self.lo += n;
        if self.lo == self.hi {
            (self.lo, self.hi) = (0, 0);
            if self.data.len() > READ_BUFFER_BYTES {
                // A large body passed: give its memory back.
                self.data = vec![0; READ_BUFFER_BYTES];
            }
        }
    }

    /// Room to read into: compacts, and grows (doubling) once the buffer is full.
    fn spare(&mut self) -> &mut [u8] {
        if self.lo > 0 {
            self.data.copy_within(self.lo..self.hi, 0);
            (self.lo, self.hi) = (0, self.hi - self.lo);
        }
        if self.hi == self.data.len() {
            let grown = self.data.len() * 2;
            self.data.resize(grown, 0);
        }
        &mut self.data[self.hi..]
    }
}

/// How one read ended.
enum Got {
    Data,
    /// The peer closed, the read failed, the time ran out, or the drain found it quiet.
    Gone,
    /// The drain began: look at the state again.
    Stopping,
}

/// Reads more into `buf`, bounded by `deadline` (else by the idle limit).
async fn fill<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Buf,
    conn: &Conn,
    front: &Front,
    deadline: Option<Instant>,
) -> Got {
    if conn.writer_done.get() {
        return Got::Gone;
    }
    let read = drain::read(r, buf.spare(), &front.drain);
    let limit = async {
        let timed = async {
            match deadline {
                Some(at) => {
                    glommio::timer::sleep(at.saturating_duration_since(Instant::now())).await
                }
                None => conn.idle.expired().await,
            }
        };
        futures_lite::future::or(timed, conn.writer_gone.wait()).await;
        drain::Read::Quiet
    };

    match futures_lite::future::or(read, limit).await {
        drain::Read::Data(Ok(0) | Err(_)) | drain::Read::Quiet => Got::Gone,
        drain::Read::Stopping => Got::Stopping,
        drain::Read::Data(Ok(n)) => {
            conn.idle.touch();
            buf.hi += n;
            Got::Data
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(mut r: R, conn: &Rc<Conn>, front: &Rc<Front>) {
    let mut buf = Buf {
        data: vec![0; READ_BUFFER_BYTES],
        lo: 0,
        hi: 0,
    };
    loop {
        let Some(head) = read_head(&mut r, &mut buf, conn, front).await else {
            return;
        };
        while conn.len() >= front.limits.max_inflight && !conn.writer_done.get() {
            conn.space.wait().await;
        }
        let Some(body) = read_body(&mut r, &mut buf, &head, conn, front).await else {
            return;
        };
        let flow = match front.drain.stopping() {
            true => refuse_draining(conn, front),
            false => super::reply::handle(head, body, conn, front).await,
        };
        match flow {
            Flow::Continue if !conn.writer_done.get() => {}
            Flow::Continue | Flow::Close => return,
            Flow::Stream => return watch_for_leaving(&mut r, &mut buf, conn, front).await,
        }
    }
}

/// Reads the next request head; `None` when the connection is done (its error answered).
async fn read_head<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Buf,
    conn: &Conn,
    front: &Front,
) -> Option<Head> {
    let mut deadline = None;
    loop {
        match parse_head(buf.filled()) {
            Ok(Some((head, used))) => {
                buf.consume(used);
                return Some(head);
            }
            Ok(None) => {}
            Err(e) => {
                let (status, msg) = match e {
                    HeadError::TooLarge => (431, "the request head is over 16 KiB"),
                    HeadError::Bad(why) => (400, why),
                };
                framing_error(conn, front, plain(status, ErrorCode::BadRequest, msg));
                return None;
            }
        }
        if deadline.is_none() && !buf.filled().is_empty() {
            deadline = Some(Instant::now() + HEAD_READ_TIMEOUT);
        }
        match fill(r, buf, conn, front, deadline).await {
            Got::Data | Got::Stopping => {}
            Got::Gone if deadline.is_some_and(|d| Instant::now() >= d) => {
                let msg = "the request head did not arrive in time";
                framing_error(conn, front, plain(408, ErrorCode::BadRequest, msg));
                return None;
            }
            Got::Gone => return None,
        }
    }
}

/// Reads the body `head` announces: `Some(None)` when there is none, `None` when the
/// connection is done (its error answered).
async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Buf,
    head: &Head,
    conn: &Conn,
    front: &Front,
) -> Option<Option<Vec<u8>>> {
    let max = front.limits.max_frame_bytes as usize;
    let too_large = || {
        let msg = format!("the request body is over network.max_frame_bytes ({max} bytes)");
        plain(413, ErrorCode::FrameTooLarge, msg)
    };
    let length = match head.framing {
        Framing::None => return Some(None),
        Framing::Length(n) if n > max as u64 => {
            framing_error(conn, front, too_large());
            return None;
        }
        Framing::Length(n) => Some(n as usize),
        Framing::Chunked => None,
    };
    if head.expect_continue {
        conn.push(Pending::Continue);
    }
    let deadline = Some(Instant::now() + BODY_READ_TIMEOUT);
    let mut chunked = Chunked::new(max);
    loop {
        match length {
            Some(n) if buf.filled().len() >= n => {
                let body = buf.filled()[..n].to_vec();
                buf.consume(n);
                return Some(Some(body));
            }
            Some(_) => {}
            None => match chunked.feed(buf.filled()) {
                Ok(used) => {
                    buf.consume(used);
                    if chunked.is_done() {
                        return Some(Some(chunked.into_body()));
                    }
                }
                Err(e) => {
                    let resp = match e {
                        ChunkError::TooLarge => too_large(),
                        ChunkError::Bad(why) => plain(400, ErrorCode::BadRequest, why),
                    };
                    framing_error(conn, front, resp);
                    return None;
                }
            },
        }
        if !matches!(fill(r, buf, conn, front, deadline).await, Got::Data) {
            return None;
        }
    }
}

/// A request that cannot be read further: answered, counted as a frame error, then closed.
fn framing_error(conn: &Conn, front: &Front, resp: Response) {
    front
        .stats
        .record_error(Op::Frame, resp.code.unwrap_or(ErrorCode::BadRequest));
    let mut bytes = Vec::new();
    resp.encode(&mut bytes, true);
    conn.push(Pending::Ready { bytes, close: true });
}

/// A request read while draining: `SHUTTING_DOWN`, then close.
fn refuse_draining(conn: &Conn, front: &Front) -> Flow {
    let started = Instant::now();
    let msg = "server is shutting down; retry on a new connection";
    let resp = plain(503, ErrorCode::ShuttingDown, msg);
    answer(conn, front, Op::Unknown, started, resp, true);
    Flow::Close
}

/// Queues a finished response, counted under `op`.
pub(super) fn answer(
    conn: &Conn,
    front: &Front,
    op: Op,
    started: Instant,
    resp: Response,
    close: bool,
) {
    completed(front, op, None, started, resp.code);
    let mut bytes = Vec::new();
    resp.encode(&mut bytes, close);
    conn.push(Pending::Ready { bytes, close });
}

/// An event stream is running: the client sends nothing more that matters, but its leaving
/// (or the drain) must end the stream. Bytes it sends are dropped.
async fn watch_for_leaving<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Buf,
    conn: &Conn,
    front: &Front,
) {
    loop {
        let n = buf.filled().len();
        buf.consume(n);
        match fill(r, buf, conn, front, None).await {
            Got::Data => {}
            Got::Gone | Got::Stopping => return,
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, conn: Rc<Conn>, front: Rc<Front>) {
    let mut out = Vec::with_capacity(READ_BUFFER_BYTES);
    loop {
        let mut close = false;
        let mut stream = None;
        while !close && stream.is_none() && head_ready(&conn) {
            let next = conn.queue.borrow_mut().pop_front();
            match next {
                Some(Pending::Ready { bytes, close: c }) => {
                    out.extend_from_slice(&bytes);
                    close = c;
                }
                Some(Pending::Continue) => out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n"),
                Some(Pending::Reply(waiting)) => close = waiting.render(&mut out, &front).await,
                Some(Pending::Stream(waiting)) => stream = Some(waiting),
                None => break,
            }
        }
        conn.space.notify();
        if !out.is_empty() {
            if w.write_all(&out).await.is_err() || w.flush().await.is_err() {
                break;
            }
            out.clear();
        }
        if let Some(waiting) = stream {
            super::sse::run(&mut w, *waiting, &conn, &front).await;
            break;
        }
        if close || (conn.reader_done.get() && conn.len() == 0) {
            break;
        }
        if !head_ready(&conn) {
            wait_for_work(&conn).await;
        }
    }
    let _ = w.flush().await;
    let _ = w.close().await;
    conn.writer_done.set(true);
    conn.space.notify();
    conn.writer_gone.notify();
}

fn head_ready(conn: &Conn) -> bool {
    match conn.queue.borrow().front() {
        Some(Pending::Ready { .. } | Pending::Continue | Pending::Stream(_)) => true,
        Some(Pending::Reply(w)) => w.slot.is_filled(),
        None => false,
    }
}

/// Waits for a new response or a filled reply at the head of the queue.
async fn wait_for_work(conn: &Conn) {
    let head = match conn.queue.borrow().front() {
        Some(Pending::Reply(w)) => Some(w.slot.clone()),
        _ => None,
    };
    let head_filled = async {
        match head {
            Some(slot) => slot.filled().await,
            None => std::future::pending().await,
        }
    };
    futures_lite::future::or(conn.writer_wake.wait(), head_filled).await;
}
