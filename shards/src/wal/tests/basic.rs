//! Appending, group commit, rotation, policies, close.

use std::rc::Rc;
use std::time::Duration;

use super::helpers::*;
use crate::wal::{FsyncPolicy, WalError};

#[test]
fn append_wait_durable_then_reopen_returns_all_records() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    run(move || async move {
        let (wal, got) = open_collect(cfg.clone()).await.expect("open");
        assert!(got.records.is_empty() && got.snapshot.is_none());
        assert_eq!(wal.append(b"").expect("empty payload"), 1);
        wal.wait_durable(1).await.expect("durable");
        append_range(&wal, 2, 200).await;
        assert_eq!((wal.head_offset(), wal.durable_offset()), (200, 200));
        wal.close().await.expect("close");
        assert!(matches!(wal.append(b"x"), Err(WalError::Closed)));
        drop(wal);

        let (wal, got) = open_collect(cfg.clone()).await.expect("reopen");
        assert_eq!(got.records[0], (1, Vec::new()));
        assert_eq!(got.records.len(), 200);
        for (o, p) in &got.records[1..] {
            assert_eq!(p, &payload(*o));
        }
        assert_eq!(wal.append(b"after").expect("append"), 201);
        wal.wait_durable(201).await.expect("durable");
        wal.close().await.expect("close");
        drop(wal);
        let (_wal, got) = open_collect(cfg).await.expect("reopen again");
        assert_eq!(got.records.last(), Some(&(201, b"after".to_vec())));
    });
}

#[test]
fn concurrent_appenders_share_fsyncs() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 20);
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        let before = wal.stats();
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let wal = Rc::clone(&wal);
                glommio::spawn_local(async move {
                    for _ in 0..50 {
                        let off = wal.append(&[7u8; 150]).expect("append");
                        wal.wait_durable(off).await.expect("durable");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await;
        }
        let st = wal.stats();
        let entries = st.entries_total - before.entries_total;
        let fsyncs = st.fsyncs_total - before.fsyncs_total;
        assert_eq!(entries, 64 * 50);
        println!(
            "group commit: {entries} entries, {fsyncs} fsyncs ({:.1} entries/fsync), {} batches, \
             write p50 <= {:?} s, fsync p50 <= {:?} s, p99 <= {:?} s",
            entries as f64 / fsyncs as f64,
            st.batches_total,
            st.write_seconds.quantile_bound(0.5),
            st.fsync_seconds.quantile_bound(0.5),
            st.fsync_seconds.quantile_bound(0.99),
        );
        assert!(
            fsyncs < entries / 4,
            "{fsyncs} fsyncs for {entries} entries"
        );
        assert_eq!(st.waiters, 0);
        wal.close().await.expect("close");
    });
}

#[test]
fn rotation_creates_segments_and_reopen_reads_across_them() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        // Several batches, one of them large enough to span a rotation by itself.
        append_range(&wal, 1, 100).await;
        append_range(&wal, 101, 1500).await;
        for i in 1501..=2000 {
            append_range(&wal, i, i).await;
        }
        let st = wal.stats();
        assert!(st.segments >= 5, "only {} segments", st.segments);
        assert_eq!(segment_files(&cfg).len() as u64, st.segments);
        wal.close().await.expect("close");
        drop(wal);
        let (wal, got) = open_collect(cfg.clone()).await.expect("reopen");
        assert_records(&got, 1, 2000);
        append_range(&wal, 2001, 2100).await;
        wal.close().await.expect("close");
        drop(wal);
        let (_wal, got) = open_collect(cfg).await.expect("reopen");
        assert_records(&got, 1, 2100);
    });
}

#[test]
fn records_larger_than_one_write_span_many_blocks() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 20);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        let big: Vec<u8> = (0..(9 << 20) + 123).map(|i| (i % 253) as u8).collect();
        wal.append(b"small").expect("append");
        wal.append(&big).expect("append big");
        let off = wal.append(&big[..5000]).expect("append");
        wal.wait_durable(off).await.expect("durable");
        assert!(
            wal.stats().writes_total >= 3,
            "a 9 MiB batch needs several writes"
        );
        let too_big = vec![0u8; wal.max_payload() + 1];
        assert!(matches!(
            wal.append(&too_big),
            Err(WalError::TooLarge { .. })
        ));
        let read = wal.read_from(2, 10, 1).await.expect("read");
        assert_eq!(read.len(), 1, "max_bytes still returns the first record");
        assert_eq!(read[0].1, big);
        wal.close().await.expect("close");
        drop(wal);
        let (_wal, got) = open_collect(cfg).await.expect("reopen");
        assert_eq!(got.offsets(), vec![1, 2, 3]);
        assert_eq!(got.records[1].1, big);
        assert_eq!(got.records[2].1, big[..5000].to_vec());
    });
}

#[test]
fn never_and_interval_policies_release_after_the_write() {
    for policy in [
        FsyncPolicy::Never,
        FsyncPolicy::Interval(Duration::from_millis(20)),
    ] {
        let dir = tmpdir();
        let mut cfg = cfg(dir.path(), 1 << 20);
        cfg.fsync = policy;
        run(move || async move {
            let (wal, _) = open_collect(cfg.clone()).await.expect("open");
            let base = wal.stats().fsyncs_total;
            for i in 1..=50 {
                append_range(&wal, i, i).await;
            }
            let st = wal.stats();
            assert_eq!(st.durable, 50);
            assert!(
                st.fsyncs_total - base < 10,
                "{policy:?}: {} fsyncs",
                st.fsyncs_total - base
            );
            if let FsyncPolicy::Interval(_) = policy {
                // The idle committer syncs once the interval is up, with no further append to
                // wake it. The deadline is generous: an fdatasync on a busy CI disk can take
                // tens of milliseconds (a fixed 60 ms wait failed there once).
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while wal.shared().synced.get() < 50 && std::time::Instant::now() < deadline {
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
                assert_eq!(wal.shared().synced.get(), 50, "interval sync while idle");
            }
            wal.close().await.expect("close");
            assert_eq!(wal.shared().synced.get(), 50, "close syncs everything");
            drop(wal);
            let (_wal, got) = open_collect(cfg).await.expect("reopen");
            assert_records(&got, 1, 50);
        });
    }
}

#[test]
fn close_flushes_pending_and_fails_later_waits() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        for i in 1..=10 {
            wal.append(&payload(i)).expect("append");
        }
        // Nobody waited: close must still write and sync them.
        wal.close().await.expect("close");
        assert_eq!(wal.durable_offset(), 10);
        assert!(wal.wait_durable(10).await.is_ok());
        assert!(matches!(wal.wait_durable(11).await, Err(WalError::Closed)));
        drop(wal);
        let (_wal, got) = open_collect(cfg).await.expect("reopen");
        assert_records(&got, 1, 10);
    });
}

#[test]
fn dropped_wait_leaves_no_waiter_behind() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        let off = wal.append(b"x").expect("append");
        let w = wal.wait_durable(off + 5);
        let res = glommio::timer::timeout(Duration::from_millis(5), async { Ok(w.await) }).await;
        assert!(res.is_err(), "offset beyond head cannot become durable");
        assert_eq!(wal.stats().waiters, 0);
        wal.close().await.expect("close");
    });
}

#[test]
fn rotation_uses_the_prepared_spare_segment() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    let c = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(c.clone()).await.expect("open");
        let mut next = 1;
        for _ in 0..3 {
            // Give the background task time to zero the spare, then fill a segment.
            glommio::timer::sleep(Duration::from_millis(30)).await;
            append_range(&wal, next, next + 199).await;
            next += 200;
        }
        let st = wal.stats();
        assert!(st.rotations_total >= 3, "{} rotations", st.rotations_total);
        assert!(st.rotations_prezeroed_total >= 1, "no spare was ever used");
        // The next spare is prepared by a background task started at the last rotation: it
        // may not have created its file yet on a busy machine.
        let spare = c.dir.join("wal/spare.seg.tmp");
        for _ in 0..200 {
            if spare.exists() {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            spare.exists(),
            "no spare is being prepared after a rotation"
        );
        wal.close().await.expect("close");
    });
    assert!(
        !cfg.dir.join("wal/spare.seg.tmp").exists(),
        "close removes the spare"
    );
    run(move || async move {
        let (_wal, got) = open_collect(cfg).await.expect("reopen");
        assert_records(&got, 1, 600);
    });
}
