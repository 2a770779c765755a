//! Failover tests' shared pieces (tests/ha.rs, tests/ha_ops.rs, tests/ha_clients.rs): a
//! member's config, three members started at once, their REPLICATION_STATUS, waiting for one
//! primary, a write load that records every `ok`, the check that each is in a member's
//! histories, and the lock that runs these tests one at a time.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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

/// A writer that sends `touch` events to whichever member accepts them, recording each one
/// acknowledged `ok` and the time of each `ok`.
pub struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(String, u64, Instant)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(addrs: Vec<SocketAddr>, ids: Vec<String>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s2, a2) = (stop.clone(), acked.clone());
        let thread = std::thread::spawn(move || {
            let (mut i, mut at) = (0u64, 0usize);
            let mut c: Option<Client> = None;
            while !s2.load(Ordering::Relaxed) {
                let Some(client) = c.as_mut() else {
                    at = (at + 1) % addrs.len();
                    c = Client::connect_hello(addrs[at], "load").ok();
                    if let Some(c) = c.as_mut() {
                        let _ = c.set_timeout(Some(Duration::from_secs(10)));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let id = &ids[i as usize % ids.len()];
                let r = client.call(
                    "APPLY_EVENT",
                    json!({"instance_id": id, "event": "touch", "payload": {"i": i}}),
                );
                match r {
                    Ok(_) => a2.lock().unwrap().push((id.clone(), i, Instant::now())),
                    Err(_) => c = None, // not acknowledged: try the next member
                }
                i += 1;
            }
        });
        Load {
            stop,
            acked,
            thread: Some(thread),
        }
    }

    pub fn acked(&self) -> Vec<(String, u64, Instant)> {
        self.acked.lock().unwrap().clone()
    }

    pub fn finish(mut self) -> Vec<(String, u64, Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.acked()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Every acknowledged touch is in `s`'s histories exactly once.
pub fn assert_acked_present_once(s: &Server, acked: &[(String, u64, Instant)]) {
    let mut by_id: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (id, i, _) in acked {
        by_id.entry(id).or_default().push(*i);
    }
    let mut c = s.client();
    for (id, want) in by_id {
        assert!(
            want.len() < 900,
            "{id}: spread the load over more instances"
        );
        let h = c
            .call("GET_HISTORY", json!({"instance_id": id, "limit": 1000}))
            .unwrap();
        let got: Vec<u64> = h["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "touch")
            .map(|e| e["payload"]["i"].as_u64().unwrap())
            .collect();
        for i in &want {
            let n = got.iter().filter(|g| *g == i).count();
            assert_eq!(
                n, 1,
                "{id}: acknowledged touch {i} must be there once: {got:?}"
            );
        }
    }
}

/// Waits until `r` holds `p`'s log heads (at most 30 s).
pub fn converge(p: &Server, r: &Server) {
    let statuses = || (status(p.addr), status(r.addr));
    let same = |a: &Value, b: &Value| a["positions"] == b["positions"];
    let (limit, every) = (Duration::from_secs(30), Duration::from_millis(100));
    wait_converged(r, limit, every, statuses, same);
}

/// The acknowledged touches missing from `s`'s histories; each one that is there is there
/// exactly once (a duplicate fails).
pub fn acked_missing(s: &Server, acked: &[(String, u64, Instant)]) -> Vec<(String, u64)> {
    let mut by_id: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (id, i, _) in acked {
        by_id.entry(id).or_default().push(*i);
    }
    let mut c = s.client();
    let mut missing = Vec::new();
    for (id, want) in by_id {
        assert!(
            want.len() < 900,
            "{id}: spread the load over more instances"
        );
        let h = c
            .call("GET_HISTORY", json!({"instance_id": id, "limit": 1000}))
            .unwrap();
        let got: Vec<u64> = h["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "touch")
            .map(|e| e["payload"]["i"].as_u64().unwrap())
            .collect();
        for i in want {
            match got.iter().filter(|g| **g == i).count() {
                0 => missing.push((id.to_string(), i)),
                1 => {}
                n => panic!("{id}: acknowledged touch {i} is there {n} times: {got:?}"),
            }
        }
    }
    missing
}
