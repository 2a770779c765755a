//! Durable timers against the real binary (docs/protocol.md, "Timed transitions"): a timer fires
//! after `after_ms` with history, push and metrics; leaving the state cancels it, re-entry
//! re-arms it, a self-loop neither; deadlines from the context (RFC 3339, epoch ms); timers
//! due while the server is down fire exactly once after a SIGKILL; a client event racing a due
//! timer never makes two transitions; a false guard leaves the instance in place; GET_INSTANCE
//! `timer` and LIST_INSTANCES `has_timer`; definition validation.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::scrape::scrape;
use common::*;
use serde_json::{json, Value};
use smdb_client::into_result;

const METRICS: &str = "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"";
const NO_FSYNC: &str = "[storage]\nfsync = \"never\"";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// pending --pay--> paid, paid --refund--> pending, pending --touch--> pending,
/// pending --expire (after `after_ms`, guarded by `guard` if any)--> expired.
fn payment(after_ms: u64, guard: Option<&str>) -> Value {
    let mut expire = json!({"from": "pending", "event": "expire", "to": "expired",
        "after_ms": after_ms});
    if let Some(g) = guard {
        expire["guard"] = json!(g);
    }
    json!({
        "states": ["pending", "paid", "expired"],
        "initial": "pending",
        "final": ["expired"],
        "transitions": [
            {"from": "pending", "event": "pay", "to": "paid"},
            {"from": "paid", "event": "refund", "to": "pending"},
            {"from": "pending", "event": "touch", "to": "pending"},
            expire
        ]
    })
}

fn put(c: &mut Client, machine: &str, def: Value) {
    c.call(
        "PUT_MACHINE",
        json!({"machine": machine, "version": 1, "definition": def}),
    )
    .expect("PUT_MACHINE");
}

fn create(c: &mut Client, machine: &str, id: &str, ctx: Value) -> Value {
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": machine, "version": 1, "id": id, "context": ctx}),
    )
    .expect("CREATE_INSTANCE")
}

fn apply(c: &mut Client, id: &str, event: &str) -> Value {
    c.call("APPLY_EVENT", json!({"instance_id": id, "event": event}))
        .expect("APPLY_EVENT")
}

fn get(c: &mut Client, id: &str) -> Value {
    c.call("GET_INSTANCE", json!({"id": id}))
        .expect("GET_INSTANCE")
}

fn events(c: &mut Client, id: &str) -> Vec<Value> {
    let h = c
        .call("GET_HISTORY", json!({"id": id, "limit": 100}))
        .expect("GET_HISTORY");
    h["events"].as_array().unwrap().clone()
}

fn event_names(c: &mut Client, id: &str) -> Vec<String> {
    events(c, id)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// Polls GET_INSTANCE until `id` is in `state` (panics after `within`).
fn wait_state(c: &mut Client, id: &str, state: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let i = get(c, id);
        if i["state"] == state {
            return i;
        }
        assert!(Instant::now() < deadline, "{id} still {}", i["state"]);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn parse_rfc3339_ms(s: &str) -> u64 {
    shards::engine::rfc3339::parse_ms(s).unwrap_or_else(|| panic!("not RFC 3339: {s}"))
}

#[test]
fn timer_fires_after_after_ms_with_history_push_and_metrics() {
    let (s, _d) = Server::start(&format!("{METRICS}\n{NO_FSYNC}"));
    let mut c = s.client();
    put(&mut c, "payment", payment(300, None));
    let mut sub = s.client();
    sub.call("WATCH_ALL", json!({"machines": ["payment"]}))
        .unwrap();

    let created = create(&mut c, "payment", "p-1", json!({}));
    let i = get(&mut c, "p-1");
    let created_at = parse_rfc3339_ms(i["created_at"].as_str().unwrap());
    assert_eq!(i["timer"]["event"], "expire", "{i}");
    let due = parse_rfc3339_ms(i["timer"]["due_at"].as_str().unwrap());
    assert_eq!(due, created_at + 300);
    let listed = c
        .call("LIST_INSTANCES", json!({"has_timer": true}))
        .unwrap();
    assert_eq!(listed["instances"][0]["id"], "p-1");
    assert_eq!(listed["instances"][0]["timer"]["event"], "expire");
    let none = c
        .call("LIST_INSTANCES", json!({"has_timer": false}))
        .unwrap();
    assert_eq!(none["instances"], json!([]));
    let m = scrape(&s);
    assert_eq!(m.get("svc_timers_pending", &[]), 1.0);

    let push = sub.recv_push().expect("push of the fired timer");
    assert_eq!(push["type"], "event", "{push}");
    assert_eq!(push["instance_id"], "p-1");
    assert_eq!(push["event"], "expire");
    assert_eq!(push["from_state"], "pending");
    assert_eq!(push["to_state"], "expired");
    assert_eq!(push["timer"], true, "{push}");
    let i = get(&mut c, "p-1");
    assert_eq!(i["state"], "expired");
    assert!(i.get("timer").is_none(), "spent timer still shown: {i}");
    let h = events(&mut c, "p-1");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["event"], "expire");
    let fired_at = parse_rfc3339_ms(h[0]["at"].as_str().unwrap());
    assert!(fired_at >= due, "fired early: at {fired_at}, due {due}");
    assert!(
        h[0]["wal_offset"].as_u64() > created["wal_offset"].as_u64(),
        "{h:?}"
    );

    let m = scrape(&s);
    assert_eq!(m.get("svc_timers_pending", &[]), 0.0);
    assert_eq!(
        m.get("svc_timers_fired_total", &[("machine", "payment")]),
        1.0
    );
    assert_eq!(
        m.get("svc_events_applied_total", &[("machine", "payment")]),
        1.0
    );
    assert_eq!(m.get("svc_timer_lateness_seconds_count", &[]), 1.0);
}

#[test]
fn leaving_cancels_reentry_rearms_and_a_self_loop_does_neither() {
    let (s, _d) = Server::start(NO_FSYNC);
    let mut c = s.client();
    put(&mut c, "payment", payment(300, None));

    // Leave before the deadline: nothing fires.
    create(&mut c, "payment", "a", json!({}));
    apply(&mut c, "a", "pay");
    assert!(get(&mut c, "a").get("timer").is_none());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(&mut c, "a")["state"], "paid");
    assert_eq!(event_names(&mut c, "a"), ["pay"]);

    // Re-enter: a new timer from the time of re-entry.
    let back = apply(&mut c, "a", "refund");
    let h = events(&mut c, "a");
    let reentered = parse_rfc3339_ms(h[1]["at"].as_str().unwrap());
    let i = get(&mut c, "a");
    assert_eq!(
        parse_rfc3339_ms(i["timer"]["due_at"].as_str().unwrap()),
        reentered + 300,
        "{i} after {back}"
    );

    // A self-loop keeps the armed timer as it is.
    std::thread::sleep(Duration::from_millis(100));
    apply(&mut c, "a", "touch");
    let after_touch = get(&mut c, "a");
    assert_eq!(after_touch["timer"], i["timer"]);
    wait_state(&mut c, "a", "expired", Duration::from_secs(5));
    assert_eq!(
        event_names(&mut c, "a"),
        ["pay", "refund", "touch", "expire"]
    );
    let h = events(&mut c, "a");
    assert!(parse_rfc3339_ms(h[3]["at"].as_str().unwrap()) >= reentered + 300);
}

#[test]
fn deadline_from_the_context_as_rfc3339_or_epoch_ms() {
    let (s, _d) = Server::start(NO_FSYNC);
    let mut c = s.client();
    let def = json!({
        "states": ["open", "closed"],
        "initial": "open",
        "final": ["closed"],
        "transitions": [
            {"from": "open", "event": "deadline", "to": "closed", "at": "ctx.order.close_at"}
        ]
    });
    put(&mut c, "lease", def);
    let due = now_ms() + 400;
    let text = shards::engine::rfc3339::format_ms(due);
    create(
        &mut c,
        "lease",
        "text",
        json!({"order": {"close_at": text}}),
    );
    create(
        &mut c,
        "lease",
        "epoch",
        json!({"order": {"close_at": due}}),
    );
    create(&mut c, "lease", "absent", json!({"order": {}}));
    create(
        &mut c,
        "lease",
        "junk",
        json!({"order": {"close_at": "soon"}}),
    );
    for id in ["text", "epoch"] {
        let i = get(&mut c, id);
        assert_eq!(
            i["timer"],
            json!({"event": "deadline", "due_at": text}),
            "{id}"
        );
    }
    for id in ["absent", "junk"] {
        assert!(get(&mut c, id).get("timer").is_none(), "{id}");
    }
    for id in ["text", "epoch"] {
        wait_state(&mut c, id, "closed", Duration::from_secs(5));
        let h = events(&mut c, id);
        assert!(
            parse_rfc3339_ms(h[0]["at"].as_str().unwrap()) >= due,
            "{id}: {h:?}"
        );
    }
    assert_eq!(get(&mut c, "absent")["state"], "open");
    // A deadline in the past fires at once.
    create(
        &mut c,
        "lease",
        "past",
        json!({"order": {"close_at": 1000}}),
    );
    wait_state(&mut c, "past", "closed", Duration::from_secs(5));
}

/// Creates `ids` pipelined (window 64).
fn create_many(c: &mut Client, machine: &str, ids: &[String]) {
    let mut sent = 0;
    let mut done = 0;
    while done < ids.len() {
        while sent < ids.len() && sent - done < 64 {
            let p = json!({"machine": machine, "version": 1, "id": ids[sent], "context": {}});
            c.send("CREATE_INSTANCE", &p).unwrap();
            sent += 1;
        }
        into_result(c.recv_response().unwrap()).expect("CREATE_INSTANCE");
        done += 1;
    }
}

#[test]
fn timers_due_while_the_server_is_down_fire_exactly_once_after_sigkill() {
    let (mut s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = s.client();
    put(&mut c, "payment", payment(400, None));
    let ids: Vec<String> = (0..300).map(|i| format!("k-{i}")).collect();
    create_many(&mut c, "payment", &ids);
    s.kill(); // some may have fired already; most are due while the server is down
    std::thread::sleep(Duration::from_millis(500));
    s.restart_after_kill();
    let mut c = s.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pending = c
            .call("LIST_INSTANCES", json!({"state": "pending", "limit": 1000}))
            .unwrap();
        if pending["instances"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timers did not fire after restart"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for id in &ids {
        assert_eq!(event_names(&mut c, id), ["expire"], "{id}");
    }
    // Once more: a restart after they all fired fires nothing again.
    s.restart_after_kill();
    let mut c = s.client();
    std::thread::sleep(Duration::from_millis(300));
    for id in &ids {
        assert_eq!(
            event_names(&mut c, id),
            ["expire"],
            "{id} after 2nd restart"
        );
    }
    let listed = c
        .call("LIST_INSTANCES", json!({"has_timer": true}))
        .unwrap();
    assert_eq!(listed["instances"], json!([]));
}

#[test]
fn a_client_event_racing_a_due_timer_never_makes_two_transitions() {
    let (s, _d) = Server::start("[shards]\ncount = 2\n[storage]\nfsync = \"never\"");
    let mut c = s.client();
    put(&mut c, "payment", payment(300, None));
    let ids: Vec<String> = (0..200).map(|i| format!("r-{i}")).collect();
    create_many(&mut c, "payment", &ids);
    // Aim the payments at the deadline: some land before the timer, some after.
    std::thread::sleep(Duration::from_millis(250));
    for id in &ids {
        c.send("APPLY_EVENT", &json!({"instance_id": id, "event": "pay"}))
            .unwrap();
    }
    let mut paid = 0;
    for _ in &ids {
        match into_result(c.recv_response().unwrap()) {
            Ok(r) => {
                assert_eq!(r["to_state"], "paid");
                paid += 1;
            }
            Err(e) => assert_eq!(e.code(), Some("INVALID_TRANSITION"), "{e:?}"),
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut expired = 0;
    for id in &ids {
        let names = event_names(&mut c, id);
        let state = get(&mut c, id)["state"].clone();
        match names.as_slice() {
            [one] if one == "pay" => assert_eq!(state, "paid", "{id}"),
            [one] if one == "expire" => {
                assert_eq!(state, "expired", "{id}");
                expired += 1;
            }
            other => panic!("{id}: history {other:?}"),
        }
    }
    assert_eq!(paid + expired, ids.len());
}

#[test]
fn a_false_guard_at_fire_time_leaves_the_instance_and_spends_the_timer() {
    let (s, _d) = Server::start(&format!("{METRICS}\n{NO_FSYNC}"));
    let mut c = s.client();
    put(
        &mut c,
        "payment",
        payment(200, Some("ctx.may_expire == true")),
    );
    create(&mut c, "payment", "held", json!({"may_expire": false}));
    create(&mut c, "payment", "free", json!({"may_expire": true}));
    assert_eq!(get(&mut c, "held")["timer"]["event"], "expire");
    wait_state(&mut c, "free", "expired", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(200));
    let held = get(&mut c, "held");
    assert_eq!(held["state"], "pending");
    assert!(
        held.get("timer").is_none(),
        "a refused timer is spent: {held}"
    );
    assert!(event_names(&mut c, "held").is_empty());
    // Making the guard true later does not bring the spent timer back.
    apply(&mut c, "held", "touch");
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "held", "event": "touch", "payload": {"may_expire": true}}),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(&mut c, "held")["state"], "pending");
    let m = scrape(&s);
    assert_eq!(
        m.get("svc_timers_fired_total", &[("machine", "payment")]),
        1.0
    );
    assert_eq!(m.get("svc_timers_pending", &[]), 0.0);
}

#[test]
fn timed_transitions_are_validated_and_returned_by_get_machine() {
    let (s, _d) = Server::start(NO_FSYNC);
    let mut c = s.client();
    let bad = |after: Value, at: Option<&str>, from: &str| {
        let mut t = json!({"from": from, "event": "e", "to": "b"});
        if !after.is_null() {
            t["after_ms"] = after;
        }
        if let Some(at) = at {
            t["at"] = json!(at);
        }
        json!({"states": ["a", "b", "z"], "initial": "a", "final": ["z"], "transitions": [t]})
    };
    let cases = [
        (bad(json!(0), None, "a"), "positive"),
        (bad(json!(-5), None, "a"), "after_ms"),
        (bad(json!(1.5), None, "a"), "after_ms"),
        (bad(json!(10), Some("ctx.x"), "a"), "both"),
        (bad(Value::Null, Some("x.y"), "a"), "ctx."),
        (bad(Value::Null, Some("ctx."), "a"), "ctx."),
        (bad(Value::Null, Some("ctx.a..b"), "a"), "ctx."),
        (bad(json!(10), None, "z"), "final"),
    ];
    for (def, want) in cases {
        let e = c
            .call(
                "PUT_MACHINE",
                json!({"machine": "m", "version": 1, "definition": def}),
            )
            .unwrap_err();
        assert_eq!(e.code(), Some("INVALID_DEFINITION"), "{def}");
        let reason = format!("{e:?}");
        assert!(reason.contains(want), "{def}: {reason}");
    }
    put(&mut c, "payment", payment(900_000, None));
    let m = c
        .call("GET_MACHINE", json!({"machine": "payment", "version": 1}))
        .unwrap();
    let t = &m["definition"]["transitions"][3];
    assert_eq!(t["after_ms"], 900_000, "{m}");
    assert_eq!(t["event"], "expire");
}
