//! BATCH against the real binary: atomic all-or-nothing (state, history, log offsets, pushes),
//! later ops seeing earlier ones, CROSS_SHARD, best effort across shards, idempotency keys,
//! per-op metrics, and SIGKILL during a stream of atomic batches.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::pipeline::write_windowed;
use common::scrape::scrape;
use common::*;
use serde_json::{json, Value};
use shards::routing::Routing;

const TWO_SHARDS: &str = "[shards]\ncount = 2";

fn batch(c: &mut Client, mode: &str, ops: Value) -> Result<Value, ClientError> {
    c.call("BATCH", json!({"mode": mode, "ops": ops}))
}

fn details(r: Result<Value, ClientError>) -> (String, Value) {
    match r {
        Err(ClientError::Server { code, details, .. }) => (code.to_string(), details),
        other => panic!("expected a server error, got {other:?}"),
    }
}

fn create(id: &str, total: i64) -> Value {
    json!({"op": "CREATE_INSTANCE",
        "params": {"machine": "order", "version": 1, "id": id, "context": {"total": total}}})
}

fn apply(id: &str, event: &str, payload: Value) -> Value {
    json!({"op": "APPLY_EVENT", "params": {"instance_id": id, "event": event, "payload": payload}})
}

fn get(id: &str) -> Value {
    json!({"op": "GET_INSTANCE", "params": {"id": id}})
}

fn wal_offset(c: &mut Client) -> Value {
    c.call("INFO", json!({})).unwrap()["wal"].clone()
}

/// Everything a failed batch must leave untouched.
fn observe(c: &mut Client, ids: &[&str]) -> Value {
    let per_id: Vec<Value> = ids
        .iter()
        .map(|id| {
            let inst = c.call("GET_INSTANCE", json!({"id": id})).ok();
            let hist = c.call("GET_HISTORY", json!({"id": id})).ok();
            json!([inst, hist])
        })
        .collect();
    json!({"instances": per_id, "wal": wal_offset(c)})
}

#[test]
fn an_abort_at_the_first_a_middle_or_the_last_op_changes_nothing() {
    let (s, _d) = Server::start("");
    let mut c = s.order_client();
    c.call("CREATE_INSTANCE", create("{o}:a", 10)["params"].clone())
        .unwrap();
    let mut watcher = s.watcher(json!({}));
    let ids = ["{o}:a", "{o}:b"];
    let before = observe(&mut c, &ids);
    let aborts = [
        // The first op fails: no such instance.
        (
            0,
            json!([apply("{o}:x", "pay", json!({})), create("{o}:b", 1)]),
            "INSTANCE_NOT_FOUND",
        ),
        // A middle op fails (the guard), after a create and an event that succeeded.
        (
            2,
            json!([
                create("{o}:b", 1),
                apply("{o}:b", "pay", json!({"amount": 1})),
                apply("{o}:a", "ship", json!({})),
                apply("{o}:a", "cancel", json!({})),
            ]),
            "INVALID_TRANSITION",
        ),
        // The last op fails: a read of an instance the batch deleted.
        (
            3,
            json!([
                apply("{o}:a", "pay", json!({"amount": 10})),
                create("{o}:b", 1),
                {"op": "DELETE_INSTANCE", "params": {"id": "{o}:a"}},
                get("{o}:a"),
            ]),
            "INSTANCE_NOT_FOUND",
        ),
    ];
    for (index, ops, inner) in aborts {
        let (code, d) = details(batch(&mut c, "atomic", ops));
        assert_eq!(code, "BATCH_ABORTED");
        assert_eq!(d["index"], index, "{d}");
        assert_eq!(d["error"]["code"], inner, "{d}");
        assert!(d["error"]["message"].is_string());
        assert_eq!(observe(&mut c, &ids), before, "abort at {index}");
    }
    // The next push the watcher sees is from a later single op: the aborts pushed nothing.
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "{o}:a", "event": "cancel"}),
    )
    .unwrap();
    let push = watcher.recv_push().unwrap();
    assert_eq!(push["event"], "cancel", "{push}");
    assert!(watcher
        .next_push(Some(Duration::from_millis(200)))
        .unwrap()
        .is_none());
}

#[test]
fn later_ops_see_earlier_ones_pushes_come_in_order_and_a_restart_keeps_the_batch() {
    let (mut s, _d) = Server::start("");
    let mut c = s.order_client();
    let mut watcher = s.watcher(json!({}));
    let head = wal_offset(&mut c)["offset"].as_u64().unwrap();
    let r = batch(
        &mut c,
        "atomic",
        json!([
            create("{p}:order", 10),
            apply("{p}:order", "pay", json!({"amount": 10})),
            create("{p}:pay", 1),
            apply("{p}:pay", "pay", json!({"amount": 1})),
            apply("{p}:order", "ship", json!({})),
            get("{p}:order"),
        ]),
    )
    .unwrap();
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    assert!(results.iter().all(|x| x["status"] == "ok"), "{r}");
    assert_eq!(results[0]["result"]["state"], "new");
    assert_eq!(results[1]["result"]["to_state"], "paid");
    assert_eq!(results[4]["result"]["from_state"], "paid");
    assert_eq!(results[5]["result"]["state"], "shipped");
    assert_eq!(results[5]["result"]["event_count"], 2);
    // One log record: every entry has the batch's one offset, the head moved by one.
    let at = head + 1;
    assert_eq!(wal_offset(&mut c)["offset"], at);
    for i in [0, 1, 2, 3, 4, 5] {
        assert_eq!(results[i]["result"]["wal_offset"], at, "op {i}");
    }
    // Pushes: the three events, in batch order, one after another.
    let pushes: Vec<(Value, Value)> = (0..3)
        .map(|_| {
            let p = watcher.recv_push().unwrap();
            (p["instance_id"].clone(), p["event"].clone())
        })
        .collect();
    assert_eq!(
        pushes,
        vec![
            (json!("{p}:order"), json!("pay")),
            (json!("{p}:pay"), json!("pay")),
            (json!("{p}:order"), json!("ship")),
        ]
    );
    let before = c.call("GET_HISTORY", json!({"id": "{p}:order"})).unwrap();
    s.restart_after_kill();
    let mut c = s.client();
    let order = c.call("GET_INSTANCE", json!({"id": "{p}:order"})).unwrap();
    assert_eq!(order["state"], "shipped");
    assert_eq!(order["wal_offset"], at);
    let pay = c.call("GET_INSTANCE", json!({"id": "{p}:pay"})).unwrap();
    assert_eq!(pay["state"], "paid");
    let after = c.call("GET_HISTORY", json!({"id": "{p}:order"})).unwrap();
    assert_eq!(after, before);
    // A replay from the start shows the batch's events with its offset.
    let mut w = s.client();
    w.call("WATCH_ALL", json!({"from_cursor": "0"})).unwrap();
    let replayed: Vec<Value> = (0..3).map(|_| w.recv_push().unwrap()).collect();
    assert!(
        replayed.iter().all(|p| p["wal_offset"] == at),
        "{replayed:?}"
    );
    assert_eq!(replayed[2]["event"], "ship");
}

/// Two ids that route to different shards of two, and a tagged id on each one's shard.
fn split_ids() -> (String, String) {
    let a = "{left}:x".to_string();
    let b = (0..100)
        .map(|i| format!("{{right{i}}}:y"))
        .find(|id| Routing::Hash.shard_for(id, 2) != Routing::Hash.shard_for(&a, 2))
        .unwrap();
    (a, b)
}

#[test]
fn an_atomic_batch_across_shards_is_cross_shard_and_best_effort_spans_them_in_order() {
    let (s, _d) = Server::start(&format!(
        "{TWO_SHARDS}\n[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\""
    ));
    let mut c = s.order_client();
    let (a, b) = split_ids();
    let head = wal_offset(&mut c);
    let (code, d) = details(batch(
        &mut c,
        "atomic",
        json!([create(&a, 1), create(&b, 1), create(&a, 2)]),
    ));
    assert_eq!(code, "CROSS_SHARD");
    assert_eq!(d["ids"], json!([a, b]), "{d}");
    assert_eq!(wal_offset(&mut c), head);
    assert_eq!(
        err_code(c.call("GET_INSTANCE", json!({"id": a}))),
        "INSTANCE_NOT_FOUND"
    );
    // The same ids with one tag each stay together per tag.
    let a2 = a.replace(":x", ":x2");
    assert_eq!(
        Routing::Hash.shard_for(&a, 2),
        Routing::Hash.shard_for(&a2, 2)
    );

    let before = scrape(&s);
    let ops = json!([
        create(&a, 1),
        create(&b, 5),
        apply(&b, "pay", json!({"amount": 1})),
        apply(&a, "pay", json!({"amount": 1})),
        create(&a, 1),
        get(&b),
        {"op": "GET_INSTANCE", "params": {}},
    ]);
    let r = batch(&mut c, "best_effort", ops).unwrap();
    let after = scrape(&s);
    let results = r["results"].as_array().unwrap();
    let statuses: Vec<&str> = results
        .iter()
        .map(|x| x["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["ok", "ok", "error", "ok", "error", "ok", "error"],
        "{r}"
    );
    assert_eq!(results[0]["result"]["id"], a);
    assert_eq!(results[1]["result"]["id"], b);
    assert_eq!(results[2]["error"]["code"], "GUARD_FAILED"); // a partial payment
    assert_eq!(results[3]["result"]["to_state"], "paid");
    assert_eq!(results[5]["result"]["state"], "new");
    // Each error is exactly what the op gets alone.
    let alone = |c: &mut Client, op: &str, p: Value| match c.call(op, p) {
        Err(ClientError::Server {
            code,
            message,
            details,
            ..
        }) => json!({"code": code.as_str(), "message": message, "details": details}),
        other => panic!("{other:?}"),
    };
    let exists = alone(&mut c, "CREATE_INSTANCE", create(&a, 1)["params"].clone());
    let no_id = alone(&mut c, "GET_INSTANCE", json!({}));
    for (i, want) in [(4, exists), (6, no_id)] {
        let e = &results[i]["error"];
        let got = json!({"code": e["code"], "message": e["message"], "details": e["details"]});
        assert_eq!(got, want, "op {i}");
    }
    // Each op counts under its own label, and the batch once under BATCH.
    let delta = |labels: &[(&str, &str)]| {
        let n = "svc_requests_total";
        after.get(n, labels) - before.get(n, labels)
    };
    let errors = |labels: &[(&str, &str)]| {
        let n = "svc_requests_errors_total";
        after.get(n, labels) - before.get(n, labels)
    };
    assert_eq!(delta(&[("op", "BATCH")]), 1.0);
    assert_eq!(delta(&[("op", "CREATE_INSTANCE")]), 3.0);
    assert_eq!(delta(&[("op", "APPLY_EVENT")]), 2.0);
    assert_eq!(
        errors(&[("op", "APPLY_EVENT"), ("code", "GUARD_FAILED")]),
        1.0
    );
    assert_eq!(delta(&[("op", "GET_INSTANCE")]), 2.0);
    assert_eq!(
        errors(&[("op", "CREATE_INSTANCE"), ("code", "INSTANCE_EXISTS")]),
        1.0
    );
    assert_eq!(
        errors(&[("op", "GET_INSTANCE"), ("code", "BAD_REQUEST")]),
        1.0
    );
}

#[test]
fn idempotency_keys_inside_a_batch_behave_as_for_single_ops() {
    let (s, _d) = Server::start("");
    let mut c = s.order_client();
    let keyed = |key: &str| {
        json!({"op": "APPLY_EVENT", "params": {"instance_id": "{k}:a", "event": "pay",
            "payload": {"amount": 10}, "idempotency_key": key}})
    };
    let first = batch(
        &mut c,
        "atomic",
        json!([create("{k}:a", 10), keyed("p1"), keyed("p1")]),
    )
    .unwrap();
    let r = &first["results"];
    assert_eq!(r[1]["result"]["applied"], true);
    assert_eq!(r[2]["result"]["applied"], false);
    assert_eq!(r[2]["result"]["to_state"], "paid");
    // The same key in a later batch, and as a single op: the first result, nothing applied.
    let head = wal_offset(&mut c);
    let again = batch(&mut c, "atomic", json!([keyed("p1"), get("{k}:a")])).unwrap();
    assert_eq!(again["results"][0]["result"]["applied"], false);
    assert_eq!(
        again["results"][0]["result"]["wal_offset"],
        r[1]["result"]["wal_offset"]
    );
    assert_eq!(again["results"][1]["result"]["event_count"], 1);
    assert_eq!(wal_offset(&mut c), head);
    let single = c
        .call("APPLY_EVENT", keyed("p1")["params"].clone())
        .unwrap();
    assert_eq!(single["applied"], false);
    assert_eq!(single["wal_offset"], r[1]["result"]["wal_offset"]);
}

#[test]
fn bad_batches_are_bad_requests() {
    let (s, _d) = Server::start("");
    let mut c = s.client();
    let bad = |c: &mut Client, p: Value| err_code(c.call("BATCH", p));
    assert_eq!(
        bad(&mut c, json!({"mode": "atomic", "ops": []})),
        "BAD_REQUEST"
    );
    assert_eq!(
        bad(&mut c, json!({"mode": "x", "ops": [get("a")]})),
        "BAD_REQUEST"
    );
    let put = json!({"op": "PUT_MACHINE", "params": {}});
    let (code, d) = details(batch(&mut c, "atomic", json!([get("a"), put])));
    assert_eq!((code.as_str(), &d["index"]), ("BAD_REQUEST", &json!(1)));
    let many: Vec<Value> = (0..1001).map(|_| get("a")).collect();
    assert_eq!(
        bad(&mut c, json!({"mode": "best_effort", "ops": many})),
        "BAD_REQUEST"
    );
    // The server is fine afterwards.
    c.call("PING", json!({})).unwrap();
}

/// An op's params are exactly what it takes alone (docs/protocol.md, BATCH): params that are
/// not an object get the `BAD_REQUEST` the op gets alone. serde once read `["a","cancel"]`
/// into APPLY_EVENT by position and cancelled `a` (routing it by `cancel`).
#[test]
fn an_op_whose_params_are_not_an_object_gets_the_bad_request_it_gets_alone() {
    let (s, _d) = Server::start("");
    let mut c = s.order_client();
    c.call("CREATE_INSTANCE", create("a", 1)["params"].clone())
        .unwrap();
    let op = json!({"op": "APPLY_EVENT", "params": ["a", "cancel"]});
    let r = batch(&mut c, "best_effort", json!([op])).unwrap();
    let error = &r["results"][0]["error"];
    assert_eq!(error["code"], "BAD_REQUEST", "{r}");
    assert_eq!(error["message"], "field `params` must be an object", "{r}");
    let (code, d) = details(batch(&mut c, "atomic", json!([op])));
    assert_eq!((code.as_str(), &d["index"]), ("BATCH_ABORTED", &json!(0)));
    assert_eq!(d["error"]["code"], "BAD_REQUEST", "{d}");
    assert_eq!(
        err_code(c.call("APPLY_EVENT", json!(["a", "cancel"]))),
        "BAD_REQUEST"
    );
    let a = c.call("GET_INSTANCE", json!({"id": "a"})).unwrap();
    assert_eq!(a["state"], "new", "{a}");
}

const TAGS: usize = 4;
const MEMBERS: usize = 4;

/// Pipelines atomic batches, each moving every member of one tag to the same `n`; records the
/// highest `n` acknowledged per tag. Stops at the first I/O error (the server was killed).
fn batch_writer(
    addr: std::net::SocketAddr,
    tag: usize,
    start: u64,
    acked: Arc<Mutex<HashMap<usize, u64>>>,
    stop: Arc<AtomicBool>,
) {
    let request = |n| {
        let ops: Vec<Value> = (0..MEMBERS)
            .map(|m| {
                json!({"op": "APPLY_EVENT", "params": {"instance_id": member(tag, m),
                    "event": "inc", "payload": {"n": n}}})
            })
            .collect();
        ("BATCH", json!({"mode": "atomic", "ops": ops}))
    };
    write_windowed(addr, "batch-writer", 4, start, &stop, request, |n, _| {
        acked.lock().unwrap().insert(tag, n);
    });
}

fn member(tag: usize, m: usize) -> String {
    format!("{{t{tag}}}:m{m}")
}

#[test]
fn sigkill_during_atomic_batches_leaves_each_batch_whole_or_absent() {
    let dir = temp_dir();
    let mut s = Server::start_in(dir.path(), TWO_SHARDS).unwrap();
    let mut c = s.client();
    let def = json!({"states": ["on"], "initial": "on",
        "transitions": [{"from": "on", "event": "inc", "to": "on"}]});
    c.call(
        "PUT_MACHINE",
        json!({"machine": "counter", "version": 1, "definition": def}),
    )
    .unwrap();
    for t in 0..TAGS {
        for m in 0..MEMBERS {
            c.call(
                "CREATE_INSTANCE",
                json!({"machine": "counter", "version": 1, "id": member(t, m),
                    "context": {"n": 0}}),
            )
            .unwrap();
        }
    }
    let mut floor: HashMap<usize, u64> = HashMap::new();
    for round in 0..3 {
        let acked = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..TAGS)
            .map(|t| {
                let (acked, stop) = (acked.clone(), stop.clone());
                let start = floor.get(&t).copied().unwrap_or(0) + 1_000_000 * round;
                let addr = s.addr;
                std::thread::spawn(move || batch_writer(addr, t, start, acked, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        s.kill();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        s.restart_after_kill();
        let mut c = s.client();
        for t in 0..TAGS {
            let values: Vec<(u64, u64)> = (0..MEMBERS)
                .map(|m| {
                    let i = c.call("GET_INSTANCE", json!({"id": member(t, m)})).unwrap();
                    (
                        i["context"]["n"].as_u64().unwrap(),
                        i["event_count"].as_u64().unwrap(),
                    )
                })
                .collect();
            // Whole or absent: every member of the tag saw the same batches.
            assert!(
                values.iter().all(|v| *v == values[0]),
                "round {round}, tag {t}: {values:?}"
            );
            let acked_n = acked.lock().unwrap().get(&t).copied().unwrap_or(0);
            assert!(
                values[0].0 >= acked_n,
                "round {round}, tag {t}: acknowledged {acked_n}, recovered {values:?}"
            );
            floor.insert(t, values[0].0);
        }
    }
    assert!(
        floor.values().all(|n| *n > 0),
        "no batch got through: {floor:?}"
    );
}
