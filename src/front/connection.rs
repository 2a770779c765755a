//! One client connection: a reader task that decodes frames and dispatches requests, and a
//! writer task that sends responses in request order, coalescing every ready response into one
//! write, with subscription pushes interleaved between responses. Generic over the byte stream
//! so a TLS stream (`crate::tls`) serves the same way.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use shards::ErrorCode;

use super::drain;
use super::executor::Front;
use super::idle::Idle;
use super::session::{Flow, Session};
use crate::front::subscriptions::ConnSubs;
use crate::mesh::router::ReplySlot;
use crate::protocol::frame::{decode_frame, FrameError};
use crate::protocol::{encode_error, encode_ok, Op};
use crate::shard::ReplyBody;
use crate::util::notify::Notify;

/// Initial read buffer; grows to fit one maximal frame only when such a frame arrives.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// A response being produced, in request order.
pub enum Pending {
    /// An encoded response frame.
    Frame(Vec<u8>),
    /// A reply coming from a shard (or a fan-out task).
    Reply {
        id: Box<str>,
        op: Op,
        /// The instance the request names (for its log line).
        instance_id: Option<Box<str>>,
        started: Instant,
        slot: ReplySlot,
    },
    /// Close the connection once everything before this is written.
    Close,
}

/// State shared by the reader and writer tasks of one connection.
#[derive(Default)]
pub struct Conn {
    queue: RefCell<VecDeque<Pending>>,
    writer_wake: Notify,
    space: Notify,
    reader_done: Cell<bool>,
    writer_done: Cell<bool>,
    /// `network.idle_timeout_secs`: when the client last sent bytes.
    idle: Idle,
    /// This connection's subscriptions (their frames go out between responses).
    pub subs: Rc<ConnSubs>,
}

impl Conn {
    pub fn push(&self, p: Pending) {
        self.queue.borrow_mut().push_back(p);
        self.writer_wake.notify();
    }

    fn len(&self) -> usize {
        self.queue.borrow().len()
    }

    /// A stream produced on this executor (a backup): waits until fewer than `max` items are
    /// queued. False once the writer has stopped (the client is gone).
    pub async fn wait_room(&self, max: usize) -> bool {
        while self.len() >= max && !self.writer_done.get() {
            self.space.wait().await;
        }
        !self.writer_done.get()
    }
}

/// Serves one connection until the peer leaves, BYE, a frame error, or shutdown.
pub async fn serve<S>(stream: S, front: Rc<Front>)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (reader, writer) = futures_lite::io::split(stream);
    let conn = Rc::new(Conn::default());
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

async fn read_loop<R: AsyncRead + Unpin>(mut r: R, conn: &Rc<Conn>, front: &Rc<Front>) {
    let max = front.limits.max_frame_bytes;
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let (mut lo, mut hi) = (0usize, 0usize);
    let mut session = Session::new(front.live.current().auth.required);
    loop {
        loop {
            match decode_frame(&buf[lo..hi], max) {
                Ok(Some((range, used))) => {
                    while conn.len() >= front.limits.max_inflight && !conn.writer_done.get() {
                        conn.space.wait().await;
                    }
                    let payload = &buf[lo + range.start..lo + range.end];
                    let flow = match front.drain.stopping() {
                        false => session.handle(payload, conn, front).await,
                        true if drain::refuse(payload, conn, front) => Flow::Close,
                        true => Flow::Continue,
                    };
                    lo += used;
                    if flow == Flow::Close || conn.writer_done.get() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    frame_error(conn, front, &e);
                    return;
                }
            }
        }
        if !make_room(&mut buf, &mut lo, &mut hi, max) {
            return;
        }
        let read = drain::read(&mut r, &mut buf[hi..], &front.drain);
        let idle = async {
            conn.idle.expired().await;
            drain::Read::Quiet
        };
        let read = match futures_lite::future::or(read, idle).await {
            drain::Read::Data(read) => read,
            drain::Read::Stopping => continue,
            drain::Read::Quiet => return, // drained, or idle past the limit: quietly
        };
        match read {
            Ok(0) | Err(_) => return, // peer closed (maybe mid-frame): quietly
            Ok(n) => {
                conn.idle.touch();
                hi += n;
            }
        }
    }
}

/// Compacts consumed bytes and grows the buffer to fit the frame whose header is buffered.
/// Returns false only if the buffer cannot be made large enough (never, with a checked header).
fn make_room(buf: &mut Vec<u8>, lo: &mut usize, hi: &mut usize, max: u32) -> bool {
    if *lo > 0 {
        buf.copy_within(*lo..*hi, 0);
        *hi -= *lo;
        *lo = 0;
    }
    let needed = match buf[..*hi].first_chunk::<16>() {
        // The header was already checked against `max` by decode_frame.
        Some(h) => 16 + u32::from_be_bytes([h[8], h[9], h[10], h[11]]).min(max) as usize,
        None => 16,
    };
    if needed > buf.len() {
        buf.resize(needed, 0);
    }
    if *hi == buf.len() {
        buf.resize(buf.len() * 2, 0);
    }
    true
}

fn frame_error(conn: &Conn, front: &Front, e: &FrameError) {
    let code = match e {
        FrameError::BadMagic(_) => ErrorCode::InvalidFrame,
        FrameError::ChecksumMismatch { .. } => ErrorCode::ChecksumMismatch,
        FrameError::TooLarge { .. } => ErrorCode::FrameTooLarge,
    };
    front.stats.record_error(Op::Frame, code);
    let mut out = Vec::new();
    encode_error(&mut out, None, &shards::Rejection::new(code, e.to_string()));
    conn.push(Pending::Frame(out));
    conn.push(Pending::Close);
}

async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, conn: Rc<Conn>, front: Rc<Front>) {
    let mut out = Vec::with_capacity(READ_BUFFER_BYTES);
    loop {
        let mut close = false;
        while !close && front_is_ready(&conn) {
            let next = conn.queue.borrow_mut().pop_front();
            match next {
                Some(p) => close = render(p, &mut out, &front).await,
                None => break,
            }
        }
        if !close {
            conn.subs.drain_into(&mut out, &front.subs);
        }
        conn.space.notify();
        if !out.is_empty() {
            // flush: TLS may hold records back when the socket was full; plain TCP: no-op.
            if w.write_all(&out).await.is_err() || w.flush().await.is_err() {
                break;
            }
            out.clear();
        } else if !close {
            if conn.reader_done.get() && conn.len() == 0 {
                break;
            }
            wait_for_work(&conn).await;
        }
        if close {
            break;
        }
    }
    let _ = w.flush().await;
    let _ = w.close().await;
    conn.writer_done.set(true);
    conn.space.notify();
}

/// Waits for a new response, a filled reply at the head of the queue, or a subscription frame.
async fn wait_for_work(conn: &Conn) {
    let head = match conn.queue.borrow().front() {
        Some(Pending::Reply { slot, .. }) => Some(slot.clone()),
        _ => None,
    };
    let head_filled = async {
        match head {
            Some(slot) => slot.filled().await,
            None => std::future::pending().await,
        }
    };
    let wake = futures_lite::future::or(conn.writer_wake.wait(), conn.subs.ready.wait());
    futures_lite::future::or(wake, head_filled).await;
}

fn front_is_ready(conn: &Conn) -> bool {
    match conn.queue.borrow().front() {
        Some(Pending::Frame(_) | Pending::Close) => true,
        Some(Pending::Reply { slot, .. }) => slot.is_filled(),
        None => false,
    }
}

/// Appends the response for `p`; returns true when the connection must close after it.
async fn render(p: Pending, out: &mut Vec<u8>, front: &Front) -> bool {
    match p {
        Pending::Frame(bytes) => {
            out.extend_from_slice(&bytes);
            false
        }
        Pending::Close => true,
        Pending::Reply {
            id,
            op,
            instance_id,
            started,
            slot,
        } => {
            let reply = slot.wait().await;
            let code = match reply {
                Ok(ReplyBody::Json(result)) | Ok(ReplyBody::Machine { result, .. }) => {
                    encode_ok(out, &id, &result);
                    None
                }
                Ok(ReplyBody::Watch {
                    result,
                    subscription,
                }) => {
                    encode_ok(out, &id, &result);
                    // Its pushes may follow now: they never precede this response.
                    front.subs.announce(subscription);
                    None
                }
                Ok(_) => {
                    let rej = shards::Rejection::new(ErrorCode::InternalError, "bad reply");
                    encode_error(out, Some(&id), &rej);
                    Some(rej.code)
                }
                Err(rej) => {
                    encode_error(out, Some(&id), &rej);
                    Some(rej.code)
                }
            };
            completed(front, op, instance_id.as_deref(), started, code);
            false
        }
    }
}

/// A request's response is ready: count it and write its request-completed log line.
pub fn completed(
    front: &Front,
    op: Op,
    instance_id: Option<&str>,
    started: Instant,
    code: Option<ErrorCode>,
) {
    let took = started.elapsed();
    match code {
        None => front.stats.record_ok(op, took),
        Some(code) => front.stats.record_failure(op, code, took),
    }
    crate::logging::request_completed(op, instance_id, took, code);
}
