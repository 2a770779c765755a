//! The cluster metrics against real processes (docs/cluster.md, "Metrics"): one etcd and two
//! groups of one member each. Before `CLUSTER_CREATE` each member shows map epoch 0 and state
//! 0; after it epoch 1, 8192 slots owned on each and state 1; an instance op sent to the
//! other group's member raises `svc_cluster_moved_total` by one there; a standalone server
//! shows no `svc_cluster_` family at all.

mod common;

use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::ha::serial;
use common::scrape::{scrape, Exposition};
use common::*;
use serde_json::json;

/// Scrapes `s` until `ok` holds (at most 5 s); the last scrape.
fn scrape_until(s: &Server, what: &str, ok: impl Fn(&Exposition) -> bool) -> Exposition {
    let since = Instant::now();
    loop {
        let e = scrape(s);
        if ok(&e) {
            return e;
        }
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "{what}:\n{}",
            e.text
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a member shows before `CLUSTER_CREATE`: every family, at 0.
fn assert_no_map_yet(e: &Exposition) {
    assert_eq!(e.get("svc_cluster_map_epoch", &[]), 0.0, "{}", e.text);
    assert_eq!(e.get("svc_cluster_state_ok", &[]), 0.0);
    assert_eq!(e.get("svc_cluster_slots_owned", &[]), 0.0);
    assert_eq!(e.get("svc_cluster_moved_total", &[]), 0.0);
    assert_eq!(e.types.get("svc_cluster_map_epoch").unwrap(), "gauge");
    assert_eq!(e.types.get("svc_cluster_moved_total").unwrap(), "counter");
    let freeze = e.types.get("svc_cluster_slot_freeze_seconds");
    assert_eq!(freeze.unwrap(), "histogram");
    for d in ["out", "in"] {
        assert_eq!(
            e.get("svc_cluster_migrating_slots", &[("direction", d)]),
            0.0
        );
        let entries = e.value("svc_cluster_migration_entries_total", &[("direction", d)]);
        assert_eq!(entries, Some(0.0));
    }
    for r in ["done", "aborted"] {
        let n = e.value("svc_cluster_migrations_total", &[("result", r)]);
        assert_eq!(n, Some(0.0));
    }
    assert_eq!(e.get("svc_cluster_tryagain_total", &[]), 0.0);
}

#[test]
fn a_member_shows_its_copy_and_its_moved_answers_and_a_standalone_server_none() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, _) = cluster::start_groups(&etcd, "metrics", &["g1", "g2"], 1);
    for m in &members {
        assert_no_map_yet(&scrape(m));
    }

    let created = members[0]
        .client()
        .call("CLUSTER_CREATE", json!({"timeout_ms": 10000}))
        .expect("CLUSTER_CREATE");
    assert_eq!(created["map_epoch"], 1, "{created}");
    for m in &members {
        let e = scrape_until(m, "epoch 1 and state ok", |e| {
            e.value("svc_cluster_map_epoch", &[]) == Some(1.0)
                && e.value("svc_cluster_state_ok", &[]) == Some(1.0)
        });
        assert_eq!(e.get("svc_cluster_slots_owned", &[]), 8192.0, "{}", e.text);
    }

    // "foo" is slot 12182: g2's. Asked of g1's member, MOVED, counted there only.
    let moved = members[0]
        .client()
        .call("GET_INSTANCE", json!({"id": "foo"}));
    match moved {
        Err(ClientError::Server { code, .. }) => assert_eq!(code, "MOVED"),
        other => panic!("expected MOVED, got {other:?}"),
    }
    assert_eq!(scrape(&members[0]).get("svc_cluster_moved_total", &[]), 1.0);
    assert_eq!(scrape(&members[1]).get("svc_cluster_moved_total", &[]), 0.0);

    let standalone = "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"\n";
    let (s, _d) = Server::start(standalone);
    let e = scrape(&s);
    assert!(e.text.contains("svc_uptime_seconds"), "{}", e.text);
    assert!(!e.text.contains("svc_cluster_"), "{}", e.text);
}
