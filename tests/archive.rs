//! The WAL archive (docs/backup.md, "The archive"; `storage.archive_dir`) against
//! the real binary: closed segments are copied under their names with the data dir's records;
//! compaction keeps a segment until its copy exists and a failing archive is counted; a quiet
//! segment is closed by `archive_timeout_ms`; a restart archives what was left; a PROMOTE
//! closes the segment and writes the new epoch's history file.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::scrape::scrape;
use common::*;
use serde_json::{json, Value};
use smdb_format::archive::{ArchivedSegment, History};
use smdb_format::record::{decode, Decoded, KIND_ENTRY};

const METRICS: &str = "[metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"";
/// 1 MiB segments (the config's minimum): a few hundred padded writes fill one.
const SMALL: &str = "[shards]\ncount = 1\n[storage]\nsegment_bytes = 1048576";

fn config(archive: &Path, extra: &str) -> String {
    format!(
        "{METRICS}\n{SMALL}\narchive_dir = \"{}\"\n{extra}",
        archive.display()
    )
}

/// Creates `n` instances with 4 KiB of context each (about 250 fill a segment).
fn write_padded(c: &mut Client, prefix: &str, n: usize) {
    let pad = "x".repeat(4000);
    for i in 0..n {
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "order", "version": 1, "id": format!("{prefix}-{i}"),
                   "context": {"total": 1, "pad": pad}}),
        )
        .expect("CREATE_INSTANCE");
    }
}

fn wal_dir(s: &Server) -> PathBuf {
    s.dir.join("data").join("shard-0").join("wal")
}

/// `(first offset, path)` of the data dir's segments, oldest first.
fn data_segments(s: &Server) -> Vec<(u64, PathBuf)> {
    smdb_format::segment::list_segments(&wal_dir(s))
        .expect("list wal")
        .files
}

/// The archived segments of shard 0 by name, oldest first.
fn archived(archive: &Path) -> Vec<(ArchivedSegment, PathBuf)> {
    let dir = archive.join("shard-0");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = rd
        .filter_map(|e| {
            let e = e.ok()?;
            let name = ArchivedSegment::parse(e.file_name().to_str()?)?;
            Some((name, e.path()))
        })
        .collect();
    out.sort_by_key(|(n, _)| n.first);
    out
}

/// The entry records `(offset, payload)` of a segment file's bytes, read as the restore
/// reader does: after the header until EOF or the first position without a valid record.
fn entries(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut at = smdb_format::limits::SEGMENT_HEADER_BYTES as usize;
    let mut out = Vec::new();
    while let Some(Decoded::Record(h)) = bytes.get(at..).map(decode) {
        if h.kind == KIND_ENTRY {
            out.push((h.offset, bytes[at..][h.payload.clone()].to_vec()));
        }
        at += h.size;
    }
    out
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every closed segment of the data dir (all but the newest) has its archived copy.
fn all_closed_archived(s: &Server, archive: &Path) -> bool {
    let data = data_segments(s);
    let names = archived(archive);
    let closed = &data[..data.len().saturating_sub(1)];
    closed
        .iter()
        .all(|(first, _)| names.iter().any(|(n, _)| n.first == *first))
}

/// Each archived copy is a prefix of its data segment, starts with its header, and holds
/// exactly the records `first..=last` its name says, equal to the data dir's.
fn check_copies(s: &Server, archive: &Path) -> usize {
    let data: BTreeMap<u64, PathBuf> = data_segments(s).into_iter().collect();
    let copies = archived(archive);
    for (name, path) in &copies {
        let copy = std::fs::read(path).unwrap();
        let Some(orig_path) = data.get(&name.first) else {
            continue; // compacted away since: its copy was checked when both existed
        };
        let orig = std::fs::read(orig_path).unwrap();
        assert!(
            copy.len() <= orig.len(),
            "{path:?} is longer than its segment"
        );
        assert_eq!(
            copy[..],
            orig[..copy.len()],
            "{path:?} is a prefix of its segment"
        );
        let header = smdb_format::segment::decode_header(&copy).expect("header");
        assert_eq!(header.first_offset, name.first);
        let epoch = smdb_format::segment::decode_epoch(&copy).expect("epoch");
        assert_eq!(epoch.epoch, name.epoch, "{path:?}");
        let got = entries(&copy);
        assert_eq!(got, entries(&orig), "{path:?}");
        let offsets: Vec<u64> = got.iter().map(|e| e.0).collect();
        let want: Vec<u64> = (name.first..=name.last).collect();
        assert_eq!(offsets, want, "{path:?} holds what its name says");
    }
    copies.len()
}

#[test]
fn closed_segments_are_archived_under_their_names_with_the_same_records() {
    let dir = temp_dir();
    let archive = dir.path().join("archive");
    let s = Server::start_in(dir.path(), &config(&archive, "")).unwrap();
    let mut c = s.order_client();
    write_padded(&mut c, "a", 900);
    assert!(data_segments(&s).len() >= 3, "segments rolled");
    wait_until(
        "every closed segment archived",
        Duration::from_secs(15),
        || all_closed_archived(&s, &archive),
    );
    let n = check_copies(&s, &archive);
    assert_eq!(n, data_segments(&s).len() - 1);
    assert_eq!(
        scrape(&s).get("svc_wal_archived_segments_total", &[]),
        n as f64
    );
    assert_eq!(scrape(&s).get("svc_wal_archive_failures_total", &[]), 0.0);
    // Contiguous: each copy starts where the previous one ended, from offset 1.
    let names = archived(&archive);
    assert_eq!(names[0].0.first, 1);
    for w in names.windows(2) {
        assert_eq!(w[1].0.first, w[0].0.last + 1);
    }
}

#[test]
fn compaction_keeps_a_segment_until_its_copy_exists_and_failures_are_counted() {
    let dir = temp_dir();
    let archive = dir.path().join("archive");
    // A regular file where the shard's archive directory goes: every copy fails.
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::write(archive.join("shard-0"), b"in the way").unwrap();
    let extra = "snapshot_every_entries = 100\nretain_bytes = 0";
    let s = Server::start_in(dir.path(), &config(&archive, extra)).unwrap();
    let mut c = s.order_client();
    write_padded(&mut c, "b", 700);
    wait_until("failures counted", Duration::from_secs(10), || {
        scrape(&s).get("svc_wal_archive_failures_total", &[]) >= 1.0
    });
    assert!(
        s.log().contains("archiving the segment at 1 failed"),
        "{}",
        s.log()
    );
    // Snapshots ran (every 100 entries) with nothing archived: the first segment stays.
    assert_eq!(
        data_segments(&s)[0].0,
        1,
        "segment 1 kept while it has no copy"
    );
    assert_eq!(scrape(&s).get("svc_wal_archived_segments_total", &[]), 0.0);

    std::fs::remove_file(archive.join("shard-0")).unwrap();
    wait_until(
        "archived after the obstacle went",
        Duration::from_secs(40),
        || all_closed_archived(&s, &archive),
    );
    check_copies(&s, &archive);
    // Compaction proceeds at the next snapshot.
    write_padded(&mut c, "b2", 150);
    wait_until("segment 1 compacted", Duration::from_secs(10), || {
        data_segments(&s)[0].0 > 1
    });
    assert!(archived(&archive).iter().any(|(n, _)| n.first == 1));
}

#[test]
fn archive_timeout_closes_a_quiet_segment_and_a_restart_archives_what_was_left() {
    let dir = temp_dir();
    let archive = dir.path().join("archive");
    let extra = "archive_timeout_ms = 500";
    let mut s = Server::start_in(dir.path(), &config(&archive, extra)).unwrap();
    let mut c = s.client();
    let t = Instant::now();
    put_order_machine(&mut c);
    wait_until("the lone write archived", Duration::from_secs(4), || {
        !archived(&archive).is_empty()
    });
    assert!(
        t.elapsed() >= Duration::from_millis(450),
        "not before the timeout"
    );
    check_copies(&s, &archive);
    let first = data_segments(&s)[0].1.clone();
    let size = std::fs::metadata(&first).unwrap().len();
    assert!(
        size < 1 << 20,
        "the closed segment gave back its space: {size}"
    );

    // Closed but not copied: the archive is blocked, a write closes its segment, SIGKILL.
    std::fs::rename(archive.join("shard-0"), archive.join("moved")).unwrap();
    std::fs::write(archive.join("shard-0"), b"in the way").unwrap();
    write_padded(&mut c, "c", 3);
    wait_until("closed by the timeout", Duration::from_secs(4), || {
        data_segments(&s).len() >= 3
    });
    drop(c);
    s.kill();
    std::fs::remove_file(archive.join("shard-0")).unwrap();
    std::fs::rename(archive.join("moved"), archive.join("shard-0")).unwrap();
    s.relaunch().unwrap();
    wait_until(
        "archived after the restart",
        Duration::from_secs(10),
        || all_closed_archived(&s, &archive),
    );
    assert!(check_copies(&s, &archive) >= 2);
}

#[test]
fn a_promotion_closes_the_segment_and_writes_the_new_epochs_history() {
    let (pdir, rdir) = (temp_dir(), temp_dir());
    let (parch, rarch) = (pdir.path().join("archive"), rdir.path().join("archive"));
    let pcfg = fixed_port(&format!(
        "[replication]\nrole = \"primary\"\nheartbeat_ms = 200\n{}",
        config(&parch, "")
    ));
    let mut p = Server::start_in(pdir.path(), &pcfg).unwrap();
    let mut w = p.order_client();
    write_padded(&mut w, "p", 5);
    let rcfg = format!(
        "[replication]\nrole = \"replica\"\nupstream = \"{}\"\nreplica_id = \"r1\"\n\
         heartbeat_ms = 200\nreconnect_max_ms = 500\n{}",
        p.addr,
        config(&rarch, "")
    );
    let r = Server::start_in(rdir.path(), &rcfg).unwrap();
    let head = |s: &Server| -> Value {
        s.client().call("REPLICATION_STATUS", json!({})).unwrap()["positions"].clone()
    };
    wait_until("the replica converged", Duration::from_secs(20), || {
        head(&p) == head(&r)
    });
    drop(w);
    p.kill();

    let mut rc = r.client();
    let promoted = rc.call("PROMOTE", json!({})).unwrap();
    let epoch = promoted["epoch"].as_u64().unwrap();
    assert!(epoch >= 2, "{promoted}");
    // The epoch record closed the replica's segment: it is archived with the old epoch...
    wait_until(
        "the old epoch's segment archived",
        Duration::from_secs(10),
        || archived(&rarch).iter().any(|(n, _)| n.epoch == epoch - 1),
    );
    let names = archived(&rarch);
    let old = names.iter().find(|(n, _)| n.epoch == epoch - 1).unwrap().0;
    check_copies(&r, &rarch);
    // ...and the new epoch's history says what it followed and where it began.
    let path = smdb_format::archive::history_path(&rarch, epoch);
    wait_until("the history file", Duration::from_secs(10), || {
        path.exists()
    });
    let h: History = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(h.epoch, epoch);
    assert_eq!(h.follows, epoch - 1);
    assert_eq!(h.from.get("0"), Some(&(old.last + 1)), "{h:?}");
    // The new segment begins with the epoch record and is labelled with it.
    let segs = data_segments(&r);
    let (first, newest) = segs.last().unwrap();
    assert_eq!(*first, old.last + 1);
    let bytes = std::fs::read(newest).unwrap();
    let label = smdb_format::segment::decode_epoch(&bytes).unwrap();
    assert!(label.starts && label.epoch == epoch && label.follows == epoch - 1);
    // The primary wrote its own first epoch's history when it began.
    assert!(smdb_format::archive::history_path(&parch, epoch - 1).exists());
}
