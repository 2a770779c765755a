//! Truncation after an offset and snapshot install (replication), then recovery.

use super::helpers::*;
use crate::wal::WalError;

/// Appends `from..=to` with payloads that differ from `payload(i)`.
async fn append_new(wal: &crate::wal::Wal, from: u64, to: u64) {
    for i in from..=to {
        assert_eq!(
            wal.append(format!("new-{i}").as_bytes()).expect("append"),
            i
        );
    }
    wal.wait_durable(to).await.expect("durable");
}

#[test]
fn truncate_inside_a_segment_then_recovery_gives_exactly_the_prefix() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        append_range(&wal, 1, 300).await;
        assert_eq!(segment_files(&cfg).len(), 1);
        let handle = wal.handle();
        let mut reader = handle.reader();
        assert_eq!(
            reader
                .read_from(290, 100, 1 << 20)
                .await
                .expect("read")
                .len(),
            11
        );
        assert_eq!(wal.truncate_after(123).await.expect("truncate"), 177);
        assert!(matches!(wal.append(b"x"), Err(WalError::Closed)));
        assert!(matches!(
            wal.write_snapshot(100, V, b"s").await,
            Err(WalError::Closed)
        ));
        let (wal, got) = reopen_collect(cfg.clone(), handle.clone())
            .await
            .expect("reopen");
        assert_records(&got, 1, 123);
        assert_eq!((wal.head_offset(), handle.durable()), (123, 123));
        // The reader made before forgets what it cached and sees the new log only.
        assert!(reader
            .read_from(124, 10, 1 << 20)
            .await
            .expect("read")
            .is_empty());
        append_new(&wal, 124, 130).await;
        let got = reader.read_from(123, 10, 1 << 20).await.expect("read");
        assert_eq!(got[0], (123, payload(123)));
        assert_eq!(got[1], (124, b"new-124".to_vec()));
        wal.close().await.expect("close");
        let (wal, got) = reopen_collect(cfg.clone(), handle).await.expect("reopen");
        assert_eq!(got.offsets(), (1..=130).collect::<Vec<_>>());
        assert_eq!(got.records[129].1, b"new-130");
        // Truncating at or after the head changes nothing.
        assert_eq!(wal.truncate_after(130).await.expect("no-op"), 0);
        let (wal, got) = open_collect(cfg).await.expect("reopen");
        assert_eq!(got.records.len(), 130);
        wal.close().await.expect("close");
    });
}

#[test]
fn truncate_across_segments_drops_later_segments_and_snapshots() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        append_range(&wal, 1, 1500).await;
        wal.write_snapshot(300, V, b"s300").await.expect("snapshot");
        wal.write_snapshot(900, V, b"s900").await.expect("snapshot");
        let oldest = wal.oldest_offset();
        assert!(oldest > 1 && oldest <= 301, "oldest {oldest}");
        // Below what the retained snapshots can rebuild: refused, nothing changes.
        let err = wal.truncate_after(oldest - 2).await.unwrap_err();
        assert!(matches!(err, WalError::Trimmed { .. }), "{err}");
        append_range(&wal, 1501, 1510).await;
        let before = segment_files(&cfg).len();
        assert!(before >= 5, "{before} segments");
        assert_eq!(wal.truncate_after(500).await.expect("truncate"), 1010);
        let after = segment_files(&cfg).len();
        assert!(after < before, "{after} segments, was {before}");
        assert!(!cfg.dir.join("snapshots/00000000000000000900.snap").exists());
        let (wal, got) = reopen_collect(cfg.clone(), wal.handle())
            .await
            .expect("reopen");
        assert_eq!(got.snapshot, Some((300, b"s300".to_vec())));
        assert_records(&got, 301, 500);
        // Now exactly at a segment boundary: the segment that starts after it goes whole.
        append_new(&wal, 501, 4000).await;
        let firsts: Vec<u64> = segment_files(&cfg)
            .iter()
            .filter_map(|p| p.file_stem()?.to_str()?.parse().ok())
            .collect();
        let boundary = *firsts.iter().find(|&&f| f > 1000).expect("a later segment") - 1;
        wal.truncate_after(boundary).await.expect("truncate");
        let (wal, got) = reopen_collect(cfg.clone(), wal.handle())
            .await
            .expect("reopen");
        assert_eq!(got.records.last().map(|r| r.0), Some(boundary));
        assert_eq!(wal.head_offset(), boundary);
        assert!(segment_files(&cfg)
            .iter()
            .all(|p| !p.ends_with(format!("{:020}.seg", boundary + 1))));
        append_new(&wal, boundary + 1, boundary + 5).await;
        wal.close().await.expect("close");
        let (wal, got) = open_collect(cfg).await.expect("reopen");
        assert_eq!(got.records.last().map(|r| r.0), Some(boundary + 5));
        wal.close().await.expect("close");
    });
}

#[test]
fn install_snapshot_then_appends_continue_after_it_and_recovery_gives_its_state() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        append_range(&wal, 1, 500).await;
        wal.write_snapshot(200, V, b"old").await.expect("snapshot");
        let handle = wal.handle();
        let mut reader = handle.reader();
        let oldest = handle.oldest();
        assert_eq!(
            reader
                .read_from(oldest, 5, 1 << 20)
                .await
                .expect("read")
                .len(),
            5
        );
        wal.install_snapshot(2000, V, b"state@2000")
            .await
            .expect("install");
        assert!(!cfg.dir.join("wal.old").exists());
        let (wal, got) = reopen_collect(cfg.clone(), handle.clone())
            .await
            .expect("reopen");
        assert_eq!(got.snapshot, Some((2000, b"state@2000".to_vec())));
        assert!(got.records.is_empty());
        assert_eq!(
            (wal.head_offset(), handle.durable(), handle.oldest()),
            (2000, 2000, 2001)
        );
        let err = reader.read_from(1, 5, 1 << 20).await.unwrap_err();
        assert!(
            matches!(err, WalError::Trimmed { oldest: 2001, .. }),
            "{err}"
        );
        assert_eq!(
            reader.newest_snapshot().await.expect("snapshot"),
            Some((2000, V, b"state@2000".to_vec()))
        );
        append_new(&wal, 2001, 2010).await;
        assert_eq!(
            reader
                .read_from(2001, 100, 1 << 20)
                .await
                .expect("read")
                .len(),
            10
        );
        wal.close().await.expect("close");
        // An install interrupted after moving the log aside: the leftover goes at open.
        std::fs::create_dir(cfg.dir.join("wal.old")).expect("mkdir");
        std::fs::write(cfg.dir.join("wal.old/junk.seg"), b"junk").expect("junk");
        let (wal, got) = open_collect(cfg.clone()).await.expect("reopen");
        assert!(!cfg.dir.join("wal.old").exists());
        assert_eq!(got.snapshot, Some((2000, b"state@2000".to_vec())));
        assert_eq!(got.offsets(), (2001..=2010).collect::<Vec<_>>());
        // Installing below the head works too: the log restarts after the snapshot.
        wal.install_snapshot(1000, V, b"state@1000")
            .await
            .expect("install");
        let (wal, got) = open_collect(cfg).await.expect("reopen");
        assert_eq!(got.snapshot, Some((1000, b"state@1000".to_vec())));
        assert!(got.records.is_empty());
        assert_eq!(wal.append(b"next").expect("append"), 1001);
        wal.close().await.expect("close");
    });
}
