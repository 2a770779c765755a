//! Replication against real primary and replica processes on loopback (docs/replication.md): a
//! replica converges and mirrors offsets; it refuses writes and serves reads and pushes;
//! SIGKILL of either side under load loses and duplicates nothing; PROMOTE keeps offsets and
//! subscription cursors; a former primary rejoins and drops its unreplicated tail; a replica
//! that starts after compaction gets a snapshot; sync mode times out on a stopped replica with
//! the write committed; a slow replica is dropped, counted, and catches up; the link
//! authenticates; stale epochs and shard-count mismatches are refused.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::ha::create_paid;
use common::replicas::wait_converged;
use common::scrape::scrape;
use common::writes::{assert_present_once_within, Load};
use common::*;
use serde_json::{json, Value};

const METRICS: &str = "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"";
/// Small segments: every server here zero-fills its first segment at start-up, and a dozen
/// servers start at once in this file.
const SMALL_SEGMENTS: &str = "[storage]\nsegment_bytes = 1048576";
/// Touches acknowledged per instance that a test here may check (a history keeps its newest
/// 1000 items; this file's loads stay well under).
const ACKED_PER_INSTANCE_MAX: usize = 500;

/// A primary on a fixed port (so a restart keeps its address).
fn primary(extra: &str) -> (Server, common::TestDir) {
    let cfg = format!(
        "[replication]\nrole = \"primary\"\nheartbeat_ms = 200\n{METRICS}\n{SMALL_SEGMENTS}\n{extra}"
    );
    Server::start(&fixed_port(&cfg))
}

fn replica_config(upstream: &str, id: &str, extra: &str) -> String {
    format!(
        "[replication]\nrole = \"replica\"\nupstream = \"{upstream}\"\nreplica_id = \"{id}\"\n\
         heartbeat_ms = 200\nreconnect_max_ms = 500\n{METRICS}\n{SMALL_SEGMENTS}\n{extra}"
    )
}

fn replica_of(p: &Server, id: &str, extra: &str) -> (Server, common::TestDir) {
    Server::start(&replica_config(&p.addr.to_string(), id, extra))
}

/// A replica whose data dir already exists (one shard, empty), so it starts without asking the
/// primary for its shard count: for replicas that will fail to follow.
fn replica_with_data(p: &Server, id: &str, extra: &str) -> (Server, common::TestDir) {
    let dir = temp_dir();
    drop(Server::start_in(dir.path(), "[shards]\ncount = 1").unwrap());
    let cfg = replica_config(&p.addr.to_string(), id, extra);
    Server::start_owning(dir, &cfg, &[])
}

fn status(s: &Server) -> Value {
    s.client().call("REPLICATION_STATUS", json!({})).unwrap()
}

/// Waits until the replica's log heads equal the primary's and it is connected (at most 30 s).
fn converge(p: &Server, r: &Server) {
    let statuses = || (Some(status(p)), Some(status(r)));
    let same = |p: &Value, r: &Value| p["positions"] == r["positions"] && r["connected"] == true;
    let (limit, every) = (Duration::from_secs(30), Duration::from_millis(50));
    wait_converged(r, limit, every, statuses, same);
}

fn put_machine(c: &mut Client) {
    put_order_machine(c);
}

fn touch(c: &mut Client, id: &str, i: u64) -> Result<Value, ClientError> {
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": id, "event": "touch", "payload": {"i": i}}),
    )
}

/// Every instance's state, offset and full history, as one comparable value.
fn snapshot_of(s: &Server, ids: &[String]) -> BTreeMap<String, Value> {
    let mut c = s.client();
    ids.iter()
        .map(|id| {
            let inst = c.call("GET_INSTANCE", json!({"instance_id": id}));
            let hist = c.call("GET_HISTORY", json!({"instance_id": id, "limit": 1000}));
            let v = match (inst, hist) {
                (Ok(i), Ok(h)) => json!({"state": i["state"], "wal_offset": i["wal_offset"],
                    "context": i["context"], "history": h}),
                (Err(e), _) | (_, Err(e)) => json!({"error": e.code()}),
            };
            (id.clone(), v)
        })
        .collect()
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[test]
fn a_replica_converges_mirrors_offsets_and_refuses_writes() {
    let (p, _pd) = primary("");
    let mut w = p.client();
    put_machine(&mut w);
    let ids = ids("a", 30);
    for (i, id) in ids.iter().enumerate() {
        create_paid(&mut w, id);
        touch(&mut w, id, i as u64).unwrap();
    }
    let (r, _rd) = replica_of(&p, "r1", "");
    converge(&p, &r);
    let want = snapshot_of(&p, &ids);
    assert_eq!(
        snapshot_of(&r, &ids),
        want,
        "replica state equals the primary's"
    );

    // Live entries follow.
    touch(&mut w, &ids[0], 99).unwrap();
    converge(&p, &r);
    assert_eq!(snapshot_of(&r, &ids[..1]), snapshot_of(&p, &ids[..1]));

    // Reads work, writes are refused, roles show.
    let mut rc = r.client();
    assert_eq!(rc.hello_result().unwrap()["role"], "replica");
    assert_eq!(rc.call("INFO", json!({})).unwrap()["role"], "replica");
    assert_eq!(err_code(touch(&mut rc, &ids[0], 1)), "READ_ONLY_MODE");
    assert_eq!(
        err_code(Ok::<_, ClientError>(json!(null)).and(create_err(&mut rc))),
        "READ_ONLY_MODE"
    );
    let batch = json!({"mode": "atomic", "ops": [{"op": "GET_INSTANCE", "params": {"instance_id": ids[0]}},
        {"op": "APPLY_EVENT", "params": {"instance_id": ids[0], "event": "touch"}}]});
    assert_eq!(err_code(rc.call("BATCH", batch)), "READ_ONLY_MODE");
    assert_eq!(
        p.client().call("INFO", json!({})).unwrap()["role"],
        "primary"
    );

    // Status and metrics on both sides.
    let ps = status(&p);
    assert_eq!(ps["role"], "primary");
    assert_eq!(ps["epoch"], 1);
    assert_eq!(ps["replicas"][0]["replica_id"], "r1");
    let rs = status(&r);
    assert_eq!(
        (rs["role"].as_str(), rs["lag_entries"].as_u64()),
        (Some("replica"), Some(0))
    );
    let m = scrape(&p);
    assert_eq!(m.get("svc_replication_connected_replicas", &[]), 1.0);
    assert!(m.get("svc_replication_entries_sent_total", &[]) >= 92.0);
    let acked = m.get(
        "svc_replication_replica_last_acked_sequence",
        &[("replica_id", "r1")],
    );
    assert_eq!(acked, ps["positions"]["0"].as_f64().unwrap());
    assert_eq!(
        m.get(
            "svc_replication_replica_lag_entries",
            &[("replica_id", "r1")]
        ),
        0.0
    );
    let rm = scrape(&r);
    assert_eq!(rm.get("svc_replication_lag_entries", &[]), 0.0);
    assert_eq!(rm.get("svc_replication_lag_seconds", &[]), 0.0);
}

fn create_err(c: &mut Client) -> Result<Value, ClientError> {
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": "nope", "context": {"total": 1}}),
    )
}

#[test]
fn a_replica_subscriber_receives_pushes_as_entries_apply() {
    let (p, _pd) = primary("");
    let mut w = p.client();
    put_machine(&mut w);
    create_paid(&mut w, "s-1");
    let (r, _rd) = replica_of(&p, "r1", "");
    converge(&p, &r);
    let mut sub = r.client();
    sub.call("WATCH_ALL", json!({"events": ["touch"]})).unwrap();
    let applied = touch(&mut w, "s-1", 7).unwrap();
    let push = sub.recv_push().unwrap();
    assert_eq!(push["instance_id"], "s-1");
    assert_eq!(push["payload"], json!({"i": 7}));
    assert_eq!(push["wal_offset"], applied["wal_offset"]);
}

#[test]
fn sigkill_of_replica_and_primary_under_load_loses_and_repeats_nothing() {
    let (mut p, _pd) = primary("");
    let mut w = p.client();
    put_machine(&mut w);
    // Enough instances that none gets near HISTORY_PER_INSTANCE_MAX (1000) touches, whatever
    // the speed: older items would leave the history and could not be checked.
    let ids = ids("k", 64);
    for id in &ids {
        create_paid(&mut w, id);
    }
    let (mut r, _rd) = replica_of(&p, "r1", "");
    let load = Load::start(vec![p.addr], ids.clone());
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(300 + 137 * round));
        r.kill();
        std::thread::sleep(Duration::from_millis(100));
        r.relaunch().unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    p.kill(); // the primary too, mid-load
    p.relaunch().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    r.kill(); // and both
    p.kill();
    p.relaunch().unwrap();
    r.relaunch().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let acked = load.finish();
    assert!(acked.len() > 50, "the load ran: {}", acked.len());
    converge(&p, &r);
    assert_present_once_within(&p, &acked, ACKED_PER_INSTANCE_MAX);
    assert_eq!(
        snapshot_of(&r, &ids),
        snapshot_of(&p, &ids),
        "histories agree"
    );
}

#[test]
fn promotion_keeps_offsets_and_a_cursor_resumes_without_gap_or_duplicate() {
    let (mut p, _pd) = primary("");
    let mut w = p.client();
    put_machine(&mut w);
    create_paid(&mut w, "c-1");
    let (r, _rd) = replica_of(&p, "r1", "");
    let mut sub = p.client();
    sub.call("WATCH_ALL", json!({"events": ["touch"]})).unwrap();
    for i in 0..5 {
        touch(&mut w, "c-1", i).unwrap();
    }
    let seen: Vec<Value> = (0..5).map(|_| sub.recv_push().unwrap()).collect();
    let cursor = seen[2]["cursor"].as_str().unwrap().to_string();
    converge(&p, &r);
    let last_offset = seen[4]["wal_offset"].as_u64().unwrap();
    p.kill();

    let mut rc = r.client();
    let promoted = rc.call("PROMOTE", json!({})).unwrap();
    assert_eq!(promoted["role"], "primary");
    assert_eq!(promoted["epoch"], 2);
    assert_eq!(rc.call("INFO", json!({})).unwrap()["role"], "primary");
    let after = touch(&mut rc, "c-1", 5).unwrap();
    assert!(
        after["wal_offset"].as_u64().unwrap() > last_offset,
        "offsets continue: {after}"
    );
    // The cursor taken on the old primary resumes on the new one: events 3, 4, 5.
    let mut again = r.watcher(json!({"events": ["touch"], "from_cursor": cursor}));
    let got: Vec<u64> = (0..3)
        .map(|_| again.recv_push().unwrap()["payload"]["i"].as_u64().unwrap())
        .collect();
    assert_eq!(got, vec![3, 4, 5]);
    assert!(again
        .next_push(Some(Duration::from_millis(300)))
        .unwrap()
        .is_none());
    assert_eq!(err_code(rc.call("PROMOTE", json!({}))), "BAD_REQUEST");
}

#[test]
fn a_former_primary_rejoins_as_a_replica_and_drops_its_unreplicated_tail() {
    let (mut p, _pd) = primary("");
    let mut w = p.client();
    put_machine(&mut w);
    let ids = ids("t", 4);
    for id in &ids {
        create_paid(&mut w, id);
    }
    let (mut r, _rd) = replica_of(&p, "r1", "");
    converge(&p, &r);
    r.kill();
    // Writes that never reach the replica.
    for i in 0..7 {
        touch(&mut w, &ids[0], 100 + i).unwrap();
    }
    p.kill();
    // The replica comes back (its primary is gone) and is promoted; new writes.
    r.relaunch().unwrap();
    let mut rc = r.client();
    rc.call("PROMOTE", json!({})).unwrap();
    touch(&mut rc, &ids[1], 1).unwrap();
    touch(&mut rc, &ids[0], 2).unwrap();
    // The old primary restarts as a replica of the new one.
    p.rewrite_config(&replica_config(&r.addr.to_string(), "old-primary", ""));
    p.relaunch().unwrap();
    converge(&r, &p);
    assert_eq!(snapshot_of(&p, &ids), snapshot_of(&r, &ids), "one history");
    let h = p
        .client()
        .call("GET_HISTORY", json!({"instance_id": ids[0], "limit": 100}))
        .unwrap();
    assert!(
        !h.to_string().contains("\"i\":100"),
        "the unreplicated tail is gone: {h}"
    );
    let m = scrape(&p);
    assert_eq!(m.get("svc_replication_truncated_entries_total", &[]), 7.0);
    assert!(p.log().contains("that the primary does not have"));
}

#[test]
fn a_replica_that_starts_after_compaction_converges_from_a_snapshot() {
    let (p, _pd) = primary(
        "[storage]\nsegment_bytes = 1048576\nsnapshot_every_entries = 500\nretain_bytes = 0\nfsync = \"never\"",
    );
    let mut w = p.client();
    put_machine(&mut w);
    let ids = ids("z", 20);
    for id in &ids {
        create_paid(&mut w, id);
    }
    let blob = "x".repeat(900);
    for i in 0..3000u64 {
        w.call(
            "APPLY_EVENT",
            json!({"instance_id": ids[i as usize % 20], "event": "touch", "payload": {"i": i, "b": blob}}),
        )
        .unwrap();
    }
    let info = w.call("INFO", json!({})).unwrap();
    let oldest = info["shard_details"][0]["wal_oldest_offset"]
        .as_u64()
        .unwrap_or(0);
    assert!(oldest > 1, "the primary compacted its log: {info}");
    let (r, _rd) = replica_of(&p, "late", "[storage]\nfsync = \"never\"");
    converge(&p, &r);
    assert!(
        r.log().contains("installing the primary's snapshot"),
        "{}",
        r.log()
    );
    let pick: Vec<String> = ids.iter().step_by(5).cloned().collect();
    assert_eq!(
        snapshot_of(&r, &pick)
            .into_iter()
            .map(|(k, v)| (
                k,
                (
                    v["state"].clone(),
                    v["wal_offset"].clone(),
                    v["context"].clone()
                )
            ))
            .collect::<Vec<_>>(),
        snapshot_of(&p, &pick)
            .into_iter()
            .map(|(k, v)| (
                k,
                (
                    v["state"].clone(),
                    v["wal_offset"].clone(),
                    v["context"].clone()
                )
            ))
            .collect::<Vec<_>>()
    );
}

/// A replica beyond retention catches up from a snapshot of several 4 MiB parts, streamed from
/// the primary's file into the replica's (format 2); a replica that reads format 1 only (one
/// that does not say `snapshot_versions`) is refused with an `error` frame naming both formats.
#[test]
fn a_replica_catches_up_from_a_streamed_snapshot_and_an_older_one_is_refused() {
    let (p, _pd) = primary(
        "[storage]\nsegment_bytes = 1048576\nsnapshot_every_entries = 2000\nretain_bytes = 0\nfsync = \"never\"",
    );
    let mut w = p.client();
    put_machine(&mut w);
    let ids = ids("s", 100);
    for id in &ids {
        create_paid(&mut w, id);
    }
    let blob = "y".repeat(1500);
    for i in 0..5000u64 {
        w.call(
            "APPLY_EVENT",
            json!({"instance_id": ids[i as usize % 100], "event": "touch", "payload": {"i": i, "b": blob}}),
        )
        .unwrap();
    }
    p.wait_for_log("snapshot at offset", 2);
    let info = w.call("INFO", json!({})).unwrap();
    assert!(
        info["shard_details"][0]["wal_oldest_offset"].as_u64() > Some(1),
        "{info}"
    );

    let mut old = p.client();
    old.call(
        "REPLICATE",
        json!({"replica_id": "old", "epoch": 1, "positions": {"0": 0}}),
    )
    .unwrap();
    let refused = loop {
        let m = old.read_message().expect("a stream frame");
        if m["kind"] == "error" {
            break m["message"].as_str().unwrap_or_default().to_string();
        }
    };
    assert!(
        refused.contains("snapshot format 2")
            && refused.contains("[1]")
            && refused.contains("upgrade replicas first"),
        "{refused}"
    );

    let (r, _rd) = replica_of(&p, "late", "[storage]\nfsync = \"never\"");
    converge(&p, &r);
    let log = r.log();
    assert!(log.contains("receiving the primary's snapshot"), "{log}");
    assert!(log.contains("format 2"), "{log}");
    let sent = p.log();
    let bytes: u64 = (sent.lines())
        .filter_map(|l| l.split("sending the snapshot at offset ").nth(1))
        .filter_map(|rest| rest.split(" (").nth(1)?.split(' ').next()?.parse().ok())
        .next_back()
        .expect("the primary logged the snapshot it sent");
    assert!(
        bytes > 4 * 1024 * 1024,
        "a snapshot of two parts or more: {bytes} bytes"
    );
    assert_eq!(snapshot_of(&r, &ids), snapshot_of(&p, &ids));
    // The replica's own snapshots load after a restart too (its log starts at the snapshot).
    let mut r = r;
    r.kill();
    r.restart_after_kill();
    assert_eq!(snapshot_of(&r, &ids), snapshot_of(&p, &ids));
}

#[test]
fn sync_mode_times_out_on_a_stopped_replica_and_the_write_is_committed() {
    let (p, _pd) = primary("[replication]\nmode = \"sync\"\nsync_timeout_ms = 400");
    let (r, _rd) = replica_of(&p, "r1", "");
    converge(&p, &r);
    let mut w = p.client();
    put_machine(&mut w);
    // With the replica attached, sync writes succeed.
    let t = Instant::now();
    create_paid(&mut w, "y-1");
    touch(&mut w, "y-1", 1).unwrap();
    assert!(t.elapsed() < Duration::from_millis(400 * 2));
    converge(&p, &r);
    r.signal(libc::SIGSTOP);
    let t = Instant::now();
    let e = touch(&mut w, "y-1", 2).unwrap_err();
    let took = t.elapsed();
    r.signal(libc::SIGCONT);
    assert_eq!(e.code(), Some("SYNC_TIMEOUT"), "{e:?}");
    let body = format!("{e:?}");
    assert!(body.contains("committed"), "{body}");
    assert!(took >= Duration::from_millis(380), "{took:?}");
    assert!(took < Duration::from_millis(3000), "{took:?}");
    // Committed: the primary shows it, and so does the replica once it runs again.
    let h = w
        .call("GET_HISTORY", json!({"instance_id": "y-1", "limit": 10}))
        .unwrap();
    assert!(h.to_string().contains("\"i\":2"), "{h}");
    assert!(scrape(&p).get("svc_replication_sync_timeouts_total", &[]) >= 1.0);
    converge(&p, &r);
}

/// A write answered `SYNC_TIMEOUT` and resent with its idempotency key is the same write: the
/// resend's answer passes the same release gate as the first, so it is `SYNC_TIMEOUT` again
/// while no replica holds the entry (alone, in a BATCH, over HTTP), and `ok` (not applied
/// again) once one does. Before the gate covered resends, the resend was `ok` at once: an
/// acknowledged write that a failover then lost.
#[test]
fn a_resent_sync_timed_out_write_is_never_ok_before_a_replica_holds_it() {
    let cfg = "[replication]\nmode = \"sync\"\nsync_timeout_ms = 300\n[http]\nenabled = true";
    let (p, _pd) = primary(cfg);
    let (r, _rd) = replica_of(&p, "r1", "");
    converge(&p, &r);
    let mut w = p.client();
    put_machine(&mut w);
    create_paid(&mut w, "k-1");
    converge(&p, &r);
    r.signal(libc::SIGSTOP);
    let apply = json!({"instance_id": "k-1", "event": "touch", "payload": {"i": 1},
        "idempotency_key": "K"});
    let create_k = json!({"machine": "order", "version": 1, "id": "k-2", "context": {},
        "idempotency_key": "C"});
    let batch = json!({"mode": "atomic", "ops": [{"op": "APPLY_EVENT", "params": apply}]});
    let timed_out = |w: &mut Client, op: &str, params: &Value| {
        let t = Instant::now();
        let e = w.call(op, params.clone()).unwrap_err();
        assert_eq!(e.code(), Some("SYNC_TIMEOUT"), "{op} {params}: {e:?}");
        assert!(t.elapsed() >= Duration::from_millis(250), "{op}: it waited");
    };
    timed_out(&mut w, "APPLY_EVENT", &apply);
    timed_out(&mut w, "CREATE_INSTANCE", &create_k);
    for _ in 0..2 {
        timed_out(&mut w, "APPLY_EVENT", &apply);
        timed_out(&mut w, "CREATE_INSTANCE", &create_k);
    }
    timed_out(&mut w, "BATCH", &batch);
    let mut h = common::http::Http::connect(p.http_addr.expect("http listener"));
    let body = json!({"event": "touch", "payload": {"i": 1}}).to_string();
    let key = [("Idempotency-Key", "K")];
    let resent = h.request("POST", "/instances/k-1/events", &key, Some(body.as_bytes()));
    assert_ne!(resent.status, 200, "HTTP resend: {}", resent.text());
    assert_eq!(resent.code(), "SYNC_TIMEOUT", "{}", resent.text());
    // A replica holds them now: the resends are ok, and were not applied again.
    r.signal(libc::SIGCONT);
    converge(&p, &r);
    let again = w.call("APPLY_EVENT", apply.clone()).unwrap();
    assert_eq!(again["applied"], false, "{again}");
    assert_eq!(
        w.call("CREATE_INSTANCE", create_k).unwrap()["applied"],
        false
    );
    let h = w
        .call("GET_HISTORY", json!({"instance_id": "k-1", "limit": 10}))
        .unwrap();
    let touches = h["events"].as_array().unwrap().iter();
    assert_eq!(touches.filter(|e| e["event"] == "touch").count(), 1, "{h}");
}

#[test]
fn promotion_after_the_primary_dies_keeps_every_sync_acknowledged_write() {
    let (mut p, _pd) = primary("[replication]\nmode = \"sync\"\nsync_timeout_ms = 5000");
    let (r, _rd) = replica_of(&p, "r1", "");
    converge(&p, &r);
    let mut w = p.client();
    put_machine(&mut w);
    let ids = ids("q", 4);
    let mut acked = Vec::new();
    for id in &ids {
        create_paid(&mut w, id);
    }
    for i in 0..40u64 {
        touch(&mut w, &ids[i as usize % 4], i).unwrap();
        acked.push((ids[i as usize % 4].clone(), i, Instant::now()));
    }
    p.kill();
    r.client().call("PROMOTE", json!({})).unwrap();
    assert_present_once_within(&r, &acked, ACKED_PER_INSTANCE_MAX);
}

#[test]
fn a_slow_replica_is_dropped_counted_and_catches_up() {
    let (p, _pd) = primary("[replication]\nfanout_max = 16\n[storage]\nfsync = \"never\"");
    let mut w = p.client();
    put_machine(&mut w);
    create_paid(&mut w, "l-1");
    let (r, _rd) = replica_of(&p, "slow", "");
    converge(&p, &r);
    r.signal(libc::SIGSTOP);
    for i in 0..300 {
        touch(&mut w, "l-1", i).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while scrape(&p).get("svc_replication_slow_replica_disconnects_total", &[]) < 1.0 {
        assert!(Instant::now() < deadline, "never dropped:\n{}", p.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    r.signal(libc::SIGCONT);
    converge(&p, &r);
    assert_eq!(
        snapshot_of(&r, &["l-1".into()]),
        snapshot_of(&p, &["l-1".into()])
    );
}

#[test]
fn the_link_authenticates_and_a_bad_token_does_not_follow() {
    // sha256("repl-secret")
    let digest = sha256_hex("repl-secret");
    let (p, _pd) = primary(&format!(
        "[auth]\nrequired = true\ntoken_hashes = []\n[replication]\ntoken_hashes = [\"{digest}\"]"
    ));
    let (r, _rd) = replica_of(&p, "auth", "[replication]\nauth_token = \"repl-secret\"");
    converge_authed(&p, &r);
    let (bad, _bd) = replica_with_data(&p, "bad", "[replication]\nauth_token = \"wrong\"");
    bad.wait_for_log("AUTH refused", 1);
    let s = bad.client().call("REPLICATION_STATUS", json!({})).unwrap();
    assert_eq!(s["connected"], false);
}

fn converge_authed(_p: &Server, r: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while status(r)["connected"] != true {
        assert!(Instant::now() < deadline, "never connected:\n{}", r.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sha256_hex(s: &str) -> String {
    let (code, out, _) = run_to_exit_stdin(s);
    assert_eq!(code, 0);
    out.trim().to_string()
}

fn run_to_exit_stdin(input: &str) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(common::cli_bin());
    common::run::output_with_stdin(cmd.arg("hash-token"), input)
}

#[test]
fn stale_epochs_and_other_members_are_refused_clearly() {
    let (p, _pd) = primary("");
    let mut c = p.client();
    let newer = c.call(
        "REPLICATE",
        json!({"replica_id": "x", "epoch": 99, "positions": {"0": 0}}),
    );
    assert_eq!(err_code(newer), "STALE_EPOCH");
    let mut c = p.client();
    let shards = c.call(
        "REPLICATE",
        json!({"replica_id": "x", "epoch": 1, "positions": {"0": 0, "1": 0}}),
    );
    assert_eq!(err_code(shards), "BAD_REQUEST");
    // A standalone server is not a primary.
    let (s, _sd) = Server::start("");
    assert_eq!(
        err_code(s.client().call(
            "REPLICATE",
            json!({"replica_id": "x", "positions": {"0": 0}})
        )),
        "BAD_REQUEST"
    );
    assert_eq!(
        s.client().call("REPLICATION_STATUS", json!({})).unwrap()["role"],
        "standalone"
    );
    assert_eq!(
        err_code(s.client().call("PROMOTE", json!({}))),
        "BAD_REQUEST"
    );
    // A replica holding data of another shard count refuses to follow, naming both counts.
    let (two, dir) = Server::start(&format!("[shards]\ncount = 2\n{SMALL_SEGMENTS}"));
    drop(two);
    let r = Server::start_in(
        dir.path(),
        &replica_config(&p.addr.to_string(), "two", "[shards]\ncount = 2"),
    )
    .unwrap();
    r.wait_for_log("shard counts differ: the primary has 1, the replica 2", 1);
}

/// The link over mutual TLS: the primary speaks only TLS and wants a client certificate; the
/// replica trusts the CA and presents its certificate. A machine loaded on the primary at
/// start-up (storage.definitions_dir) reaches the replica through the stream.
#[test]
fn the_link_runs_over_mutual_tls() {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let pki = temp_dir();
    let d = pki.path();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, "repl CA");
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let root = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(d.join("ca.pem"), root.pem()).unwrap();
    let leaf = |name: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &root).unwrap();
        std::fs::write(d.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(d.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    };
    leaf(
        "server",
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    leaf("replica", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let defs = d.join("defs");
    std::fs::create_dir(&defs).unwrap();
    let def = json!({"machine": "order", "version": 1, "definition": order_definition()});
    std::fs::write(defs.join("order.json"), def.to_string()).unwrap();
    let path = |f: &str| d.join(f).display().to_string();
    let (p, _pd) = primary(&format!(
        "[tls]\nenabled = true\ncert_path = \"{}\"\nkey_path = \"{}\"\nclient_ca_path = \"{}\"\n\
         [storage]\ndefinitions_dir = \"{}\"",
        path("server.pem"),
        path("server.key"),
        path("ca.pem"),
        defs.display()
    ));
    let (r, _rd) = replica_of(
        &p,
        "tls",
        &format!(
            "[replication]\ntls_ca_path = \"{}\"\ntls_cert_path = \"{}\"\ntls_key_path = \"{}\"",
            path("ca.pem"),
            path("replica.pem"),
            path("replica.key")
        ),
    );
    converge_authed(&p, &r);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = r
            .client()
            .call("GET_MACHINE", json!({"machine": "order", "version": 1}));
        if got.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "{got:?}\n{}", r.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Without the client certificate the primary refuses the link.
    let (bad, _bd) = replica_with_data(
        &p,
        "no-cert",
        &format!("[replication]\ntls_ca_path = \"{}\"", path("ca.pem")),
    );
    bad.wait_for_log("following", 1);
    assert_eq!(status(&bad)["connected"], false);
}

/// The largest record the config allows (a request at `network.max_frame_bytes`, which may be
/// at most one record's limit) is acknowledged on the primary and reaches the replica whole:
/// every limit on the way (record, replication frame, the replica's reader) holds it.
#[test]
fn the_largest_record_the_config_allows_reaches_a_replica() {
    let limit = smdb::limits::REQUEST_FRAME_BYTES_MAX;
    // Segments large enough for the largest record (the default 64 MiB holds slightly less).
    let storage = "[storage]\nsegment_bytes = 134217728\nfsync = \"never\"";
    let cfg = format!(
        "[network]\nmax_frame_bytes = {limit}\n\
         [replication]\nrole = \"primary\"\nheartbeat_ms = 200\n{METRICS}\n{storage}"
    );
    let (p, _pd) = Server::start(&fixed_port(&cfg));
    let (r, _rd) = replica_of(
        &p,
        "r-big",
        &format!("[network]\nmax_frame_bytes = {limit}\n{storage}"),
    );
    let mut w = p.client();
    put_machine(&mut w);
    // The request frame is within a few hundred bytes of the limit.
    let blob = "x".repeat(limit as usize - 400);
    let created = w.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": "big", "context": {"blob": blob, "total": 1}}),
    );
    assert!(created.is_ok(), "{:?}", created.err());
    let too_big = "x".repeat(limit as usize);
    let refused = w.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": "bigger", "context": {"blob": too_big}}),
    );
    assert!(refused.is_err(), "a frame over the limit is refused");
    let mut w = p.client();
    w.call(
        "APPLY_EVENT",
        json!({"instance_id": "big", "event": "pay", "payload": {"amount": 1}}),
    )
    .unwrap();
    converge(&p, &r);
    let got = r
        .client()
        .call("GET_INSTANCE", json!({"id": "big"}))
        .unwrap();
    assert_eq!(got["state"], "paid");
    assert_eq!(
        got["context"]["blob"].as_str().map(str::len),
        Some(blob.len())
    );
    assert_eq!(status(&r)["connected"], true);
}
