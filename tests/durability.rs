//! Crash safety against the real binary: SIGKILL during pipelined writes, torn and corrupt
//! logs, snapshots and compaction, idempotency across restarts.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::pipeline::write_windowed;
use common::*;
use serde_json::{json, Value};

const CONNECTIONS: usize = 8;
const WINDOW: usize = 8;

fn counter_machine(c: &mut Client) {
    let def = json!({"states": ["on"], "initial": "on",
        "transitions": [{"from": "on", "event": "inc", "to": "on"}]});
    let _ = c.call(
        "PUT_MACHINE",
        json!({"machine": "counter", "version": 1, "definition": def}),
    );
}

fn ensure_instance(c: &mut Client, id: &str) {
    let p = json!({"machine": "counter", "version": 1, "id": id, "context": {"n": 0}});
    match c.call("CREATE_INSTANCE", p) {
        Ok(_) => {}
        Err(e) if e.code() == Some("INSTANCE_EXISTS") => {}
        Err(e) => panic!("create {id}: {e}"),
    }
}

/// One writer: pipelines `inc` events on its own instance, recording the highest `n` the
/// server acknowledged. Stops at the first I/O error (the server was killed).
fn writer(
    addr: std::net::SocketAddr,
    id: String,
    start: u64,
    acked: Arc<Mutex<HashMap<String, u64>>>,
) {
    let never = AtomicBool::new(false);
    let request = |n| {
        let p = json!({"instance_id": id, "event": "inc", "payload": {"n": n}});
        ("APPLY_EVENT", p)
    };
    write_windowed(
        addr,
        "crash-writer",
        WINDOW,
        start,
        &never,
        request,
        |n, resp| {
            assert_eq!(resp["result"]["context"]["n"], n);
            acked.lock().unwrap().insert(id.clone(), n);
        },
    );
}

fn check_acked_present(s: &Server, acked: &HashMap<String, u64>) {
    let mut c = s.client();
    for (id, n) in acked {
        let g = c.call("GET_INSTANCE", json!({"id": id})).unwrap();
        let have = g["context"]["n"].as_u64().unwrap();
        assert!(
            have >= *n,
            "{id}: acknowledged n={n} but recovered n={have}"
        );
        assert_eq!(
            g["event_count"].as_u64().unwrap(),
            have,
            "{id}: one event per n"
        );
    }
}

#[test]
fn sigkill_during_pipelined_writes_loses_nothing_acknowledged() {
    sigkill_rounds("[shards]\ncount = 2", 20, 1000);
}

/// The same with every shard's executor serving connections itself (each front routes the
/// other shard's instances across cores): INFO counts one front per shard.
#[test]
fn sigkill_with_fronts_on_the_shards_loses_nothing_acknowledged() {
    let extra = "[network]\nfronts_on_shards = true\n[shards]\ncount = 2";
    let s = sigkill_rounds(extra, 8, 400);
    let info = s.client().call("INFO", json!({})).unwrap();
    assert_eq!(info["acceptor_cores"], 2, "{info}");
    assert_eq!(info["shards"], 2, "{info}");
}

/// `rounds` of pipelined writers SIGKILLed at a random moment and the server restarted: every
/// acknowledged event is there after each restart, and at least `least` were acknowledged.
fn sigkill_rounds(extra: &str, rounds: usize, least: u64) -> Server {
    let (mut s, _dir) = Server::start_owning(temp_dir(), extra, &[]);
    let mut acked_total: HashMap<String, u64> = HashMap::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..rounds {
        let mut c = s.client();
        counter_machine(&mut c);
        let ids: Vec<String> = (0..CONNECTIONS).map(|i| format!("ctr-{i}")).collect();
        for id in &ids {
            ensure_instance(&mut c, id);
        }
        check_acked_present(&s, &acked_total);
        // Resume every writer from the recovered value so n stays one per event.
        let mut starts = HashMap::new();
        for id in &ids {
            let g = c.call("GET_INSTANCE", json!({"id": id})).unwrap();
            starts.insert(id.clone(), g["context"]["n"].as_u64().unwrap());
        }
        let acked = Arc::new(Mutex::new(HashMap::new()));
        let threads: Vec<_> = ids
            .iter()
            .map(|id| {
                let (addr, id, acked) = (s.addr, id.clone(), acked.clone());
                let start = starts[&id];
                std::thread::spawn(move || writer(addr, id, start, acked))
            })
            .collect();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(50 + rng % 250));
        s.kill();
        for t in threads {
            t.join().expect("writer saw a wrong answer");
        }
        let acked = acked.lock().unwrap().clone();
        assert!(!acked.is_empty() || round > 0, "writers made progress");
        for (id, n) in acked {
            acked_total.insert(id, n);
        }
        s.restart_after_kill();
    }
    check_acked_present(&s, &acked_total);
    let total: u64 = acked_total.values().sum();
    assert!(
        total >= least,
        "the writers were acknowledged only {total} events in {rounds} rounds"
    );
    s
}

fn segments(data: &Path, shard: u32) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data.join(format!("data/shard-{shard}/wal")))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

fn fill(c: &mut Client, instances: usize, events: usize) {
    counter_machine(c);
    for i in 0..instances {
        ensure_instance(c, &format!("f{i}"));
    }
    let mut sent = 0;
    for e in 0..events {
        let id = format!("f{}", e % instances);
        let n = (e / instances + 1) as u64;
        c.send(
            "APPLY_EVENT",
            &json!({"instance_id": id, "event": "inc",
            "payload": {"n": n, "pad": "x".repeat(200)}}),
        )
        .unwrap();
        sent += 1;
        if sent == 64 {
            for _ in 0..sent {
                assert_eq!(c.recv_response().unwrap()["status"], "ok");
            }
            sent = 0;
        }
    }
    for _ in 0..sent {
        assert_eq!(c.recv_response().unwrap()["status"], "ok");
    }
}

fn snapshot_all(c: &mut Client, instances: usize) -> Vec<Value> {
    (0..instances)
        .map(|i| {
            c.call("GET_INSTANCE", json!({"id": format!("f{i}")}))
                .unwrap()
        })
        .collect()
}

#[test]
fn garbage_after_the_tail_is_truncated_and_the_server_keeps_going() {
    let dir = temp_dir();
    let mut s = Server::start_in(dir.path(), "").unwrap();
    let mut c = s.client();
    fill(&mut c, 10, 300);
    let before = snapshot_all(&mut c, 10);
    s.kill();
    let newest = segments(dir.path(), 0).pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let junk: Vec<u8> = (0..777u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    // Find the end of data (zero padding) and put garbage there.
    let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
    bytes.truncate(end);
    bytes.extend_from_slice(&junk);
    std::fs::write(&newest, &bytes).unwrap();
    s.restart_after_kill();
    let mut c = s.client();
    assert_eq!(
        snapshot_all(&mut c, 10),
        before,
        "every committed entry kept"
    );
    fill(&mut c, 10, 50);
    let after_writes = snapshot_all(&mut c, 10);
    s.restart_after_kill();
    let mut c = s.client();
    assert_eq!(
        snapshot_all(&mut c, 10),
        after_writes,
        "and it restarts again"
    );
}

#[test]
fn corrupt_byte_in_an_older_segment_refuses_start_naming_file_and_offset() {
    let dir = temp_dir();
    let extra = "[storage]\nsegment_bytes = 1048576\nsnapshot_every_entries = 100000000";
    let mut s = Server::start_in(dir.path(), extra).unwrap();
    let mut c = s.client();
    fill(&mut c, 10, 12_000); // ~3 MiB of log: several 1 MiB segments
    s.kill();
    let segs = segments(dir.path(), 0);
    assert!(segs.len() >= 3, "expected several segments, got {segs:?}");
    let victim = &segs[0];
    let mut bytes = std::fs::read(victim).unwrap();
    let at = 4096 + 5000;
    bytes[at] ^= 0x5a;
    std::fs::write(victim, &bytes).unwrap();
    let err = Server::start_in(dir.path(), extra)
        .err()
        .expect("start-up must be refused");
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "names the file: {err}");
    assert!(err.contains("offset"), "names the offset: {err}");
}

#[test]
fn compaction_then_restart_gives_identical_instances() {
    let dir = temp_dir();
    let extra = "[storage]\nsegment_bytes = 1048576\nsnapshot_every_entries = 2000\n\
                 retain_bytes = 1048576";
    let mut s = Server::start_in(dir.path(), extra).unwrap();
    let mut c = s.client();
    fill(&mut c, 50, 20_000);
    let before = snapshot_all(&mut c, 50);
    // Snapshots run in the background; wait until old segments are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // The log started at offset 1; compaction has run once that segment is gone.
    let first_segment_is_gone = |d: &Path| {
        segments(d, 0)
            .first()
            .is_some_and(|p| !p.ends_with("00000000000000000001.seg"))
    };
    while !first_segment_is_gone(dir.path()) {
        assert!(
            std::time::Instant::now() < deadline,
            "compaction never removed a segment: {:?}",
            segments(dir.path(), 0)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let snaps = std::fs::read_dir(dir.path().join("data/shard-0/snapshots"))
        .unwrap()
        .count();
    assert!(snaps >= 1, "a snapshot was written");
    s.restart_after_kill();
    let mut c = s.client();
    assert_eq!(snapshot_all(&mut c, 50), before);
    let h = c.call("GET_HISTORY", json!({"id": "f0"})).unwrap();
    assert!(
        !h["events"].as_array().unwrap().is_empty(),
        "history survives compaction"
    );
}

/// The snapshot files of shard 0, oldest first.
fn snapshot_files(data: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data.join("data/shard-0/snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .collect();
    v.sort();
    v
}

/// Waits until shard 0 holds two snapshots, the newer one at or after `offset`.
fn two_snapshots_after(data: &Path, offset: u64) -> Vec<PathBuf> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let snaps = snapshot_files(data);
        let newest = (snaps.last())
            .and_then(|p| p.file_stem()?.to_str()?.parse::<u64>().ok())
            .unwrap_or(0);
        if snaps.len() >= 2 && newest >= offset {
            return snaps;
        }
        assert!(std::time::Instant::now() < deadline, "snapshots: {snaps:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A damaged newest snapshot (a flipped byte in its payload, then a file cut short) is set
/// aside and the server recovers from the one before it plus the log, to the same state.
#[test]
fn a_corrupt_or_torn_snapshot_falls_back_to_the_previous_one_and_the_log() {
    let dir = temp_dir();
    let extra = "[storage]\nsegment_bytes = 1048576\nsnapshot_every_entries = 1500\n\
                 retain_bytes = 104857600";
    let mut s = Server::start_in(dir.path(), extra).unwrap();
    let mut c = s.client();
    fill(&mut c, 40, 4_000);
    let snaps = two_snapshots_after(dir.path(), 3_000);
    let before = snapshot_all(&mut c, 40);
    s.kill();
    let newest = snaps.last().unwrap().clone();
    let mut bytes = std::fs::read(&newest).unwrap();
    let mid = 4096 + (bytes.len() - 4096) / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&newest, &bytes).unwrap();
    s.restart_after_kill();
    let mut c = s.client();
    assert_eq!(snapshot_all(&mut c, 40), before, "the flipped byte");
    assert!(s.log().contains("payload checksum mismatch"), "{}", s.log());
    assert!(newest.with_extension("snap.corrupt").exists());

    fill(&mut c, 40, 4_000);
    let info = c.call("INFO", json!({})).unwrap();
    let head = info["shard_details"][0]["wal_offset"].as_u64().unwrap();
    let snaps = two_snapshots_after(dir.path(), head - 1_500);
    let before = snapshot_all(&mut c, 40);
    s.kill();
    let newest = snaps.last().unwrap();
    let torn = std::fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .unwrap();
    torn.set_len(torn.metadata().unwrap().len() / 2).unwrap();
    s.restart_after_kill();
    let mut c = s.client();
    assert_eq!(snapshot_all(&mut c, 40), before, "the torn file");
    assert!(s.log().contains("truncated"), "{}", s.log());
}

#[test]
fn idempotency_keys_and_definitions_survive_restart() {
    let dir = temp_dir();
    let mut s = Server::start_in(dir.path(), "[shards]\ncount = 2").unwrap();
    let mut c = s.order_client();
    let create = json!({"machine":"order","version":1,"id":"idem","context":{"total":1},
        "idempotency_key":"c-1"});
    let first = c.call("CREATE_INSTANCE", create.clone()).unwrap();
    let pay = json!({"instance_id":"idem","event":"pay","payload":{"amount":2},
        "idempotency_key":"pay-1"});
    let paid = c.call("APPLY_EVENT", pay.clone()).unwrap();
    s.restart_after_kill();
    let mut c = s.client();
    let again = c.call("CREATE_INSTANCE", create).unwrap();
    assert_eq!(
        (again["applied"].clone(), again["wal_offset"].clone()),
        (json!(false), first["wal_offset"].clone())
    );
    let replay = c.call("APPLY_EVENT", pay).unwrap();
    assert_eq!(replay["applied"], false);
    assert_eq!(replay["wal_offset"], paid["wal_offset"]);
    let m = c.call("LIST_MACHINES", json!({})).unwrap();
    assert_eq!(m["machines"][0]["machine"], "order");
}

#[test]
fn clean_shutdown_flushes_the_log_even_without_fsync() {
    let dir = temp_dir();
    let mut s = Server::start_in(dir.path(), "[storage]\nfsync = \"never\"").unwrap();
    let mut c = s.client();
    fill(&mut c, 5, 500);
    let before = snapshot_all(&mut c, 5);
    assert!(s.terminate().success());
    let s = Server::start_in(dir.path(), "[storage]\nfsync = \"never\"").unwrap();
    let mut c = s.client();
    assert_eq!(snapshot_all(&mut c, 5), before);
}

/// The end of the records in a segment file: where the next record would go.
fn records_end(seg: &[u8]) -> usize {
    use smdb_format::record::{decode, Decoded};
    let mut at = smdb_format::limits::SEGMENT_HEADER_BYTES as usize;
    while let Decoded::Record(h) = decode(&seg[at..]) {
        at += h.size;
    }
    at
}

/// A log entry the state does not fit (an event for an instance that was never created),
/// written into the log behind the server's back, is found at recovery: reads go on, writes
/// are refused naming the entry, and `/health` says which shard diverged, where and why.
#[test]
fn a_log_entry_that_does_not_fit_the_state_stops_writes_and_shows_on_health() {
    let extra = "[shards]\ncount = 1\n[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"";
    let (mut s, _dir) = Server::start(extra);
    let mut c = s.client();
    counter_machine(&mut c);
    ensure_instance(&mut c, "real");
    let head = c.call("INFO", json!({})).unwrap()["wal"]["offset"]
        .as_u64()
        .unwrap();
    drop(c);
    s.kill();
    // Append one valid record (its checksum holds) that applies `inc` to an unknown instance.
    let wal = s.dir.join("data/shard-0/wal");
    let seg_path = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .max()
        .expect("a segment");
    let mut seg = std::fs::read(&seg_path).unwrap();
    let end = records_end(&seg);
    let ghost = shards::engine::Entry::Apply {
        instance_id: "ghost".into(),
        event: "inc".into(),
        from: "on".into(),
        to: "on".into(),
        payload: None,
        idempotency_key: None,
        at_ms: 1,
        machine: None,
        version: None,
        timer: false,
    };
    let mut record = Vec::new();
    let kind = smdb_format::record::KIND_ENTRY;
    smdb_format::record::encode(&mut record, head + 1, kind, &ghost.to_bytes());
    seg[end..end + record.len()].copy_from_slice(&record);
    std::fs::write(&seg_path, &seg).unwrap();
    s.restart_after_kill();
    let mut c = s.client();
    let got = c.call("GET_INSTANCE", json!({"id": "real"})).unwrap();
    assert_eq!(got["state"], "on", "reads go on");
    let p = json!({"instance_id": "real", "event": "inc", "payload": {"n": 1}});
    let err = c.call("APPLY_EVENT", p).unwrap_err();
    assert_eq!(err.code(), Some("WAL_IO_ERROR"), "{err}");
    assert_eq!(err.details()["diverged_at"], head + 1, "{err}");
    assert!(err.to_string().contains("ghost"), "{err}");
    let health = common::scrape::http_get(s.metrics_addr.unwrap(), "/health", &[]);
    assert_eq!(health.status, 503, "{}", health.body);
    let body: Value = serde_json::from_str(&health.body).unwrap();
    assert_eq!(body["status"], "diverged");
    assert_eq!(body["diverged_shards"][0]["offset"], head + 1);
    assert!(
        s.log().contains("does not fit the state"),
        "one error line names it"
    );
}
