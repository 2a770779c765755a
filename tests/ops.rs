//! Every op's success path and the engine's error codes, against the real server with several
//! shards (so routing and fan-out are exercised).

mod common;

use common::*;
use serde_json::{json, Value};

const TWO_SHARDS: &str = "[shards]\ncount = 2";

#[test]
fn machine_definition_ops() {
    let (s, _d) = Server::start(TWO_SHARDS);
    let mut c = s.client();
    let def = order_definition();
    let r = c
        .call(
            "PUT_MACHINE",
            json!({"machine":"order","version":1,"definition":def}),
        )
        .unwrap();
    assert_eq!(r["created"], true);
    assert_eq!(r["machine"], "order");
    let checksum = r["checksum"].as_str().unwrap().to_string();
    let again = c.call(
        "PUT_MACHINE",
        json!({"machine":"order","version":1,"definition":def}),
    );
    assert_eq!(
        again.unwrap()["created"],
        false,
        "identical definition is idempotent"
    );
    let mut other = def.clone();
    other["initial"] = json!("paid");
    let r = c.call(
        "PUT_MACHINE",
        json!({"machine":"order","version":1,"definition":other}),
    );
    assert_eq!(err_code(r), "MACHINE_VERSION_EXISTS");
    c.call(
        "PUT_MACHINE",
        json!({"machine":"order","version":2,"definition":other}),
    )
    .unwrap();

    let g = c
        .call("GET_MACHINE", json!({"machine":"order","version":1}))
        .unwrap();
    assert_eq!(g["checksum"], checksum.as_str());
    assert_eq!(g["definition"]["initial"], "new");
    let latest = c.call("GET_MACHINE", json!({"machine":"order"})).unwrap();
    assert_eq!(latest["version"], 2);
    assert_eq!(
        err_code(c.call("GET_MACHINE", json!({"machine":"nope"}))),
        "MACHINE_NOT_FOUND"
    );
    let list = c.call("LIST_MACHINES", json!({})).unwrap();
    assert_eq!(
        list["machines"],
        json!([{"machine":"order","versions":[1,2]}])
    );
}

#[test]
fn invalid_definitions_are_refused_with_reason() {
    let (s, _d) = Server::start("");
    let mut c = s.client();
    let bad = [
        json!({"states":["a"],"initial":"zz","transitions":[]}),
        json!({"states":["a","b"],"initial":"a","transitions":[{"from":"a","event":"e","to":"q"}]}),
        json!({"states":["a","b"],"initial":"a","transitions":[
            {"from":"a","event":"e","to":"b"},{"from":"a","event":"e","to":"a"}]}),
        json!({"states":["a","b"],"initial":"a","transitions":[
            {"from":"a","event":"e","to":"b","guard":"ctx.x >"}]}),
        json!({"states":["a","b"],"initial":"a","final":["b"],"transitions":[
            {"from":"b","event":"e","to":"a"}]}),
    ];
    for (i, def) in bad.iter().enumerate() {
        let r = c.call(
            "PUT_MACHINE",
            json!({"machine":"m","version":i+1,"definition":def}),
        );
        match r {
            Err(ClientError::Server { code, details, .. }) => {
                assert_eq!(code, "INVALID_DEFINITION", "case {i}");
                assert!(details["reason"].is_string(), "case {i}: {details}");
            }
            other => panic!("case {i}: {other:?}"),
        }
    }
}

#[test]
fn definitions_are_visible_on_every_shard() {
    let (s, _d) = Server::start("[shards]\ncount = 4");
    let mut c = s.order_client();
    // 64 ids spread over all four shards: each create needs the definition on its shard.
    for i in 0..64 {
        create_order(&mut c, &format!("spread-{i}"), 1);
    }
}

#[test]
fn instance_lifecycle() {
    let (s, _d) = Server::start(TWO_SHARDS);
    let mut c = s.order_client();
    let r = create_order(&mut c, "o1", 10);
    assert_eq!(r["state"], "new");
    assert_eq!(r["context"], json!({"total": 10}));
    assert!(r["wal_offset"].as_u64().unwrap() >= 1);
    assert_eq!(
        err_code(c.call(
            "CREATE_INSTANCE",
            json!({"machine":"order","version":1,"id":"o1","context":{}})
        )),
        "INSTANCE_EXISTS"
    );
    assert_eq!(
        err_code(c.call(
            "CREATE_INSTANCE",
            json!({"machine":"order","version":9,"id":"o2","context":{}})
        )),
        "MACHINE_NOT_FOUND"
    );
    assert_eq!(
        err_code(c.call(
            "CREATE_INSTANCE",
            json!({"machine":"order","version":1,"id":"","context":{}})
        )),
        "BAD_REQUEST"
    );
    // Aliases of docs/protocol.md, "Instances and events".
    let r = c.call(
        "CREATE_INSTANCE",
        json!({"machine":"order","version":1,"instance_id":"o2","initial_ctx":{"total":1}}),
    );
    assert_eq!(r.unwrap()["id"], "o2");

    let g = c.call("GET_INSTANCE", json!({"id":"o1"})).unwrap();
    for k in [
        "id",
        "machine",
        "version",
        "state",
        "context",
        "created_at",
        "updated_at",
        "event_count",
        "wal_offset",
    ] {
        assert!(!g[k].is_null(), "GET_INSTANCE lacks {k}: {g}");
    }
    assert_eq!(
        c.call("GET_INSTANCE", json!({"instance_id":"o2"})).unwrap()["id"],
        "o2"
    );

    let a = c
        .call(
            "APPLY_EVENT",
            json!({"instance_id":"o1","event":"pay","payload":{"amount":12,"by":"card"}}),
        )
        .unwrap();
    assert_eq!(
        (a["from_state"].as_str(), a["to_state"].as_str()),
        (Some("new"), Some("paid"))
    );
    assert_eq!(
        a["context"],
        json!({"total":10,"amount":12,"by":"card"}),
        "payload merged"
    );
    assert_eq!(a["applied"], true);

    let d = c.call("DELETE_INSTANCE", json!({"id":"o2"})).unwrap();
    assert_eq!(d["deleted"], true);
    assert_eq!(
        err_code(c.call("GET_INSTANCE", json!({"id":"o2"}))),
        "INSTANCE_NOT_FOUND"
    );
    assert_eq!(
        err_code(c.call("DELETE_INSTANCE", json!({"id":"o2"}))),
        "INSTANCE_NOT_FOUND"
    );
}

#[test]
fn event_errors_guards_and_expectations() {
    let (s, _d) = Server::start(TWO_SHARDS);
    let mut c = s.order_client();
    create_order(&mut c, "e1", 10);
    let apply = |c: &mut Client, p: Value| c.call("APPLY_EVENT", p);
    assert_eq!(
        err_code(apply(
            &mut c,
            json!({"instance_id":"e1","event":"pay",
        "payload":{"amount":3}})
        )),
        "GUARD_FAILED"
    );
    assert_eq!(
        err_code(apply(&mut c, json!({"instance_id":"e1","event":"ship"}))),
        "INVALID_TRANSITION"
    );
    assert_eq!(
        err_code(apply(&mut c, json!({"instance_id":"zz","event":"ship"}))),
        "INSTANCE_NOT_FOUND"
    );
    match apply(
        &mut c,
        json!({"instance_id":"e1","event":"cancel","expected_state":"paid"}),
    ) {
        Err(ClientError::Server { code, details, .. }) => {
            assert_eq!(code, "CONFLICT");
            assert_eq!(details["actual_state"], "new");
        }
        other => panic!("{other:?}"),
    }
    let off = c.call("GET_INSTANCE", json!({"id":"e1"})).unwrap()["wal_offset"]
        .as_u64()
        .unwrap();
    assert_eq!(
        err_code(apply(
            &mut c,
            json!({"instance_id":"e1","event":"cancel",
        "expected_wal_offset": off + 100})
        )),
        "CONFLICT"
    );
    let ok = apply(
        &mut c,
        json!({"instance_id":"e1","event":"pay","payload":{"amount":10},
        "expected_state":"new","expected_wal_offset":off}),
    )
    .unwrap();
    assert_eq!(ok["to_state"], "paid");
    assert_eq!(
        err_code(apply(
            &mut c,
            json!({"instance_id":"e1","event":"pay","bogus":1})
        )),
        "BAD_REQUEST"
    );
    apply(&mut c, json!({"instance_id":"e1","event":"ship"})).unwrap();
    assert_eq!(
        err_code(apply(&mut c, json!({"instance_id":"e1","event":"cancel"}))),
        "INVALID_TRANSITION",
        "nothing leaves a final state"
    );
}

#[test]
fn idempotency_keys_replay_the_first_result() {
    let (s, _d) = Server::start(TWO_SHARDS);
    let mut c = s.order_client();
    let p = json!({"machine":"order","version":1,"id":"k1","context":{"total":1},
        "idempotency_key":"create-k1"});
    let first = c.call("CREATE_INSTANCE", p.clone()).unwrap();
    let again = c.call("CREATE_INSTANCE", p).unwrap();
    assert_eq!(again["applied"], false);
    assert_eq!(again["wal_offset"], first["wal_offset"]);
    let ev =
        json!({"instance_id":"k1","event":"pay","payload":{"amount":5},"idempotency_key":"p1"});
    let a = c.call("APPLY_EVENT", ev.clone()).unwrap();
    assert_eq!(a["applied"], true);
    let b = c.call("APPLY_EVENT", ev).unwrap();
    assert_eq!(b["applied"], false);
    assert_eq!(b["wal_offset"], a["wal_offset"]);
    assert_eq!(b["to_state"], "paid");
    let g = c.call("GET_INSTANCE", json!({"id":"k1"})).unwrap();
    assert_eq!(g["event_count"], 1, "the replay applied nothing");
}

#[test]
fn history_lists_applied_events_in_order() {
    let (s, _d) = Server::start("");
    let mut c = s.order_client();
    create_order(&mut c, "h1", 1);
    c.call(
        "APPLY_EVENT",
        json!({"instance_id":"h1","event":"pay","payload":{"amount":1}}),
    )
    .unwrap();
    for _ in 0..3 {
        c.call("APPLY_EVENT", json!({"instance_id":"h1","event":"touch"}))
            .unwrap();
    }
    let h = c.call("GET_HISTORY", json!({"id":"h1"})).unwrap();
    let ev = h["events"].as_array().unwrap();
    assert_eq!(ev.len(), 4);
    assert_eq!(ev[0]["event"], "pay");
    assert_eq!(ev[0]["from_state"], "new");
    assert_eq!(ev[3]["to_state"], "paid");
    let page = c
        .call("GET_HISTORY", json!({"id":"h1","from":2,"limit":2}))
        .unwrap();
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    assert_eq!(page["events"][0]["seq"], 2);
    assert_eq!(
        err_code(c.call("GET_HISTORY", json!({"id":"none"}))),
        "INSTANCE_NOT_FOUND"
    );
}

#[test]
fn list_instances_paginates_across_shards_with_filters() {
    let (s, _d) = Server::start("[shards]\ncount = 3");
    let mut c = s.order_client();
    for i in 0..25 {
        create_order(&mut c, &format!("l{i:02}"), 1);
        if i % 5 == 0 {
            c.call(
                "APPLY_EVENT",
                json!({"instance_id":format!("l{i:02}"),"event":"cancel"}),
            )
            .unwrap();
        }
    }
    let mut seen = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let mut p = json!({"limit": 7, "machine": "order"});
        if !cursor.is_null() {
            p["cursor"] = cursor.clone();
        }
        let page = c.call("LIST_INSTANCES", p).unwrap();
        for i in page["instances"].as_array().unwrap() {
            seen.push(i["id"].as_str().unwrap().to_string());
        }
        cursor = page["next_cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("l{i:02}")).collect();
    assert_eq!(seen, expected, "every instance once, in id order");
    let cancelled = c
        .call("LIST_INSTANCES", json!({"state":"cancelled"}))
        .unwrap();
    assert_eq!(cancelled["instances"].as_array().unwrap().len(), 5);
    let none = c
        .call("LIST_INSTANCES", json!({"machine":"other"}))
        .unwrap();
    assert_eq!(none["instances"], json!([]));
    assert_eq!(
        err_code(c.call("LIST_INSTANCES", json!({"limit": 0}))),
        "BAD_REQUEST"
    );
    assert_eq!(
        err_code(c.call("LIST_INSTANCES", json!({"cursor": "xyz"}))),
        "BAD_REQUEST"
    );
}
