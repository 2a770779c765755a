//! The nemesis's requests to a member: a client with short timeouts, one call, a whole
//! instance history by GET_HISTORY's pages, and a bare HTTP GET on the metrics listener.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::Client;

/// A client connected to `a` (HELLO done), with short timeouts.
pub fn connect(a: SocketAddr) -> Result<Client, String> {
    let mut c = Client::connect_timeout(a, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    c.set_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    c.hello("nemesis").map_err(|e| e.to_string())?;
    Ok(c)
}

/// One request on a new connection.
pub fn call(a: SocketAddr, op: &str, params: Value) -> Result<Value, String> {
    connect(a)?.call(op, params).map_err(|e| e.to_string())
}

/// Every `add` token of instance `id`, following GET_HISTORY's pages.
pub fn full_history(c: &mut Client, id: &str) -> Vec<u64> {
    let (mut tokens, mut from) = (Vec::new(), 1u64);
    loop {
        let r = c
            .call(
                "GET_HISTORY",
                json!({"id": id, "from": from, "limit": 1000}),
            )
            .unwrap_or_else(|e| panic!("GET_HISTORY {id}: {e}"));
        tokens.extend(tokens_of(&r));
        match r["next"].as_u64() {
            Some(n) if n > from => from = n,
            _ => return tokens,
        }
    }
}

/// The tokens of a GET_HISTORY page's `add` events, in order.
pub fn tokens_of(page: &Value) -> Vec<u64> {
    (page["events"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter())
    .filter(|e| e["event"] == "add")
    .filter_map(|e| e["payload"]["t"].as_u64())
    .collect()
}

/// `GET path` over HTTP/1.0 with a 500 ms budget per step: (status, body).
pub fn http_get(a: SocketAddr, path: &str) -> Option<(u16, String)> {
    let t = Duration::from_millis(500);
    let mut s = TcpStream::connect_timeout(&a, t).ok()?;
    s.set_read_timeout(Some(t)).ok()?;
    s.set_write_timeout(Some(t)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {a}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Some((code, body))
}
