//! Failover tests' shared pieces (tests/ha.rs, tests/ha_ops.rs, tests/ha_clients.rs): a
//! member's config, three members started at once, their REPLICATION_STATUS, waiting for one
//! primary, and the lock that runs these tests one at a time (the write load and its check
//! are in writes.rs).

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::etcd::Etcd;
use super::replicas::wait_converged;
use super::{temp_dir, Client, Server};

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

/// Starts three members `n0`..`n2` of `cluster` in `mode` ("sync" or "async"), each with
/// `extra` TOML merged into its config. The temp dirs come first so they outlive the servers.
pub fn start_members(
    etcd: &Etcd,
    cluster: &str,
    mode: &str,
    extra: &str,
) -> (Vec<tempfile::TempDir>, Vec<Server>) {
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let members = (0..3)
        .map(|i| {
            let cfg = member_config(etcd, cluster, &format!("n{i}"), mode) + extra;
            Server::start_in(dirs[i].path(), &cfg).unwrap()
        })
        .collect();
    (dirs, members)
}

/// `start_members`, then waits (at most 20 s) for one primary; returns its index too.
pub fn start_cluster(
    etcd: &Etcd,
    cluster: &str,
    mode: &str,
    extra: &str,
) -> (Vec<tempfile::TempDir>, Vec<Server>, usize) {
    let (dirs, members) = start_members(etcd, cluster, mode, extra);
    let primary = one_primary(&members.iter().collect::<Vec<_>>(), Duration::from_secs(20));
    (dirs, members, primary)
}

pub fn status(addr: SocketAddr) -> Option<Value> {
    let mut c = Client::connect_hello(addr, "ha-test").ok()?;
    c.set_timeout(Some(Duration::from_secs(5))).ok()?;
    c.call("REPLICATION_STATUS", json!({})).ok()
}

/// Waits until `f(status)` holds on `s` (at most `limit`); returns that status.
pub fn wait_status(s: &Server, limit: Duration, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let st = status(s.addr);
        if let Some(st) = st.as_ref().filter(|st| f(st)) {
            return st.clone();
        }
        assert!(Instant::now() < deadline, "{what}: last status {st:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates `order` instance `id` and pays it (state `paid`, where `touch` applies).
pub fn create_paid(c: &mut Client, id: &str) {
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": id, "context": {"total": 1}}),
    )
    .unwrap_or_else(|e| panic!("create {id}: {e}"));
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": id, "event": "pay", "payload": {"amount": 1}}),
    )
    .unwrap_or_else(|e| panic!("pay {id}: {e}"));
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

/// Waits until member `want` is the one primary, within `limit`. After a switchover answers,
/// the old primary may still report its role for a moment (its driver demotes it at its next
/// turn); `one_primary` still fails the test on two primaries at once.
pub fn becomes_primary(members: &[&Server], want: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    while one_primary(members, limit) != want {
        assert!(
            Instant::now() < deadline,
            "member {want} did not become the one primary within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `r` holds `p`'s log heads (at most 30 s).
pub fn converge(p: &Server, r: &Server) {
    let statuses = || (status(p.addr), status(r.addr));
    let same = |a: &Value, b: &Value| a["positions"] == b["positions"];
    let (limit, every) = (Duration::from_secs(30), Duration::from_millis(100));
    wait_converged(r, limit, every, statuses, same);
}
