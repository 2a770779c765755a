//! Failover tests' shared pieces (tests/ha.rs, tests/ha_clients.rs): a member's config, its
//! REPLICATION_STATUS, waiting for one primary, and the lock that runs them one at a time.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::etcd::Etcd;
use super::{Client, Server};

/// The etcd lease of a member (whole seconds; etcd's minimum here is 1 s).
pub const TTL_MS: u64 = 2000;
/// Every test here starts etcd and three members: on a 2-core machine they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn member_config(etcd: &Etcd, cluster: &str, node: &str, mode: &str) -> String {
    format!(
        "[shards]\ncount = 1\n[storage]\nsegment_bytes = 1048576\n\
         [metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"\n\
         [replication]\nmode = \"{mode}\"\nheartbeat_ms = 200\nreconnect_max_ms = 500\n\
         [ha]\nenabled = true\nnode_id = \"{node}\"\ncluster = \"{cluster}\"\n\
         etcd_endpoints = {}\nttl_ms = {TTL_MS}\nsafety_margin_ms = 500\n",
        etcd.toml_endpoints()
    )
}

pub fn status(addr: SocketAddr) -> Option<Value> {
    let mut c = Client::connect_hello(addr, "ha-test").ok()?;
    c.set_timeout(Some(Duration::from_secs(5))).ok()?;
    c.call("REPLICATION_STATUS", json!({})).ok()
}

/// Waits until exactly one of `members` is primary (and the others follow it); returns its
/// index.
pub fn one_primary(members: &[&Server], limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let roles: Vec<String> = members
            .iter()
            .map(|m| {
                status(m.addr).map_or("down".into(), |s| s["role"].as_str().unwrap_or("").into())
            })
            .collect();
        let primaries: Vec<usize> = (0..roles.len())
            .filter(|&i| roles[i] == "primary")
            .collect();
        if primaries.len() == 1 {
            return primaries[0];
        }
        assert!(primaries.len() <= 1, "two primaries at once: {roles:?}");
        assert!(
            Instant::now() < deadline,
            "no single primary within {limit:?}: {roles:?}\n{}",
            members
                .iter()
                .map(|m| m.log())
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
