//! Who is on the other end of a connection: the TCP peer, or, with `network.proxy_protocol`, the
//! client named by the balancer's PROXY header (read here, before anything else on the socket).
//! The client address goes into the connection's open/close log lines and into `INFO`'s
//! connection counts (`Peers`, shared by every front).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use glommio::net::TcpStream;
use serde_json::{json, Value};

use super::executor::Front;
use crate::proxy;

/// Client addresses listed by `INFO` (those with the most connections); the rest are summed.
pub const INFO_CLIENTS_MAX: usize = 16;
/// Log target of connection open/close lines and refused PROXY headers.
pub const CONNECTION_TARGET: &str = "smdb::connection";

/// Open connections per client IP across all fronts (entries leave at zero, so the map holds at
/// most `network.max_connections` entries), and refused PROXY headers.
#[derive(Debug, Default)]
pub struct Peers {
    by_ip: Mutex<HashMap<IpAddr, u32>>,
    proxy_rejected: AtomicU64,
}

impl Peers {
    fn map(&self) -> MutexGuard<'_, HashMap<IpAddr, u32>> {
        // A panic elsewhere cannot leave the counts inconsistent (one insert or remove).
        self.by_ip.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self, ip: IpAddr) {
        *self.map().entry(ip).or_insert(0) += 1;
    }

    fn close(&self, ip: IpAddr) {
        let mut map = self.map();
        if let Some(n) = map.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&ip);
            }
        }
    }

    /// `INFO`'s `connections` object.
    pub fn info(&self, proxy_protocol: bool) -> Value {
        let mut counts: Vec<(IpAddr, u32)> = self.map().iter().map(|(a, n)| (*a, *n)).collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let active: u64 = counts.iter().map(|c| u64::from(c.1)).sum();
        let top: Vec<Value> = counts
            .iter()
            .take(INFO_CLIENTS_MAX)
            .map(|(a, n)| json!({"address": a.to_string(), "connections": n}))
            .collect();
        let others: u64 = counts
            .iter()
            .skip(INFO_CLIENTS_MAX)
            .map(|c| u64::from(c.1))
            .sum();
        json!({
            "active": active,
            "clients": counts.len(),
            "top_clients": top,
            "other_clients_connections": others,
            "proxy_protocol": proxy_protocol,
            "proxy_headers_rejected": self.proxy_rejected.load(Relaxed),
        })
    }
}

/// A served connection's client, counted while it lives; logs the close line when dropped.
pub struct Client {
    pub addr: SocketAddr,
    /// The balancer's address, when the client came through a PROXY header.
    pub via: Option<SocketAddr>,
    peers: Arc<Peers>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.peers.close(self.addr.ip());
        log_line(self, "connection closed");
    }
}

fn log_line(c: &Client, msg: &str) {
    let peer = c.addr.to_string();
    match c.via {
        Some(via) => {
            let via = via.to_string();
            log::debug!(target: CONNECTION_TARGET, peer = peer.as_str(), via = via.as_str(); "{msg}")
        }
        None => log::debug!(target: CONNECTION_TARGET, peer = peer.as_str(); "{msg}"),
    }
}

/// Finds the client of a new connection: reads the PROXY header first when configured. `None`
/// when the header is missing, malformed or late: the caller closes the connection.
pub async fn identify(stream: &mut TcpStream, front: &Front) -> Option<Client> {
    let peer = stream
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let (addr, via) = if front.limits.proxy_protocol {
        match proxy::read_header(stream).await {
            Ok(h) => match h.source {
                Some(src) => (src, Some(peer)),
                // LOCAL / UNKNOWN: the balancer's own connection (health check).
                None => (peer, Some(peer)),
            },
            Err(e) => {
                front.peers.proxy_rejected.fetch_add(1, Relaxed);
                let balancer = peer.to_string();
                log::debug!(target: CONNECTION_TARGET, peer = balancer.as_str();
                    "connection closed: {e}");
                return None;
            }
        }
    } else {
        (peer, None)
    };
    front.peers.open(addr.ip());
    let client = Client {
        addr,
        via,
        peers: front.peers.clone(),
    };
    log_line(&client, "connection opened");
    Some(client)
}
