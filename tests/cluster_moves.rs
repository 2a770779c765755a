//! Moving slots between groups online, against real processes (docs/cluster.md, "Moving
//! slots"): one etcd, two groups of two members each in sync mode, on loopback.
//! - A third of the slots move from g1 to g2 while writers apply events to instances in every
//!   slot: the move switches, every acknowledged event is in its instance's history exactly
//!   once afterwards, on the new owner; idempotency keys still deduplicate there; a timer
//!   armed before the move fires once, on the target, not early; g1 answers `MOVED` for the
//!   slots and its clean-up deletes its copies.
//! - SIGKILL of the source's primary, and SIGSTOP of the target's, in the middle of a move
//!   under writes: the move aborts (`source_failover`, `target_failover`), the slots stay
//!   with the source, every acknowledged event is there exactly once, and the target (its new
//!   primary, and the stopped one once it runs again) answers `MOVED` for them.
//! - A move cancelled in the middle ends `aborted`: the slots stay with the source, nothing
//!   is lost, and a later move of them switches.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::serial;
use common::*;
use serde_json::{json, Value};

const GROUPS: [&str; 2] = ["g1", "g2"];
/// The moved range: the lower third of g1's half.
const MOVED: [u16; 2] = [0, 2730];

/// A member of `group` in sync mode, with `extra` TOML (a `[cluster]` key or two).
fn member(etcd: &Etcd, cluster: &str, node: &str, group: &str, extra: &str) -> String {
    common::ha::member_config(etcd, cluster, node, "sync")
        + &format!("[cluster]\nenabled = true\ngroup = \"{group}\"\n{extra}")
}

fn start(etcd: &Etcd, cluster: &str, extra: &str) -> (Vec<tempfile::TempDir>, Vec<Server>) {
    start_groups(etcd, cluster, extra, 2)
}

/// `per` members in each group (member i is in group i / per), each group's primary found,
/// the map created.
fn start_groups(
    etcd: &Etcd,
    cluster: &str,
    extra: &str,
    per: usize,
) -> (Vec<tempfile::TempDir>, Vec<Server>) {
    let dirs: Vec<_> = (0..2 * per).map(|_| temp_dir()).collect();
    let members: Vec<Server> = (0..2 * per)
        .map(|i| {
            let group = GROUPS[i / per];
            let cfg = member(etcd, cluster, &format!("{group}-{}", i % per), group, extra);
            Server::start_in(dirs[i].path(), &cfg).expect("a member starts")
        })
        .collect();
    for g in 0..2 {
        let of: Vec<&Server> = members[per * g..per * g + per].iter().collect();
        common::ha::one_primary(&of, Duration::from_secs(20));
    }
    cluster::create(&members, Duration::from_secs(2));
    (dirs, members)
}

/// Sends `op` starting at `addrs[0]`, following `MOVED` and a follower's `READ_ONLY_MODE`,
/// retrying `TRYAGAIN` / `CLUSTERDOWN` / `NO_PRIMARY` (nothing executed, or a keyed request
/// whose outcome is unknown) and a lost connection at the next member, for up to 20 s.
fn routed(addrs: &[String], op: &str, params: &Value) -> Result<(Value, String), ClientError> {
    let mut addr = addrs[0].clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut redirects = 0;
    loop {
        let reply = Client::connect_hello(addr.as_str(), "moves-test")
            .and_then(|mut c| c.call(op, params.clone()));
        match reply {
            Ok(v) => return Ok((v, addr)),
            Err(ClientError::Server { code, details, .. })
                if (code == "MOVED" || code == "READ_ONLY_MODE") && details["addr"].is_string()
                    || details["primary"].is_string() && code == "READ_ONLY_MODE" =>
            {
                redirects += 1;
                assert!(
                    Instant::now() < deadline,
                    "{op} {params}: redirected {redirects} times in 20 s"
                );
                let to = if code == "MOVED" {
                    &details["addr"]
                } else {
                    &details["primary"]
                };
                addr = to.as_str().unwrap_or_default().to_string();
            }
            // Nothing executed; or, for a request with an idempotency key, an outcome not
            // known (a primary lost): resent with the same key, it applies at most once.
            Err(ClientError::Server { code, details, .. })
                if (code == "TRYAGAIN" || code == "CLUSTERDOWN" || code == "NO_PRIMARY")
                    && (details["maybe_committed"] != true
                        || params["idempotency_key"].is_string())
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
                addr = addrs[redirects % addrs.len()].clone();
                redirects += 1;
            }
            Err(ClientError::Io(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
                addr = addrs[redirects % addrs.len()].clone();
                redirects += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn put_machines(members: &[Server]) {
    let counter = json!({"machine": "counter", "version": 1, "definition": {
        "states": ["open"], "initial": "open",
        "transitions": [{"from": "open", "event": "tick", "to": "open"}]}});
    let timed = json!({"machine": "timed", "version": 1, "definition": {
        "states": ["waiting", "done"], "initial": "waiting", "final": ["done"],
        "transitions": [{"from": "waiting", "event": "expire", "to": "done", "after_ms": 6000}]}});
    // Each group's primary gets its definitions (a move copies them too).
    for m in members {
        if m.client().call("REPLICATION_STATUS", json!({})).unwrap()["role"] == "primary" {
            let mut c = m.client();
            c.call("PUT_MACHINE", counter.clone()).unwrap();
            c.call("PUT_MACHINE", timed.clone()).unwrap();
        }
    }
}

/// `n` ids spread over every slot, with their slots.
fn ids(n: usize) -> Vec<(String, u16)> {
    (0..n)
        .map(|i| {
            let id = format!("c-{i}");
            let slot = smdb_protocol::slot::slot_of(&id);
            (id, slot)
        })
        .collect()
}

fn moved(slot: u16) -> bool {
    MOVED[0] <= slot && slot <= MOVED[1]
}

/// Writers applying `tick` with payload `{w, k}` and key `w<w>-<k>` until `stop`; each
/// returns the (id, k) it had acknowledged.
fn writers(
    addrs: Vec<String>,
    ids: Arc<Vec<(String, u16)>>,
    stop: Arc<AtomicBool>,
    n: usize,
) -> Vec<std::thread::JoinHandle<Vec<(String, u64)>>> {
    (0..n)
        .map(|w| {
            let (addrs, ids, stop) = (addrs.clone(), ids.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut k: u64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    k += 1;
                    let (id, _) = &ids[(k as usize * 7 + w * 13) % ids.len()];
                    let params = json!({"instance_id": id, "event": "tick",
                        "payload": {"w": w, "k": k}, "idempotency_key": format!("w{w}-{k}")});
                    match routed(&addrs, "APPLY_EVENT", &params) {
                        Ok(_) => acked.push((id.clone(), w as u64 * 1_000_000 + k)),
                        Err(e) => panic!("writer {w}: {id} {k}: {e}"),
                    }
                }
                acked
            })
        })
        .collect()
}

/// Every `tick` in `id`'s history, as w * 1e6 + k.
fn ticks(addrs: &[String], id: &str) -> (Vec<u64>, String) {
    let (h, at) = routed(addrs, "GET_HISTORY", &json!({"id": id, "limit": 1000})).unwrap();
    let events = h["events"].as_array().cloned().unwrap_or_default();
    let marks = (events.iter())
        .filter(|e| e["event"] == "tick")
        .map(|e| {
            e["payload"]["w"].as_u64().unwrap() * 1_000_000 + e["payload"]["k"].as_u64().unwrap()
        })
        .collect();
    (marks, at)
}

/// The events each writer had acknowledged, checked against every instance's history:
/// each exactly once; returns how many instances of the moved slots were answered by `owner`.
fn check_every_event_once(
    addrs: &[String],
    all: &[(String, u16)],
    acked: &[(String, u64)],
    owner: &str,
) -> usize {
    let mut want: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for (id, mark) in acked {
        want.entry(id.as_str()).or_default().insert(*mark);
    }
    let mut at_owner = 0;
    for (id, slot) in all {
        let (got, at) = ticks(addrs, id);
        let unique: BTreeSet<u64> = got.iter().copied().collect();
        assert_eq!(unique.len(), got.len(), "{id}: an event twice: {got:?}");
        let missing: Vec<_> = want
            .get(id.as_str())
            .into_iter()
            .flatten()
            .filter(|m| !unique.contains(m))
            .collect();
        assert!(
            missing.is_empty(),
            "{id} (slot {slot}, at {at}): acknowledged, not in history: {missing:?}"
        );
        if moved(*slot) {
            assert_eq!(
                at, owner,
                "{id} (slot {slot}) is served by the owner the map names"
            );
            at_owner += 1;
        }
    }
    at_owner
}

fn primary_addr(members: &[Server], group: usize) -> String {
    let shards = (members.iter())
        .find_map(|m| Client::connect_hello(m.addr.to_string().as_str(), "t").ok())
        .expect("a live member")
        .call("CLUSTER_SHARDS", json!({}))
        .unwrap();
    let g = &shards["shards"][group];
    let primary = g["primary"].as_str().unwrap().to_string();
    (g["nodes"].as_array().unwrap().iter())
        .find(|n| n["node_id"] == primary.as_str())
        .map(|n| n["addr"].as_str().unwrap().to_string())
        .unwrap()
}

#[test]
fn a_third_of_a_group_s_slots_move_under_writes_with_nothing_lost() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members) = start(&etcd, "moves", "");
    put_machines(&members);
    let addrs: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let all = Arc::new(ids(400));
    for (id, _) in all.iter() {
        routed(
            &addrs,
            "CREATE_INSTANCE",
            &json!({"machine": "counter", "version": 1, "id": id}),
        )
        .unwrap();
    }
    // A timer armed before the move, in the moved slots: it must fire once, on g2, not early.
    let timed = (0..)
        .map(|i| format!("t-{i}"))
        .find(|id| moved(smdb_protocol::slot::slot_of(id)))
        .unwrap();
    let armed = Instant::now();
    routed(
        &addrs,
        "CREATE_INSTANCE",
        &json!({"machine": "timed", "version": 1, "id": timed}),
    )
    .unwrap();
    let before = ticks(&addrs, &all[0].0);
    assert!(before.0.is_empty());

    // Subscriptions at the source covering the moved slots: one WATCH_ALL (of `timed`, whose
    // one instance is in them) and one WATCH_INSTANCE of that instance.
    let g1_before = primary_addr(&members, 0);
    let mut watchers: Vec<Client> = [
        json!({"machines": ["timed"]}),
        json!({"instance_id": timed}),
    ]
    .iter()
    .map(|p| {
        let mut c = Client::connect_hello(g1_before.as_str(), "watcher").unwrap();
        let op = if p["instance_id"].is_string() {
            "WATCH_INSTANCE"
        } else {
            "WATCH_ALL"
        };
        c.call(op, p.clone()).unwrap();
        c
    })
    .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let running = writers(addrs.clone(), all.clone(), stop.clone(), 4);
    std::thread::sleep(Duration::from_millis(700));
    let started = Instant::now();
    let done = members[1]
        .client()
        .call("CLUSTER_MOVE_SLOTS", json!({"slots": MOVED, "to": "g2"}))
        .expect("the move switches");
    let took = started.elapsed();
    std::thread::sleep(Duration::from_millis(700)); // writes after the switch, on g2
    stop.store(true, Ordering::Relaxed);
    let acked: Vec<(String, u64)> = running
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["map_epoch"], 2, "{done}");
    assert!(done["instances"].as_u64().unwrap() > 0, "{done}");
    eprintln!(
        "move: {done} in {took:?}; {} events acknowledged",
        acked.len()
    );

    // Each subscription hears slots_moved, naming the slots, the target and the new epoch.
    for w in &mut watchers {
        let deadline = Instant::now() + Duration::from_secs(5);
        let moved_push = loop {
            let push = w.next_push(Some(Duration::from_millis(200))).unwrap();
            if let Some(p) = push.filter(|p| p["type"] == "slots_moved") {
                break p;
            }
            assert!(Instant::now() < deadline, "no slots_moved push");
        };
        assert_eq!(moved_push["slots"], json!(MOVED), "{moved_push}");
        assert_eq!(
            (moved_push["to"].as_str(), moved_push["map_epoch"].as_u64()),
            (Some("g2"), Some(2)),
            "{moved_push}"
        );
    }

    // Every acknowledged event exactly once, on the owner the map names.
    let g2 = primary_addr(&members, 1);
    let moved_checked = check_every_event_once(&addrs, &all, &acked, &g2);
    assert!(moved_checked > 50, "{moved_checked}");

    // An idempotency key from before the move still deduplicates on the target.
    let (id, mark) = acked
        .iter()
        .find(|(id, _)| moved(smdb_protocol::slot::slot_of(id)))
        .unwrap();
    let (w, k) = (mark / 1_000_000, mark % 1_000_000);
    let again = json!({"instance_id": id, "event": "tick", "payload": {"w": w, "k": k},
                       "idempotency_key": format!("w{w}-{k}")});
    let before = ticks(&addrs, id).0.len();
    routed(&addrs, "APPLY_EVENT", &again).unwrap();
    assert_eq!(
        ticks(&addrs, id).0.len(),
        before,
        "the retry was not applied twice"
    );

    // g1 answers MOVED for the slots; its clean-up deletes its copies (LIST on g1 shows none).
    let g1 = primary_addr(&members, 0);
    let refused = refusal(
        Client::connect_hello(g1.as_str(), "t")
            .unwrap()
            .call("GET_INSTANCE", json!({"id": id})),
    );
    assert_eq!(
        (refused.0.as_str(), refused.1["group"].as_str()),
        ("MOVED", Some("g2")),
        "{refused:?}"
    );
    common::lifecycle::wait_until(Duration::from_secs(10), || {
        let page = Client::connect_hello(g1.as_str(), "t")
            .unwrap()
            .call(
                "LIST_INSTANCES",
                json!({"machine": "counter", "limit": 1000}),
            )
            .unwrap();
        let left = (page["instances"].as_array().unwrap().iter())
            .filter(|i| moved(smdb_protocol::slot::slot_of(i["id"].as_str().unwrap())))
            .count();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("g1 still lists {left} moved instances"))
        }
    });

    // The timer fires once, on g2, not before its due time.
    common::lifecycle::wait_until(Duration::from_secs(15), || {
        let (v, _) = routed(&addrs, "GET_INSTANCE", &json!({"id": timed})).unwrap();
        if v["state"] == "done" {
            Ok(())
        } else {
            Err(format!("the moved timer has not fired: {v}"))
        }
    });
    assert!(
        armed.elapsed() >= Duration::from_millis(5900),
        "fired early: {:?}",
        armed.elapsed()
    );
    let (h, at) = routed(&addrs, "GET_HISTORY", &json!({"id": timed})).unwrap();
    let fired: Vec<&Value> = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "expire")
        .collect();
    assert_eq!(fired.len(), 1, "{h}");
    assert_eq!(at, g2);
}

#[test]
fn a_cancelled_move_leaves_the_slots_with_the_source_and_a_new_one_switches() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    // Slow enough to cancel in the middle: 20 kB/s.
    let (_dirs, members) = start(&etcd, "cancel", "move_bytes_per_sec = 20000\n");
    put_machines(&members);
    let addrs: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let all = ids(300);
    for (id, _) in &all {
        let p = json!({"instance_id": id, "event": "tick", "payload": {"pad": "x".repeat(200)}});
        routed(
            &addrs,
            "CREATE_INSTANCE",
            &json!({"machine": "counter", "version": 1, "id": id}),
        )
        .unwrap();
        routed(&addrs, "APPLY_EVENT", &p).unwrap();
    }
    let mut admin = members[2].client();
    let started = admin
        .call(
            "CLUSTER_MOVE_SLOTS",
            json!({"slots": MOVED, "to": "g2", "wait": false}),
        )
        .unwrap();
    assert_eq!(started["state"], "running", "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(500));
    let cancelled = admin
        .call("CLUSTER_CANCEL_MOVE", json!({"id": id}))
        .unwrap();
    assert_eq!(cancelled["state"], "aborted", "{cancelled}");
    let again = admin
        .call("CLUSTER_CANCEL_MOVE", json!({"id": id}))
        .unwrap();
    assert_eq!(again["state"], "aborted", "cancelling twice: {again}");

    // The slots are g1's; every instance is there with its event.
    let g1 = primary_addr(&members, 0);
    let info = members[0]
        .client()
        .call("CLUSTER_SHARDS", json!({}))
        .unwrap();
    assert_eq!(info["map_epoch"], 1, "{info}");
    let listed = (info["migrations"].as_array().unwrap().iter())
        .find(|m| m["id"] == id.as_str())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        (listed["state"].as_str(), listed["reason"].as_str()),
        (Some("aborted"), Some("cancelled")),
        "{info}"
    );
    for (id, slot) in all.iter().filter(|(_, s)| moved(*s)) {
        let (h, at) = routed(&addrs, "GET_HISTORY", &json!({"id": id})).unwrap();
        assert_eq!(at, g1, "{id} (slot {slot})");
        assert_eq!(h["events"].as_array().unwrap().len(), 1, "{h}");
    }

    // A new move of part of the slots switches.
    let d = admin
        .call("CLUSTER_MOVE_SLOTS", json!({"slots": [0, 100], "to": "g2"}))
        .unwrap();
    assert_eq!(d["state"], "done", "{d}");
    assert_eq!(d["map_epoch"], 2, "{d}");
}

/// What happens to a group's primary in the middle of a move.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// SIGKILL of the source's primary.
    KillSource,
    /// SIGSTOP of the target's primary (SIGCONT once the move has aborted).
    StopTarget,
}

#[test]
fn a_move_whose_source_primary_is_killed_aborts_and_nothing_acknowledged_is_lost() {
    fault_in_the_middle(Fault::KillSource, "kill", "source_failover");
}

#[test]
fn a_move_whose_target_primary_is_stopped_aborts_and_nothing_acknowledged_is_lost() {
    fault_in_the_middle(Fault::StopTarget, "stop", "target_failover");
}

fn fault_in_the_middle(fault: Fault, name: &str, reason: &str) {
    let _serial = serial();
    let etcd = Etcd::start(1);
    // Three members a group (sync mode elects from the sync set); a slow copy (20 kB/s).
    let (_dirs, mut members) = start_groups(&etcd, name, "move_bytes_per_sec = 20000\n", 3);
    put_machines(&members);
    let addrs: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let all = Arc::new(ids(300));
    for (id, _) in all.iter() {
        let create = json!({"machine": "counter", "version": 1, "id": id});
        routed(&addrs, "CREATE_INSTANCE", &create).unwrap();
        let pad = json!({"instance_id": id, "event": "tick",
                         "payload": {"w": 9, "k": 0, "pad": "x".repeat(200)}});
        routed(&addrs, "APPLY_EVENT", &pad).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let running = writers(addrs.clone(), all.clone(), stop.clone(), 3);
    let asked = json!({"slots": MOVED, "to": "g2", "wait": false});
    let started = members[1]
        .client()
        .call("CLUSTER_MOVE_SLOTS", asked)
        .unwrap();
    let id = started["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1200));
    let (group, of) = match fault {
        Fault::KillSource => (0, 0..3),
        Fault::StopTarget => (1, 3..6),
    };
    let primary = primary_addr(&members, group);
    let hit = of.clone().find(|&i| addrs[i] == primary).unwrap();
    match fault {
        Fault::KillSource => members[hit].kill(),
        Fault::StopTarget => members[hit].signal(libc::SIGSTOP),
    }
    // A new primary of the group aborts the move of the earlier term (or the source gives up
    // on the target); the slots stay g1's.
    let ask = if group == 0 { 4 } else { 1 };
    let aborted = || {
        let shards = members[ask]
            .client()
            .call("CLUSTER_SHARDS", json!({}))
            .unwrap();
        (shards["migrations"].as_array().unwrap().iter())
            .find(|m| m["id"] == id.as_str())
            .cloned()
            .filter(|m| m["state"] == "aborted")
    };
    common::lifecycle::wait_until(Duration::from_secs(30), || {
        aborted()
            .map(|_| ())
            .ok_or_else(|| "the move is not aborted yet".to_string())
    });
    if fault == Fault::StopTarget {
        members[hit].signal(libc::SIGCONT);
    }
    std::thread::sleep(Duration::from_millis(1000)); // writes go on
    stop.store(true, Ordering::Relaxed);
    let acked: Vec<(String, u64)> = running
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let m = aborted().unwrap();
    assert_eq!(m["reason"], reason, "{m}");
    let shards = members[ask]
        .client()
        .call("CLUSTER_SHARDS", json!({}))
        .unwrap();
    assert_eq!(shards["map_epoch"], 1, "{shards}");
    eprintln!("{name} mid-move: {m}; {} events acknowledged", acked.len());
    let g1 = primary_addr(&members, 0);
    let at_g1 = check_every_event_once(&addrs, &all, &acked, &g1);
    assert!(at_g1 > 30, "{at_g1}");
    // No member of g2 serves the slots: each answers MOVED (the stopped one too, once it runs).
    let (id0, _) = all.iter().find(|(_, s)| moved(*s)).unwrap();
    for addr in &addrs[3..6] {
        let Ok(mut c) = Client::connect_hello(addr.as_str(), "t") else {
            continue;
        };
        let r = refusal(c.call("GET_INSTANCE", json!({"id": id0})));
        assert_eq!(r.0, "MOVED", "{addr}: {r:?}");
    }
}
