//! Bearer authentication and scopes (docs/protocol.md, "Session ops") against the real binary: every op before
//! AUTH, each scope's ops, pushes to a read-only subscriber, the five-failure close, the
//! token's absence from a trace log, SIGHUP rotation, and `smdb-cli hash-token`.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::scrape::scrape;
use common::*;
use serde_json::{json, Value};
use smdb::auth::table::{hex, sha256};
use smdb::auth::{need, required_scope, Need, Scope};
use smdb::protocol::Op;

const FULL: &str = "full-secret-4f1c9a";
const SCOPED: [(&str, Scope); 4] = [
    ("reader-secret-77aa", Scope::Read),
    ("writer-secret-12bb", Scope::Write),
    ("admin-secret-90cc", Scope::Admin),
    ("replicator-secret-3dd", Scope::Replicate),
];

fn digest(token: &str) -> String {
    hex(&sha256(token.as_bytes()))
}

/// `auth.required` with FULL as an all-scope digest and one named token per scope.
fn auth_config() -> String {
    let mut c = format!(
        "[auth]\nrequired = true\ntoken_hashes = [\"{}\"]\n",
        digest(FULL)
    );
    for (token, scope) in SCOPED {
        c += &format!(
            "[[auth.tokens]]\nname = \"{0}-token\"\nsha256 = \"{1}\"\nscopes = [\"{0}\"]\n",
            scope.as_str(),
            digest(token)
        );
    }
    c
}

fn authed(s: &Server, token: &str) -> Client {
    let mut c = s.client();
    c.auth(token).expect("AUTH");
    c
}

/// Creates `order` instance `id` with total `amount` and pays it in full.
fn create_and_pay(c: &mut Client, id: &str, amount: u64) {
    c.create_instance("order", 1, id, &json!({"total": amount}))
        .unwrap();
    c.apply_event(id, "pay", Some(&json!({"amount": amount})))
        .unwrap();
}

fn server_error<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (String, Value) {
    match r {
        Err(ClientError::Server { code, details, .. }) => (code.to_string(), details),
        other => panic!("expected a server error, got {other:?}"),
    }
}

/// Every op the server knows that needs a scope: iterated from the code, so a new op is
/// covered the day it is added.
fn scoped_ops() -> Vec<(Op, Scope)> {
    Op::ALL
        .iter()
        .filter_map(|op| required_scope(*op).map(|s| (*op, s)))
        .collect()
}

#[test]
fn every_op_before_auth_is_unauthorized() {
    let (s, _dir) = Server::start(&auth_config());
    let mut c = s.client();
    assert_eq!(c.hello_result().unwrap()["auth_required"], true);
    let ops: Vec<Op> = Op::ALL
        .iter()
        .copied()
        .filter(|op| need(*op) != Need::Nothing)
        .collect();
    assert!(ops.len() >= 14 && ops.contains(&Op::Batch), "{ops:?}");
    for op in ops {
        let (code, _) = server_error(c.call(op.as_str(), json!({"id": "x", "instance_id": "x"})));
        assert_eq!(code, "UNAUTHORIZED", "{op:?}");
    }
    assert!(c.ping().unwrap().pong, "PING needs no token");
    let (code, _) = server_error(c.call("AUTH", json!({"method": "bearer", "token": "nope"})));
    assert_eq!(code, "AUTH_FAILED");
    let ok = c.auth(FULL).unwrap();
    assert!(ok.authenticated);
    assert_eq!(ok.name, "auth.token_hashes[0]");
    assert_eq!(ok.scopes, ["read", "write", "admin", "replicate"]);
    c.call("INFO", serde_json::Value::Null)
        .expect("INFO after AUTH");
}

#[test]
fn each_scope_allows_exactly_its_ops() {
    let (s, _dir) = Server::start(&auth_config());
    put_order_machine(&mut authed(&s, FULL));
    for (token, scope) in SCOPED {
        let mut c = authed(&s, token);
        let hello = c
            .call("AUTH", json!({"method": "bearer", "token": token}))
            .unwrap();
        assert_eq!(hello["name"], format!("{}-token", scope.as_str()));
        assert_eq!(hello["scopes"], json!([scope.as_str()]));
        for (op, needs) in scoped_ops() {
            let r = c.call(op.as_str(), json!({"id": "i-1", "instance_id": "i-1"}));
            if needs == scope {
                if let Err(ClientError::Server { code, .. }) = &r {
                    assert!(
                        code != "FORBIDDEN" && code != "UNAUTHORIZED",
                        "{op:?} with {scope:?}: {code}"
                    );
                }
            } else {
                let (code, details) = server_error(r);
                assert_eq!(code, "FORBIDDEN", "{op:?} with {scope:?}");
                assert_eq!(details["scope"], needs.as_str(), "{op:?}");
            }
        }
    }
}

#[test]
fn a_batch_needs_the_scope_of_each_op_inside() {
    let (s, _dir) = Server::start(&auth_config());
    put_order_machine(&mut authed(&s, FULL));
    let batch = |ops: Value| json!({"mode": "atomic", "ops": ops});
    let create = json!({"op": "CREATE_INSTANCE",
        "params": {"machine": "order", "version": 1, "id": "b-1", "context": {"total": 1}}});
    let get = json!({"op": "GET_INSTANCE", "params": {"id": "b-1"}});
    let mut reader = authed(&s, SCOPED[0].0);
    let (code, details) = server_error(reader.call("BATCH", batch(json!([get, create]))));
    assert_eq!(
        (code.as_str(), &details["scope"], &details["index"]),
        ("FORBIDDEN", &json!("write"), &json!(1))
    );
    let mut writer = authed(&s, SCOPED[1].0);
    let (code, details) = server_error(writer.call("BATCH", batch(json!([create, get]))));
    assert_eq!(
        (code.as_str(), &details["scope"], &details["index"]),
        ("FORBIDDEN", &json!("read"), &json!(1))
    );
    let (code, _) = server_error(reader.get_instance("b-1"));
    assert_eq!(
        code, "INSTANCE_NOT_FOUND",
        "a refused batch runs none of its ops"
    );
    writer
        .call("BATCH", batch(json!([create])))
        .expect("write-only batch");
    let r = reader
        .call("BATCH", batch(json!([get])))
        .expect("read-only batch");
    assert_eq!(r["results"][0]["result"]["state"], "new");
}

#[test]
fn a_read_only_subscriber_receives_pushes() {
    let (s, _dir) = Server::start(&auth_config());
    put_order_machine(&mut authed(&s, FULL));
    let mut reader = authed(&s, SCOPED[0].0);
    reader
        .call("WATCH_ALL", json!({}))
        .expect("WATCH_ALL with read");
    let mut writer = authed(&s, SCOPED[1].0);
    create_and_pay(&mut writer, "o-1", 5);
    let push = reader
        .next_push(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("a push for the read-only subscriber");
    assert_eq!(
        (push["instance_id"].as_str(), push["event"].as_str()),
        (Some("o-1"), Some("pay"))
    );
    let (code, _) = server_error(reader.apply_event("o-1", "ship", None));
    assert_eq!(code, "FORBIDDEN");
}

#[test]
fn reauth_without_read_ends_the_subscriptions() {
    let (s, _dir) = Server::start(&auth_config());
    let mut full = authed(&s, FULL);
    put_order_machine(&mut full);
    full.call("WATCH_ALL", json!({})).unwrap();
    full.auth(SCOPED[1].0).expect("AUTH as the writer");
    let mut other = authed(&s, FULL);
    create_and_pay(&mut other, "o-2", 1);
    full.ping().unwrap();
    let push = full.next_push(Some(Duration::from_millis(500))).unwrap();
    assert!(push.is_none(), "a session without read got {push:?}");
    let (code, _) = server_error(full.call("WATCH_ALL", json!({})));
    assert_eq!(code, "FORBIDDEN");
}

#[test]
fn five_failed_auths_close_the_connection_and_are_counted() {
    let (s, _dir) = Server::start(
        &(auth_config() + "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"\n"),
    );
    let mut c = s.client();
    for i in 1..=4 {
        let (code, _) = server_error(c.auth(&format!("wrong-{i}")));
        assert_eq!(code, "AUTH_FAILED");
        c.ping().expect("still open after {i} failures");
    }
    let (code, _) = server_error(c.auth("wrong-5"));
    assert_eq!(code, "AUTH_FAILED");
    let after = c
        .ping()
        .expect_err("the fifth failure closes the connection");
    assert!(after.is_connection_lost(), "{after}");
    assert_eq!(scrape(&s).get("svc_auth_failures_total", &[]), 5.0);
    authed(&s, FULL)
        .ping()
        .expect("other connections unaffected");
}

#[test]
fn the_token_never_reaches_a_trace_log() {
    let (mut s, _dir) = Server::start_with_env(&auth_config(), &[("RUST_LOG", "trace")]);
    let mut c = s.client();
    let secrets = ["wrong-token-5a5a5a", "guessed-token-6b6b6b"];
    let _ = c.auth(secrets[0]);
    let _ = c.call("AUTH", json!({"method": "basic", "token": secrets[1]}));
    let _ = c.call("AUTH", json!({"token": secrets[1]}));
    let _ = c.call(
        "AUTH",
        json!({"method": secrets[1], "token": secrets[1], "x": 1}),
    );
    let _ = c.call("AUTH", json!({"method": "bearer", "token": [secrets[1]]}));
    let mut ok = authed(&s, FULL);
    ok.call("INFO", serde_json::Value::Null).unwrap();
    ok.bye().unwrap();
    s.terminate();
    let log = s.log();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "trace logging was on:\n{log}"
    );
    assert!(log.contains("AUTH failed"), "{log}");
    for secret in secrets.iter().chain([&FULL]) {
        assert!(
            !log.contains(secret),
            "{secret} leaked into the log:\n{log}"
        );
    }
}

#[test]
fn sighup_rotates_tokens_and_open_connections_keep_working() {
    let (mut s, _dir) = Server::start(&auth_config());
    let mut open = authed(&s, FULL);
    put_order_machine(&mut open);
    let rotated = "rotated-secret-c0ffee";
    s.rewrite_config(&format!(
        "[auth]\nrequired = true\ntoken_hashes = [\"{}\"]\n",
        digest(rotated)
    ));
    s.signal(libc::SIGHUP);
    s.wait_for_log("SIGHUP: reloaded", 1);
    open.create_instance("order", 1, "kept", &json!({"total": 1}))
        .expect("an open connection keeps its grant");
    let (code, _) = server_error(s.client().auth(FULL));
    assert_eq!(code, "AUTH_FAILED", "the old token is gone for new AUTH");
    authed(&s, rotated)
        .get_instance("kept")
        .expect("the new token works");

    s.rewrite_config("[auth]\nrequired = true\n[[auth.tokens]]\nname = \"x\"\nsha256 = \"00\"\nscopes = [\"read\"]\n");
    s.signal(libc::SIGHUP);
    let log = s.wait_for_log("SIGHUP: reload failed", 1);
    let line = log.lines().find(|l| l.contains("reload failed")).unwrap();
    assert!(line.contains("auth.tokens[0].sha256"), "{line}");
    authed(&s, rotated)
        .ping()
        .expect("a failed reload keeps the running settings");
}

#[test]
fn hash_token_prints_the_digest_the_config_takes() {
    let mut child = Command::new(common::cli_bin())
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"abc\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn bad_auth_config_exits_78_naming_the_key() {
    let dir = temp_dir();
    let bad = "[auth]\nrequired = true\n[[auth.tokens]]\nname = \"d\"\nsha256 = \"".to_string()
        + &"ab".repeat(32)
        + "\"\nscopes = [\"reed\"]\n";
    let (code, _, err) = run_config_to_exit(&dir.path().join("bad.toml"), &bad);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("auth.tokens[0].scopes"), "{err}");
}

#[test]
fn without_auth_required_every_op_runs_unauthenticated() {
    let (s, _dir) = Server::start("");
    let mut c = s.client();
    assert_eq!(c.hello_result().unwrap()["auth_required"], false);
    c.call("INFO", serde_json::Value::Null)
        .expect("INFO without AUTH");
    put_order_machine(&mut c);
}
