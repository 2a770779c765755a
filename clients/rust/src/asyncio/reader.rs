//! The reader task of a connection: frames in, each response to the call waiting for its id,
//! each push to its subscription's queue.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::call::Delivered;
use super::conn::Link;
use super::fast;
use crate::error::{Error, Result};
use crate::frame::decode_frame;
use crate::message::{Incoming, Received};
use crate::ops::Applied;
use crate::CLIENT_FRAME_BYTES_MAX;

/// Read buffer to start with; grows to the largest frame.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// A response's result as raw JSON text: its caller decodes it straight into its typed result.
pub type RawResult = Result<Box<RawValue>>;

/// A response's result as the reader hands it over: raw JSON text, or already decoded when
/// the call said what it expects and the response has the usual shape (`fast`).
#[derive(Debug)]
pub enum Answer {
    Raw(Box<RawValue>),
    Applied(Applied),
}

/// What a call expects as its result: the reader decodes an `Applied` in the same pass as the
/// envelope (`fast::applied`); anything else is handed over as raw text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Raw,
    Applied,
}

impl Expect {
    /// The id of the `n`th request of a connection: the lowest bit says what the call
    /// expects, so the reader knows it from the response alone, before it takes the lock.
    pub fn id(self, n: u64) -> u64 {
        n.wrapping_mul(2) | u64::from(self == Expect::Applied)
    }

    /// What the call of request `id` expects.
    pub fn of(id: u64) -> Expect {
        match id & 1 {
            1 => Expect::Applied,
            _ => Expect::Raw,
        }
    }
}

impl Answer {
    /// The result as raw JSON text (what every call but an APPLY_EVENT's receives).
    pub fn into_raw(self) -> RawResult {
        match self {
            Answer::Raw(r) => Ok(r),
            // Not reached: an `Applied` answers only a call that expects one. Serializing a
            // struct of strings, values and integers cannot fail; an error is still reported.
            Answer::Applied(a) => {
                serde_json::value::to_raw_value(&a).map_err(|e| Error::Protocol(e.to_string()))
            }
        }
    }
}

pub(super) async fn read_loop<R: AsyncRead + Unpin>(mut r: R, link: Arc<Link>) {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BUFFER_BYTES);
    let mut start = 0;
    let why = loop {
        let mut handed = false;
        // Hand out every complete frame in the buffer.
        loop {
            match decode_frame(&buf[start..], CLIENT_FRAME_BYTES_MAX) {
                Ok(Some((range, used))) => {
                    let payload = &buf[start + range.start..start + range.end];
                    let handled = handle(&link, payload);
                    start += used;
                    handed = true;
                    if let Err(e) = handled {
                        link.fail_all(e);
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    link.fail_all(Error::Protocol(e.to_string()));
                    return;
                }
            }
        }
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if !link.is_alive() {
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
    link.fail_all(why);
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

/// Routes one frame's payload: the usual answer to a call expecting an `Applied` in one pass
/// (`fast`), anything else through the general read.
fn handle(link: &Link, payload: &[u8]) -> Result<()> {
    if let Some((id, at)) = fast::ok_head(payload) {
        if Expect::of(id) == Expect::Applied {
            if let Some(a) = fast::applied(payload, at) {
                return answer(link, Some(id), Ok(Answer::Applied(a)), || id.to_string());
            }
        }
    }
    Received::parse(payload).and_then(|m| dispatch(link, m))
}

/// Routes one message: a response to its caller, a push to its subscription's queue.
fn dispatch(link: &Link, m: Received) -> Result<()> {
    match m {
        Received::Response { id, result } => {
            let Some(id) = id else {
                // `id: null`: the server refused our bytes and is closing the connection.
                return Err(result.err().unwrap_or_else(|| {
                    Error::Protocol("a response with id null and status ok".into())
                }));
            };
            let n = id.parse::<u64>().ok();
            answer(link, n, result.map(Answer::Raw), || id)?;
        }
        Received::Other(Incoming::Event(v)) => push(link, v),
        Received::Other(lag @ Incoming::Lagged { .. }) => push(link, lag.into_value()),
        // Another push of a subscription (`slots_moved` in cluster mode): its queue decides.
        Received::Other(Incoming::Other(v)) if !v["subscription_id"].is_null() => push(link, v),
        Received::Other(_) => {}
    }
    Ok(())
}

/// Hands a response to the call waiting for request `id` (and registers a WATCH's queue);
/// `id_text`: the id as the response wrote it, for the error when no such call waits.
fn answer(
    link: &Link,
    id: Option<u64>,
    result: Result<Answer>,
    id_text: impl FnOnce() -> String,
) -> Result<()> {
    let not_pending =
        |id: String| Error::Protocol(format!("response for request {id}, which is not pending"));
    let mut guard = link.lock();
    let s = &mut *guard;
    let Some((n, p)) = id.and_then(|n| Some((n, s.pending.get_mut(&n)?))) else {
        return Err(not_pending(id_text()));
    };
    if let (Ok(Answer::Raw(r)), Some(q)) = (&result, p.pushes.take()) {
        // A WATCH: its pushes are routed by the subscription id of its result.
        let sub = serde_json::from_str::<Value>(r.get())
            .map(|v| v["subscription_id"].to_string())
            .unwrap_or_default();
        s.subs.insert(sub, q);
    }
    let waker = match p.slot.deliver(result) {
        Delivered::Wake(w) => w,
        Delivered::Dropped => {
            s.remove(n);
            None
        }
        // Answered already (its caller has not taken it yet): no call waits for this one.
        Delivered::Unexpected => return Err(not_pending(id_text())),
    };
    drop(guard);
    if let Some(w) = waker {
        w.wake();
    }
    Ok(())
}

fn push(link: &Link, v: Value) {
    let key = v["subscription_id"].to_string();
    let mut s = link.lock();
    let Some(q) = s.subs.get(&key) else {
        return;
    };
    if q.try_send(v).is_err() {
        // Full (the consumer is SUBSCRIPTION_QUEUE_MAX behind) or dropped: the subscription
        // sees its queue close and resumes from its last delivered cursor.
        s.subs.remove(&key);
    }
}
