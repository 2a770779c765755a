//! The online backup (docs/backup.md, "Taking a backup"): `smdb-cli backup --out DIR` against
//! the real server under concurrent writes, then a server started on a copy of DIR.

mod common;

use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::run::{cli_at, output};
use common::{err_code, temp_dir, Client, Server};
use serde_json::{json, Value};
use shards::routing::Routing;

const SHARDS: u32 = 2;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cli(addr: &str, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = cli_at(addr);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (code, stdout, stderr) = output(&mut cmd);
    Out {
        code,
        stdout,
        stderr,
    }
}

/// An id that routes to `shard`, made from `base`.
fn id_on(base: &str, shard: u32) -> String {
    (0..)
        .map(|k| format!("{base}-{k}"))
        .find(|id| Routing::Hash.shard_for(id, SHARDS) == shard)
        .expect("some id routes there")
}

fn create(c: &mut Client, id: &str) -> Result<Value, common::ClientError> {
    create_padded(c, id, 0)
}

/// An instance whose context carries `pad` bytes (bigger entries: segments fill sooner).
fn create_padded(c: &mut Client, id: &str, pad: usize) -> Result<Value, common::ClientError> {
    let ctx = json!({"total": 1, "pad": "x".repeat(pad)});
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": id, "context": ctx}),
    )
}

fn history(c: &mut Client, id: &str) -> Vec<Value> {
    let r = c
        .call("GET_HISTORY", json!({"id": id, "limit": 1000}))
        .expect("GET_HISTORY");
    r["events"].as_array().cloned().unwrap_or_default()
}

fn exists(c: &mut Client, id: &str) -> bool {
    match c.call("GET_INSTANCE", json!({"id": id})) {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(e.code(), Some("INSTANCE_NOT_FOUND"), "{e:?}");
            false
        }
    }
}

/// What the writer threads did: dependent pairs `(first, second)` acknowledged in that order
/// (on different shards), and per thread the instance they kept touching.
#[derive(Default)]
struct Written {
    pairs: Vec<(String, String)>,
    touched: Vec<String>,
}

/// Writer threads until `stop`: each creates a pair of instances on two shards (the second
/// only after the first was acknowledged, alternating the direction) and touches its own
/// paid instance, so histories grow while the backup runs.
fn writers(
    s: &Server,
    n: usize,
    pad: usize,
    stop: &Arc<AtomicBool>,
    w: &Arc<Mutex<Written>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|t| {
            let (addr, stop, w) = (s.addr, stop.clone(), w.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect_hello(addr, "backup-writer").expect("connect");
                let mine = format!("touch-{t}");
                create(&mut c, &mine).expect("create");
                c.call(
                    "APPLY_EVENT",
                    json!({"instance_id": mine, "event": "pay", "payload": {"amount": 1}}),
                )
                .expect("pay");
                w.lock().unwrap().touched.push(mine.clone());
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let (sa, sb) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
                    let a = id_on(&format!("p{t}-{i}-a"), sa);
                    let b = id_on(&format!("p{t}-{i}-b"), sb);
                    create_padded(&mut c, &a, pad).expect("create a");
                    create_padded(&mut c, &b, pad).expect("create b");
                    w.lock().unwrap().pairs.push((a, b));
                    if i % 8 == 0 {
                        c.call(
                            "APPLY_EVENT",
                            json!({"instance_id": mine, "event": "touch"}),
                        )
                        .expect("touch");
                    }
                    i += 1;
                }
            })
        })
        .collect()
}

/// Copies `from` into `to` (a new directory).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("backup.json")).expect("backup.json"))
        .expect("manifest JSON")
}

/// A server on a copy of the backup at `backup`; its shard heads must be the manifest's.
fn restore(backup: &Path, extra: &str) -> (Server, tempfile::TempDir) {
    let dir = temp_dir();
    copy_dir(backup, &dir.path().join("data"));
    let s = Server::start_in(dir.path(), extra).unwrap_or_else(|e| panic!("restore: {e}"));
    let m = manifest(backup);
    let info = s.client().call("INFO", json!({})).expect("INFO");
    for d in info["shard_details"].as_array().expect("shard_details") {
        let shard = d["shard"].as_u64().unwrap().to_string();
        assert_eq!(
            d["wal_offset"], m["positions"][&shard],
            "shard {shard}: head after restore vs the manifest: {info} {m}"
        );
    }
    (s, dir)
}

/// Takes a backup while `writers` write, once they have written `warm_pairs` pairs (at least
/// 300 ms); checks it against the original once they stopped.
fn backup_under_writes(
    extra: &str,
    pad: usize,
    warm_pairs: usize,
    env: &[(&str, &str)],
    until: impl Fn(&Server) -> bool,
) -> (Server, PathBuf, tempfile::TempDir) {
    let (s, _d) = Server::start(extra);
    let mut c = s.order_client();
    let before: Vec<String> = (0..40).map(|i| format!("before-{i}")).collect();
    for id in &before {
        create(&mut c, id).expect("create before");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let w = Arc::new(Mutex::new(Written::default()));
    let threads = writers(&s, 4, pad, &stop, &w);
    std::thread::sleep(Duration::from_millis(300));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while w.lock().unwrap().pairs.len() < warm_pairs {
        assert!(
            std::time::Instant::now() < deadline,
            "the writers are too slow"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let acked_before: Vec<(String, String)> = w.lock().unwrap().pairs.clone();
    let out_dir = temp_dir();
    let out = out_dir.path().join("b");
    let addr = s.addr.to_string();
    let r = cli(&addr, &["backup", "--out", out.to_str().unwrap()], env);
    assert_eq!(r.code, 0, "backup: {} {}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("positions") && r.stdout.contains("files"),
        "{}",
        r.stdout
    );
    std::thread::sleep(Duration::from_millis(200));
    // The writers go on (at most 30 s) until what the caller waits for has happened.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !until(&s) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    let v = cli(&addr, &["backup", "--verify", out.to_str().unwrap()], &[]);
    assert_eq!(v.code, 0, "verify: {} {}", v.stdout, v.stderr);

    let (r_srv, _rd) = restore(&out, extra);
    let mut rc = r_srv.client();
    for id in &before {
        assert!(
            exists(&mut rc, id),
            "{id}, written before the backup, is missing"
        );
    }
    let w = w.lock().unwrap();
    let (mut present, mut absent) = (0, 0);
    for (i, (a, b)) in w.pairs.iter().enumerate() {
        let (ha, hb) = (exists(&mut rc, a), exists(&mut rc, b));
        assert!(
            !hb || ha,
            "pair {i}: {b} is in the backup without {a}, acknowledged before it"
        );
        if i < acked_before.len() {
            assert!(
                ha && hb,
                "pair {i}: acknowledged before the backup began, missing"
            );
        }
        if hb {
            present += 1
        } else {
            absent += 1
        }
    }
    assert!(
        present > 0 && absent > 0,
        "the cut fell inside the writes: {present} in, {absent} out"
    );
    for id in &w.touched {
        // Events by `seq`: every event the restored history has is the original's.
        let (orig, back) = (history(&mut c, id), history(&mut rc, id));
        assert!(
            !back.is_empty() && back.len() <= orig.len(),
            "{id}: {back:?} vs {orig:?}"
        );
        for e in &back {
            let same = orig.iter().find(|o| o["seq"] == e["seq"]);
            assert_eq!(Some(e), same, "{id}: event {} differs", e["seq"]);
        }
    }
    drop(_d);
    (s, out, out_dir)
}

#[test]
fn a_backup_under_cross_shard_writes_restores_a_consistent_prefix() {
    let extra = "[shards]\ncount = 2\n[storage]\nsnapshot_every_entries = 500";
    let (s, out, _keep) = backup_under_writes(extra, 0, 50, &[], |_| true);
    let m = manifest(&out);
    assert_eq!(m["shards"], 2);
    assert!(m["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["path"].as_str().unwrap().ends_with(".seg")));

    // --verify names a flipped byte in a segment: the largest one's first record (a shard's
    // log after its snapshot may be short on a slow machine, but the two shards' are not both
    // empty: the writers ran past the snapshots' offsets).
    let seg = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .filter(|p| p.ends_with(".seg"))
        .max_by_key(|p| std::fs::metadata(out.join(p)).unwrap().len())
        .filter(|p| std::fs::metadata(out.join(p)).unwrap().len() > 4096 + 64)
        .expect("a segment with records");
    let mut bytes = std::fs::read(out.join(&seg)).unwrap();
    bytes[4096 + 30] ^= 0x01;
    std::fs::write(out.join(&seg), bytes).unwrap();
    let bad = cli(
        &s.addr.to_string(),
        &["backup", "--verify", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(bad.code, 1, "{} {}", bad.stdout, bad.stderr);
    assert!(
        bad.stderr.contains("BACKUP_INVALID") && bad.stderr.contains(&seg),
        "{}",
        bad.stderr
    );

    // A non-empty --out is refused, and left as it was.
    let r = cli(
        &s.addr.to_string(),
        &["backup", "--out", out.to_str().unwrap()],
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
}

/// A backup read slowly while the writers fill segments and the server takes snapshots and
/// compacts: it verifies and restores to a consistent prefix. Whether a compaction falls inside
/// the stream's window depends on the machine's speed (the socket buffers hold megabytes), so
/// the pin itself is proven deterministically in the WAL's unit tests
/// (`a_pin_keeps_its_snapshot_and_the_log_after_it_until_dropped`); here, compaction must at
/// least have run during the test (the writers go on until it has, on a slow machine too).
#[test]
fn compaction_during_a_slow_backup_does_not_break_it() {
    let extra = "[shards]\ncount = 2\n[storage]\nsegment_bytes = 1048576\n\
                 snapshot_every_entries = 300\nretain_bytes = 0";
    let env = [("SMDB_BACKUP_READ_DELAY_MS", "100")];
    let compacted = |s: &Server| s.log().contains("segment(s) covered by the snapshot");
    let (s, _out, _keep) = backup_under_writes(extra, 2000, 400, &env, compacted);
    let log = s.log();
    assert!(log.contains("backup: cut at"), "the cut is logged: {log}");
    assert!(
        log.contains("segment(s) covered by the snapshot"),
        "no compaction ran: {log}"
    );
}

#[test]
fn backup_needs_the_replicate_scope() {
    use common::tokens::{required, token};
    let reader = "backup-reader-token-1";
    let replicator = "backup-replicator-token-2";
    let tokens = [
        token("r", reader, &["read"]),
        token("b", replicator, &["replicate"]),
    ];
    let cfg = format!("[shards]\ncount = 2\n{}", required(&tokens));
    let (s, _d) = Server::start(&cfg);
    let mut c = s.client();
    c.auth(reader).expect("AUTH");
    assert_eq!(err_code(c.call("BACKUP", json!({}))), "FORBIDDEN");
    let out_dir = temp_dir();
    let out = out_dir.path().join("b");
    let addr = s.addr.to_string();
    let r = cli(
        &addr,
        &["--token", reader, "backup", "--out", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("FORBIDDEN"), "{}", r.stderr);
    let out2 = out_dir.path().join("c");
    let r = cli(
        &addr,
        &[
            "--token",
            replicator,
            "backup",
            "--out",
            out2.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
}

/// The response comes before the stream even when the stream is a lone `end` frame (an empty
/// server), and the server closes the connection after it.
#[test]
fn an_empty_servers_backup_is_the_response_then_end() {
    let (s, _d) = Server::start("[shards]\ncount = 2\n");
    let mut c = s.client();
    let id = c.send("BACKUP", &json!({})).unwrap();
    let first = c.read_message().expect("the response");
    assert_eq!(first["type"], "response", "{first}");
    assert_eq!(first["id"], id, "{first}");
    assert_eq!(
        first["result"]["positions"],
        json!({"0": 0, "1": 0}),
        "{first}"
    );
    let end = c.read_message().expect("the end frame");
    assert_eq!(
        (&end["type"], &end["kind"]),
        (&json!("stream"), &json!("end")),
        "{end}"
    );
    assert!(
        c.read_message().is_err(),
        "the connection closes after the end"
    );
}
