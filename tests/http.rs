//! The HTTP API against the real binary (docs/http.md): every path with its success status and
//! its error statuses, ETag / If-Match, Idempotency-Key, and HTTP and RCP1 seeing one state.
//! Auth, limits and hardening: tests/http_guard.rs. Event streams: tests/http_stream.rs.

mod common;

use common::http::Http;
use common::tokens::{http_required, token, ALL_SCOPES};
use common::{lifecycle, order_definition, Server};
use serde_json::{json, Value};

const HTTP: &str = "[http]\nenabled = true";

fn server() -> (Server, common::TestDir) {
    Server::start(HTTP)
}

fn http(s: &Server) -> Http {
    Http::connect(s.http_addr.expect("http listener"))
}

/// A server with the HTTP API, a connection to it, and the order machine put through it.
fn server_with_order() -> (Server, common::TestDir, Http) {
    let (s, d) = server();
    let mut h = http(&s);
    put_order(&mut h);
    (s, d, h)
}

/// The ETag of `path` and the log offset it names (`"EPOCH.OFFSET"`).
fn etag_of(h: &mut Http, path: &str) -> (String, u64) {
    let etag = h.get(path).header("etag").unwrap().to_string();
    let offset = etag.trim_matches('"').split('.').nth(1).unwrap();
    let offset = offset.parse().unwrap();
    (etag, offset)
}

/// `r`'s ETag names epoch 0 and the `wal_offset` in `body`.
fn assert_etag_at(r: &common::http::Resp, body: &serde_json::Value) {
    let want = format!("\"0.{}\"", body["wal_offset"]);
    assert_eq!(r.header("etag"), Some(want.as_str()));
}

/// The order machine over HTTP; returns the response.
fn put_order(h: &mut Http) -> common::http::Resp {
    h.put("/machines/order/versions/1", &order_definition())
}

fn create(h: &mut Http, id: &str, total: i64) -> common::http::Resp {
    h.post(
        "/instances",
        &json!({"machine": "order", "version": 1, "id": id, "context": {"total": total}}),
    )
}

#[test]
fn machines_put_get_list_stats_and_their_errors() {
    let (s, _d) = server();
    let mut h = http(&s);
    let r = put_order(&mut h);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["created"], true);
    let again = put_order(&mut h);
    assert_eq!(
        (again.status, again.json()["created"].clone()),
        (200, json!(false))
    );
    let other = h.put(
        "/machines/order/versions/1",
        &json!({"states": ["a"], "initial": "a", "transitions": []}),
    );
    other.assert_error(409, "MACHINE_VERSION_EXISTS");
    let bad = h.put(
        "/machines/m2/versions/1",
        &json!({"states": ["a"], "initial": "zz", "transitions": []}),
    );
    bad.assert_error(400, "INVALID_DEFINITION");
    let nan = h.put("/machines/m2/versions/x", &json!({}));
    nan.assert_error(400, "BAD_REQUEST");

    let list = h.get("/machines");
    assert_eq!(list.status, 200);
    assert_eq!(
        list.json(),
        json!({"machines": [{"machine": "order", "versions": [1]}]})
    );
    let latest = h.get("/machines/order");
    assert_eq!(
        (latest.status, latest.json()["version"].clone()),
        (200, json!(1))
    );
    assert_eq!(latest.json()["definition"]["initial"], "new");
    let v1 = h.get("/machines/order/versions/1");
    assert_eq!(v1.json()["checksum"], latest.json()["checksum"]);
    let missing = h.get("/machines/nope");
    missing.assert_error(404, "MACHINE_NOT_FOUND");
    let missing = h.get("/machines/order/versions/9");
    missing.assert_error(404, "MACHINE_NOT_FOUND");

    create(&mut h, "o1", 10);
    create(&mut h, "o2", 10);
    let paid = h.post(
        "/instances/o2/events",
        &json!({"event": "pay", "payload": {"amount": 10}}),
    );
    assert_eq!(paid.status, 200, "{}", paid.text());
    let stats = h.get("/machines/order/stats");
    assert_eq!(stats.status, 200);
    assert_eq!(
        stats.json(),
        json!({"machine": "order", "states": {"new": 1, "paid": 1, "shipped": 0, "cancelled": 0}})
    );
    let none = h.get("/machines/nope/stats");
    none.assert_error(404, "MACHINE_NOT_FOUND");
}

#[test]
fn diagrams_in_every_format() {
    let (_s, _d, mut h) = server_with_order();
    let svg = h.get("/machines/order/versions/1/diagram");
    assert_eq!(svg.status, 200);
    assert_eq!(svg.header("content-type"), Some("image/svg+xml"));
    let text = svg.text();
    assert!(text.starts_with("<svg"), "{text}");
    for state in ["new", "paid", "shipped", "cancelled"] {
        assert!(text.contains(&format!("data-state=\"{state}\"")), "{state}");
    }
    let same = smdb_diagram::render("order", &order_definition(), smdb_diagram::Format::Svg);
    assert_eq!(text, same.unwrap(), "the server draws what the crate draws");
    let dot = h.get("/machines/order/versions/1/diagram?format=dot");
    assert!(
        dot.text().starts_with("digraph \"order\""),
        "{}",
        dot.text()
    );
    let mmd = h.get("/machines/order/versions/1/diagram?format=mermaid");
    assert!(mmd.text().starts_with("stateDiagram-v2"));
    let bad = h.get("/machines/order/versions/1/diagram?format=png");
    bad.assert_error(400, "BAD_REQUEST");
    let missing = h.get("/machines/order/versions/2/diagram");
    missing.assert_error(404, "MACHINE_NOT_FOUND");
}

#[test]
fn instances_create_get_list_apply_history_delete() {
    let (_s, _d, mut h) = server_with_order();
    let r = create(&mut h, "a/b c", 30);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.header("location"), Some("/instances/a%2Fb%20c"));
    assert!(r.header("etag").is_some());
    let exists = create(&mut h, "a/b c", 30);
    exists.assert_error(409, "INSTANCE_EXISTS");
    let no_machine = h.post(
        "/instances",
        &json!({"machine": "x", "version": 1, "id": "z"}),
    );
    no_machine.assert_error(404, "MACHINE_NOT_FOUND");

    let got = h.get("/instances/a%2Fb%20c");
    assert_eq!(got.status, 200);
    let body = got.json();
    assert_eq!(
        (body["id"].clone(), body["state"].clone()),
        (json!("a/b c"), json!("new"))
    );
    assert_etag_at(&got, &body);

    let guard = h.post(
        "/instances/a%2Fb%20c/events",
        &json!({"event": "pay", "payload": {"amount": 1}}),
    );
    guard.assert_error(422, "GUARD_FAILED");
    let invalid = h.post("/instances/a%2Fb%20c/events", &json!({"event": "ship"}));
    invalid.assert_error(422, "INVALID_TRANSITION");
    let pay = h.post(
        "/instances/a%2Fb%20c/events",
        &json!({"event": "pay", "payload": {"amount": 30}}),
    );
    assert_eq!(pay.status, 200, "{}", pay.text());
    let moved = pay.json();
    assert_eq!(
        (moved["from_state"].clone(), moved["to_state"].clone()),
        (json!("new"), json!("paid"))
    );
    assert_etag_at(&pay, &moved);
    let expect = h.post(
        "/instances/a%2Fb%20c/events",
        &json!({"event": "ship", "expected_state": "new"}),
    );
    expect.assert_error(409, "CONFLICT");
    // The path names the instance: the body may not name another.
    let twice = h.post(
        "/instances/a%2Fb%20c/events",
        &json!({"event": "ship", "instance_id": "zz"}),
    );
    twice.assert_error(400, "BAD_REQUEST");

    create(&mut h, "b", 5);
    let list = h.get("/instances?machine=order&state=paid");
    assert_eq!(list.status, 200);
    let ids: Vec<Value> = list.json()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("a/b c")]);
    let page = h.get("/instances?machine=order&limit=1");
    assert_eq!(page.json()["instances"].as_array().unwrap().len(), 1);
    let cursor = page.json()["next_cursor"].as_str().unwrap().to_string();
    let next = h.get(&format!("/instances?machine=order&limit=1&cursor={cursor}"));
    assert_eq!(next.json()["instances"][0]["id"], "b");
    let bad = h.get("/instances?limit=ten");
    bad.assert_error(400, "BAD_REQUEST");

    let history = h.get("/instances/a%2Fb%20c/events?from=1&limit=10");
    assert_eq!(history.status, 200);
    assert_eq!(history.json()["events"].as_array().unwrap().len(), 1);
    assert_eq!(history.json()["events"][0]["event"], "pay");
    let gone = h.get("/instances/nope/events");
    gone.assert_error(404, "INSTANCE_NOT_FOUND");

    let del = h.delete("/instances/b");
    assert_eq!(
        (del.status, del.json()["deleted"].clone()),
        (200, json!(true))
    );
    let after = h.get("/instances/b");
    after.assert_error(404, "INSTANCE_NOT_FOUND");
    let again = h.delete("/instances/b");
    assert_eq!(again.status, 404);
}

#[test]
fn if_match_runs_only_on_the_current_version() {
    let (_s, _d, mut h) = server_with_order();
    create(&mut h, "o", 10);
    let (etag, offset) = etag_of(&mut h, "/instances/o");
    let pay = json!({"event": "pay", "payload": {"amount": 10}}).to_string();
    let stale = format!("\"0.{}\"", offset - 1);
    let wrong_epoch = format!("\"7.{offset}\"");
    for tag in [
        stale.as_str(),
        wrong_epoch.as_str(),
        "W/\"0.1\"",
        "\"junk\"",
    ] {
        let r = h.request(
            "POST",
            "/instances/o/events",
            &[("If-Match", tag)],
            Some(pay.as_bytes()),
        );
        assert_eq!(
            (r.status, r.code()),
            (412, "CONFLICT".into()),
            "{tag}: {}",
            r.text()
        );
    }
    assert_eq!(
        h.get("/instances/o").json()["state"],
        "new",
        "nothing applied"
    );
    let ok = h.request(
        "POST",
        "/instances/o/events",
        &[("If-Match", &etag)],
        Some(pay.as_bytes()),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let new_tag = ok.header("etag").unwrap().to_string();
    assert_ne!(new_tag, etag);
    assert_eq!(h.get("/instances/o").header("etag"), Some(new_tag.as_str()));
    let replay = h.request(
        "POST",
        "/instances/o/events",
        &[("If-Match", &etag)],
        Some(br#"{"event":"ship"}"#),
    );
    assert_eq!(replay.status, 412, "the old tag no longer matches");
    let any = h.request(
        "POST",
        "/instances/o/events",
        &[("If-Match", "*")],
        Some(br#"{"event":"ship"}"#),
    );
    assert_eq!(any.status, 200, "{}", any.text());
}

#[test]
fn idempotency_key_replays_the_first_result() {
    let (_s, _d, mut h) = server_with_order();
    let body =
        json!({"machine": "order", "version": 1, "id": "k", "context": {"total": 1}}).to_string();
    let key = [("Idempotency-Key", "create-k")];
    let first = h.request("POST", "/instances", &key, Some(body.as_bytes()));
    assert_eq!(first.status, 201);
    let again = h.request("POST", "/instances", &key, Some(body.as_bytes()));
    assert_eq!(
        again.status,
        200,
        "a replay is not a creation: {}",
        again.text()
    );
    assert_eq!(again.json()["applied"], false);
    let pay = json!({"event": "pay", "payload": {"amount": 1}}).to_string();
    let key = [("Idempotency-Key", "pay-1")];
    let a = h.request("POST", "/instances/k/events", &key, Some(pay.as_bytes()));
    let b = h.request("POST", "/instances/k/events", &key, Some(pay.as_bytes()));
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(b.json()["applied"], false);
    assert_eq!(a.json()["wal_offset"], b.json()["wal_offset"]);
    assert_eq!(
        h.get("/instances/k/events").json()["events"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let misplaced = h.request("GET", "/instances/k", &key, None);
    misplaced.assert_error(400, "BAD_REQUEST");
}

#[test]
fn batch_info_replication_and_their_errors() {
    let (_s, _d, mut h) = server_with_order();
    let batch = json!({"mode": "atomic", "ops": [
        {"op": "CREATE_INSTANCE", "params": {"machine": "order", "version": 1, "id": "x", "context": {"total": 0}}},
        {"op": "APPLY_EVENT", "params": {"instance_id": "x", "event": "pay", "payload": {"amount": 0}}}]});
    let r = h.post("/batch", &batch);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["results"].as_array().unwrap().len(), 2);
    let aborted = h.post(
        "/batch",
        &json!({"mode": "atomic", "ops": [
        {"op": "APPLY_EVENT", "params": {"instance_id": "x", "event": "nope"}}]}),
    );
    aborted.assert_error(422, "BATCH_ABORTED");
    let info = h.get("/info");
    assert_eq!(
        (info.status, info.json()["server_name"].clone()),
        (200, json!("smdb"))
    );
    let repl = h.get("/replication");
    assert_eq!(
        (repl.status, repl.json()["role"].clone()),
        (200, json!("standalone"))
    );
    let body_on_get = h.request("GET", "/info", &[], Some(b"{}"));
    body_on_get.assert_error(400, "BAD_REQUEST");
}

/// One state, two codecs: what one writes the other reads, offsets and versions included.
#[test]
fn http_and_rcp1_see_one_state() {
    let (s, _d) = server();
    let mut c = s.order_client();
    let mut h = http(&s);
    let created = c
        .call(
            "CREATE_INSTANCE",
            json!({"machine": "order", "version": 1, "id": "both", "context": {"total": 5}}),
        )
        .unwrap();
    let over_http = h.get("/instances/both");
    assert_eq!(
        over_http.json(),
        c.call("GET_INSTANCE", json!({"id": "both"})).unwrap()
    );
    assert_eq!(over_http.json()["wal_offset"], created["wal_offset"]);
    let applied = h
        .post(
            "/instances/both/events",
            &json!({"event": "pay", "payload": {"amount": 5}}),
        )
        .json();
    let rcp1 = c.call("GET_INSTANCE", json!({"id": "both"})).unwrap();
    assert_eq!(rcp1["state"], "paid");
    assert_eq!(rcp1["wal_offset"], applied["wal_offset"]);
    assert_eq!(h.get("/instances/both").json(), rcp1);
    let hist_rcp1 = c.call("GET_HISTORY", json!({"id": "both"})).unwrap();
    assert_eq!(h.get("/instances/both/events").json(), hist_rcp1);
    assert_eq!(
        h.get("/machines").json(),
        c.call("LIST_MACHINES", json!({})).unwrap()
    );
    // An RCP1 expectation on the offset the ETag names.
    let (_, offset) = etag_of(&mut h, "/instances/both");
    let shipped = c.call(
        "APPLY_EVENT",
        json!({"instance_id": "both", "event": "ship", "expected_wal_offset": offset}),
    );
    assert_eq!(shipped.unwrap()["to_state"], "shipped");
}

#[test]
fn requests_are_counted_under_their_op() {
    let (s, _d) = Server::start(&format!(
        "{HTTP}\n[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\""
    ));
    let mut h = http(&s);
    put_order(&mut h);
    create(&mut h, "m", 1);
    for _ in 0..3 {
        h.get("/instances/m");
    }
    h.get("/instances/nope");
    h.get("/no/such/path");
    let text = common::scrape::http_get(s.metrics_addr.unwrap(), "/metrics", &[]).body;
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no {needle} in metrics"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(line("svc_requests_total{op=\"GET_INSTANCE\"}"), "4");
    assert_eq!(
        line("svc_requests_errors_total{op=\"GET_INSTANCE\",code=\"INSTANCE_NOT_FOUND\"}"),
        "1"
    );
    assert_eq!(
        line("svc_requests_errors_total{op=\"UNKNOWN\",code=\"NOT_FOUND\"}"),
        "1"
    );
    assert_eq!(line("svc_requests_total{op=\"PUT_MACHINE\"}"), "1");
}

#[test]
fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let (_s, _d, mut h) = server_with_order();
    let mut burst = Vec::new();
    for i in 0..20 {
        let body = json!({"machine": "order", "version": 1, "id": format!("p{i}"), "context": {}})
            .to_string();
        burst.extend(h.encode("POST", "/instances", &[], Some(body.as_bytes())));
        burst.extend(h.encode("GET", &format!("/instances/p{i}"), &[], None));
    }
    h.send(&burst);
    for i in 0..20 {
        let created = h.read_response().unwrap();
        assert_eq!(
            (created.status, created.json()["id"].clone()),
            (201, json!(format!("p{i}")))
        );
        let got = h.read_response().unwrap();
        assert_eq!(
            (got.status, got.json()["id"].clone()),
            (200, json!(format!("p{i}")))
        );
    }
}

/// `smdb-cli diagram` prints exactly what the HTTP API answers, in every format.
#[test]
fn the_cli_draws_what_the_server_draws() {
    let (s, _d, mut h) = server_with_order();
    for format in ["svg", "dot", "mermaid"] {
        let out = std::process::Command::new(common::cli_bin())
            .args([
                "--addr",
                &s.addr.to_string(),
                "diagram",
                "order",
                "--format",
                format,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let served = h.get(&format!(
            "/machines/order/versions/1/diagram?format={format}"
        ));
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            served.text(),
            "{format}"
        );
    }
    let missing = std::process::Command::new(common::cli_bin())
        .args(["--addr", &s.addr.to_string(), "diagram", "nope"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("MACHINE_NOT_FOUND"));
}

/// POSTs `body` (with `limit`) to `path` from no cursor to the last page: each reply in order.
fn drive(h: &mut Http, path: &str, body: &Value, limit: u64) -> Vec<Value> {
    lifecycle::pages(body, limit, |call| {
        let r = h.post(path, &call);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    })
}

/// `POST /machines/{m}/migrate` (MIGRATE_INSTANCES): a dry run, then the walk driven by
/// cursor; `POST /machines/{m}/delete-instances` (DELETE_INSTANCES) likewise; both only with
/// the admin scope.
#[test]
fn migrate_and_delete_instances_by_cursor_with_the_admin_scope() {
    const ADMIN: &str = "http-admin-5d1e";
    const WRITER: &str = "http-writer-a73c";
    let config = http_required(&[
        token("admin", ADMIN, ALL_SCOPES),
        token("app", WRITER, &["read", "write"]),
    ]) + "[shards]\ncount = 2\n";
    let (s, _d) = Server::start(&config);
    let mut h = http(&s).with_token(ADMIN);
    for (v, def) in (1..).zip(lifecycle::job_versions(json!([]))) {
        let r = h.put(&format!("/machines/job/versions/{v}"), &def);
        assert_eq!(r.status, 201, "{}", r.text());
    }
    // 6 new, 4 open, 2 paused, all v1.
    for (prefix, n, events) in [
        ("n", 6, &[][..]),
        ("o", 4, &["go"][..]),
        ("p", 2, &["go", "pause"][..]),
    ] {
        for i in 0..n {
            let id = format!("{prefix}{i}");
            let body = json!({"machine": "job", "version": 1, "id": id, "context": {}});
            assert_eq!(h.post("/instances", &body).status, 201);
            for ev in events {
                let r = h.post(&format!("/instances/{id}/events"), &json!({ "event": ev }));
                assert_eq!(r.status, 200, "{}", r.text());
            }
        }
    }
    let plan = json!({"from_version": 1, "to_version": 2, "states": {"open": "active"}});

    // A token without the admin scope is refused, and nothing moves.
    let mut writer = http(&s).with_token(WRITER);
    let r = writer.post("/machines/job/migrate", &plan);
    r.assert_error(403, "FORBIDDEN");
    assert_eq!(r.json()["details"]["scope"], "admin");
    let r = writer.post(
        "/machines/job/delete-instances",
        &json!({"state": "paused"}),
    );
    r.assert_error(403, "FORBIDDEN");

    // A dry run reports per state and changes nothing; a bad plan is refused.
    let mut dry = plan.clone();
    dry["dry_run"] = json!(true);
    let r = h.post("/machines/job/migrate", &dry);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"would_migrate": {"new": 6, "open": 4}, "skipped": {"no_state": 2}, "examined": 12})
    );
    assert_eq!(h.get("/instances/o0").json()["version"], 1);
    let typo = json!({"from_version": 1, "to_version": 2, "states": {"open": "actve"}});
    h.post("/machines/job/migrate", &typo)
        .assert_error(400, "BAD_REQUEST");
    let body_machine = json!({"machine": "job", "from_version": 1, "to_version": 2});
    h.post("/machines/job/migrate", &body_machine)
        .assert_error(400, "BAD_REQUEST");

    // For real, 4 examined per call: every instance counted once.
    let replies = drive(&mut h, "/machines/job/migrate", &plan, 4);
    assert!(replies.len() >= 3, "{replies:?}");
    let sum = |key: &str, sub: Option<&str>| lifecycle::total(&replies, key, sub);
    assert_eq!(sum("migrated", None), 10, "{replies:?}");
    assert_eq!(sum("skipped", Some("no_state")), 2, "{replies:?}");
    assert_eq!(sum("examined", None), 12, "{replies:?}");
    assert_eq!(replies.last().unwrap()["remaining"], 0);
    let got = |h: &mut Http, id: &str| {
        let i = h.get(&format!("/instances/{id}")).json();
        (
            i["version"].as_u64().unwrap(),
            i["state"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(got(&mut h, "o3"), (2, "active".into()));
    assert_eq!(got(&mut h, "n5"), (2, "new".into()));
    assert_eq!(got(&mut h, "p1"), (1, "paused".into()));

    // DELETE_INSTANCES: a dry run, then by cursor, two examined per call (one per shard).
    let only_new = json!({"state": "new"});
    let mut dry = only_new.clone();
    dry["dry_run"] = json!(true);
    let r = h.post("/machines/job/delete-instances", &dry);
    assert_eq!(r.json()["would_delete"], json!({"new": 6}), "{}", r.text());
    let replies = drive(&mut h, "/machines/job/delete-instances", &only_new, 2);
    let deleted: u64 = replies.iter().map(|r| r["deleted"].as_u64().unwrap()).sum();
    assert_eq!(deleted, 6, "{replies:?}");
    assert!(replies.len() >= 3, "{replies:?}");
    assert_eq!(replies.last().unwrap()["remaining"], 0);
    h.get("/instances/n0")
        .assert_error(404, "INSTANCE_NOT_FOUND");
    assert_eq!(got(&mut h, "o0"), (2, "active".into()));
    assert_eq!(got(&mut h, "p0"), (1, "paused".into()));
}
