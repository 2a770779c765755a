//! `smdb-server restore` (docs/backup.md "Restore") against the real binaries: a
//! backup taken with `smdb-cli backup` plus the archive the server wrote, replayed to the end,
//! to per-shard offsets and to a point in time; a missing archived segment and a non-empty
//! target refused; after a failover, the deposed primary's archived tail not replayed.

mod common;

use std::path::{Path, PathBuf};

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::run::{cli_at, output_ok};
use common::{run_to_exit, temp_dir, Client, Server};
use serde_json::{json, Value};
use smdb_format::archive::ArchivedSegment;

/// 1 MiB segments, closed after 150 ms with entries so the archive keeps up with the head.
/// Instances created after the backup in the archive test (4 KB contexts each).
const AFTER: usize = 1500;

fn config(archive: &Path, shards: u32) -> String {
    format!(
        "[shards]\ncount = {shards}\n[storage]\nsegment_bytes = 1048576\n\
         archive_dir = \"{}\"\narchive_timeout_ms = 150",
        archive.display()
    )
}

fn create(c: &mut Client, id: &str, pad: usize) {
    c.call(
        "CREATE_INSTANCE",
        json!({"machine": "order", "version": 1, "id": id,
               "context": {"total": 1, "pad": "x".repeat(pad)}}),
    )
    .unwrap_or_else(|e| panic!("CREATE_INSTANCE {id}: {e:?}"));
}

fn exists(c: &mut Client, id: &str) -> bool {
    c.call("GET_INSTANCE", json!({"id": id})).is_ok()
}

/// Per shard, the head offset (`INFO.shard_details[].wal_offset`).
fn heads(s: &Server) -> Vec<u64> {
    let info = s.client().call("INFO", json!({})).expect("INFO");
    info["shard_details"]
        .as_array()
        .expect("shard_details")
        .iter()
        .map(|d| d["wal_offset"].as_u64().expect("wal_offset"))
        .collect()
}

fn backup(s: &Server, out: &Path) {
    output_ok(
        cli_at(&s.addr.to_string())
            .args(["backup", "--out"])
            .arg(out),
    );
}

/// The archived segments of `shard`.
fn archived(archive: &Path, shard: u32) -> Vec<(ArchivedSegment, PathBuf)> {
    let dir = smdb_format::archive::shard_dir(archive, shard);
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| {
                let e = e.ok()?;
                Some((ArchivedSegment::parse(e.file_name().to_str()?)?, e.path()))
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|(n, _)| (n.first, n.last));
    v
}

/// Waits until every shard's archive reaches its head.
fn wait_archived(archive: &Path, heads: &[u64]) {
    let start = Instant::now();
    for (shard, &head) in heads.iter().enumerate() {
        while archived(archive, shard as u32)
            .iter()
            .all(|(n, _)| n.last < head)
        {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "shard {shard}: the archive never reached {head}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Runs `smdb-server restore` with `args`; returns (exit code, stdout, stderr).
fn restore(
    backup: &Path,
    archive: Option<&Path>,
    to: &Path,
    args: &[&str],
) -> (i32, String, String) {
    let mut all = vec![
        "restore".to_string(),
        "--backup".into(),
        backup.display().to_string(),
        "--data-dir".into(),
        to.display().to_string(),
    ];
    if let Some(a) = archive {
        all.push("--archive".into());
        all.push(a.display().to_string());
    }
    all.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    run_to_exit(&refs)
}

/// A server started on `data` (moved under a fresh test dir as its `data`).
fn start_on(data: &Path, shards: u32) -> (Server, tempfile::TempDir) {
    let dir = temp_dir();
    std::fs::rename(data, dir.path().join("data")).expect("move the restored dir");
    let s = Server::start_in(dir.path(), &format!("[shards]\ncount = {shards}"))
        .unwrap_or_else(|e| panic!("start on the restored dir: {e}"));
    (s, dir)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

#[test]
fn a_backup_and_the_archive_restore_to_the_end_and_to_offsets_and_a_gap_is_refused() {
    let dir = temp_dir();
    let archive = dir.path().join("archive");
    let mut s = Server::start_in(dir.path(), &config(&archive, 2)).unwrap();
    let mut c = s.order_client();
    for i in 0..50 {
        create(&mut c, &format!("before-{i}"), 2000);
    }
    let out = dir.path().join("backup");
    backup(&s, &out);
    let at_backup = heads(&s);
    // Enough after the backup to fill several 1 MiB segments per shard (about 3 MiB each),
    // however few segments the 150 ms timed closes cut on a fast machine: the gap check below
    // needs one wholly inside.
    for i in 0..AFTER {
        create(&mut c, &format!("after-{i}"), 4000);
    }
    let end = heads(&s);
    wait_archived(&archive, &end);
    s.kill();

    // To the end of the archive.
    let to = dir.path().join("restored");
    let (code, stdout, stderr) = restore(&out, Some(&archive), &to, &[]);
    assert_eq!(code, 0, "restore: {stdout}\n{stderr}");
    let positions: Value = serde_json::from_str(
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("positions "))
            .expect("a positions line"),
    )
    .expect("positions JSON");
    for (shard, head) in end.iter().enumerate() {
        assert_eq!(positions[shard.to_string()], json!(head), "{stdout}");
    }
    // A second restore into the now non-empty directory is refused.
    let (code, _, stderr) = restore(&out, Some(&archive), &to, &[]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not empty"), "{stderr}");
    let (r, _rd) = start_on(&to, 2);
    assert_eq!(heads(&r), end, "the restored heads are the original's");
    let mut rc = r.client();
    for i in (0..50).step_by(7) {
        assert!(exists(&mut rc, &format!("before-{i}")), "before-{i}");
    }
    for i in (0..AFTER).step_by(37).chain([AFTER - 1]) {
        assert!(exists(&mut rc, &format!("after-{i}")), "after-{i}");
    }
    drop((rc, r));

    // To per-shard offsets: shard 0 halfway, shard 1 at the backup.
    let mid = at_backup[0] + (end[0] - at_backup[0]) / 2;
    // Into an existing empty directory (a fresh mount point, say).
    let to2 = dir.path().join("restored-offsets");
    std::fs::create_dir(&to2).unwrap();
    let spec = format!("0:{mid},1:{}", at_backup[1]);
    let (code, stdout, stderr) = restore(
        &out,
        Some(&archive),
        &to2,
        &["--until-offset", &spec, "--pause-timers"],
    );
    assert_eq!(code, 0, "restore: {stdout}\n{stderr}");
    assert!(
        to2.join("timers.paused").exists(),
        "--pause-timers marks the dir"
    );
    let (r, _rd) = start_on(&to2, 2);
    assert_eq!(heads(&r), vec![mid, at_backup[1]]);
    let info = r.client().call("INFO", json!({})).expect("INFO");
    assert_eq!(info["timers_paused"], true, "{info}");
    drop(r);

    // A segment in the middle of shard 0's archive goes missing: refused, by shard and offset.
    let segs = archived(&archive, 0);
    let (gone, path) = segs
        .iter()
        .find(|(n, _)| n.first > at_backup[0] + 1 && n.last < end[0])
        .cloned()
        .expect("a middle segment");
    std::fs::remove_file(&path).unwrap();
    let to3 = dir.path().join("restored-gap");
    let (code, stdout, stderr) = restore(&out, Some(&archive), &to3, &[]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stderr.contains("shard 0") && stderr.contains(&format!("offset {}", gone.first)),
        "names the shard and the first missing offset {}: {stderr}",
        gone.first
    );
    assert!(!to3.exists(), "a refused restore leaves no directory");
}

#[test]
fn point_in_time_restore_keeps_what_was_acknowledged_before_and_nothing_sent_after() {
    let dir = temp_dir();
    let archive = dir.path().join("archive");
    let mut s = Server::start_in(dir.path(), &config(&archive, 2)).unwrap();
    let mut c = s.order_client();
    let out = dir.path().join("backup");
    backup(&s, &out);
    // (id, sent, acknowledged), wall-clock milliseconds, one write every ~2 ms for ~1.2 s.
    let mut writes = Vec::new();
    for i in 0..400 {
        let id = format!("w-{i}");
        let sent = now_ms();
        create(&mut c, &id, 100);
        writes.push((id, sent, now_ms()));
        std::thread::sleep(Duration::from_millis(2));
    }
    let target = writes[200].2;
    wait_archived(&archive, &heads(&s));
    s.kill();

    let until = shards::engine::rfc3339::format_ms(target);
    let to = dir.path().join("restored");
    let (code, stdout, stderr) = restore(&out, Some(&archive), &to, &["--until", &until]);
    assert_eq!(code, 0, "restore: {stdout}\n{stderr}");
    assert!(stdout.contains("--until: the next entry is at"), "{stdout}");
    let (r, _rd) = start_on(&to, 2);
    let mut rc = r.client();
    let (mut kept, mut dropped) = (0, 0);
    for (id, sent, acked) in &writes {
        let present = exists(&mut rc, id);
        if *acked + 5 <= target {
            assert!(
                present,
                "{id} acknowledged at {acked}, before {target} - 5 ms"
            );
        }
        if *sent >= target + 5 {
            assert!(!present, "{id} sent at {sent}, after {target} + 5 ms");
        }
        match present {
            true => kept += 1,
            false => dropped += 1,
        }
    }
    assert!(
        kept >= 150 && dropped >= 150,
        "kept {kept}, dropped {dropped}"
    );
}

#[test]
fn after_a_failover_the_deposed_primarys_archived_tail_is_not_replayed() {
    let (pdir, rdir) = (temp_dir(), temp_dir());
    let archive = pdir.path().join("archive");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let pcfg = format!(
        "[network]\nbind_addr = \"127.0.0.1:{port}\"\n[replication]\nrole = \"primary\"\n\
         heartbeat_ms = 200\n{}",
        config(&archive, 1)
    );
    let mut p = Server::start_in(pdir.path(), &pcfg).unwrap();
    let mut w = p.order_client();
    for i in 0..20 {
        create(&mut w, &format!("first-{i}"), 100);
    }
    let out = pdir.path().join("backup");
    backup(&p, &out);
    let rcfg = format!(
        "[replication]\nrole = \"replica\"\nupstream = \"{}\"\nreplica_id = \"r1\"\n\
         heartbeat_ms = 200\nreconnect_max_ms = 500\n{}",
        p.addr,
        config(&archive, 1)
    );
    let mut r = Server::start_in(rdir.path(), &rcfg).unwrap();
    for i in 0..20 {
        create(&mut w, &format!("both-{i}"), 100);
    }
    let start = Instant::now();
    while heads(&r) != heads(&p) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the replica converges"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The replica goes away; the primary acknowledges a tail it alone holds and archives it.
    r.kill();
    for i in 0..30 {
        create(&mut w, &format!("tail-{i}"), 100);
    }
    wait_archived(&archive, &heads(&p));
    drop(w);
    p.kill();

    // The replica comes back without its primary and is promoted: a new epoch.
    r.relaunch().expect("restart the replica");
    let promoted = r.client().call("PROMOTE", json!({})).expect("PROMOTE");
    let epoch = promoted["epoch"].as_u64().expect("epoch");
    let mut rw = r.client();
    for i in 0..20 {
        create(&mut rw, &format!("after-{i}"), 100);
    }
    let head = heads(&r)[0];
    let start = Instant::now();
    while !archived(&archive, 0)
        .iter()
        .any(|(n, _)| n.epoch == epoch && n.last >= head)
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "epoch {epoch} archived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let history = smdb_format::archive::history_path(&archive, epoch);
    let h: smdb_format::archive::History =
        serde_json::from_slice(&std::fs::read(&history).expect("history file")).expect("JSON");
    let from = h.from["0"];
    assert!(
        archived(&archive, 0)
            .iter()
            .any(|(n, _)| n.epoch == h.follows && n.last >= from),
        "the deposed primary's tail (epoch {} from offset {from}) is in the archive",
        h.follows
    );
    drop(rw);
    r.kill();

    let to = pdir.path().join("restored");
    let (code, stdout, stderr) = restore(&out, Some(&archive), &to, &[]);
    assert_eq!(code, 0, "restore: {stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{}]", epoch)),
        "the chain ends at epoch {epoch}: {stdout}"
    );
    let (s, _sd) = start_on(&to, 1);
    let mut c = s.client();
    for prefix in ["first", "both", "after"] {
        for i in 0..20 {
            assert!(
                exists(&mut c, &format!("{prefix}-{i}")),
                "{prefix}-{i}: {stdout} {:?}",
                archived(&archive, 0)
            );
        }
    }
    for i in 0..30 {
        assert!(
            !exists(&mut c, &format!("tail-{i}")),
            "tail-{i}, the deposed primary's tail, was replayed"
        );
    }
    assert_eq!(heads(&s), heads_of_restored(&stdout));
}

fn heads_of_restored(stdout: &str) -> Vec<u64> {
    let v: Value = serde_json::from_str(
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("positions "))
            .expect("a positions line"),
    )
    .expect("positions JSON");
    vec![v["0"].as_u64().expect("shard 0")]
}
