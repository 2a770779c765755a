//! Fixtures for the lifecycle ops (docs/lifecycle.md): a machine `job` in two versions, its
//! instances placed in chosen states, and a walk driven by cursor to its last page.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Client;

/// Version 1 `new → open → paused` (and `done`); version 2 renames `open` to `active` and
/// drops `paused`. `extra` transitions are added to version 2 (a timer, a `finish`).
pub fn job_versions(extra_v2: Value) -> [Value; 2] {
    let mut v2_transitions = vec![json!({"from": "new", "event": "go", "to": "active"})];
    v2_transitions.extend(extra_v2.as_array().cloned().unwrap_or_default());
    [
        json!({"states": ["new", "open", "paused", "done"], "initial": "new", "final": ["done"],
               "transitions": [{"from": "new", "event": "go", "to": "open"},
                               {"from": "open", "event": "pause", "to": "paused"},
                               {"from": ["new", "open", "paused"], "event": "finish",
                                "to": "done"}]}),
        json!({"states": ["new", "active", "done"], "initial": "new", "final": ["done"],
               "transitions": v2_transitions}),
    ]
}

/// PUT_MACHINE `job` versions 1 and 2 of [`job_versions`].
pub fn put_job(c: &mut Client, extra_v2: Value) {
    for (v, def) in (1..).zip(job_versions(extra_v2)) {
        c.call(
            "PUT_MACHINE",
            json!({"machine": "job", "version": v, "definition": def}),
        )
        .unwrap_or_else(|e| panic!("PUT_MACHINE job {v}: {e}"));
    }
}

/// How many `job` v1 instances to place in each state: `(prefix, count, events)`; the ids are
/// the prefix and two digits (`o03`).
pub type Plan<'a> = [(&'a str, usize, &'a [&'a str])];

/// 10 each in `new` (`n00`..), `open` (`o00`..) and `paused` (`p00`..).
pub const TENS: &Plan<'static> = &[
    ("n", 10, &[]),
    ("o", 10, &["go"]),
    ("p", 10, &["go", "pause"]),
];

/// Creates the `job` v1 instances of `plan`, each moved by its events.
pub fn place(c: &mut Client, plan: &Plan) {
    for &(prefix, n, events) in plan {
        for i in 0..n {
            let id = format!("{prefix}{i:02}");
            c.call(
                "CREATE_INSTANCE",
                json!({"machine": "job", "version": 1, "id": id}),
            )
            .unwrap_or_else(|e| panic!("CREATE_INSTANCE {id}: {e}"));
            for ev in events {
                c.call("APPLY_EVENT", json!({"instance_id": id, "event": ev}))
                    .unwrap_or_else(|e| panic!("{ev} on {id}: {e}"));
            }
        }
    }
}

/// An instance's version and state, by GET_INSTANCE.
pub fn version_state(c: &mut Client, id: &str) -> (u64, String) {
    let i = (c.call("GET_INSTANCE", json!({ "id": id })))
        .unwrap_or_else(|e| panic!("GET_INSTANCE {id}: {e}"));
    (
        i["version"].as_u64().expect("a version"),
        i["state"].as_str().expect("a state").to_owned(),
    )
}

/// Calls `call` with `params` (and `limit`) from no cursor to the last page: each reply in
/// order. `call` carries it over any transport.
pub fn pages(params: &Value, limit: u64, mut call: impl FnMut(Value) -> Value) -> Vec<Value> {
    let mut replies = Vec::new();
    let mut cursor = Value::Null;
    for _ in 0..1000 {
        let mut p = params.clone();
        p["limit"] = json!(limit);
        if !cursor.is_null() {
            p["cursor"] = cursor.clone();
        }
        let r = call(p);
        cursor = r["cursor"].clone();
        replies.push(r);
        if cursor.is_null() {
            return replies;
        }
    }
    panic!("the walk never finished: {replies:?}");
}

/// [`pages`] of `op` over RCP1.
pub fn drive(c: &mut Client, op: &str, params: Value, limit: u64) -> Vec<Value> {
    pages(&params, limit, |p| {
        c.call(op, p).unwrap_or_else(|e| panic!("{op}: {e}"))
    })
}

/// Sums `key` (or `key.sub`, 0 where absent) over the replies of a walk.
pub fn total(replies: &[Value], key: &str, sub: Option<&str>) -> u64 {
    (replies.iter())
        .map(|r| match sub {
            None => r[key].as_u64().unwrap_or(0),
            Some(k) => r[key][k].as_u64().unwrap_or(0),
        })
        .sum()
}

/// Polls `check` every 100 ms until it answers `Ok`; past `limit`, panics with its last
/// answer.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(()) => return,
            Err(why) => assert!(Instant::now() < deadline, "{why}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
