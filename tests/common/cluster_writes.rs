//! Writers through the Rust cluster client and the check that follows them (docs/cluster.md,
//! "Clients"): each writer applies `tick` with payload `{w, k}` and idempotency key
//! `w<w>-<k>`; afterwards every acknowledged event must be in its instance's history exactly
//! once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use smdb_client::ops::ApplyOptions;
use smdb_client::{ConnectOptions, RetryPolicy};

/// The `counter` machine the writers tick.
pub fn counter_machine() -> Value {
    json!({"machine": "counter", "version": 1, "definition": {
        "states": ["open"], "initial": "open",
        "transitions": [{"from": "open", "event": "tick", "to": "open"}]}})
}

/// PUT_MACHINE `def` on `s`, forwarded to every group: a retryable refusal (a group's primary
/// not answering the forward yet: `CLUSTERDOWN`, which the contract says is safe to repeat)
/// is repeated for up to 10 s, each printed so a slow start shows in the test's output.
pub fn put_machine(s: &super::Server, def: &Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match s.client().call("PUT_MACHINE", def.clone()) {
            Ok(_) => return,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                eprintln!("PUT_MACHINE refused, repeated: {e} {}", e.details());
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("PUT_MACHINE: {e} {}", e.details()),
        }
    }
}

/// A cluster client on `seeds` with the failover retry policy.
pub fn cluster_client(seeds: &[String]) -> smdb_client::Client {
    let opts = ConnectOptions {
        retry: RetryPolicy::failover(),
        ..ConnectOptions::default()
    };
    smdb_client::Client::connect_any(seeds, &opts).expect("connect to a seed")
}

/// One acknowledged event: instance, mark (w * 1e6 + k), when it was sent, how long it took.
#[derive(Debug, Clone)]
pub struct Ack {
    pub id: String,
    pub mark: u64,
    pub sent: Instant,
    pub took: Duration,
}

impl Ack {
    pub fn answered(&self) -> Instant {
        self.sent + self.took
    }
}

/// What one writer did: its acknowledgements and its failures (the error's text).
pub type Written = (Vec<Ack>, Vec<String>);

/// Writer `w` applies `tick` to `ids` round-robin (from a stride of its own) until `stop`.
pub fn writer(
    seeds: Vec<String>,
    ids: Arc<Vec<String>>,
    w: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Written> {
    std::thread::spawn(move || {
        let mut c = cluster_client(&seeds);
        let (mut acked, mut failed) = (Vec::new(), Vec::new());
        let mut k = 0u64;
        while !stop.load(Ordering::Relaxed) {
            k += 1;
            let id = &ids[(k as usize * 7 + w as usize * 13) % ids.len()];
            let opts = ApplyOptions {
                idempotency_key: Some(format!("w{w}-{k}")),
                ..ApplyOptions::default()
            };
            let payload = json!({"w": w, "k": k});
            let sent = Instant::now();
            match c.apply_event_with(id, "tick", Some(&payload), &opts) {
                Ok(_) => acked.push(Ack {
                    id: id.clone(),
                    mark: w * 1_000_000 + k,
                    sent,
                    took: sent.elapsed(),
                }),
                Err(e) => failed.push(format!("{id} k={k}: {e}")),
            }
        }
        (acked, failed)
    })
}

fn mark_of(p: &Value) -> u64 {
    p["w"].as_u64().unwrap_or(0) * 1_000_000 + p["k"].as_u64().unwrap_or(0)
}

/// Every acknowledged event is in its instance's history exactly once (ticks without `k` are
/// someone else's: not counted); returns the events
/// acknowledged but missing (each `(id, mark)`), after asserting that none is there twice.
pub fn lost_events(seeds: &[String], acked: &[&Ack]) -> Vec<(String, u64)> {
    let mut want: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for a in acked {
        want.entry(a.id.as_str()).or_default().insert(a.mark);
    }
    let mut c = cluster_client(seeds);
    let mut lost = Vec::new();
    for (id, marks) in &want {
        let h =
            (c.history(id, None, Some(1000))).unwrap_or_else(|e| panic!("history of {id}: {e}"));
        let got: Vec<u64> = (h.events.iter())
            .filter(|e| e.event == "tick" && e.payload["k"].is_u64())
            .map(|e| mark_of(&e.payload))
            .collect();
        let unique: BTreeSet<u64> = got.iter().copied().collect();
        assert_eq!(unique.len(), got.len(), "{id}: an event twice: {got:?}");
        lost.extend(marks.difference(&unique).map(|m| (id.to_string(), *m)));
    }
    lost
}
