//! The replica side (control executor): dials `replication.upstream`, HELLO, AUTH with
//! `replication.auth_token`, TLS when `replication.tls_ca_path` is set, then `REPLICATE` with
//! its positions (its own log heads: a replica mirrors the primary's layout, so the head of
//! shard i is its position in the primary's shard i). It truncates what follows the agreed
//! offsets, then applies the stream through each shard's replica path (`ReplicaAppend`:
//! appended at the same offsets, applied as recovery does, never re-decided) and acks what is
//! durable. Reconnects with capped exponential backoff until PROMOTE.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use rustls::pki_types::ServerName;
use serde_json::{json, Value};

use super::hub::Hub;
use super::wire::{self, ReplicateResult, StreamFrame};
use crate::config::Config;
use crate::protocol::frame::{decode_frame, encode_frame};
use crate::server::router::ReplySlot;
use crate::shard::{ReplyBody, ShardCall};
use crate::util::notify::Notify;
use crate::util::time::now_ms;

// The largest frame a primary sends: a whole record of the largest size, base64-encoded
// (`crate::limits`, where the sizes that must fit inside it are checked).
use crate::limits::STREAM_FRAME_BYTES_MAX;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// First reconnect delay; doubles up to `replication.reconnect_max_ms`.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
/// Bytes of one snapshot being received, at most (it is held in memory until installed).
const SNAPSHOT_BYTES_MAX: usize = 8 << 30;

#[derive(Debug, Clone)]
pub struct Settings {
    pub upstream: String,
    pub replica_id: String,
    pub auth_token: Option<String>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub server_name: String,
    pub heartbeat: Duration,
    pub reconnect_max: Duration,
}

impl Settings {
    pub fn from_config(c: &Config) -> Result<Settings, String> {
        let r = &c.replication;
        let upstream = r
            .upstream
            .clone()
            .ok_or("replication.role = \"replica\" needs replication.upstream")?;
        let host = upstream
            .rsplit_once(':')
            .map_or(upstream.as_str(), |(h, _)| h)
            .trim_matches(|c| c == '[' || c == ']')
            .to_string();
        let tls = match &r.tls_ca_path {
            None => None,
            Some(ca) => Some(
                crate::tls::client_config(&crate::tls::ClientTlsOptions {
                    ca: Some(ca.clone()),
                    cert: r.tls_cert_path.clone(),
                    key: r.tls_key_path.clone(),
                    server_name: r.tls_server_name.clone(),
                })
                .map_err(|e| format!("replication.tls_*: {e}"))?,
            ),
        };
        let replica_id = r.replica_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "replica".into());
            format!(
                "{host}:{}",
                c.network.bind_addr.rsplit(':').next().unwrap_or("0")
            )
        });
        Ok(Settings {
            upstream,
            replica_id,
            auth_token: r.auth_token.clone(),
            tls,
            server_name: r.tls_server_name.clone().unwrap_or(host),
            heartbeat: Duration::from_millis(r.heartbeat_ms.max(1)),
            reconnect_max: Duration::from_millis(r.reconnect_max_ms.max(100)),
        })
    }
}

/// Follows the primary until PROMOTE.
pub async fn run(hub: Rc<Hub>) {
    let Some(cfg) = hub.settings.follower.clone() else {
        return;
    };
    let mut backoff = RECONNECT_MIN;
    while hub.state.is_replica() && !hub.stopping.get() {
        let stop = async {
            hub.follower_stop.wait().await;
            Err("stopped".to_string())
        };
        let outcome = futures_lite::future::or(session(&hub, &cfg), stop).await;
        set_connected(&hub, false);
        if !hub.state.is_replica() || hub.stopping.get() {
            break;
        }
        match outcome {
            Ok(()) => backoff = RECONNECT_MIN,
            Err(e) => {
                log::warn!(
                    "replication: following {} failed: {e}; retrying in {} ms",
                    cfg.upstream,
                    backoff.as_millis()
                );
                if let Ok(mut f) = hub.state.stats.follower.lock() {
                    f.last_error = Some(e);
                }
            }
        }
        let stop = async {
            hub.follower_stop.wait().await;
        };
        futures_lite::future::or(glommio::timer::sleep(backoff), stop).await;
        backoff = (backoff * 2).min(cfg.reconnect_max);
    }
    hub.follower_running.set(false);
    log::info!("replication: no longer following {}", cfg.upstream);
}

fn set_connected(hub: &Hub, connected: bool) {
    if let Ok(mut f) = hub.state.stats.follower.lock() {
        f.connected = connected;
    }
}

async fn session(hub: &Rc<Hub>, cfg: &Settings) -> Result<(), String> {
    let tcp = glommio::timer::timeout(CONNECT_TIMEOUT, async {
        Ok(TcpStream::connect(cfg.upstream.as_str()).await)
    })
    .await
    .map_err(|e| format!("connect: {e}"))?
    .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    match &cfg.tls {
        None => follow(hub, cfg, tcp).await,
        Some(tls) => {
            let name = ServerName::try_from(cfg.server_name.clone())
                .map_err(|e| format!("replication.tls_server_name: {e}"))?;
            let stream = futures_rustls::TlsConnector::from(tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            follow(hub, cfg, stream).await
        }
    }
}

/// Reads whole frames from one half of the link.
struct FrameReader<R> {
    r: R,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    fn new(r: R) -> Self {
        FrameReader {
            r,
            buf: vec![0; 256 << 10],
            lo: 0,
            hi: 0,
        }
    }

    async fn next(&mut self, within: Duration) -> Result<Vec<u8>, String> {
        loop {
            match decode_frame(&self.buf[self.lo..self.hi], STREAM_FRAME_BYTES_MAX) {
                Ok(Some((range, used))) => {
                    let payload = self.buf[self.lo + range.start..self.lo + range.end].to_vec();
                    self.lo += used;
                    return Ok(payload);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("bad frame from the primary: {e}")),
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
            .map_err(|_| format!("nothing from the primary for {} ms", within.as_millis()))?;
            match read {
                Ok(0) => return Err("the primary closed the connection".into()),
                Ok(n) => self.hi += n,
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }
}

async fn request<R, W>(
    r: &mut FrameReader<R>,
    w: &mut W,
    op: &str,
    params: Value,
) -> Result<Result<Value, Value>, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let body = json!({"type": "request", "id": op, "op": op, "params": params});
    let mut out = Vec::new();
    encode_frame(body.to_string().as_bytes(), &mut out);
    w.write_all(&out).await.map_err(|e| format!("write: {e}"))?;
    w.flush().await.map_err(|e| format!("write: {e}"))?;
    let payload = r.next(CONNECT_TIMEOUT * 2).await?;
    let v: Value = serde_json::from_slice(&payload).map_err(|e| format!("{op}: {e}"))?;
    if v["status"] == "ok" {
        Ok(Ok(v["result"].clone()))
    } else {
        Ok(Err(v["error"].clone()))
    }
}

async fn follow<S>(hub: &Rc<Hub>, cfg: &Settings, stream: S) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (r, mut w) = futures_lite::io::split(stream);
    let mut r = FrameReader::new(r);
    let hello = json!({"protocol_version": 1, "client_name": "smdb-replica",
        "client_version": env!("CARGO_PKG_VERSION")});
    request(&mut r, &mut w, "HELLO", hello)
        .await?
        .map_err(|e| format!("HELLO refused: {e}"))?;
    if let Some(token) = &cfg.auth_token {
        request(
            &mut r,
            &mut w,
            "AUTH",
            json!({"method": "bearer", "token": token}),
        )
        .await?
        .map_err(|e| format!("AUTH refused: {}", e["code"]))?;
    }
    let logs = hub.positions().await.map_err(|r| r.message)?;
    let heads: Vec<u64> = logs.iter().map(|l| l.head).collect();
    let epochs: Vec<u64> = logs.iter().map(|l| l.last_epoch).collect();
    let epoch = epochs
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(hub.state.epoch());
    let params = json!({
        "replica_id": cfg.replica_id,
        "epoch": epoch,
        "positions": wire::positions_map(&heads),
        "epochs": wire::positions_map(&epochs),
    });
    let result = request(&mut r, &mut w, "REPLICATE", params)
        .await?
        .map_err(|e| format!("REPLICATE refused: {} {}", e["code"], e["message"]))?;
    let result: ReplicateResult =
        serde_json::from_value(result).map_err(|e| format!("REPLICATE result: {e}"))?;
    let n = hub.router.shard_count();
    if result.shards != n {
        return Err(format!(
            "shard counts differ: the primary has {}, this replica {n}; not following",
            result.shards
        ));
    }
    hub.state.see_epoch(result.epoch);
    let agree = wire::positions_vec(&result.agree, n)?;
    let mut positions = heads.clone();
    for (shard, (&a, &h)) in agree.iter().zip(&heads).enumerate() {
        if a < h {
            truncate(hub, shard as u32, a, h).await?;
            positions[shard] = a;
        }
    }
    log::info!(
        "replication: following {} from {:?} (primary epoch {})",
        cfg.upstream,
        positions,
        result.epoch
    );
    {
        let mut f = hub
            .state
            .stats
            .follower
            .lock()
            .map_err(|_| "poisoned lock")?;
        f.connected = true;
        f.upstream.clone_from(&cfg.upstream);
        f.primary_epoch = result.epoch;
        f.primary_heads = wire::positions_vec(&result.heads, n)?;
        f.positions.clone_from(&positions);
        f.last_error = None;
    }
    let mut applier = Applier::new(positions);
    applier.ack_every = std::time::Duration::from_millis(result.ack_every_ms);
    let applier = Rc::new(applier);
    let acker = glommio::spawn_local(ack_loop(hub.clone(), applier.clone(), w));
    let read = read_loop(hub, cfg, &mut r, &applier).await;
    applier
        .failed
        .borrow_mut()
        .get_or_insert(read.clone().err().unwrap_or_default());
    applier.wake.notify();
    let acked = acker.await;
    read.and(acked)
}

async fn truncate(hub: &Hub, shard: u32, after: u64, head: u64) -> Result<(), String> {
    match hub
        .router
        .call(shard, ShardCall::Truncate { after })
        .await
        .map_err(|r| format!("truncating shard {shard}: {}", r.message))?
    {
        ReplyBody::Truncated { removed } => {
            log::warn!(
                "replication: shard {shard}: dropped {removed} entries after offset {after} (head was {head}) that the primary does not have"
            );
            hub.state
                .stats
                .truncated_entries
                .fetch_add(removed, Relaxed);
            Ok(())
        }
        _ => Err("unexpected reply to Truncate".into()),
    }
}

/// Appends in flight to the shards, in stream order, and what the acker reports.
struct Applier {
    pending: RefCell<VecDeque<(usize, ReplySlot)>>,
    positions: RefCell<Vec<u64>>,
    /// The `at_ms` of the newest applied entry that has one (lag in seconds).
    last_at_ms: std::cell::Cell<u64>,
    /// The primary's clock minus ours, from its latest heartbeat.
    skew_ms: std::cell::Cell<i64>,
    wake: Notify,
    /// Set when the session must end (read error, or an append refused).
    failed: RefCell<Option<String>>,
    /// The primary's `ack_every_ms`: acks that only move positions come at most this often.
    ack_every: std::time::Duration,
}

impl Applier {
    fn new(positions: Vec<u64>) -> Applier {
        Applier {
            pending: RefCell::new(VecDeque::new()),
            positions: RefCell::new(positions),
            last_at_ms: std::cell::Cell::new(0),
            skew_ms: std::cell::Cell::new(0),
            wake: Notify::default(),
            failed: RefCell::new(None),
            ack_every: std::time::Duration::ZERO,
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    hub: &Rc<Hub>,
    cfg: &Settings,
    r: &mut FrameReader<R>,
    applier: &Rc<Applier>,
) -> Result<(), String> {
    let silence = cfg.heartbeat * 3 + Duration::from_secs(2);
    let mut snapshot: Option<(u32, u64, Vec<u8>)> = None;
    loop {
        if let Some(e) = applier.failed.borrow().clone() {
            return Err(e);
        }
        let payload = r.next(silence).await?;
        let f: StreamFrame =
            serde_json::from_slice(&payload).map_err(|e| format!("bad stream frame: {e}"))?;
        if f.kind_of == "response" {
            continue; // e.g. an answer to nothing we asked: ignore
        }
        if f.epoch < hub.state.epoch() {
            return Err(format!(
                "STALE_EPOCH: the stream is from epoch {}, this member has seen {}",
                f.epoch,
                hub.state.epoch()
            ));
        }
        match f.kind.as_str() {
            "entries" => {
                let records = wire::decode_entries(&f)?;
                let count = records.len() as u64;
                let call = ShardCall::ReplicaAppend {
                    epoch: f.epoch,
                    first: f.first,
                    entries: records,
                };
                let slot = hub.router.start(f.shard, call).await;
                applier
                    .pending
                    .borrow_mut()
                    .push_back((f.shard as usize, slot));
                applier.wake.notify();
                note_primary_head(hub, f.shard as usize, f.first + count - 1);
            }
            "snapshot" => {
                let data = wire::decode_data(&f)?;
                let (shard, offset, mut bytes) = match snapshot.take() {
                    Some((s, o, b)) if s == f.shard && o == f.offset => (s, o, b),
                    _ => (f.shard, f.offset, Vec::new()),
                };
                if bytes.len() + data.len() > SNAPSHOT_BYTES_MAX {
                    return Err(format!(
                        "snapshot of shard {shard} over {SNAPSHOT_BYTES_MAX} bytes"
                    ));
                }
                bytes.extend_from_slice(&data);
                if !f.last {
                    snapshot = Some((shard, offset, bytes));
                    continue;
                }
                install(hub, applier, shard, offset, bytes).await?;
            }
            "heartbeat" => {
                let skew_ms = f.time_ms as i64 - now_ms() as i64;
                let heads = wire::positions_vec(&f.heads, hub.router.shard_count())?;
                if let Ok(mut v) = hub.state.stats.follower.lock() {
                    v.primary_heads = heads;
                    v.primary_epoch = f.epoch;
                }
                applier.skew_ms.set(skew_ms);
                update_lag(hub, applier);
                applier.wake.notify();
            }
            other => return Err(format!("unknown stream frame kind {other:?}")),
        }
    }
}

fn note_primary_head(hub: &Hub, shard: usize, offset: u64) {
    if let Ok(mut v) = hub.state.stats.follower.lock() {
        if let Some(h) = v.primary_heads.get_mut(shard) {
            *h = (*h).max(offset);
        }
    }
}

/// Replaces shard `shard`'s state with the primary's snapshot at `offset`, once every append
/// sent before it is done.
async fn install(
    hub: &Hub,
    applier: &Applier,
    shard: u32,
    offset: u64,
    payload: Vec<u8>,
) -> Result<(), String> {
    let before = hub.router.start(shard, ShardCall::LogPosition).await;
    drop(before.wait().await); // the shard has handled everything sent before
    log::info!(
        "replication: shard {shard}: installing the primary's snapshot at offset {offset} ({} bytes)",
        payload.len()
    );
    hub.router
        .call(shard, ShardCall::InstallSnapshot { offset, payload })
        .await
        .map_err(|r| format!("installing the snapshot of shard {shard}: {}", r.message))?;
    applier.positions.borrow_mut()[shard as usize] = offset;
    applier.wake.notify();
    Ok(())
}

fn update_lag(hub: &Hub, applier: &Applier) {
    let skew_ms = applier.skew_ms.get();
    let positions = applier.positions.borrow().clone();
    if let Ok(mut v) = hub.state.stats.follower.lock() {
        let lag: u64 = v
            .primary_heads
            .iter()
            .zip(&positions)
            .map(|(h, p)| h.saturating_sub(*p))
            .sum();
        v.lag_entries = lag;
        v.lag_seconds = if lag == 0 || applier.last_at_ms.get() == 0 {
            0.0
        } else {
            let primary_now = now_ms() as i64 + skew_ms;
            (primary_now - applier.last_at_ms.get() as i64).max(0) as f64 / 1000.0
        };
        v.positions = positions;
    }
}

/// Awaits the shards' replies in stream order and acks what is durable.
async fn ack_loop<W: AsyncWrite + Unpin>(
    hub: Rc<Hub>,
    applier: Rc<Applier>,
    mut w: W,
) -> Result<(), String> {
    let mut acked: Vec<u64> = Vec::new();
    let mut sent_at = std::time::Instant::now();
    loop {
        loop {
            let next = applier.pending.borrow_mut().pop_front();
            let Some((shard, slot)) = next else { break };
            match slot.wait().await {
                Ok(ReplyBody::Replicated {
                    through,
                    last_at_ms,
                }) => {
                    let mut positions = applier.positions.borrow_mut();
                    positions[shard] = positions[shard].max(through);
                    drop(positions);
                    if last_at_ms > 0 {
                        applier.last_at_ms.set(last_at_ms);
                    }
                }
                Ok(_) => return fail(&applier, "unexpected reply to ReplicaAppend".into()),
                Err(rej) => {
                    return fail(
                        &applier,
                        format!(
                            "shard {shard} refused entries: {} {}",
                            rej.code.as_str(),
                            rej.message
                        ),
                    )
                }
            }
        }
        if applier.failed.borrow().is_some() {
            return Ok(());
        }
        let positions = applier.positions.borrow().clone();
        // Ack what moved (at most once per `ack_every`), and at least once per heartbeat so
        // the primary knows we are here.
        let since = sent_at.elapsed();
        let moved = positions != acked;
        let due = since >= applier.ack_every;
        if (moved && due) || since >= hub.settings.heartbeat {
            let mut out = Vec::new();
            wire::ack_frame(&mut out, hub.state.epoch(), &positions);
            if w.write_all(&out).await.is_err() || w.flush().await.is_err() {
                return fail(&applier, "write to the primary failed".into());
            }
            acked = positions;
            sent_at = std::time::Instant::now();
            update_lag(&hub, &applier);
        }
        if moved && !due {
            // An ack is owed: come back when it is due (entries keep arriving meanwhile).
            glommio::timer::sleep(applier.ack_every - since).await;
        } else if applier.pending.borrow().is_empty() {
            futures_lite::future::or(
                applier.wake.wait(),
                glommio::timer::sleep(hub.settings.heartbeat),
            )
            .await;
        }
    }
}

fn fail(applier: &Applier, why: String) -> Result<(), String> {
    applier.failed.borrow_mut().get_or_insert(why.clone());
    Err(why)
}
