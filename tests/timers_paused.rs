//! A data dir whose timers start paused (`timers.paused`, written by `smdb-server restore
//! --pause-timers`; docs/backup.md, "Timers after a restore") against the real binary: the
//! server starts with the timer armed but fires nothing, says so in its log and INFO;
//! `smdb-cli timers resume` deletes the marker and the overdue timer fires; a later restart
//! fires as usual. TIMERS_RESUME needs `admin` (RCP1 and `POST /timers/resume`) and answers
//! `was_paused: false` when nothing was paused.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::http::Http;
use common::run::{cli_at, output};
use common::tokens::{http_required, token};
use common::*;
use serde_json::{json, Value};
use smdb::datadir::TIMERS_PAUSED_FILE;

const AFTER_MS: u64 = 300;
const LOG_LINE: &str = "timers: paused by ";

/// pending --expire (after AFTER_MS)--> expired.
fn put_expiring(c: &mut Client) {
    let def = json!({
        "states": ["pending", "expired"],
        "initial": "pending",
        "final": ["expired"],
        "transitions": [
            {"from": "pending", "event": "expire", "to": "expired", "after_ms": AFTER_MS}
        ]
    });
    c.call(
        "PUT_MACHINE",
        json!({"machine": "exp", "version": 1, "definition": def}),
    )
    .expect("PUT_MACHINE");
}

fn create(c: &mut Client, id: &str) {
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "exp", "version": 1, "id": id, "context": {}}),
    )
    .expect("CREATE_INSTANCE");
}

fn get(c: &mut Client, id: &str) -> Value {
    c.call("GET_INSTANCE", json!({"id": id}))
        .expect("GET_INSTANCE")
}

fn wait_state(c: &mut Client, id: &str, state: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let i = get(c, id);
        if i["state"] == state {
            return;
        }
        assert!(Instant::now() < deadline, "{id} still {}", i["state"]);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn info(c: &mut Client) -> Value {
    c.call("INFO", Value::Null).expect("INFO")
}

/// `smdb-cli --addr ADDR [--json] timers resume`: (exit code, stdout).
fn cli_resume(s: &Server, json: bool) -> (i32, String) {
    let mut cmd = cli_at(&s.addr.to_string());
    if json {
        cmd.arg("--json");
    }
    let (code, stdout, stderr) = output(cmd.args(["timers", "resume"]));
    assert_eq!(code, 0, "smdb-cli: {stdout}{stderr}");
    (code, stdout)
}

fn marker(s: &Server) -> std::path::PathBuf {
    Path::new(&s.dir).join("data").join(TIMERS_PAUSED_FILE)
}

#[test]
fn a_paused_data_dir_fires_nothing_until_timers_resume() {
    let started = Instant::now();
    let (mut s, _d) = Server::start("");
    let mut c = s.client();
    put_expiring(&mut c);
    assert_eq!(info(&mut c)["timers_paused"], false);
    create(&mut c, "p-1");
    // Killed before the deadline (checked below: the history holds no fire).
    s.kill();
    std::fs::write(marker(&s), "restored\n").unwrap();
    s.restart_after_kill();
    let log = s.wait_for_log(LOG_LINE, 1);
    assert!(
        log.contains("none fires until `smdb-cli timers resume`"),
        "{log}"
    );
    let mut c = s.client();
    let i = info(&mut c);
    assert_eq!(i["timers_paused"], true, "{i}");
    assert_eq!(i["shard_details"][0]["timers_paused"], true, "{i}");

    // Long past the deadline: still pending, the timer armed and listed.
    std::thread::sleep(Duration::from_millis(1500));
    let i = get(&mut c, "p-1");
    assert_eq!(i["state"], "pending", "{i}");
    assert_eq!(i["timer"]["event"], "expire", "{i}");
    let listed = c
        .call("LIST_INSTANCES", json!({"has_timer": true}))
        .unwrap();
    assert_eq!(listed["instances"][0]["id"], "p-1", "{listed}");
    let h = c.call("GET_HISTORY", json!({"id": "p-1"})).unwrap();
    assert_eq!(h["events"], json!([]), "fired before the kill: {h}");

    let (_, out) = cli_resume(&s, false);
    assert_eq!(out.trim(), "timers resumed");
    assert!(!marker(&s).exists(), "the marker is deleted");
    wait_state(&mut c, "p-1", "expired", Duration::from_secs(5));
    let h = c.call("GET_HISTORY", json!({"id": "p-1"})).unwrap();
    assert_eq!(h["events"][0]["event"], "expire", "{h}");
    assert_eq!(info(&mut c)["timers_paused"], false);

    // Idempotent: a second resume says nothing was paused.
    let (_, out) = cli_resume(&s, true);
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r, json!({"resumed": true, "was_paused": false}));
    let (_, out) = cli_resume(&s, false);
    assert_eq!(out.trim(), "timers were not paused");

    // Without the marker a restart fires as usual.
    create(&mut c, "p-2");
    s.kill();
    s.restart_after_kill();
    let mut c = s.client();
    wait_state(&mut c, "p-2", "expired", Duration::from_secs(5));
    assert_eq!(s.log().matches(LOG_LINE).count(), 1, "{}", s.log());
    eprintln!("took {:?}", started.elapsed());
}

const ADMIN: &str = "admin-secret-5e1d";
const READER: &str = "reader-secret-9a0b";

fn token_config() -> String {
    http_required(&[
        token("admin", ADMIN, &["admin"]),
        token("reader", READER, &["read"]),
    ])
}

#[test]
fn timers_resume_needs_admin_and_reports_was_paused_false_when_not_paused() {
    let (s, _d) = Server::start(&token_config());
    let mut reader = s.client();
    reader.auth(READER).expect("AUTH reader");
    let r = reader.call("TIMERS_RESUME", json!({}));
    match r {
        Err(ClientError::Server { code, details, .. }) => {
            assert_eq!(code.to_string(), "FORBIDDEN");
            assert_eq!(details["scope"], "admin");
        }
        other => panic!("expected FORBIDDEN, got {other:?}"),
    }
    let mut admin = s.client();
    admin.auth(ADMIN).expect("AUTH admin");
    let r = admin.call("TIMERS_RESUME", json!({})).unwrap();
    assert_eq!(r, json!({"resumed": true, "was_paused": false}));
    // The same over HTTP (`POST /timers/resume`, no body).
    let addr = s.http_addr.expect("http listener");
    let r = Http::connect(addr)
        .with_token(READER)
        .request("POST", "/timers/resume", &[], None);
    r.assert_error(403, "FORBIDDEN");
    let r = Http::connect(addr)
        .with_token(ADMIN)
        .request("POST", "/timers/resume", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"resumed": true, "was_paused": false}));
    assert!(!s.log().contains(LOG_LINE), "{}", s.log());
}
