//! Event streams (docs/http.md, "Event streams"): `GET /stream` runs WATCH_ALL or
//! WATCH_INSTANCE on the existing subscriptions, and the connection's writer turns into the
//! stream: each push is one Server-Sent Event whose `id:` is its cursor, so a client that
//! reconnects with `Last-Event-ID` resumes with no gap and no duplicate.
//!
//! Bounds and policies:
//! * the subscription's queue, `subscriptions.queue_max` events (the named limit of every
//!   stream): full → `event: lagged` with the resume cursor, then the stream ends;
//! * a write that cannot finish (the client stopped reading): once the subscription lagged,
//!   `LAGGED_WRITE_GRACE`, else `STREAM_WRITE_TIMEOUT`; then the connection closes, so a
//!   client that never reads holds at most one queue of events and one socket buffer;
//! * a comment every `STREAM_KEEPALIVE`; the token checked again within `RELOAD_CHECK` of a
//!   reload (a removed token, or one that lost `read`, ends the stream); the drain and the
//!   client leaving end it too.

use std::time::{Duration, Instant};

use futures_lite::{AsyncWrite, AsyncWriteExt};

use super::conn::Conn;
use super::reply::{refusal, Digest, Waiting};
use super::STREAM_KEEPALIVE;
use crate::auth::Scope;
use crate::front::connection::completed;
use crate::front::executor::Front;
use crate::shard::ReplyBody;

/// How long a write may stay stuck once the stream's subscription has lagged: a client that
/// reads again within it still gets every event before the lag and the `lagged` notice.
pub const LAGGED_WRITE_GRACE: Duration = Duration::from_secs(10);
/// How long any one write may stay stuck (a client that stopped reading).
pub const STREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a stream looks for a reload of the tokens.
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Runs the stream of `start` (a WATCH) until it ends; the connection closes after.
pub(super) async fn run<W: AsyncWrite + Unpin>(
    w: &mut W,
    start: Waiting,
    conn: &Conn,
    front: &Front,
) {
    let Some((result, subscription)) = watched(w, &start, front).await else {
        return;
    };
    let out = head(&result);
    front.subs.announce(subscription);
    pump(w, out, conn, front, start.stream_token).await;
}

/// The WATCH's reply, counted as completed: its result and subscription; a refusal is
/// written as the response (`None`: the stream never starts).
async fn watched<W: AsyncWrite + Unpin>(
    w: &mut W,
    start: &Waiting,
    front: &Front,
) -> Option<(Vec<u8>, u64)> {
    let reply = start.slot.wait().await;
    let (result, subscription) = match reply {
        Ok(ReplyBody::Watch {
            result,
            subscription,
        }) => (result, subscription),
        other => {
            let rej = match other {
                Err(rej) => rej,
                Ok(_) => shards::Rejection::new(shards::ErrorCode::InternalError, "bad reply"),
            };
            let resp = refusal(&rej, false);
            completed(
                front,
                start.op,
                start.instance_id.as_deref(),
                start.started,
                resp.code,
            );
            let mut out = Vec::new();
            resp.encode(&mut out, true);
            let _ = w.write_all(&out).await;
            return None;
        }
    };
    completed(
        front,
        start.op,
        start.instance_id.as_deref(),
        start.started,
        None,
    );
    Some((result, subscription))
}

/// Writes the stream: `out` (the head) first, then the subscription's events and the
/// keep-alives, until the subscription or the client ends, the drain, or a reload that takes
/// `token`'s read scope away.
async fn pump<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut out: Vec<u8>,
    conn: &Conn,
    front: &Front,
    token: Option<Digest>,
) {
    let generation = front.live.generation();
    let mut keepalive = Instant::now() + STREAM_KEEPALIVE;
    // One timer at a time, kept across wake-ups (a timer made and dropped per event would
    // cost more than the event's write).
    let mut tick = Box::pin(glommio::timer::sleep(RELOAD_CHECK));
    loop {
        conn.subs.drain_into(&mut out, &front.subs);
        if !out.is_empty() {
            if !write(w, &out, conn).await {
                return;
            }
            out.clear();
            keepalive = Instant::now() + STREAM_KEEPALIVE;
            continue;
        }
        if conn.subs.is_empty() || conn.reader_done.get() || front.drain.stopping() {
            return;
        }
        if front.live.generation() != generation && !still_allowed(front, token) {
            log::info!("event stream ended: its token was removed or lost the read scope");
            conn.subs.end_all(&front.subs);
            return;
        }
        if Instant::now() >= keepalive {
            out.extend_from_slice(b": keep-alive\n\n");
            continue;
        }
        let woke = async {
            futures_lite::future::or(conn.subs.ready.wait(), conn.writer_wake.wait()).await;
            false
        };
        let ticked = async {
            (&mut tick).await;
            true
        };
        if futures_lite::future::or(woke, ticked).await {
            tick = Box::pin(glommio::timer::sleep(RELOAD_CHECK));
        }
    }
}

/// The response head, then `retry:` and an `event: subscribed` whose id is the starting
/// cursor (a client that reconnects before any event resumes from there) and whose data is
/// the WATCH result.
fn head(result: &[u8]) -> Vec<u8> {
    let cursor = serde_json::from_slice::<serde_json::Value>(result)
        .ok()
        .and_then(|v| v["cursor"].as_str().map(str::to_string))
        .unwrap_or_default();
    let mut out = Vec::with_capacity(256 + result.len());
    out.extend_from_slice(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
          X-Content-Type-Options: nosniff\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n\
          retry: 2000\n\n",
    );
    out.extend_from_slice(format!("id: {cursor}\nevent: subscribed\ndata: ").as_bytes());
    out.extend_from_slice(result);
    out.extend_from_slice(b"\n\n");
    out
}

/// Writes `bytes`; false when the stream must end (the write failed, or stayed stuck).
async fn write<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8], conn: &Conn) -> bool {
    let written = async { w.write_all(bytes).await.is_ok() && w.flush().await.is_ok() };
    let stuck = async {
        let lagged = async {
            while !conn.subs.any_lagged() {
                conn.subs.ready.wait().await;
            }
            glommio::timer::sleep(LAGGED_WRITE_GRACE).await;
        };
        futures_lite::future::or(lagged, glommio::timer::sleep(STREAM_WRITE_TIMEOUT)).await;
        log::debug!("event stream closed: its client is not reading");
        false
    };
    futures_lite::future::or(written, stuck).await
}

/// After a reload: may the stream's token still read?
fn still_allowed(front: &Front, token: Option<Digest>) -> bool {
    let settings = front.live.current();
    if !settings.auth.required {
        return true;
    }
    let Some(digest) = token else {
        return false;
    };
    match settings.auth.verify_digest(&digest) {
        Ok(grant) => grant.scopes.contains(Scope::Read),
        Err(_) => false,
    }
}
