//! Before a replica with an empty data directory starts its shards, it asks the primary how
//! many shards it has, and adopts that count (docs/replication.md: a replica mirrors the primary's
//! layout). Blocking, in `main`, before any executor exists: one HELLO (its result names the
//! shard count; no AUTH needed) over a plain std socket (or rustls), retried with backoff until
//! the primary answers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use rustls::pki_types::ServerName;
use serde_json::{json, Value};

use super::follower::{LinkError, Settings};
use crate::protocol::frame::{decode_frame, encode_frame};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The primary's shard count, asking until it answers (a replica with nothing cannot serve
/// anything until it has followed once).
pub fn primary_shard_count(cfg: &Settings) -> u32 {
    let mut backoff = Duration::from_millis(100);
    loop {
        match ask(cfg) {
            Ok(n) => return n,
            Err(e) => {
                log::warn!(
                    "replication: asking {} for its shard count failed: {e}; retrying in {} ms",
                    cfg.upstream,
                    backoff.as_millis()
                );
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(cfg.reconnect_max);
            }
        }
    }
}

fn ask(cfg: &Settings) -> Result<u32, LinkError> {
    let tcp = TcpStream::connect(&cfg.upstream).map_err(|e| LinkError::Connect(e.to_string()))?;
    let timeouts = |e: std::io::Error| LinkError::SocketTimeouts(e.to_string());
    tcp.set_read_timeout(Some(IO_TIMEOUT)).map_err(timeouts)?;
    tcp.set_write_timeout(Some(IO_TIMEOUT)).map_err(timeouts)?;
    if cfg.proxy_local {
        (&tcp)
            .write_all(&crate::proxy::V2_LOCAL_HEADER)
            .map_err(|e| LinkError::ProxyHeader(e.to_string()))?;
    }
    match &cfg.tls {
        None => talk(tcp),
        Some(tls) => {
            let name = ServerName::try_from(cfg.server_name.clone())
                .map_err(|e| LinkError::ServerName(e.to_string()))?;
            let conn = rustls::ClientConnection::new(tls.clone(), name)
                .map_err(|e| LinkError::TlsSetup(e.to_string()))?;
            talk(rustls::StreamOwned::new(conn, tcp))
        }
    }
}

fn talk<S: Read + Write>(mut s: S) -> Result<u32, LinkError> {
    let hello = json!({"protocol_version": 1, "client_name": "smdb-replica"});
    call(&mut s, "HELLO", hello)?["shards"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or(LinkError::NoShardCount)
}

fn call<S: Read + Write>(s: &mut S, op: &'static str, params: Value) -> Result<Value, LinkError> {
    let body = json!({"type": "request", "id": op, "op": op, "params": params});
    let mut out = Vec::new();
    encode_frame(body.to_string().as_bytes(), &mut out);
    let write = |e: std::io::Error| LinkError::Write(e.to_string());
    s.write_all(&out).map_err(write)?;
    s.flush().map_err(write)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if let Some((range, _)) = decode_frame(&buf, 16 << 20).map_err(LinkError::Frame)? {
            let v: Value = serde_json::from_slice(&buf[range]).map_err(|e| LinkError::Answer {
                op,
                why: e.to_string(),
            })?;
            if v["status"] == "ok" {
                return Ok(v["result"].clone());
            }
            let why = v["error"].to_string();
            return Err(LinkError::Refused { op, why });
        }
        let n = s
            .read(&mut chunk)
            .map_err(|e| LinkError::Read(e.to_string()))?;
        if n == 0 {
            return Err(LinkError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
