//! The archiver and epoch segments (`archive.rs`, `epoch.rs`): closed segments are copied
//! under their names; an epoch entry starts a labelled segment; compaction keeps a segment
//! until its copy exists.

use std::path::Path;
use std::time::{Duration, Instant};

use smdb_format::archive::{history_path, shard_dir, ArchivedSegment, History};
use smdb_format::segment::{decode_epoch, SegmentEpoch};

use super::helpers::*;
use crate::wal::WalConfig;

fn archived(archive: &Path) -> Vec<ArchivedSegment> {
    let Ok(rd) = std::fs::read_dir(shard_dir(archive, 0)) else {
        return Vec::new();
    };
    let mut out: Vec<_> = rd
        .filter_map(|e| ArchivedSegment::parse(e.ok()?.file_name().to_str()?))
        .collect();
    out.sort_by_key(|n| n.first);
    out
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}

fn with_archive(dir: &Path) -> WalConfig {
    WalConfig {
        archive_dir: Some(dir.join("archive")),
        ..cfg(dir, 32 << 10)
    }
}

#[test]
fn an_epoch_entry_starts_a_labelled_segment_and_closed_ones_are_archived() {
    let dir = tmpdir();
    let cfg = with_archive(dir.path());
    let archive = dir.path().join("archive");
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        // The first entry begins epoch 1: the empty first segment is relabelled.
        let one = wal.append_epoch(b"epoch-1", 1, 0).expect("append");
        assert_eq!(one, 1);
        append_range(&wal, 2, 40).await;
        let two = wal.append_epoch(b"epoch-2", 2, 1).expect("append");
        wal.wait_durable(two).await.expect("durable");
        append_range(&wal, 42, 300).await;
        let files = segment_files(&cfg);
        let label = |p: &Path| decode_epoch(&std::fs::read(p).unwrap()).unwrap();
        assert_eq!(
            label(&files[0]),
            SegmentEpoch {
                epoch: 1,
                follows: 0,
                starts: true
            }
        );
        let second = files
            .iter()
            .find(|p| p.ends_with("00000000000000000041.seg"))
            .expect("the epoch entry starts a segment");
        assert_eq!(label(second).epoch, 2);
        assert!(label(second).starts);
        let n = files.len();
        let archive2 = archive.clone();
        // The copy's name appears before its archiver counts it: wait for both.
        wait_for("closed segments archived", || {
            archived(&archive2).len() == n - 1
                && wal.stats().archived_segments_total == (n - 1) as u64
        })
        .await;
        let names = archived(&archive);
        assert_eq!((names[0].first, names[0].last, names[0].epoch), (1, 40, 1));
        assert_eq!((names[1].first, names[1].epoch), (41, 2));
        assert!(names[2..].iter().all(|s| s.epoch == 2));
        for h in [1, 2] {
            let text = std::fs::read(history_path(&archive, h)).expect("history");
            let h: History = serde_json::from_slice(&text).unwrap();
            let want = if h.epoch == 1 { 1 } else { 41 };
            assert_eq!(h.from.get("0"), Some(&want), "{h:?}");
            assert_eq!(h.follows, h.epoch - 1);
        }
        assert_eq!(wal.stats().archived_segments_total, (n - 1) as u64);
        wal.close().await.expect("close");
        // Reopened: the labels are read back from the headers and nothing is copied twice.
        let (wal, got) = open_collect(cfg.clone()).await.expect("reopen");
        assert_eq!(got.offsets(), (1..=300).collect::<Vec<u64>>());
        glommio::timer::sleep(Duration::from_millis(200)).await;
        assert_eq!(wal.stats().archived_segments_total, 0, "already archived");
        assert_eq!(wal.stats().archive_failures_total, 0);
        wal.close().await.expect("close");
    });
}

#[test]
fn compaction_keeps_the_oldest_unarchived_segment_and_every_later_one() {
    let dir = tmpdir();
    let cfg = with_archive(dir.path());
    let archive = dir.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::write(shard_dir(&archive, 0), b"in the way").unwrap();
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        append_range(&wal, 1, 600).await;
        wal.write_snapshot(550, V, b"s1").await.expect("snapshot");
        wal.write_snapshot(600, V, b"s2").await.expect("snapshot");
        assert_eq!(
            wal.oldest_offset(),
            1,
            "nothing archived: nothing compacted"
        );
        let w = wal.clone();
        wait_for("a failure counted", || {
            w.stats().archive_failures_total >= 1
        })
        .await;
        std::fs::remove_file(shard_dir(&archive, 0)).unwrap();
        let n = segment_files(&cfg).len();
        let archive2 = archive.clone();
        wait_for("archived once possible", || {
            archived(&archive2).len() == n - 1
        })
        .await;
        append_range(&wal, 601, 650).await;
        wal.write_snapshot(650, V, b"s3").await.expect("snapshot");
        assert!(wal.oldest_offset() > 1, "compacted once archived");
        wal.close().await.expect("close");
    });
}
