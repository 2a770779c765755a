//! The Rust client in cluster mode against real processes (docs/cluster.md, "Clients"): one
//! etcd and three groups of one member each. A client given ONE seed sees `"cluster"` in
//! HELLO's features, reads the map with `CLUSTER_SHARDS` and sends every instance op straight
//! to its slot's group primary: 300 creates and 300 reads with no error and no `MOVED`, and
//! each instance is found on the primary of its slot's group, a third or so per group.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::etcd::Etcd;
use common::ha::serial;
use common::*;
use serde_json::{json, Value};
use smdb_client::{ConnectOptions, RetryPolicy};

const GROUPS: [&str; 3] = ["g1", "g2", "g3"];

#[test]
fn one_seed_routes_every_instance_op_to_its_slot_s_primary() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, _) = cluster::start_groups(&etcd, "client", &GROUPS, 1);
    // Every member's copy shows the map before the client reads it from its seed.
    let created = cluster::create(&members, Duration::from_secs(2));
    assert_eq!(created["map_epoch"], 1, "{created}");
    // Definitions: one PUT per group's primary (forwarding is not in this version).
    for m in &members {
        put_order_machine(&mut m.client());
    }

    let seed = members[1].addr.to_string();
    let opts = ConnectOptions {
        retry: RetryPolicy::failover(),
        ..ConnectOptions::default()
    };
    let mut c = smdb_client::Client::connect_with(&seed, &opts).expect("connect to the seed");
    assert!(c.is_cluster());
    assert_eq!(c.cluster_map_epoch(), 1);
    let ids: Vec<String> = (0..300).map(|i| format!("o-{i}")).collect();
    for id in &ids {
        c.create_instance("order", 1, id, &json!({}))
            .unwrap_or_else(|e| panic!("create {id}: {e}"));
    }
    for id in &ids {
        let got = c
            .get_instance(id)
            .unwrap_or_else(|e| panic!("get {id}: {e}"));
        assert_eq!(got.id, *id);
    }
    assert_eq!(c.cluster_redirects(), 0, "the map was current: no MOVED");

    // Each instance lives on its slot's group primary: ask each primary directly.
    let mut per_group: BTreeMap<&str, u32> = BTreeMap::new();
    for (g, m) in members.iter().enumerate() {
        let mut direct = m.client();
        for id in &ids {
            let r: Result<Value, _> = direct.call("GET_INSTANCE", json!({"id": id}));
            if r.is_ok() {
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
