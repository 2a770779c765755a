//! Acknowledged writes (tests/replication.rs and the failover tests): a load that sends
//! `touch` events to whichever server accepts them and records each one acknowledged `ok`,
//! and the check that every acknowledged touch is in a server's histories exactly once.
//! Touch `i` carries the payload `{"i": i}`, so each write is identifiable in a history.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Client, Server};

/// One acknowledged touch: instance id, touch number, when its `ok` was read.
pub type Acked = (String, u64, Instant);

/// The failover tests' bound on the touches acknowledged per instance: a history keeps its
/// newest 1000 items, and a check of older ones would be void.
pub const PER_INSTANCE_MAX: usize = 900;

/// A writer that sends `touch` events to whichever member accepts them, recording each one
/// acknowledged `ok` and the time of each `ok`.
pub struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
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

    pub fn acked(&self) -> Vec<Acked> {
        self.acked.lock().unwrap().clone()
    }

    pub fn finish(mut self) -> Vec<Acked> {
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

/// The `i` of every `touch` in `id`'s history (its newest 1000 items).
pub fn touches(c: &mut Client, id: &str) -> Vec<u64> {
    let h = c
        .call("GET_HISTORY", json!({"instance_id": id, "limit": 1000}))
        .unwrap();
    h["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "touch")
        .map(|e| e["payload"]["i"].as_u64().unwrap())
        .collect()
}

/// The acknowledged touches missing from `s`'s histories; each one that is there is there
/// exactly once (a duplicate fails). Fewer than `per_instance_max` touches may be
/// acknowledged per instance, or the test fails: it must spread its load wider.
pub fn missing_within(s: &Server, acked: &[Acked], per_instance_max: usize) -> Vec<(String, u64)> {
    let mut by_id: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (id, i, _) in acked {
        by_id.entry(id).or_default().push(*i);
    }
    let mut c = s.client();
    let mut missing = Vec::new();
    for (id, want) in by_id {
        assert!(
            want.len() < per_instance_max,
            "{id}: {} touches acknowledged (under {per_instance_max} can be checked): \
             spread the load over more instances",
            want.len()
        );
        let got = touches(&mut c, id);
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

/// Every acknowledged touch is in `s`'s histories exactly once.
pub fn assert_present_once_within(s: &Server, acked: &[Acked], per_instance_max: usize) {
    let missing = missing_within(s, acked, per_instance_max);
    assert!(
        missing.is_empty(),
        "acknowledged touches must be there exactly once; missing: {missing:?}"
    );
}

/// `missing_within` at the failover tests' bound.
pub fn acked_missing(s: &Server, acked: &[Acked]) -> Vec<(String, u64)> {
    missing_within(s, acked, PER_INSTANCE_MAX)
}

/// `assert_present_once_within` at the failover tests' bound.
pub fn assert_acked_present_once(s: &Server, acked: &[Acked]) {
    assert_present_once_within(s, acked, PER_INSTANCE_MAX)
}
