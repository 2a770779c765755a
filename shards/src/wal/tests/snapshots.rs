//! Snapshots, compaction, fallback, and reading old records.

use super::helpers::*;
use crate::wal::WalError;

#[test]
fn snapshot_then_compaction_deletes_covered_segments() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    let c = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(c.clone()).await.expect("open");
        append_range(&wal, 1, 1000).await;
        let before = wal.stats().segments;
        assert!(before >= 4);
        assert!(matches!(
            wal.write_snapshot(1001, V, b"x").await,
            Err(WalError::NotDurable {
                offset: 1001,
                durable: 1000
            })
        ));
        wal.write_snapshot(700, V, b"state@700")
            .await
            .expect("snapshot");
        let after = wal.stats().segments;
        assert!(after < before, "{after} segments, was {before}");
        let oldest = wal.oldest_offset();
        assert!(oldest > 1 && oldest <= 701, "oldest {oldest}");
        assert_eq!(segment_files(&c).len() as u64, after);
        wal.close().await.expect("close");
    });
    run(move || async move {
        let (wal, got) = open_collect(cfg).await.expect("reopen");
        assert_eq!(got.snapshot, Some((700, b"state@700".to_vec())));
        assert_records(&got, 701, 1000);
        append_range(&wal, 1001, 1010).await;
        wal.close().await.expect("close");
    });
}

#[test]
fn invalid_newest_snapshot_falls_back_to_the_older_one() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 10);
    let c = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(c).await.expect("open");
        append_range(&wal, 1, 400).await;
        wal.write_snapshot(100, V, b"old")
            .await
            .expect("snapshot 100");
        append_range(&wal, 401, 800).await;
        wal.write_snapshot(300, V, b"mid")
            .await
            .expect("snapshot 300");
        wal.write_snapshot(600, V, b"new")
            .await
            .expect("snapshot 600");
        // Only the 2 newest stay; the log still covers everything after the older one.
        assert_eq!(*wal.shared().snapshots.borrow(), vec![300, 600]);
        assert!(wal.oldest_offset() <= 301);
        wal.close().await.expect("close");
    });
    let snaps = cfg.dir.join("snapshots");
    assert!(!snaps.join("00000000000000000100.snap").exists());
    let newest = snaps.join("00000000000000000600.snap");
    write_bytes(&newest, 4096 + 1, b"X");
    let c = cfg.clone();
    run(move || async move {
        let (wal, got) = open_collect(c).await.expect("reopen");
        assert_eq!(got.snapshot, Some((300, b"mid".to_vec())));
        // The damaged payload was streamed before its CRC failed: told to discard it.
        assert_eq!(got.discarded, vec![600]);
        assert_records(&got, 301, 800);
        wal.close().await.expect("close");
    });
    assert!(!newest.exists());
    assert!(snaps.join("00000000000000000600.snap.corrupt").exists());
}

#[test]
fn read_from_across_segments_and_trimmed_error() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        append_range(&wal, 1, 1200).await;
        assert!(wal.stats().segments >= 4);
        let all = wal
            .read_from(1, usize::MAX, usize::MAX)
            .await
            .expect("read all");
        assert_eq!(all.len(), 1200);
        for (o, p) in &all {
            assert_eq!(p, &payload(*o));
        }
        let some = wal.read_from(555, 3, usize::MAX).await.expect("read 3");
        assert_eq!(
            some.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![555, 556, 557]
        );
        let budget = payload(900).len() + payload(901).len();
        let by_bytes = wal
            .read_from(900, 100, budget)
            .await
            .expect("read by bytes");
        assert_eq!(by_bytes.len(), 2);
        assert!(wal
            .read_from(1201, 10, 1000)
            .await
            .expect("beyond")
            .is_empty());

        wal.write_snapshot(1000, V, b"s").await.expect("snapshot");
        let oldest = wal.oldest_offset();
        assert!(oldest > 1);
        match wal.read_from(1, 10, 1000).await {
            Err(WalError::Trimmed {
                requested: 1,
                oldest: o,
            }) => assert_eq!(o, oldest),
            other => panic!("expected Trimmed, got {other:?}"),
        }
        let tail = wal
            .read_from(oldest, usize::MAX, usize::MAX)
            .await
            .expect("read tail");
        assert_eq!(tail.first().map(|r| r.0), Some(oldest));
        assert_eq!(tail.last().map(|r| r.0), Some(1200));
        wal.close().await.expect("close");
        drop(wal);

        // After reopen (index rebuilt by recovery, older segments unindexed) reads still work.
        let (wal, _) = open_collect(cfg).await.expect("reopen");
        let tail2 = wal
            .read_from(oldest, usize::MAX, usize::MAX)
            .await
            .expect("read again");
        assert_eq!(tail2, tail);
        wal.close().await.expect("close");
    });
}

#[test]
fn retain_bytes_keeps_log_behind_the_snapshot() {
    let dir = tmpdir();
    let mut cfg = cfg(dir.path(), 64 << 10);
    cfg.retain_bytes = 1 << 30;
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        append_range(&wal, 1, 1000).await;
        let segments = wal.stats().segments;
        wal.write_snapshot(1000, V, b"s").await.expect("snapshot");
        assert_eq!(wal.stats().segments, segments);
        assert_eq!(wal.oldest_offset(), 1);
        wal.close().await.expect("close");
    });
}

#[test]
fn snapshot_under_never_policy_syncs_the_log_first() {
    let dir = tmpdir();
    let mut cfg = cfg(dir.path(), 1 << 20);
    cfg.fsync = crate::wal::FsyncPolicy::Never;
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        append_range(&wal, 1, 50).await;
        assert!(wal.shared().synced.get() < 50);
        wal.write_snapshot(50, V, b"s").await.expect("snapshot");
        assert_eq!(wal.shared().synced.get(), 50);
        wal.close().await.expect("close");
    });
}

/// A pin (a running backup, `LogHandle::pin`) keeps its snapshot and every segment after it
/// through later snapshots and compactions; once dropped, the next snapshot's compaction
/// deletes them.
#[test]
fn a_pin_keeps_its_snapshot_and_the_log_after_it_until_dropped() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        append_range(&wal, 1, 500).await;
        wal.write_snapshot(400, V, b"state@400")
            .await
            .expect("snapshot");
        let pin = wal.handle().pin(400);
        let mut next = 501;
        for snap in [900, 1400, 1900, 2400] {
            append_range(&wal, next, snap + 50).await;
            next = snap + 51;
            wal.write_snapshot(snap, V, b"later")
                .await
                .expect("snapshot");
        }
        assert!(wal.oldest_offset() <= 401, "oldest {}", wal.oldest_offset());
        let mut reader = wal.handle().reader();
        let snap = reader.snapshot_stream_at(400).await.expect("read");
        let snap = snap.expect("the pinned snapshot is still there");
        snap.close().await.expect("close");
        let records = reader.read_from(401, 10, 1 << 20).await.expect("read");
        assert_eq!(records.first().map(|r| r.0), Some(401));

        drop(pin);
        append_range(&wal, next, 2950).await;
        wal.write_snapshot(2900, V, b"after")
            .await
            .expect("snapshot");
        assert!(wal.oldest_offset() > 401, "oldest {}", wal.oldest_offset());
        let gone = reader.snapshot_stream_at(400).await.expect("read");
        assert!(
            gone.is_none(),
            "the snapshot at 400 is pruned once unpinned"
        );
        wal.close().await.expect("close");
    });
}
