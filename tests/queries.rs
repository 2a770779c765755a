//! FIND_INSTANCES and LIST_INSTANCES from the shards' indexes, against the real binary
//! (docs/queries.md): paging under concurrent writes against what the test knows, a refusal
//! that names the index to declare, and indexes identical after SIGKILL + restart and on a
//! replica.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{err_code, fixed_port, Client, Server};
use serde_json::{json, Value};

/// Accounts with two declared indexes; `set` merges its payload and stays open.
fn account_definition() -> Value {
    json!({
        "states": ["open", "held", "closed"],
        "initial": "open",
        "final": ["closed"],
        "transitions": [
            {"from": ["open", "held"], "event": "set", "to": "open"},
            {"from": "open", "event": "hold", "to": "held"},
            {"from": ["open", "held"], "event": "close", "to": "closed"}
        ],
        "indexes": ["ctx.customer", "ctx.total"]
    })
}

fn put_accounts(c: &mut Client) {
    let def = account_definition();
    c.call(
        "PUT_MACHINE",
        json!({"machine": "acct", "version": 1, "definition": def}),
    )
    .expect("PUT_MACHINE acct");
}

fn open(c: &mut Client, id: &str, customer: &str, total: i64) {
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "acct", "version": 1, "id": id,
               "context": {"customer": customer, "total": total}}),
    )
    .unwrap_or_else(|e| panic!("create {id}: {e}"));
}

/// Every page of FIND `params` (limit `limit`), walked by cursor: the items in order.
fn find_all(c: &mut Client, params: Value, limit: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let mut p = params.clone();
        p["limit"] = json!(limit);
        if !cursor.is_null() {
            p["cursor"] = cursor.clone();
        }
        let page = c.call("FIND_INSTANCES", p).expect("FIND_INSTANCES");
        let items = page["instances"].as_array().expect("instances").clone();
        assert!(items.len() as u64 <= limit, "a page holds at most limit");
        out.extend(items);
        cursor = page["next_cursor"].clone();
        if cursor.is_null() {
            return out;
        }
    }
}

fn ids(items: &[Value]) -> Vec<String> {
    (items.iter())
        .map(|i| i["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn find_pages_each_match_once_while_writers_move_instances_in_and_out() {
    let (s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = s.client();
    put_accounts(&mut c);
    // Stable instances keep their customer; movers flip between c-1 and c-2 throughout.
    let stable: Vec<(String, &str)> = (0..120)
        .map(|i| (format!("s{i:03}"), if i % 3 == 0 { "c-1" } else { "c-2" }))
        .collect();
    for (id, customer) in &stable {
        open(&mut c, id, customer, 1);
    }
    let movers: Vec<String> = (0..40).map(|i| format!("m{i:03}")).collect();
    for id in &movers {
        open(&mut c, id, "c-1", 1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, movers, mut w) = (stop.clone(), movers.clone(), s.client());
        std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let id = &movers[n % movers.len()];
                let customer = if (n / movers.len()) % 2 == 0 {
                    "c-2"
                } else {
                    "c-1"
                };
                w.call(
                    "APPLY_EVENT",
                    json!({"instance_id": id, "event": "set", "payload": {"customer": customer}}),
                )
                .expect("set");
                n += 1;
            }
            n
        })
    };
    let want: Vec<String> = (stable.iter())
        .filter(|(_, c)| *c == "c-1")
        .map(|(id, _)| id.clone())
        .collect();
    let params =
        json!({"machine": "acct", "where": {"ctx.customer": "c-1"}, "include_context": true});
    for _walk in 0..15 {
        let items = find_all(&mut c, params.clone(), 7);
        let got = ids(&items);
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(got, sorted, "pages in id order, no id twice");
        for item in &items {
            assert_eq!(item["context"]["customer"], "c-1", "{item}");
        }
        let stable_got: Vec<String> = got.into_iter().filter(|i| i.starts_with('s')).collect();
        assert_eq!(stable_got, want, "every stable match exactly once");
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().expect("writer");
    assert!(writes > 0, "the writer ran");
    // At rest, the movers are where the last writes left them.
    let at_rest = ids(&find_all(&mut c, params, 1000));
    let mut model: BTreeSet<String> = want.iter().cloned().collect();
    for (k, id) in movers.iter().enumerate() {
        let last = (0..writes).rev().find(|n| n % movers.len() == k);
        let customer = match last {
            Some(n) if (n / movers.len()) % 2 == 0 => "c-2",
            _ => "c-1",
        };
        if customer == "c-1" {
            model.insert(id.clone());
        }
    }
    assert_eq!(at_rest, model.into_iter().collect::<Vec<_>>());
}

#[test]
fn conditions_combine_and_an_undeclared_index_is_named() {
    let (s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = s.client();
    put_accounts(&mut c);
    for (i, (customer, total)) in [("c-1", 5), ("c-1", 12), ("c-2", 5), ("c-3", 7)]
        .into_iter()
        .enumerate()
    {
        open(&mut c, &format!("a{i}"), customer, total);
    }
    c.call("APPLY_EVENT", json!({"instance_id": "a1", "event": "hold"}))
        .unwrap();
    let find = |c: &mut Client, p: Value| ids(&find_all(c, p, 100));
    let p = json!({"machine": "acct", "where": {"ctx.customer": {"in": ["c-1", "c-3"]}}});
    assert_eq!(find(&mut c, p), ["a0", "a1", "a3"]);
    let p = json!({"machine": "acct", "where": {"ctx.total": {"gte": 5, "lt": 7.0}}});
    assert_eq!(find(&mut c, p), ["a0", "a2"]);
    let p = json!({"machine": "acct", "where": {"ctx.customer": "c-1", "ctx.total": {"gt": 5}}});
    assert_eq!(find(&mut c, p), ["a1"]);
    let p = json!({"machine": "acct", "state": "open", "where": {"ctx.customer": "c-1"}});
    assert_eq!(find(&mut c, p), ["a0"]);
    let page = c
        .call(
            "FIND_INSTANCES",
            json!({"machine": "acct", "where": {"ctx.total": 12}}),
        )
        .unwrap();
    assert_eq!(page["versions"], json!([1]));
    assert!(page["instances"][0].get("context").is_none());
    let err = c
        .call(
            "FIND_INSTANCES",
            json!({"machine": "acct", "where": {"ctx.colour": "red"}}),
        )
        .unwrap_err();
    assert_eq!(err.code(), Some("BAD_REQUEST"));
    assert!(err.to_string().contains("ctx.colour"), "{err}");
    for bad in [
        json!({"machine": "acct", "where": {}}),
        json!({"machine": "acct", "where": {"ctx.total": {"gt": 1, "gte": 2}}}),
        json!({"machine": "acct", "where": {"ctx.total": {"lt": true}}}),
        json!({"machine": "acct", "where": {"ctx.total": 1}, "limit": 1001}),
    ] {
        assert_eq!(
            err_code(c.call("FIND_INSTANCES", bad.clone())),
            "BAD_REQUEST",
            "{bad}"
        );
    }
    // The Rust client's pages iterator walks the cursor to the end.
    let q = smdb_client::FindQuery {
        limit: Some(1),
        ..smdb_client::FindQuery::new("acct", "ctx.customer", json!("c-1"))
    };
    let pages: Vec<smdb_client::FoundPage> = c.find_pages(q).collect::<Result<_, _>>().unwrap();
    let walked: Vec<&str> = (pages.iter())
        .flat_map(|p| p.instances.iter().map(|i| i.id.as_str()))
        .collect();
    assert_eq!((pages.len(), walked), (2, vec!["a0", "a1"]));
    let unknown = json!({"machine": "nope", "where": {"ctx.total": 1}});
    assert_eq!(
        err_code(c.call("FIND_INSTANCES", unknown)),
        "MACHINE_NOT_FOUND"
    );
    let bad_def = json!({"machine": "x", "version": 1, "definition":
        {"states": ["a"], "initial": "a", "indexes": ["total"]}});
    assert_eq!(
        err_code(c.call("PUT_MACHINE", bad_def)),
        "INVALID_DEFINITION"
    );
}

/// FIND and LIST answers the test compares across a restart and a replica.
fn answers(c: &mut Client) -> Vec<Vec<String>> {
    let finds = [
        json!({"machine": "acct", "where": {"ctx.customer": "c-1"}}),
        json!({"machine": "acct", "where": {"ctx.total": {"gte": 3}}}),
        json!({"machine": "acct", "state": "held", "where": {"ctx.customer": {"in": ["c-0", "c-2"]}}}),
    ];
    let mut out: Vec<Vec<String>> = finds.into_iter().map(|p| ids(&find_all(c, p, 9))).collect();
    for state in ["open", "held", "closed"] {
        let page = c
            .call(
                "LIST_INSTANCES",
                json!({"machine": "acct", "state": state, "limit": 1000}),
            )
            .unwrap();
        out.push(ids(page["instances"].as_array().unwrap()));
    }
    out
}

/// 200 accounts moved about: held, closed, re-assigned, a few deleted.
fn fill_and_move(c: &mut Client) {
    put_accounts(c);
    for i in 0..200 {
        open(c, &format!("x{i:03}"), &format!("c-{}", i % 4), i % 6);
        let id = format!("x{i:03}");
        let event = |e: &str, p: Value| json!({"instance_id": id, "event": e, "payload": p});
        let (op, params) = match i % 5 {
            0 => ("APPLY_EVENT", event("hold", json!({}))),
            1 => ("APPLY_EVENT", event("close", json!({}))),
            2 => (
                "APPLY_EVENT",
                event("set", json!({"customer": "c-1", "total": 9})),
            ),
            3 if i % 2 == 1 => ("DELETE_INSTANCE", json!({"id": id})),
            _ => continue,
        };
        c.call(op, params)
            .unwrap_or_else(|e| panic!("{op} {id}: {e}"));
    }
}

#[test]
fn indexes_are_the_same_after_sigkill_and_restart() {
    let (mut s, _d) = Server::start("[shards]\ncount = 2\n[storage]\nsnapshot_every_entries = 150");
    let mut c = s.client();
    fill_and_move(&mut c);
    let before = answers(&mut c);
    assert!(before.iter().all(|a| !a.is_empty()), "{before:?}");
    s.restart_after_kill();
    let mut c = s.client();
    assert_eq!(answers(&mut c), before);
}

#[test]
fn a_replica_answers_finds_as_its_primary_does() {
    let (p, _pd) = Server::start(&fixed_port(
        "[shards]\ncount = 2\n[replication]\nrole = \"primary\"\nheartbeat_ms = 200",
    ));
    let mut c = p.client();
    fill_and_move(&mut c);
    let want = answers(&mut c);
    let cfg = format!(
        "[replication]\nrole = \"replica\"\nupstream = \"{}\"\nreplica_id = \"r1\"\n\
         heartbeat_ms = 200\nreconnect_max_ms = 500",
        p.addr
    );
    let (r, _rd) = Server::start(&cfg);
    common::lifecycle::wait_until(Duration::from_secs(30), || {
        let got = r.client().call(
            "FIND_INSTANCES",
            json!({"machine": "acct", "where": {"ctx.total": 0}}),
        );
        match got.is_ok() && answers(&mut r.client()) == want {
            true => Ok(()),
            false => Err(format!("the replica's answers never matched:\n{}", r.log())),
        }
    });
}

#[test]
fn scan_filters_on_any_path_and_pages_to_the_end() {
    let (s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = s.client();
    put_accounts(&mut c);
    for i in 0..60 {
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "acct", "version": 1, "id": format!("k{i:02}"),
                   "context": {"note": {"level": i % 4}}}),
        )
        .unwrap();
    }
    let want: Vec<String> = (0..60)
        .filter(|i| i % 4 >= 2)
        .map(|i| format!("k{i:02}"))
        .collect();
    let mut got = Vec::new();
    let mut cursor = Value::Null;
    let mut calls = 0;
    loop {
        let mut p = json!({"machine": "acct", "where": {"ctx.note.level": {"gte": 2}}, "limit": 4});
        if !cursor.is_null() {
            p["cursor"] = cursor.clone();
        }
        let page = c.call("SCAN_INSTANCES", p).unwrap();
        let items = page["instances"].as_array().unwrap();
        assert!(items.len() <= 4);
        assert!(page["examined"].as_u64().unwrap() <= 2 * 10_000);
        got.extend(ids(items));
        cursor = page["next_cursor"].clone();
        calls += 1;
        if cursor.is_null() {
            break;
        }
    }
    assert_eq!(got, want, "every match once, in id order, in {calls} calls");
    let all = c
        .call("SCAN_INSTANCES", json!({"machine": "acct", "limit": 1000}))
        .unwrap();
    assert_eq!(all["instances"].as_array().unwrap().len(), 60);
    assert_eq!(all["next_cursor"], Value::Null);
}

#[test]
fn the_cli_finds_and_scans_with_where_arguments() {
    let (s, _d) = Server::start("");
    let mut c = s.client();
    put_accounts(&mut c);
    for (i, total) in [3, 10, 12].into_iter().enumerate() {
        open(&mut c, &format!("a{i}"), "c-9", total);
    }
    let run = |args: &[&str]| {
        let (code, stdout, stderr) =
            common::run::output_with_stdin(common::run::cli_at(&s.addr.to_string()).args(args), "");
        assert_eq!(code, 0, "{args:?}: {stderr}");
        serde_json::from_str::<Value>(stdout.trim()).expect("JSON")
    };
    let found = run(&[
        "--json",
        "find",
        "acct",
        "-w",
        "ctx.customer=c-9",
        "-w",
        "ctx.total>=10",
        "--all",
    ]);
    assert_eq!(ids(found["instances"].as_array().unwrap()), ["a1", "a2"]);
    let scanned = run(&[
        "--json",
        "scan",
        "acct",
        "-w",
        "ctx.total<10",
        "--all",
        "--context",
    ]);
    assert_eq!(ids(scanned["instances"].as_array().unwrap()), ["a0"]);
    assert_eq!(scanned["instances"][0]["context"]["total"], 3);
}

#[test]
fn http_get_instances_with_where_finds_and_with_scan_scans() {
    let (s, _d) = Server::start("[http]\nbind_addr = \"127.0.0.1:0\"");
    let mut c = s.client();
    put_accounts(&mut c);
    for (i, (customer, total)) in [("c-1", 5), ("c-1", 12), ("c-2", 12)]
        .into_iter()
        .enumerate()
    {
        open(&mut c, &format!("h{i}"), customer, total);
    }
    let mut h = common::http::Http::connect(s.http_addr.expect("http listener"));
    let r = h.get("/instances?machine=acct&where.ctx.customer=c-1&where.ctx.total.gte=10");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(ids(r.json()["instances"].as_array().unwrap()), ["h1"]);
    assert_eq!(r.json()["versions"], json!([1]));
    let r =
        h.get("/instances?machine=acct&where.ctx.customer.in=c-1,c-2&limit=2&include_context=true");
    assert_eq!(ids(r.json()["instances"].as_array().unwrap()), ["h0", "h1"]);
    assert_eq!(r.json()["instances"][0]["context"]["total"], 5);
    assert!(r.json()["next_cursor"].is_string());
    let r = h.get("/instances?machine=acct&scan=true&where.ctx.total=12");
    assert_eq!(ids(r.json()["instances"].as_array().unwrap()), ["h1", "h2"]);
    h.get("/instances?machine=acct&where.ctx.colour=red")
        .assert_error(400, "BAD_REQUEST");
    h.get("/instances?machine=acct&where.ctx.a=1&bogus=1")
        .assert_error(400, "BAD_REQUEST");
    // Without where. or scan it is LIST, as before.
    let r = h.get("/instances?machine=acct&state=open");
    assert_eq!(
        ids(r.json()["instances"].as_array().unwrap()),
        ["h0", "h1", "h2"]
    );
}
