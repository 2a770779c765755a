//! A created cluster routing by slot, against real processes (docs/cluster.md): one etcd and
//! three groups of two members each on loopback. `CLUSTER_CREATE` over the wire splits the
//! slots as Redis does and every member's copy agrees within 1 s; `CLUSTER_SHARDS`,
//! `CLUSTER_SLOTS` and `CLUSTER_INFO` answer from the copy; an instance op sent to a member of
//! another group gets `MOVED` naming the owner's primary, and a follower of the owning group
//! `READ_ONLY_MODE` (ownership first, then the role); a client that follows `MOVED` spreads
//! its creates over the three groups; `CLUSTER_ADD_GROUP` adds an empty group.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::etcd::Etcd;
use common::ha::serial;
use common::*;
use serde_json::{json, Value};

const GROUPS: [&str; 3] = ["g1", "g2", "g3"];

/// Sends `op` to `first`, following `MOVED` (and a follower's `READ_ONLY_MODE` naming its
/// primary), at most 5 times: the reply and the address that gave it.
fn follow(first: String, op: &str, params: &Value) -> (Value, String) {
    let mut addr = first;
    for _ in 0..=5 {
        let mut c = Client::connect_hello(addr.as_str(), "cluster-test").unwrap();
        match c.call(op, params.clone()) {
            Ok(v) => return (v, addr),
            Err(ClientError::Server { code, details, .. }) if code == "MOVED" => {
                addr = details["addr"]
                    .as_str()
                    .expect("MOVED names addr")
                    .to_owned();
            }
            // The owning group's follower (the first address may be one) names its primary,
            // as any failover client follows it (docs/ha.md).
            Err(ClientError::Server { code, details, .. })
                if code == "READ_ONLY_MODE" && details["primary"].is_string() =>
            {
                addr = details["primary"].as_str().unwrap_or_default().to_owned();
            }
            Err(e) => panic!("{op} {params}: {e}"),
        }
    }
    panic!("{op} {params}: more than 5 redirects");
}

#[test]
fn a_created_cluster_routes_every_instance_op_to_its_slot_s_group() {
    let _serial = serial();
    let etcd = Etcd::start(1);
    let (_dirs, members, primaries) = cluster::start_groups(&etcd, "routing", &GROUPS, 2);
    let addr_of = |i: usize| members[i].addr.to_string();

    // A definition put on g1 before the map exists stays there; CLUSTER_CREATE (sent to a g1
    // member) copies it to every group.
    put_order_machine(&mut members[primaries[0]].client());

    // Created, and every member's copy agrees within 1 s, primaries and followers alike.
    let created = cluster::create(&members, Duration::from_secs(1));
    assert_eq!(created["map_epoch"], 1, "{created}");
    let ranges: Vec<Value> = (created["shards"].as_array().unwrap().iter())
        .map(|g| json!([g["group"], g["slots"]]))
        .collect();
    assert_eq!(
        ranges,
        [
            json!(["g1", [[0, 5460]]]),
            json!(["g2", [[5461, 10922]]]),
            json!(["g3", [[10923, 16383]]])
        ]
    );
    let mut admin = members[0].client();
    let again = refusal(admin.call("CLUSTER_CREATE", json!({})));
    assert_eq!(
        (again.0.as_str(), &again.1["map_epoch"]),
        ("BAD_REQUEST", &json!(1))
    );

    let info = members[3].client().call("CLUSTER_INFO", json!({})).unwrap();
    assert_eq!(
        (info["slots_ok"].clone(), info["groups"].clone()),
        (json!(16384), json!(3))
    );
    let slots = members[5]
        .client()
        .call("CLUSTER_SLOTS", json!({}))
        .unwrap();
    let table = slots["slots"].as_array().unwrap();
    assert_eq!(table.len(), 3, "{slots}");
    for (g, row) in table.iter().enumerate() {
        let follower = 2 * g + (1 - (primaries[g] - 2 * g));
        assert_eq!(row[2], json!(addr_of(primaries[g])), "{slots}");
        assert_eq!(row[3], json!([addr_of(follower)]), "{slots}");
    }

    // Definitions: in every group after the create; a PUT on one group's primary reaches
    // every group's before it is answered.
    let machine = |p: usize, name: &str| {
        let got = members[p]
            .client()
            .call("GET_MACHINE", json!({"machine": name, "version": 1}));
        got.map(|m| m["machine"].clone())
    };
    for &p in &primaries {
        assert_eq!(machine(p, "order").expect("order everywhere"), "order");
    }
    let counter = json!({"machine": "counter", "version": 1, "definition": {
        "states": ["open"], "initial": "open",
        "transitions": [{"from": "open", "event": "tick", "to": "open"}]}});
    let put = members[primaries[2]]
        .client()
        .call("PUT_MACHINE", counter.clone())
        .unwrap();
    assert_eq!(put["created"], true, "{put}");
    for &p in &primaries {
        assert_eq!(
            machine(p, "counter").expect("counter everywhere"),
            "counter"
        );
    }
    let again = members[primaries[0]]
        .client()
        .call("PUT_MACHINE", counter)
        .unwrap();
    assert_eq!(again["created"], false, "{again}");
    let mut other = json!({"machine": "counter", "version": 1, "definition": {
        "states": ["x"], "initial": "x"}});
    let clash = refusal(
        members[primaries[1]]
            .client()
            .call("PUT_MACHINE", other.take()),
    );
    assert_eq!(clash.0, "MACHINE_VERSION_EXISTS", "{clash:?}");

    // "foo" is slot 12182 (g3): MOVED from g1's primary, READ_ONLY_MODE from g3's follower.
    let create = |id: &str| json!({"machine": "order", "version": 1, "id": id, "context": {}});
    let moved = refusal(
        members[primaries[0]]
            .client()
            .call("CREATE_INSTANCE", create("foo")),
    );
    assert_eq!(moved.0, "MOVED");
    assert_eq!(
        (
            moved.1["slot"].clone(),
            moved.1["group"].clone(),
            moved.1["addr"].clone()
        ),
        (json!(12182), json!("g3"), json!(addr_of(primaries[2])))
    );
    assert_eq!(moved.1["map_epoch"], 1);
    let g3_follower = 4 + (1 - (primaries[2] - 4));
    let ro = refusal(
        members[g3_follower]
            .client()
            .call("CREATE_INSTANCE", create("foo")),
    );
    assert_eq!(ro.0, "READ_ONLY_MODE", "{ro:?}");

    // A client that follows MOVED: creates spread a third per group (± 8 points for 300).
    let mut per_group: BTreeMap<String, u32> = BTreeMap::new();
    for i in 0..300 {
        let (_, at) = follow(addr_of(0), "CREATE_INSTANCE", &create(&format!("o-{i}")));
        let g = (0..3)
            .find(|&g| addr_of(primaries[g]) == at)
            .expect("answered by a group's primary");
        *per_group.entry(GROUPS[g].to_string()).or_default() += 1;
    }
    for g in GROUPS {
        let n = per_group.get(g).copied().unwrap_or(0);
        assert!((76..=124).contains(&n), "{per_group:?}");
    }
    // Reads follow the same rule; the owning group's follower serves them.
    let (got, _) = follow(addr_of(1), "GET_INSTANCE", &json!({"id": "o-7"}));
    assert_eq!(got["state"], "new");

    // Pushes name the group and the instance's slot, live and replayed.
    let mut live = Client::connect_hello(addr_of(primaries[2]).as_str(), "w").unwrap();
    let watching = (live.call("WATCH_ALL", json!({"machines": ["order"]}))).unwrap();
    // A cursor names its group; a member of another group refuses it, naming both.
    let g3_cursor = watching["cursor"].as_str().expect("cursor").to_string();
    assert!(g3_cursor.ends_with("@g3"), "{g3_cursor}");
    let elsewhere = members[primaries[0]]
        .client()
        .call("WATCH_ALL", json!({"from_cursor": g3_cursor}));
    let (code, details) = refusal(elsewhere);
    assert_eq!(code, "BAD_REQUEST", "{details}");
    assert_eq!(
        (&details["cursor_group"], &details["group"]),
        (&json!("g3"), &json!("g1")),
        "{details}"
    );
    let mut g3 = members[primaries[2]].client();
    let mut foo = create("foo");
    foo["context"] = json!({"total": 1});
    g3.call("CREATE_INSTANCE", foo).unwrap();
    g3.call(
        "APPLY_EVENT",
        json!({"instance_id": "foo", "event": "pay", "payload": {"amount": 1}}),
    )
    .unwrap();
    let mut replay = Client::connect_hello(addr_of(primaries[2]).as_str(), "r").unwrap();
    replay
        .call(
            "WATCH_INSTANCE",
            json!({"instance_id": "foo", "from_offset": 0}),
        )
        .unwrap();
    for (w, what) in [(&mut live, "live"), (&mut replay, "replayed")] {
        let push = (w.next_push(Some(Duration::from_secs(5))).unwrap()).expect(what);
        assert_eq!(
            (&push["instance_id"], &push["group"], &push["slot"]),
            (&json!("foo"), &json!("g3"), &json!(12182)),
            "{what}: {push}"
        );
    }

    // A group added owns no slot until slots move to it.
    let added = admin
        .call(
            "CLUSTER_ADD_GROUP",
            json!({"group": "g2", "timeout_ms": 1000}),
        )
        .unwrap();
    assert_eq!(
        (added["added"].clone(), added["map_epoch"].clone()),
        (json!(false), json!(1))
    );
}
