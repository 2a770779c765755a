//! Cluster mode and what a move leaves behind, against real processes on one etcd:
//! - MIGRATE_INSTANCES and DELETE_INSTANCES on a source whose settling has not purged the
//!   slots it gave up (`cluster.move_purge_delay_ms`) leave those instances alone and count
//!   without them (docs/lifecycle.md, "Cluster mode");
//! - a move whose async target has a follower SIGSTOPped does not switch (the target answers
//!   `end` only once a live follower holds it, so each freeze attempt is abandoned), and
//!   switches once the follower goes on; meanwhile each freeze is held for
//!   `move_freeze_max_ms`, and a DELETE_INSTANCES walk reaching a frozen instance stops
//!   before it (its progress reported) or answers `TRYAGAIN` when it could do nothing;
//! - a replay on a group that took a slot back shows, of its instances, only the events since
//!   their latest import (docs/cluster.md, "Subscriptions").

mod common;

use std::time::{Duration, Instant};

use common::cluster_writes::{cluster_client, put_machine};
use common::etcd::Etcd;
use common::ha::serial;
use common::lifecycle::wait_until;
use common::*;
use serde_json::{json, Value};
use smdb_protocol::slot::slot_of;

const GROUPS: [&str; 2] = ["g1", "g2"];
/// The moved range: the lower third of g1's half (g1 owns 0-8191 at first).
const MOVED: [u16; 2] = [0, 2730];

fn moving(id: &str) -> bool {
    slot_of(id) <= MOVED[1]
}

/// Slots g1 keeps.
fn kept_by_g1(id: &str) -> bool {
    (MOVED[1] + 1..=8191).contains(&slot_of(id))
}

/// A member of `group`, async mode, one shard, with `extra` in its `[cluster]` section and
/// the lease `ttl_ms`.
fn member(etcd: &Etcd, cluster: &str, node: &str, group: &str, ttl_ms: u64, extra: &str) -> String {
    format!(
        "[shards]\ncount = 1\n[storage]\nsegment_bytes = 1048576\n\
         [metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"\n\
         [replication]\nmode = \"async\"\nheartbeat_ms = 200\nreconnect_max_ms = 500\n\
         [ha]\nenabled = true\nnode_id = \"{node}\"\ncluster = \"{cluster}\"\n\
         etcd_endpoints = {}\nttl_ms = {ttl_ms}\nsafety_margin_ms = 500\n\
         [cluster]\nenabled = true\ngroup = \"{group}\"\n{extra}",
        etcd.toml_endpoints()
    )
}

/// Starts `sizes[g]` members of group g; the dirs, the members, each group's primary index.
fn start(
    etcd: &Etcd,
    cluster: &str,
    sizes: [usize; 2],
    ttl_ms: u64,
    extra: &str,
) -> (Vec<tempfile::TempDir>, Vec<Server>, [usize; 2]) {
    let n = sizes[0] + sizes[1];
    let dirs: Vec<_> = (0..n).map(|_| temp_dir()).collect();
    let members: Vec<Server> = (0..n)
        .map(|i| {
            let (g, k) = if i < sizes[0] {
                (0, i)
            } else {
                (1, i - sizes[0])
            };
            let cfg = member(
                etcd,
                cluster,
                &format!("{}-{k}", GROUPS[g]),
                GROUPS[g],
                ttl_ms,
                extra,
            );
            Server::start_in(dirs[i].path(), &cfg).expect("a member starts")
        })
        .collect();
    let of = |g: usize| -> Vec<&Server> {
        let lo = if g == 0 { 0 } else { sizes[0] };
        members[lo..lo + sizes[g]].iter().collect()
    };
    let primary = [0, 1].map(|g| {
        let lo = if g == 0 { 0 } else { sizes[0] };
        lo + ha::one_primary(&of(g), Duration::from_secs(20))
    });
    cluster::create(&members, Duration::from_secs(5));
    (dirs, members, primary)
}

fn machine(name: &str, version: u32) -> Value {
    json!({"machine": name, "version": version, "definition": {
        "states": ["open"], "initial": "open",
        "transitions": [{"from": "open", "event": "tick", "to": "open"}]}})
}

fn open_count(server: &Server, machine: &str) -> u64 {
    let stats = (server.client())
        .call("MACHINE_STATS", json!({"machine": machine}))
        .expect("MACHINE_STATS");
    stats["states"]["open"].as_u64().unwrap_or(0)
}

/// Calls bulk `op` with `params` on `server` until its cursor is null; the answers.
fn drive(server: &Server, op: &str, params: Value) -> Vec<Value> {
    let mut c = server.client();
    let (mut answers, mut cursor) = (Vec::new(), Value::Null);
    for _ in 0..1000 {
        let mut p = params.clone();
        if !cursor.is_null() {
            p["cursor"] = cursor.clone();
        }
        let a = c.call(op, p).unwrap_or_else(|e| panic!("{op}: {e}"));
        cursor = a["cursor"].clone();
        answers.push(a);
        if cursor.is_null() {
            break;
        }
    }
    answers
}

fn sum(answers: &[Value], key: &str) -> u64 {
    answers.iter().map(|a| a[key].as_u64().unwrap_or(0)).sum()
}

#[test]
fn bulk_ops_on_the_source_leave_moved_instances_alone_and_count_without_them() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, primary) = start(
        &etcd,
        "bulk-owned",
        [1, 1],
        2000,
        "move_purge_delay_ms = 600000\n",
    );
    for v in [1, 2] {
        put_machine(&members[primary[0]], &machine("item", v));
    }
    let seeds: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let mut client = cluster_client(&seeds);
    let all: Vec<String> = (0..300).map(|i| format!("i-{i}")).collect();
    for id in &all {
        (client.create_instance("item", 1, id, &json!({})))
            .unwrap_or_else(|e| panic!("create {id}: {e}"));
    }
    let moved = all.iter().filter(|id| moving(id)).count() as u64;
    let kept = all.iter().filter(|id| kept_by_g1(id)).count() as u64;
    assert!(moved > 20 && kept > 40, "{moved} {kept}");

    let source = &members[primary[0]];
    let done = (source.client())
        .call("CLUSTER_MOVE_SLOTS", json!({"slots": MOVED, "to": "g2"}))
        .expect("the move switches");
    assert_eq!(done["state"], "done", "{done}");
    wait_until(Duration::from_secs(5), || {
        let info = source.client().call("CLUSTER_INFO", json!({})).unwrap();
        match info["cleanup_pending"] == 2731 && info["map_epoch"] == done["map_epoch"] {
            true => Ok(()),
            false => Err(format!("the settling has not seen the switch: {info}")),
        }
    });
    let held_before = open_count(source, "item");

    // The first call's own counts: what it examined and what remains are g1's instances.
    let migrate = json!({"machine": "item", "from_version": 1, "to_version": 2, "limit": 40});
    let answers = drive(source, "MIGRATE_INSTANCES", migrate);
    let first = &answers[0];
    assert_eq!(
        sum(&answers[..1], "examined") + sum(&answers[..1], "remaining"),
        kept,
        "counted without the moved instances: {first}"
    );
    assert_eq!(sum(&answers, "migrated"), kept, "{answers:?}");
    assert_eq!(sum(&answers, "examined"), kept, "{answers:?}");
    assert!(
        answers.iter().all(|a| a["skipped"] == json!({})),
        "{answers:?}"
    );
    // One moved instance named alone: not here to migrate.
    let one = all.iter().find(|id| moving(id)).unwrap();
    let alone = json!({"machine": "item", "from_version": 1, "to_version": 2,
                       "where": {"id": one}});
    let a = source.client().call("MIGRATE_INSTANCES", alone).unwrap();
    assert_eq!(
        (a["migrated"].as_u64(), a["examined"].as_u64()),
        (Some(0), Some(0)),
        "{a}"
    );

    let answers = drive(
        source,
        "DELETE_INSTANCES",
        json!({"machine": "item", "limit": 40}),
    );
    assert_eq!(sum(&answers, "deleted"), kept, "{answers:?}");
    // The moved instances' copies are still there until the purge (whether or not the
    // member's counts show them), and g2 serves every one of them unchanged.
    assert_eq!(held_before - open_count(source, "item"), kept);
    for id in all.iter().filter(|id| moving(id)) {
        let got = client
            .get_instance(id)
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(got.version, 1, "{id}");
    }
    let info = source.client().call("CLUSTER_INFO", json!({})).unwrap();
    assert_eq!(info["cleanup_pending"], 2731, "purged meanwhile: {info}");
}

/// Whether an APPLY_EVENT on `id` at `server` is refused `TRYAGAIN` (the slot frozen).
fn frozen(server: &Server, id: &str) -> bool {
    let r = server
        .client()
        .call("APPLY_EVENT", json!({"instance_id": id, "event": "tick"}));
    match r {
        Ok(_) => false,
        Err(e) if e.code() == Some("TRYAGAIN") => true,
        Err(e) => panic!("probe {id}: {e}"),
    }
}

fn move_state(server: &Server, id: &str) -> String {
    let shards = server.client().call("CLUSTER_SHARDS", json!({})).unwrap();
    (shards["migrations"].as_array().unwrap().iter())
        .find(|m| m["id"] == id)
        .map_or("unknown".into(), |m| {
            m["state"].as_str().unwrap_or("").to_string()
        })
}

#[test]
fn a_frozen_slot_holds_bulk_walks_and_an_async_target_waits_for_its_follower() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    // A long lease: the stopped follower stays a live member of g2 for the whole test.
    let extra = "move_freeze_max_ms = 1500\nmove_attempts = 1000\n";
    let (_dirs, members, primary) = start(&etcd, "bulk-frozen", [1, 2], 30000, extra);
    for m in ["frz", "mix", "probe"] {
        put_machine(&members[primary[0]], &machine(m, 1));
    }
    let seeds: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let mut client = cluster_client(&seeds);
    let pick = |prefix: &str, n: usize, f: fn(&str) -> bool| -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .filter(|id| f(id))
            .take(n)
            .collect()
    };
    let frz = pick("f-", 8, moving);
    // In id order, g1's kept "a-" instances come before the moving "b-" ones.
    let (before, after) = (pick("a-", 5, kept_by_g1), pick("b-", 5, moving));
    let probe = pick("p-", 1, moving).remove(0);
    for (m, ids) in [("frz", &frz), ("mix", &before), ("mix", &after)] {
        for id in ids {
            client.create_instance(m, 1, id, &json!({})).unwrap();
        }
    }
    client
        .create_instance("probe", 1, &probe, &json!({}))
        .unwrap();

    let follower = if primary[1] == 1 { 2 } else { 1 };
    members[follower].signal(libc::SIGSTOP);
    let source = &members[primary[0]];
    let started = (source.client())
        .call(
            "CLUSTER_MOVE_SLOTS",
            json!({"slots": MOVED, "to": "g2", "wait": false}),
        )
        .expect("the move starts");
    let move_id = started["id"].as_str().unwrap().to_string();
    let since = Instant::now();

    // Catch a freeze as it begins (unfrozen, then frozen): it lasts `move_freeze_max_ms`.
    let mut was_open = false;
    loop {
        assert!(since.elapsed() < Duration::from_secs(60), "no freeze seen");
        let now = frozen(source, &probe);
        if now && was_open {
            break;
        }
        was_open |= !now;
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut c = source.client();
    let mixed = c
        .call("DELETE_INSTANCES", json!({"machine": "mix"}))
        .unwrap();
    let held = c.call("DELETE_INSTANCES", json!({"machine": "frz"}));
    let again = json!({"machine": "mix", "cursor": mixed["cursor"]});
    let resumed = c.call("DELETE_INSTANCES", again);
    assert!(
        frozen(source, &probe),
        "the freeze ended during the calls: try again"
    );
    assert_eq!(
        mixed["deleted"], 5,
        "stopped before the first frozen one: {mixed}"
    );
    assert!(mixed["cursor"].is_string(), "{mixed}");
    for r in [held, resumed] {
        let (code, details) = refusal(r);
        assert_eq!(code, "TRYAGAIN", "{details}");
        assert_eq!(details["migration"], move_id.as_str(), "{details}");
        assert!(
            details["slot"].as_u64() <= Some(u64::from(MOVED[1])),
            "{details}"
        );
    }

    // The async target answers `end` only once its follower holds it: no switch meanwhile.
    while since.elapsed() < Duration::from_secs(6) {
        assert_eq!(
            move_state(source, &move_id),
            "running",
            "switched without the follower"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    members[follower].signal(libc::SIGCONT);
    wait_until(Duration::from_secs(30), || {
        match move_state(source, &move_id).as_str() {
            "done" => Ok(()),
            s => Err(format!("the move is {s}")),
        }
    });
    // Nothing frozen was deleted: g2 serves every one.
    for id in frz.iter().chain(&after) {
        client
            .get_instance(id)
            .unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    for id in &before {
        assert_eq!(
            err_code(client.get_instance(id)),
            "INSTANCE_NOT_FOUND",
            "{id}"
        );
    }
}

/// The events a `WATCH_ALL` from cursor "0" (the log's start) on `server` replays for `id`
/// (their payloads' `n`).
fn replayed_seqs(server: &Server, id: &str) -> Vec<u64> {
    let mut c = server.client();
    c.call("WATCH_ALL", json!({"from_cursor": "0"}))
        .expect("WATCH_ALL");
    c.set_timeout(Some(Duration::from_millis(1500))).unwrap();
    let mut seqs = Vec::new();
    while let Ok(p) = c.recv_push() {
        if p["type"] == "event" && p["instance_id"] == id {
            seqs.push(p["payload"]["n"].as_u64().unwrap_or(0));
        }
    }
    seqs
}

#[test]
fn a_replay_after_a_move_back_shows_only_events_since_the_latest_import() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, primary) = start(&etcd, "bulk-replay", [1, 1], 2000, "");
    put_machine(&members[primary[0]], &machine("counter", 1));
    let seeds: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let mut client = cluster_client(&seeds);
    let (x, stay) = ("x-1", "s-0");
    let x = (0..)
        .map(|i| format!("{x}{i}"))
        .find(|id| moving(id))
        .unwrap();
    let stay = (0..)
        .map(|i| format!("{stay}{i}"))
        .find(|id| kept_by_g1(id))
        .unwrap();
    for id in [&x, &stay] {
        client
            .create_instance("counter", 1, id, &json!({}))
            .unwrap();
        for n in 1..=2 {
            client
                .apply_event(id, "tick", Some(&json!({"n": n})))
                .unwrap();
        }
    }
    let g1 = &members[primary[0]];
    assert_eq!(replayed_seqs(g1, &x), vec![1, 2]);
    let there = json!({"slots": MOVED, "to": "g2"});
    let moved = g1
        .client()
        .call("CLUSTER_MOVE_SLOTS", there)
        .expect("to g2");
    assert_eq!(moved["state"], "done", "{moved}");
    client
        .apply_event(&x, "tick", Some(&json!({"n": 3})))
        .unwrap(); // on g2
    let back = json!({"slots": MOVED, "to": "g1"});
    let back = g1
        .client()
        .call("CLUSTER_MOVE_SLOTS", back)
        .expect("back to g1");
    assert_eq!(back["state"], "done", "{back}");
    (client.apply_event(&x, "tick", Some(&json!({"n": 4})))).expect("on g1 again");
    assert_eq!(client.get_instance(&x).unwrap().event_count, 4);
    // g1's log still holds events 1 and 2 of x from before it left: not shown again; what never
    // left is replayed whole.
    assert_eq!(replayed_seqs(g1, &x), vec![4]);
    assert_eq!(replayed_seqs(g1, &stay), vec![1, 2]);
}
