//! The tokio client in cluster mode against real processes (docs/cluster.md, "Clients"), as
//! `tests/cluster_client.rs` has the blocking one: one etcd and three groups of one member
//! each. A client given ONE seed sees `"cluster"` in HELLO's features, reads the map with
//! `CLUSTER_SHARDS` and sends every instance op straight to its slot's group primary, from
//! eight tasks at once: 300 creates, events and reads with no error and no `MOVED`, and each
//! instance is found on the primary of its slot's group, a third or so per group.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::etcd::Etcd;
use common::ha::serial;
use common::*;
use serde_json::{json, Value};
use smdb_client::ops::{self, BatchOp, BatchResults};
use smdb_client::{
    asyncio, ApplyOptions, BatchMode, ConnectOptions, CreateOptions, ListFilter, RetryPolicy,
};

const GROUPS: [&str; 3] = ["g1", "g2", "g3"];

#[test]
fn one_seed_routes_every_instance_op_to_its_slot_s_primary() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, _) = cluster::start_groups(&etcd, "tokio", &GROUPS, 1);
    let created = cluster::create(&members, Duration::from_secs(2));
    assert_eq!(created["map_epoch"], 1, "{created}");
    for m in &members {
        put_order_machine(&mut m.client());
    }

    let seed = members[2].addr.to_string();
    let opts = ConnectOptions {
        retry: RetryPolicy::failover(),
        ..ConnectOptions::default()
    };
    let ids: Vec<String> = (0..300).map(|i| format!("t-{i}")).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let c = asyncio::Client::connect(&seed, opts)
            .await
            .expect("connect");
        assert!(c.is_cluster());
        assert_eq!(c.cluster_map_epoch(), 1);
        let tasks: Vec<_> = (0..8)
            .map(|t| {
                let (c, ids) = (c.clone(), ids.clone());
                tokio::spawn(async move {
                    for id in ids.iter().skip(t).step_by(8) {
                        let opts = CreateOptions::default();
                        let r = c
                            .create_instance("order", 1, id, &json!({"total": 1}), &opts)
                            .await;
                        r.unwrap_or_else(|e| panic!("create {id}: {e}"));
                        let pay = json!({"amount": 1});
                        let r =
                            (c.apply_event(id, "pay", Some(&pay), &ApplyOptions::default())).await;
                        r.unwrap_or_else(|e| panic!("pay {id}: {e}"));
                        let got = c.get_instance(id).await;
                        assert_eq!(got.unwrap_or_else(|e| panic!("get {id}: {e}")).id, *id);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(c.cluster_redirects(), 0, "the map was current: no MOVED");

        // A best-effort batch over every group comes back in order; a list covers them all.
        let batch = batch_ops(&ids);
        let r = c.batch(BatchMode::BestEffort, &batch).await.expect("batch");
        check_batch(&ids, r);
        // An atomic batch keeps to one slot and goes to that slot's group (the seed is g3's).
        let other = (ids.iter()).find(|id| smdb_protocol::slot::slot_of(id) < 10923);
        let one: Vec<BatchOp> = vec![ops::get_instance(other.expect("an id of g1 or g2")).into()];
        let r = c
            .batch(BatchMode::Atomic, &one)
            .await
            .expect("atomic batch");
        assert_eq!(r.results[0].status, "ok", "{r:?}");
        assert_eq!(c.cluster_redirects(), 0, "no MOVED for the atomic batch");
        let mut seen = Vec::new();
        let mut filter = ListFilter {
            limit: Some(40),
            ..ListFilter::default()
        };
        loop {
            let page = c.list_instances(&filter).await.expect("list");
            seen.extend(page.instances.into_iter().map(|i| i.id));
            match page.next_cursor {
                Some(next) => filter.cursor = Some(next),
                None => break,
            }
        }
        check_listed(&ids, seen);
    });

    // The blocking client splits and fans out the same way.
    let mut b = smdb_client::Client::connect_with(&seed, &ConnectOptions::default()).expect("seed");
    let r = b
        .batch(BatchMode::BestEffort, &batch_ops(&ids))
        .expect("batch");
    check_batch(&ids, r);
    let mut seen = Vec::new();
    let mut filter = ListFilter {
        limit: Some(70),
        ..ListFilter::default()
    };
    loop {
        let page = b.list_instances(&filter).expect("list");
        seen.extend(page.instances.into_iter().map(|i| i.id));
        match page.next_cursor {
            Some(next) => filter.cursor = Some(next),
            None => break,
        }
    }
    check_listed(&ids, seen);

    // Each instance lives on its slot's group primary: ask each primary directly.
    let mut per_group: BTreeMap<&str, u32> = BTreeMap::new();
    for (g, m) in members.iter().enumerate() {
        let mut direct = m.client();
        for id in &ids {
            let r: Result<Value, _> = direct.call("GET_INSTANCE", json!({"id": id}));
            if r.is_ok_and(|v| v["state"] == "paid") {
                *per_group.entry(GROUPS[g]).or_default() += 1;
            }
        }
    }
    assert_eq!(per_group.values().sum::<u32>(), 300, "{per_group:?}");
    for g in GROUPS {
        let n = per_group.get(g).copied().unwrap_or(0);
        assert!((76..=124).contains(&n), "{per_group:?}");
    }
}

/// GET_INSTANCE of every 10th id, and one of an id that does not exist, in one batch.
fn batch_ops(ids: &[String]) -> Vec<BatchOp> {
    let mut ops: Vec<BatchOp> = (ids.iter().step_by(10))
        .map(|id| ops::get_instance(id).into())
        .collect();
    ops.insert(3, ops::get_instance("no-such-id").into());
    ops
}

fn check_batch(ids: &[String], r: BatchResults) {
    let want: Vec<&String> = ids.iter().step_by(10).collect();
    assert_eq!(r.results.len(), want.len() + 1);
    let mut results = r.results.into_iter();
    for (i, id) in want.iter().enumerate() {
        if i == 3 {
            let missing = results.next().expect("entry").into_result();
            assert!(missing.is_err(), "{missing:?}");
        }
        let got = results.next().expect("entry").into_result();
        let got = got.unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(got["id"], json!(id), "results in the ops' order");
    }
}

fn check_listed(ids: &[String], mut seen: Vec<String>) {
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "no id twice");
    let mut want = ids.to_vec();
    want.sort();
    assert_eq!(seen, want);
}
