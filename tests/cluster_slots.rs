//! Cluster mode's slots against the real binary (docs/cluster.md): CLUSTER_KEYSLOT over RCP1
//! and HTTP on a standalone server, the map ops refused without `[cluster]`, and on a cluster
//! member (etcd, no map yet) HELLO's `cluster` object, `CLUSTERDOWN` for instance ops (the map ops answer from an empty copy) and
//! `CROSS_SLOT` for an atomic batch across slots; a data dir refuses the other routing.

mod common;

use common::etcd::Etcd;
use common::http::Http;
use common::*;
use serde_json::{json, Value};

const HTTP: &str = "[http]\nenabled = true";

/// The map ops: every `CLUSTER_*` op but CLUSTER_KEYSLOT, with params they take.
fn map_ops() -> Vec<(&'static str, Value)> {
    vec![
        ("CLUSTER_SHARDS", json!({})),
        ("CLUSTER_SLOTS", json!({})),
        ("CLUSTER_INFO", json!({})),
        ("CLUSTER_CREATE", json!({"groups": ["g1"]})),
        ("CLUSTER_ADD_GROUP", json!({"group": "g2"})),
        ("CLUSTER_MOVE_SLOTS", json!({"slots": [0, 99], "to": "g2"})),
        ("CLUSTER_CANCEL_MOVE", json!({"id": "0123456789abcdef"})),
    ]
}

#[test]
fn keyslot_answers_on_a_standalone_server_over_rcp1_and_http() {
    let (s, _d) = Server::start(HTTP);
    let mut c = s.client();
    let vectors = [
        ("123456789", 12739, "123456789"),
        ("{user1000}.following", 3443, "user1000"),
        ("foo{{bar}}zap", 4015, "{bar"),
        ("foo{}{bar}", 8363, "foo{}{bar}"),
        ("{o-7}:pay", 340, "o-7"),
        ("é", 10180, "é"),
    ];
    for (id, slot, key) in vectors {
        let r = c.call("CLUSTER_KEYSLOT", json!({"id": id})).unwrap();
        assert_eq!(r, json!({"id": id, "slot": slot, "routing_key": key}));
    }
    let long = "x".repeat(257);
    for params in [json!({"id": long}), json!({}), json!({"id": 7})] {
        let (code, _) = refusal(c.call("CLUSTER_KEYSLOT", params));
        assert_eq!(code, "BAD_REQUEST");
    }
    let mut h = Http::connect(s.http_addr.expect("http listener"));
    let r = h.get("/cluster/keyslot/%7Bo-7%7D%3Apay");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"id": "{o-7}:pay", "slot": 340, "routing_key": "o-7"})
    );
    assert_eq!(h.get("/cluster/keyslot/hello").json()["slot"], 866);
    h.get(&format!("/cluster/keyslot/{}", "y".repeat(257)))
        .assert_error(400, "BAD_REQUEST");
}

#[test]
fn map_ops_without_cluster_mode_are_bad_requests_saying_so() {
    let (s, _d) = Server::start(HTTP);
    let mut c = s.client();
    let hello = c.hello_result().cloned().unwrap_or_default();
    assert!(hello.get("cluster").is_none(), "{hello}");
    assert!(
        !hello["features"].to_string().contains("cluster"),
        "{hello}"
    );
    for (op, params) in map_ops() {
        let (code, details) = refusal(c.call(op, params));
        assert_eq!(
            (code.as_str(), &details["cluster"]),
            ("BAD_REQUEST", &json!(false)),
            "{op}"
        );
    }
    let mut h = Http::connect(s.http_addr.expect("http listener"));
    for path in ["/cluster/shards", "/cluster/slots", "/cluster/info"] {
        let r = h.get(path);
        r.assert_error(400, "BAD_REQUEST");
        assert_eq!(r.json()["details"]["cluster"], false, "{path}");
    }
}

/// A cluster member's extra config: failover on etcd, `[cluster]` in group `g1`.
fn member(etcd: &Etcd) -> String {
    common::ha::member_config(etcd, "slots-test", "n0", "async")
        + "[cluster]\nenabled = true\ngroup = \"g1\"\n"
}

#[test]
fn a_cluster_member_without_a_map_says_so_and_keeps_atomic_batches_in_one_slot() {
    let etcd = Etcd::start(1);
    let dir = temp_dir();
    let s = Server::start_in(dir.path(), &member(&etcd)).unwrap();
    let mut c = s.client();
    let hello = c.hello_result().cloned().unwrap_or_default();
    assert!(
        hello["features"].to_string().contains("\"cluster\""),
        "{hello}"
    );
    assert_eq!(
        hello["cluster"],
        json!({"name": "slots-test", "group": "g1", "map_epoch": 0, "slots": 16384})
    );
    // No map yet: the map ops say so, and an instance op is CLUSTERDOWN naming its slot.
    let info = c.call("CLUSTER_INFO", json!({})).unwrap();
    assert_eq!(
        (
            info["state"].clone(),
            info["map_epoch"].clone(),
            info["my_group"].clone()
        ),
        (json!("fail"), json!(0), json!("g1"))
    );
    let shards = c.call("CLUSTER_SHARDS", json!({})).unwrap();
    assert_eq!(shards["map_epoch"], 0, "{shards}");
    let get = c.call("GET_INSTANCE", json!({"id": "o-7"}));
    let (code, details) = refusal(get);
    assert_eq!(code, "CLUSTERDOWN");
    assert_eq!(
        details,
        json!({"reason": "no_map", "map_epoch": 0, "slot": 340})
    );
    let r = c.call("CLUSTER_KEYSLOT", json!({"id": "o-7"})).unwrap();
    assert_eq!(r["slot"], 340);
    // One shard holds both slots, yet the batch spans two: CROSS_SLOT, whatever the role.
    let create = |id: &str| {
        json!({"op": "CREATE_INSTANCE",
               "params": {"machine": "order", "version": 1, "id": id, "context": {}}})
    };
    let ops = json!([create("{o-7}:pay"), create("foo"), create("o-7")]);
    let (code, details) = refusal(c.call("BATCH", json!({"mode": "atomic", "ops": ops})));
    assert_eq!(code, "CROSS_SLOT");
    assert_eq!(
        details,
        json!({"ids": ["{o-7}:pay", "foo", "o-7"], "slots": [340, 12182, 340]})
    );
}

/// Runs the server on `dir`'s data dir with `extra`; it must refuse to start, naming both
/// routings, and leave the data dir's files as they were.
fn refuses_the_other_routing(dir: &std::path::Path, extra: &str, have: &str, want: &str) {
    let data = dir.join("data");
    let files = |d: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = (files(&data), std::fs::read(data.join("smdb.meta")).unwrap());
    let config = base_config(dir, extra);
    let (code, _, stderr) = run_config_to_exit(&dir.join("other.toml"), &config);
    assert_eq!(code, 1, "{stderr}");
    let (have, want) = (format!("\"{have}\""), format!("\"{want}\""));
    assert!(stderr.contains(&have) && stderr.contains(&want), "{stderr}");
    let after = (files(&data), std::fs::read(data.join("smdb.meta")).unwrap());
    assert_eq!(after, before, "the data dir is left as it was");
}

#[test]
fn a_data_dir_refuses_to_open_with_the_other_routing() {
    let etcd = Etcd::start(1);
    // Made in cluster mode: a standalone server refuses it.
    let dir = temp_dir();
    let mut s = Server::start_in(dir.path(), &member(&etcd)).unwrap();
    assert!(s.terminate().success());
    let meta = std::fs::read_to_string(dir.path().join("data/smdb.meta")).unwrap();
    assert!(meta.contains(r#""routing":"slots""#), "{meta}");
    refuses_the_other_routing(dir.path(), "[shards]\ncount = 1\n", "slots", "hash");
    // Made standalone: a cluster member refuses it (before it reaches etcd).
    let dir = temp_dir();
    let mut s = Server::start_in(dir.path(), "[shards]\ncount = 1\n").unwrap();
    assert!(s.terminate().success());
    refuses_the_other_routing(dir.path(), &member(&etcd), "hash", "slots");
    // And each still opens with its own.
    let again = Server::start_in(dir.path(), "[shards]\ncount = 1\n").unwrap();
    again.client().call("PING", json!({})).unwrap();
}
