//! WATCH_ALL of the tokio client over a cluster (docs/cluster.md, "Clients"): one etcd, two
//! groups of one member each. One `subscribe_all` runs a subscription per group and merges
//! them: it hears events from both groups, and across a `CLUSTER_MOVE_SLOTS` of a third of
//! g1's slots to g2 under writes, every acknowledged event of every instance arrives once, in
//! the order it was written (a moved instance's events before the switch come from g1, those
//! after it from g2; g2's are held until g1's `slots_moved`). And when g2's member restarts
//! (on a new port), g2's subscription opens again from its own cursor at the address the map
//! then names: still every event once, in order. The blocking client's `subscribe_all` does
//! the same over the move.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::serial;
use common::*;
use serde_json::json;
use smdb_client::asyncio::{self, Subscription};
use smdb_client::{ApplyOptions, ConnectOptions, CreateOptions, RetryPolicy, WatchAllFilter};

const GROUPS: [&str; 2] = ["g1", "g2"];
/// The slots that move, g1's first third.
const MOVED: [u16; 2] = [0, 2730];

fn moved(id: &str) -> bool {
    let s = smdb_protocol::slot::slot_of(id);
    MOVED[0] <= s && s <= MOVED[1]
}

/// Two groups of one member, the map made, `counter` defined; the seed is g1's member.
fn start(etcd: &Etcd, cluster: &str) -> (Vec<tempfile::TempDir>, Vec<Server>) {
    let (dirs, members, _) = cluster::start_groups(etcd, cluster, &GROUPS, 1);
    cluster::create(&members, Duration::from_secs(2));
    let counter = json!({"machine": "counter", "version": 1, "definition": {
        "states": ["open"], "initial": "open",
        "transitions": [{"from": "open", "event": "tick", "to": "open"}]}});
    members[0]
        .client()
        .call("PUT_MACHINE", counter)
        .expect("PUT_MACHINE");
    (dirs, members)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn client(seed: &str, ids: &[String]) -> asyncio::Client {
    let opts = ConnectOptions {
        retry: RetryPolicy::failover(),
        ..ConnectOptions::default()
    };
    let c = asyncio::Client::connect(seed, opts).await.expect("connect");
    for id in ids {
        let r = (c.create_instance("counter", 1, id, &json!({}), &CreateOptions::default())).await;
        r.unwrap_or_else(|e| panic!("create {id}: {e}"));
    }
    c
}

fn ticks() -> WatchAllFilter {
    WatchAllFilter {
        events: vec!["tick".into()],
        ..WatchAllFilter::default()
    }
}

#[test]
fn a_group_s_subscription_resumes_from_its_cursor_after_its_member_restarts() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, mut members) = start(&etcd, "watch-restart");
    let seed = members[0].addr.to_string();
    let ids: Vec<String> = (0..40).map(|i| format!("r-{i}")).collect();
    let rt = runtime();
    let (c, mut sub) = rt.block_on(async {
        let c = client(&seed, &ids).await;
        let sub = c.subscribe_all(ticks()).await.expect("subscribe_all");
        (c, sub)
    });
    let mut acked: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut tick_all = |c: &asyncio::Client, k: u64| {
        rt.block_on(async {
            for id in &ids {
                let (payload, opts) = (json!({"k": k}), ApplyOptions::default());
                let r = c.apply_event(id, "tick", Some(&payload), &opts).await;
                r.unwrap_or_else(|e| panic!("{id} {k}: {e}"));
            }
        });
        for id in &ids {
            acked.entry(id.clone()).or_default().push(k);
        }
    };
    for k in 1..=5 {
        tick_all(&c, k);
    }
    // g2's member stops cleanly and comes back on a new port: its subscription's connection
    // is gone, and the map names the new address once the member is primary again.
    members[1].terminate();
    members[1].restart_after_kill();
    common::ha::one_primary(&[&members[1]], Duration::from_secs(20));
    let c = rt.block_on(async {
        // A fresh client, so the writes do not hang on how the first one finds g2 again.
        let fresh = client(&seed, &[]).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !all_up(&fresh, &ids).await {
            assert!(Instant::now() < deadline, "g2 never served again");
            tokio::time::sleep(Duration::from_millis(100)).await;
            fresh.refresh_cluster_map().await;
        }
        fresh
    });
    for k in 6..=10 {
        tick_all(&c, k);
    }
    let total: usize = acked.values().map(Vec::len).sum();
    let got = rt.block_on(collect(&mut sub, total));
    check_in_order(&acked, &got);
}

/// Whether every instance answers a read.
async fn all_up(c: &asyncio::Client, ids: &[String]) -> bool {
    for id in ids {
        if c.get_instance(id).await.is_err() {
            return false;
        }
    }
    true
}

#[test]
fn watch_all_over_two_groups_keeps_each_instance_s_events_in_order_across_a_move() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members) = start(&etcd, "watch");
    let seed = members[0].addr.to_string();
    let ids: Vec<String> = (0..120).map(|i| format!("w-{i}")).collect();
    assert!(ids.iter().filter(|id| moved(id)).count() > 10);
    runtime().block_on(async {
        let c = client(&seed, &ids).await;
        let mut sub = c.subscribe_all(ticks()).await.expect("subscribe_all");
        let acked = writes_across_a_move(&c, &seed, &ids).await;
        let total: usize = acked.values().map(Vec::len).sum();
        let got = collect(&mut sub, total).await;
        check(&acked, &got);
    });
}

/// 4 writers apply `tick`s to `ids` while a third of g1's slots move to g2: every (id, k)
/// acknowledged, by id in order.
async fn writes_across_a_move(
    c: &asyncio::Client,
    seed: &str,
    ids: &[String],
) -> BTreeMap<String, Vec<u64>> {
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| tokio::spawn(write(c.clone(), ids.to_vec(), w, stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mover = asyncio::Client::connect(seed, ConnectOptions::default())
        .await
        .expect("mover");
    let done = (mover.call("CLUSTER_MOVE_SLOTS", json!({"slots": MOVED, "to": "g2"})))
        .await
        .expect("the move");
    assert_eq!(done["state"], "done", "{done}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for w in writers {
        for (id, k) in w.await.expect("writer") {
            acked.entry(id).or_default().push(k);
        }
    }
    let total: usize = acked.values().map(Vec::len).sum();
    eprintln!("{total} events acknowledged; move {done}");
    acked
}

/// The same through the blocking client: its `subscribe_all` on a cluster client runs one
/// subscription per group (a thread each) and merges them by the same rule.
#[test]
fn the_blocking_client_s_watch_all_hears_every_group_in_order_across_a_move() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members) = start(&etcd, "watch-blocking");
    let seed = members[0].addr.to_string();
    let ids: Vec<String> = (0..120).map(|i| format!("b-{i}")).collect();
    let rt = runtime();
    let c = rt.block_on(client(&seed, &ids));
    let opts = ConnectOptions {
        retry: RetryPolicy::failover(),
        ..ConnectOptions::default()
    };
    let blocking = smdb_client::Client::connect_with(&seed, &opts).expect("blocking client");
    assert!(blocking.is_cluster());
    let mut sub = blocking.subscribe_all(ticks()).expect("subscribe_all");
    let acked = rt.block_on(writes_across_a_move(&c, &seed, &ids));
    let total: usize = acked.values().map(Vec::len).sum();
    let mut got = Got::new();
    let (mut n, deadline) = (0, Instant::now() + Duration::from_secs(15));
    while n < total && Instant::now() < deadline {
        let Some(e) = sub.next_timeout(Duration::from_secs(1)).expect("no error") else {
            continue;
        };
        let k = e.payload["k"].as_u64().expect("k");
        let group = e.extra.get("group").and_then(|g| g.as_str()).unwrap_or("?");
        got.entry(e.instance_id.clone())
            .or_default()
            .push((k, group.to_string()));
        n += 1;
    }
    assert!(sub.cursor().is_some_and(|c| c.starts_with("cluster:")));
    check(&acked, &got);
    sub.close().expect("close");
}

/// Applies `tick` to the ids `w` owns (every 4th), each with payload `{k}` counting up per
/// instance, until `stop`; returns every (id, k) acknowledged.
async fn write(
    c: asyncio::Client,
    ids: Vec<String>,
    w: usize,
    stop: Arc<AtomicBool>,
) -> Vec<(String, u64)> {
    let mine: Vec<&String> = ids.iter().skip(w).step_by(4).collect();
    let mut next: Vec<u64> = vec![1; mine.len()];
    let mut acked = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let i = n % mine.len();
        n += 1;
        let (id, k) = (mine[i], next[i]);
        let opts = ApplyOptions {
            idempotency_key: Some(format!("{id}-{k}")),
            ..ApplyOptions::default()
        };
        let r = c
            .apply_event(id, "tick", Some(&json!({"k": k})), &opts)
            .await;
        r.unwrap_or_else(|e| panic!("writer {w}: {id} {k}: {e}"));
        acked.push((id.clone(), k));
        next[i] += 1;
    }
    acked
}

/// An event as received: (k, the group that pushed it).
type Got = BTreeMap<String, Vec<(u64, String)>>;

/// Events until `want` have come, or 15 s.
async fn collect(sub: &mut Subscription, want: usize) -> Got {
    let mut got = Got::new();
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    while n < want && Instant::now() < deadline {
        let next = tokio::time::timeout(Duration::from_secs(1), sub.next()).await;
        let Ok(Some(e)) = next else { continue };
        let e = e.expect("no error in the stream");
        let k = e.payload["k"].as_u64().expect("k");
        let group = e.extra.get("group").and_then(|g| g.as_str()).unwrap_or("?");
        got.entry(e.instance_id.clone())
            .or_default()
            .push((k, group.to_string()));
        n += 1;
    }
    got
}

/// Each instance's events exactly as acknowledged: every one once, in order.
fn check_in_order(acked: &BTreeMap<String, Vec<u64>>, got: &Got) {
    for (id, want) in acked {
        let seen = got.get(id).cloned().unwrap_or_default();
        let ks: Vec<u64> = seen.iter().map(|(k, _)| *k).collect();
        assert_eq!(&ks, want, "{id}: every event once, in order ({seen:?})");
    }
    let extra: Vec<&String> = got.keys().filter(|id| !acked.contains_key(*id)).collect();
    assert!(
        extra.is_empty(),
        "events of instances never written: {extra:?}"
    );
}

fn check(acked: &BTreeMap<String, Vec<u64>>, got: &Got) {
    check_in_order(acked, got);
    let mut groups: BTreeMap<String, usize> = BTreeMap::new();
    let mut both = 0;
    for (id, seen) in got {
        for (_, g) in seen {
            *groups.entry(g.clone()).or_default() += 1;
        }
        if moved(id) {
            let from: Vec<&str> = seen.iter().map(|(_, g)| g.as_str()).collect();
            let switch = from.iter().position(|g| *g == "g2").unwrap_or(from.len());
            assert!(
                from[switch..].iter().all(|g| *g == "g2"),
                "{id}: g1's events, then g2's: {from:?}"
            );
            if switch > 0 && switch < from.len() {
                both += 1;
            }
        }
    }
    eprintln!("events by group: {groups:?}; {both} moved instances heard from both");
    assert!(groups.get("g1").copied().unwrap_or(0) > 0, "{groups:?}");
    assert!(groups.get("g2").copied().unwrap_or(0) > 0, "{groups:?}");
    assert!(
        both > 0,
        "some moved instance had events before and after the switch"
    );
}
