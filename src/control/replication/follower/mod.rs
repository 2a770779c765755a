//! The replica side (control executor): dials `replication.upstream`, HELLO, AUTH with
//! `replication.auth_token`, TLS when `replication.tls_ca_path` is set, then `REPLICATE` with
//! its positions (its own log heads: a replica mirrors the primary's layout, so the head of
//! shard i is its position in the primary's shard i). It truncates what follows the agreed
//! offsets, then applies the stream through each shard's replica path (`ReplicaAppend`:
//! appended at the same offsets, applied as recovery does, never re-decided) and acks what is
//! durable. Reconnects with capped exponential backoff until PROMOTE.

use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use rustls::pki_types::ServerName;

mod apply;
mod error;
pub(crate) mod link;

use apply::{ack_loop, read_loop, Applier};
pub use error::{FollowError, LinkError, SettingsError, StreamError};
use link::{handshake, record_view, replicate, FrameReader};

use super::hub::Hub;
use crate::config::Config;
use crate::protocol::stream;
use crate::shard::{ReplyBody, ShardCall};

/// The longest a connect (and the answer to each handshake request) may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// First reconnect delay; doubles up to `replication.reconnect_max_ms`.
const RECONNECT_MIN: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct Settings {
    pub upstream: String,
    pub replica_id: String,
    pub auth_token: Option<String>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub server_name: String,
    pub heartbeat: Duration,
    pub reconnect_max: Duration,
    /// `network.proxy_protocol`: the members expect PROXY headers, so a connection to the
    /// primary starts with a v2 `LOCAL` header.
    pub proxy_local: bool,
}

impl Settings {
    pub fn from_config(c: &Config) -> Result<Settings, SettingsError> {
        let upstream = (c.replication.upstream.clone()).ok_or(SettingsError::NoUpstream)?;
        Settings::for_upstream(c, upstream)
    }

    /// The settings to follow `upstream` (failover: the leader key's address; docs/ha.md).
    pub fn for_upstream(c: &Config, upstream: String) -> Result<Settings, SettingsError> {
        let r = &c.replication;
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
                .map_err(SettingsError::Tls)?,
            ),
        };
        let named = r.replica_id.clone().or_else(|| c.ha.node_id.clone());
        let replica_id = named.unwrap_or_else(|| {
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
            proxy_local: c.network.proxy_protocol,
        })
    }
}

/// Follows `cfg.upstream` until PROMOTE, shutdown, or (failover) until the hub's follow
/// generation moves on from `gen` (`Hub::stop_follower`).
pub async fn run(hub: Rc<Hub>, cfg: Settings, gen: u64) {
    let mut backoff = RECONNECT_MIN;
    let current =
        |hub: &Hub| hub.state.is_replica() && !hub.stopping.get() && hub.follow_gen.get() == gen;
    while current(&hub) {
        let stop = async {
            hub.follower_stop.wait().await;
            Err(FollowError::Stopped)
        };
        let outcome = futures_lite::future::or(session(&hub, &cfg), stop).await;
        set_connected(&hub, false);
        if !current(&hub) {
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
                    f.last_error = Some(e.to_string());
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

async fn session(hub: &Rc<Hub>, cfg: &Settings) -> Result<(), FollowError> {
    let connect = |e: glommio::GlommioError<()>| LinkError::Connect(e.to_string());
    let mut tcp = glommio::timer::timeout(CONNECT_TIMEOUT, async {
        Ok(TcpStream::connect(cfg.upstream.as_str()).await)
    })
    .await
    .map_err(connect)?
    .map_err(connect)?;
    let _ = tcp.set_nodelay(true);
    if cfg.proxy_local {
        use futures_lite::AsyncWriteExt;
        (tcp.write_all(&crate::proxy::V2_LOCAL_HEADER).await)
            .map_err(|e| LinkError::ProxyHeader(e.to_string()))?;
    }
    match &cfg.tls {
        None => follow(hub, cfg, tcp).await,
        Some(tls) => {
            let name = ServerName::try_from(cfg.server_name.clone())
                .map_err(|e| LinkError::ServerName(e.to_string()))?;
            let stream = futures_rustls::TlsConnector::from(tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| LinkError::TlsHandshake(e.to_string()))?;
            follow(hub, cfg, stream).await
        }
    }
}

async fn follow<S>(hub: &Rc<Hub>, cfg: &Settings, stream: S) -> Result<(), FollowError>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (r, mut w) = futures_lite::io::split(stream);
    let mut r = FrameReader::new(r);
    handshake(cfg, &mut r, &mut w).await?;
    let logs = (hub.positions().await).map_err(|r| StreamError::Positions(r.message))?;
    let heads: Vec<u64> = logs.iter().map(|l| l.head).collect();
    let epochs: Vec<u64> = logs.iter().map(|l| l.last_epoch).collect();
    let result = replicate(hub, cfg, &mut r, &mut w, &heads, &epochs).await?;
    let n = hub.router.shard_count();
    hub.state.see_epoch(result.epoch);
    let agree = stream::positions_vec(&result.agree, n).map_err(|why| StreamError::Field {
        what: "the REPLICATE result's agree",
        why,
    })?;
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
    record_view(hub, cfg, &result, &positions)?;
    let mut applier = Applier::new(positions);
    applier.ack_every = std::time::Duration::from_millis(result.ack_every_ms);
    let applier = Rc::new(applier);
    let acker = glommio::spawn_local(ack_loop(hub.clone(), applier.clone(), w));
    // The read loop returns only when the session ends, with why (the acker's error when the
    // acker failed first); the acker then stops, and the read loop's error is the session's.
    let ended = read_loop(hub, cfg, &mut r, &applier).await;
    applier.failed.borrow_mut().get_or_insert(ended.clone());
    applier.wake.notify();
    let _ = acker.await;
    Err(ended)
}

async fn truncate(hub: &Hub, shard: u32, after: u64, head: u64) -> Result<(), StreamError> {
    let refused = |r: shards::Rejection| StreamError::Truncate {
        shard,
        after,
        why: r.message,
    };
    match (hub.router.call(shard, ShardCall::Truncate { after }).await).map_err(refused)? {
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
        _ => Err(StreamError::UnexpectedReply { call: "Truncate" }),
    }
}
