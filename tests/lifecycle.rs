//! The lifecycle of instances against the real binary (docs/lifecycle.md): MIGRATE_INSTANCES
//! with a dry run, a state mapping, skipped states, re-armed timers, pushes and idempotent
//! re-runs; retention that deletes finished instances, surviving SIGKILL and reaching a
//! replica; DELETE_INSTANCES in slices.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::lifecycle::{self, drive, total, wait_until};
use common::scrape::scrape;
use common::{err_code, fixed_port, Client, Server};

const METRICS: &str = "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"";
use serde_json::{json, Value};

/// The `job` machine of `common::lifecycle`, whose v2 times out an active instance after
/// 400 ms and can finish from `new` or `active`.
fn put_versions(c: &mut Client) {
    lifecycle::put_job(
        c,
        json!([{"from": "active", "event": "expire", "to": "done", "after_ms": 400},
               {"from": ["new", "active"], "event": "finish", "to": "done"}]),
    );
}

fn get(c: &mut Client, id: &str) -> Value {
    c.call("GET_INSTANCE", json!({ "id": id }))
        .unwrap_or_else(|e| panic!("GET_INSTANCE {id}: {e}"))
}

/// Milliseconds into the day of an RFC 3339 `...THH:MM:SS.mmmZ` time.
fn ms_of_day(at: &Value) -> i64 {
    let t = at
        .as_str()
        .and_then(|s| s.split('T').nth(1))
        .expect("a time");
    let num = |r: std::ops::Range<usize>| t[r].parse::<i64>().expect("digits");
    ((num(0..2) * 60 + num(3..5)) * 60 + num(6..8)) * 1000 + num(9..12)
}

#[test]
fn migration_dry_runs_maps_skips_rearms_timers_and_reruns_idempotently() {
    let (s, _d) = Server::start(&format!("[shards]\ncount = 2\n{METRICS}"));
    let mut c = s.client();
    put_versions(&mut c);
    lifecycle::place(&mut c, lifecycle::TENS);
    let mut watcher = s.watcher(json!({"machines": ["job"]}));
    let plan = json!({"machine": "job", "from_version": 1, "to_version": 2,
                      "states": {"open": "active"}});

    // A dry run reports per state and changes nothing.
    let mut dry = plan.clone();
    dry["dry_run"] = json!(true);
    let r = c.call("MIGRATE_INSTANCES", dry).expect("dry run");
    assert_eq!(r["would_migrate"], json!({"new": 10, "open": 10}), "{r}");
    assert_eq!(r["skipped"], json!({"no_state": 10}), "{r}");
    assert_eq!(get(&mut c, "o03")["version"], 1);

    // Bad plans are refused before anything moves.
    let mut typo = plan.clone();
    typo["states"] = json!({"open": "actve"});
    assert_eq!(err_code(c.call("MIGRATE_INSTANCES", typo)), "BAD_REQUEST");
    let mut same = plan.clone();
    same["to_version"] = json!(1);
    assert_eq!(err_code(c.call("MIGRATE_INSTANCES", same)), "BAD_REQUEST");
    let mut unknown = plan.clone();
    unknown["to_version"] = json!(9);
    assert_eq!(
        err_code(c.call("MIGRATE_INSTANCES", unknown)),
        "MACHINE_NOT_FOUND"
    );

    // Driven by cursor, 7 examined per call: every instance counted once.
    let replies = drive(&mut c, "MIGRATE_INSTANCES", plan.clone(), 7);
    assert!(replies.len() >= 30 / 7, "{replies:?}");
    assert_eq!(total(&replies, "migrated", None), 20);
    assert_eq!(total(&replies, "skipped", Some("no_state")), 10);
    assert_eq!(replies.last().unwrap()["remaining"], 0);
    let m = scrape(&s);
    assert_eq!(
        m.get("svc_migrated_instances_total", &[("machine", "job")]),
        20.0
    );

    let o = get(&mut c, "o03");
    assert_eq!(o["version"], 2, "{o}");
    assert!(o["state"] == "active" || o["state"] == "done", "{o}");
    let n = get(&mut c, "n03");
    assert_eq!(
        (n["version"].as_u64(), n["state"].as_str()),
        (Some(2), Some("new"))
    );
    let p = get(&mut c, "p03");
    assert_eq!(
        (p["version"].as_u64(), p["state"].as_str()),
        (Some(1), Some("paused"))
    );

    // The history keeps its events and gains one `migrated` item.
    let h = c
        .call("GET_HISTORY", json!({"id": "o03"}))
        .expect("history");
    let events = h["events"].as_array().unwrap();
    assert_eq!(events[0]["event"], "go");
    let migrated: Vec<&Value> = events.iter().filter(|e| e["type"] == "migrated").collect();
    assert_eq!(migrated.len(), 1, "{h}");
    assert_eq!(
        (
            migrated[0]["from_version"].clone(),
            migrated[0]["to_version"].clone()
        ),
        (json!(1), json!(2))
    );
    assert_eq!(
        (
            migrated[0]["from_state"].as_str(),
            migrated[0]["to_state"].as_str()
        ),
        (Some("open"), Some("active"))
    );

    // Re-armed from v2: every migrated `active` instance expires, once, not before 400 ms
    // after it entered the state.
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..10 {
        let id = format!("o{i:02}");
        while get(&mut c, &id)["state"] != "done" {
            assert!(
                Instant::now() < deadline,
                "{id} never expired: {}",
                get(&mut c, &id)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let h = c.call("GET_HISTORY", json!({ "id": id })).expect("history");
        let items = h["events"].as_array().unwrap();
        let fired: Vec<&Value> = items.iter().filter(|e| e["event"] == "expire").collect();
        assert_eq!(fired.len(), 1, "{h}");
        let entered = items.iter().find(|e| e["event"] == "go").expect("go");
        let waited = ms_of_day(&fired[0]["at"]) - ms_of_day(&entered["at"]);
        assert!(waited.rem_euclid(86_400_000) >= 400, "fired early: {h}");
    }

    // Re-running moves nothing more and skips the same instances.
    let again = drive(&mut c, "MIGRATE_INSTANCES", plan.clone(), 1000);
    assert_eq!(total(&again, "migrated", None), 0);
    assert_eq!(total(&again, "skipped", Some("no_state")), 10);

    // One instance by id, with a mapping for its state.
    let one = json!({"machine": "job", "from_version": 1, "to_version": 2,
                     "states": {"paused": "active"}, "where": {"id": "p05"}});
    let r = drive(&mut c, "MIGRATE_INSTANCES", one, 1000);
    assert_eq!(total(&r, "migrated", None), 1);
    assert_eq!(get(&mut c, "p05")["version"], 2);
    assert_eq!(get(&mut c, "p06")["version"], 1);

    // Subscribers heard each migration once.
    let mut pushes = BTreeMap::new();
    while let Some(p) = watcher.next_push(Some(Duration::from_millis(500))).unwrap() {
        if p["type"] == "migrated" {
            assert_eq!(p["machine"], "job");
            assert_eq!(
                (p["from_version"].as_u64(), p["to_version"].as_u64()),
                (Some(1), Some(2))
            );
            assert!(p["cursor"].is_string(), "{p}");
            *pushes
                .entry(p["instance_id"].as_str().unwrap().to_owned())
                .or_insert(0) += 1;
        }
    }
    assert_eq!(pushes.len(), 21, "{pushes:?}");
    assert!(pushes.values().all(|n| *n == 1), "{pushes:?}");

    // CREATE_INSTANCE without a version takes the latest.
    let created = c
        .call("CREATE_INSTANCE", json!({"machine": "job", "id": "fresh"}))
        .expect("create without version");
    assert_eq!(get(&mut c, "fresh")["version"], 2, "{created}");
}

/// A machine whose finished instances go `ms` after they finish.
fn put_retained(c: &mut Client, ms: u64) {
    let def = json!({
        "states": ["open", "closed"], "initial": "open", "final": ["closed"],
        "transitions": [{"from": "open", "event": "close", "to": "closed"}],
        "retention": {"final_after_ms": ms}
    });
    c.call(
        "PUT_MACHINE",
        json!({"machine": "ticket", "version": 1, "definition": def}),
    )
    .expect("PUT_MACHINE ticket");
}

fn open_tickets(c: &mut Client, n: usize, closed: usize) {
    for i in 0..n {
        let id = format!("t{i:02}");
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "ticket", "version": 1, "id": id, "idempotency_key": id}),
        )
        .expect("create");
        if i < closed {
            c.call("APPLY_EVENT", json!({"instance_id": id, "event": "close"}))
                .expect("close");
        }
    }
}

fn exists(c: &mut Client, id: &str) -> bool {
    match c.call("GET_INSTANCE", json!({ "id": id })) {
        Ok(_) => true,
        Err(e) if e.code() == Some("INSTANCE_NOT_FOUND") => false,
        Err(e) => panic!("GET_INSTANCE {id}: {e}"),
    }
}

#[test]
fn retention_deletes_finished_instances_even_across_sigkill() {
    let (mut s, _d) = Server::start(&format!("[shards]\ncount = 2\n{METRICS}"));
    let mut c = s.client();
    put_retained(&mut c, 1500);
    let invalid = json!({"states": ["a"], "initial": "a", "retention": {"final_after_ms": 5}});
    let r = c.call(
        "PUT_MACHINE",
        json!({"machine": "nofinal", "version": 1, "definition": invalid}),
    );
    assert_eq!(err_code(r), "INVALID_DEFINITION");
    open_tickets(&mut c, 10, 5);
    let t = get(&mut c, "t00");
    assert_eq!(t["timer"]["reason"], "retention", "{t}");
    assert!(get(&mut c, "t07").get("timer").is_none());

    // Killed before they are due; overdue by the time it is back.
    s.kill();
    std::thread::sleep(Duration::from_millis(2000));
    s.restart_after_kill();
    let mut c = s.client();
    wait_until(Duration::from_secs(5), || {
        match (0..5).any(|i| exists(&mut c, &format!("t{i:02}"))) {
            true => Err("overdue deletions did not happen after recovery".into()),
            false => Ok(()),
        }
    });
    assert!((5..10).all(|i| exists(&mut c, &format!("t{i:02}"))));
    let m = scrape(&s);
    assert_eq!(
        m.get("svc_instances_expired_total", &[("machine", "ticket")]),
        5.0
    );
    // Their idempotency records went with them: the same key creates anew.
    let again = c
        .call(
            "CREATE_INSTANCE",
            json!({"machine": "ticket", "version": 1, "id": "t00", "idempotency_key": "t00"}),
        )
        .expect("re-create");
    assert_eq!(again["applied"], json!(true), "{again}");
    // And they stay gone after another restart (the deletions were logged).
    s.kill();
    s.restart_after_kill();
    let mut c = s.client();
    assert!((1..5).all(|i| !exists(&mut c, &format!("t{i:02}"))));
}

#[test]
fn retention_on_a_primary_reaches_its_replica() {
    let (p, _pd) = Server::start(&fixed_port(
        "[shards]\ncount = 2\n[replication]\nrole = \"primary\"\nheartbeat_ms = 200",
    ));
    let cfg = format!(
        "[replication]\nrole = \"replica\"\nupstream = \"{}\"\nreplica_id = \"r1\"\n\
         heartbeat_ms = 200\nreconnect_max_ms = 500",
        p.addr
    );
    let (r, _rd) = Server::start(&cfg);
    let mut c = p.client();
    put_retained(&mut c, 300);
    let mut watcher = p.watcher(json!({"machines": ["ticket"]}));
    open_tickets(&mut c, 6, 3);
    let mut rc = r.client();
    wait_until(Duration::from_secs(20), || {
        let seen: Vec<bool> = (0..6)
            .map(|i| exists(&mut rc, &format!("t{i:02}")))
            .collect();
        match seen == [false, false, false, true, true, true] {
            true => Ok(()),
            false => Err(format!("replica shows {seen:?}\n{}", r.log())),
        }
    });
    let mut deleted = Vec::new();
    while let Some(p) = watcher.next_push(Some(Duration::from_millis(500))).unwrap() {
        if p["type"] == "deleted" {
            assert_eq!(p["reason"], "retention", "{p}");
            deleted.push(p["instance_id"].as_str().unwrap().to_owned());
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["t00", "t01", "t02"]);
}

#[test]
fn delete_instances_walks_in_slices_and_pushes_each_deletion() {
    let (s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = s.client();
    put_retained(&mut c, 3_600_000);
    for i in 0..40 {
        let tier = if i % 2 == 0 { "free" } else { "paid" };
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "ticket", "version": 1, "id": format!("d{i:02}"),
                   "context": {"tier": tier}}),
        )
        .expect("create");
    }
    let mut watcher = s.watcher(json!({"machines": ["ticket"]}));
    let free = json!({"machine": "ticket", "where": {"ctx.tier": "free"}});
    let mut dry = free.clone();
    dry["dry_run"] = json!(true);
    let r = c.call("DELETE_INSTANCES", dry).expect("dry run");
    assert_eq!(r["would_delete"], json!({"open": 20}), "{r}");
    assert!(exists(&mut c, "d00"));

    let replies = drive(&mut c, "DELETE_INSTANCES", free, 6);
    assert_eq!(total(&replies, "deleted", None), 20);
    assert!((0..40).all(|i| exists(&mut c, &format!("d{i:02}")) == (i % 2 == 1)));

    // Nothing was updated before the epoch; everything before the far future.
    let mut deleted_before = |at: &str| {
        let before = json!({"machine": "ticket", "updated_before": at});
        total(
            &drive(&mut c, "DELETE_INSTANCES", before, 1000),
            "deleted",
            None,
        )
    };
    assert_eq!(deleted_before("1970-01-02T00:00:00Z"), 0);
    assert_eq!(deleted_before("2999-01-01T00:00:00Z"), 20);

    let mut pushed = 0;
    while let Some(p) = watcher.next_push(Some(Duration::from_millis(500))).unwrap() {
        assert_eq!(
            (p["type"].as_str(), p["reason"].as_str()),
            (Some("deleted"), Some("delete"))
        );
        pushed += 1;
    }
    assert_eq!(pushed, 40);
    assert_eq!(
        err_code(c.call(
            "DELETE_INSTANCES",
            json!({"machine": "ticket", "from_version": 1})
        )),
        "BAD_REQUEST"
    );
}
