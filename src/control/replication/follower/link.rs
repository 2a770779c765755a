//! The follower's link to the primary: whole frames from the socket, request/response before
//! the stream starts (HELLO, AUTH, REPLICATE).

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use serde_json::{json, Value};
use shards::wal::SNAPSHOT_VERSIONS_READ;

use std::time::Duration;

use super::error::{LinkError, StreamError};
use super::{Settings, CONNECT_TIMEOUT};
// The largest frame a primary sends: a whole record of the largest size, base64-encoded
// (`crate::limits`, where the sizes that must fit inside it are checked).
use crate::control::replication::hub::Hub;
use crate::limits::STREAM_FRAME_BYTES_MAX;
use crate::protocol::frame::{decode_frame, encode_frame};
use crate::protocol::stream::{self, ReplicateResult};

/// Reads whole frames from one half of the link.
pub(crate) struct FrameReader<R> {
    r: R,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub(crate) fn new(r: R) -> Self {
        FrameReader {
            r,
            buf: vec![0; 256 << 10],
            lo: 0,
            hi: 0,
        }
    }

    pub(crate) async fn next(&mut self, within: Duration) -> Result<Vec<u8>, LinkError> {
        loop {
            match decode_frame(&self.buf[self.lo..self.hi], STREAM_FRAME_BYTES_MAX) {
                Ok(Some((range, used))) => {
                    let payload = self.buf[self.lo + range.start..self.lo + range.end].to_vec();
                    self.lo += used;
                    return Ok(payload);
                }
                Ok(None) => {}
                Err(e) => return Err(LinkError::Frame(e)),
            }
            if self.lo > 0 {
                self.buf.copy_within(self.lo..self.hi, 0);
                self.hi -= self.lo;
                self.lo = 0;
            }
            if self.hi == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let read = glommio::timer::timeout(within, async {
                Ok(self.r.read(&mut self.buf[self.hi..]).await)
            })
            .await
            .map_err(|_| LinkError::Silent {
                ms: within.as_millis(),
            })?;
            match read {
                Ok(0) => return Err(LinkError::Closed),
                Ok(n) => self.hi += n,
                Err(e) => return Err(LinkError::Read(e.to_string())),
            }
        }
    }
}

pub(crate) async fn request<R, W>(
    r: &mut FrameReader<R>,
    w: &mut W,
    op: &'static str,
    params: Value,
) -> Result<Result<Value, Value>, LinkError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let body = json!({"type": "request", "id": op, "op": op, "params": params});
    let mut out = Vec::new();
    encode_frame(body.to_string().as_bytes(), &mut out);
    let write = |e: std::io::Error| LinkError::Write(e.to_string());
    w.write_all(&out).await.map_err(write)?;
    w.flush().await.map_err(write)?;
    let payload = r.next(CONNECT_TIMEOUT * 2).await?;
    let v: Value = serde_json::from_slice(&payload).map_err(|e| LinkError::Answer {
        op,
        why: e.to_string(),
    })?;
    if v["status"] == "ok" {
        Ok(Ok(v["result"].clone()))
    } else {
        Ok(Err(v["error"].clone()))
    }
}

/// HELLO, then AUTH with `replication.auth_token` when set.
pub(crate) async fn handshake<R, W>(
    cfg: &Settings,
    r: &mut FrameReader<R>,
    w: &mut W,
) -> Result<(), LinkError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let refused = |op, why: String| LinkError::Refused { op, why };
    let hello = json!({"protocol_version": 1, "client_name": "smdb-replica",
        "client_version": env!("CARGO_PKG_VERSION")});
    request(r, w, "HELLO", hello)
        .await?
        .map_err(|e| refused("HELLO", e.to_string()))?;
    if let Some(token) = &cfg.auth_token {
        request(r, w, "AUTH", json!({"method": "bearer", "token": token}))
            .await?
            .map_err(|e| refused("AUTH", e["code"].to_string()))?;
    }
    Ok(())
}

/// REPLICATE with this member's heads and epochs; checks the primary's shard count.
pub(super) async fn replicate<R, W>(
    hub: &Hub,
    cfg: &Settings,
    r: &mut FrameReader<R>,
    w: &mut W,
    heads: &[u64],
    epochs: &[u64],
) -> Result<ReplicateResult, LinkError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let epoch = epochs
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(hub.state.epoch());
    let mut params = json!({
        "replica_id": cfg.replica_id,
        "epoch": epoch,
        "positions": stream::positions_map(heads),
        "epochs": stream::positions_map(epochs),
        "snapshot_versions": SNAPSHOT_VERSIONS_READ,
    });
    let mut result = request(r, w, "REPLICATE", params.clone()).await?;
    if let Err(e) = &result {
        if e["message"]
            .as_str()
            .is_some_and(|m| m.contains("snapshot_versions"))
        {
            // A primary built before streamed snapshots does not know the field (it sends
            // format 1, which this build reads): ask again without it.
            params
                .as_object_mut()
                .map(|p| p.remove("snapshot_versions"));
            result = request(r, w, "REPLICATE", params).await?;
        }
    }
    let result = result.map_err(|e| LinkError::Refused {
        op: "REPLICATE",
        why: format!("{} {}", e["code"], e["message"]),
    })?;
    let result: ReplicateResult =
        serde_json::from_value(result).map_err(|e| LinkError::ReplicateResult(e.to_string()))?;
    let n = hub.router.shard_count();
    if result.shards != n {
        return Err(LinkError::ShardCounts {
            primary: result.shards,
            mine: n,
        });
    }
    Ok(result)
}

/// What REPLICATION_STATUS shows of the stream.
pub(super) fn record_view(
    hub: &Hub,
    cfg: &Settings,
    result: &ReplicateResult,
    positions: &[u64],
) -> Result<(), StreamError> {
    let n = hub.router.shard_count();
    let mut f = hub
        .state
        .stats
        .follower
        .lock()
        .map_err(|_| StreamError::PoisonedLock)?;
    f.connected = true;
    f.upstream.clone_from(&cfg.upstream);
    f.primary_epoch = result.epoch;
    f.primary_heads =
        stream::positions_vec(&result.heads, n).map_err(|why| StreamError::Field {
            what: "the REPLICATE result's heads",
            why,
        })?;
    f.positions = positions.to_vec();
    f.last_error = None;
    Ok(())
}
