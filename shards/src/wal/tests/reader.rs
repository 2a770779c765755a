//! `LogHandle` / `LogReader`: reading a shard's log from other executors while it runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use glommio::{LocalExecutorBuilder, Placement};

use super::helpers::*;
use crate::wal::{LogHandle, WalError};

/// Reads everything from `from` in calls of `max` records; checks offsets and payloads.
async fn read_all(reader: &mut crate::wal::LogReader, from: u64, max: usize) -> u64 {
    let mut next = from;
    loop {
        let got = reader.read_from(next, max, 1 << 20).await.expect("read");
        if got.is_empty() {
            return next;
        }
        for (o, p) in got {
            assert_eq!(o, next, "offsets in order, no gap");
            assert_eq!(p, payload(o), "payload of {o}");
            next += 1;
        }
    }
}

#[test]
fn reader_on_another_executor_follows_appends_rotation_and_compaction() {
    const N: u64 = 6000;
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    let (tx, rx) = mpsc::channel::<LogHandle>();
    let done = Arc::new(AtomicBool::new(false));
    let reader_at = Arc::new(AtomicU64::new(0));
    let (done_w, reader_at_w) = (done.clone(), reader_at.clone());
    let writer = LocalExecutorBuilder::new(Placement::Unbound)
        .name("wal-owner")
        .io_memory(1 << 20)
        .spawn(move || async move {
            let (wal, _) = open_collect(cfg).await.expect("open");
            tx.send(wal.handle()).expect("send handle");
            let mut next = 1;
            while next <= N {
                let last = (next + 39).min(N);
                append_range(&wal, next, last).await;
                next = last + 1;
                if last % 600 == 0 {
                    let snap = format!("snap@{last}");
                    wal.write_snapshot(last, V, snap.as_bytes())
                        .await
                        .expect("snapshot");
                }
                if last % 200 == 0 {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
            }
            done_w.store(true, Ordering::Release);
            // Keep the log open until the reader is through.
            while reader_at_w.load(Ordering::Acquire) <= N {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            let stats = wal.stats();
            wal.close().await.expect("close");
            (stats.rotations_total, wal.oldest_offset())
        })
        .expect("spawn owner");
    let follower = LocalExecutorBuilder::new(Placement::Unbound)
        .name("wal-reader")
        .io_memory(1 << 20)
        .spawn(move || async move {
            let handle = rx.recv().expect("handle");
            let mut reader = handle.reader();
            let (mut next, mut reads, mut records, mut trimmed) = (1u64, 0u64, 0u64, 0u64);
            while next <= N {
                match reader.read_from(next, 64, 16 << 10).await {
                    Ok(got) if got.is_empty() => {
                        assert!(!done.load(Ordering::Acquire) || reader.durable() < N);
                        glommio::timer::sleep(Duration::from_micros(200)).await;
                    }
                    Ok(got) => {
                        reads += 1;
                        for (o, p) in got {
                            assert_eq!(o, next, "no gap, no repeat");
                            assert!(o <= reader.durable(), "only durable records");
                            assert_eq!(p, payload(o), "payload of {o}");
                            next += 1;
                            records += 1;
                        }
                    }
                    Err(WalError::Trimmed { requested, oldest }) => {
                        assert_eq!(requested, next);
                        assert!(oldest > next, "trimmed {next} but oldest is {oldest}");
                        let (s, _, bytes) = reader
                            .newest_snapshot()
                            .await
                            .expect("snapshot read")
                            .expect("a snapshot exists once something was trimmed");
                        assert_eq!(bytes, format!("snap@{s}").into_bytes());
                        assert!(s + 1 >= next);
                        trimmed += 1;
                        next = s + 1;
                    }
                    Err(e) => panic!("read at {next}: {e}"),
                }
            }
            reader_at.store(next, Ordering::Release);
            (reads, records, trimmed)
        })
        .expect("spawn reader");
    let (rotations, oldest) = writer.join().expect("owner");
    let (reads, records, trimmed) = follower.join().expect("reader");
    assert!(rotations >= 20, "only {rotations} rotations");
    assert!(oldest > 1, "compaction deleted nothing");
    assert!(reads > 10, "{reads} reads");
    assert!(
        records + trimmed > 0 && records > N / 2,
        "{records} records, {trimmed} trims"
    );
}

#[test]
fn reader_serves_open_deleted_segments_then_trimmed_then_the_snapshot() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    let c = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(c.clone()).await.expect("open");
        append_range(&wal, 1, 1000).await;
        let handle = wal.handle();
        assert_eq!((handle.durable(), handle.oldest()), (1000, 1));
        let mut reader = handle.reader();
        let first = reader.read_from(1, 10, 1 << 20).await.expect("read");
        assert_eq!(first.len(), 10);
        let first_segment = segment_files(&c)[0].clone();
        wal.write_snapshot(900, V, b"state@900")
            .await
            .expect("snapshot");
        assert!(
            !first_segment.exists(),
            "compaction deleted the first segment"
        );
        assert_eq!(handle.oldest(), wal.oldest_offset());
        assert!(handle.oldest() > 11);
        // The open first segment still serves the rest of its records...
        let rest = reader
            .read_from(11, 10_000, 1 << 20)
            .await
            .expect("open file");
        assert!(!rest.is_empty());
        assert_eq!(rest[0], (11, payload(11)));
        let after = rest.last().map_or(11, |r| r.0 + 1);
        assert!(after < handle.oldest());
        // ...then the next one is gone.
        let err = reader.read_from(after, 10, 1 << 20).await.unwrap_err();
        assert!(
            matches!(err, WalError::Trimmed { requested, oldest }
            if requested == after && oldest == handle.oldest()),
            "{err}"
        );
        // A fresh reader is trimmed at once and goes to the snapshot.
        let mut fresh = handle.reader();
        let err = fresh.read_from(1, 10, 1 << 20).await.unwrap_err();
        assert!(
            matches!(err, WalError::Trimmed { requested: 1, .. }),
            "{err}"
        );
        let snap = fresh.newest_snapshot().await.expect("snapshot");
        assert_eq!(snap, Some((900, V, b"state@900".to_vec())));
        assert_eq!(read_all(&mut fresh, 901, 7).await, 1001);
        wal.close().await.expect("close");
    });
}

#[test]
fn reader_limits_continuation_and_the_durable_edge() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        let mut reader = wal.handle().reader();
        assert!(reader
            .read_from(1, 10, 100)
            .await
            .expect("empty")
            .is_empty());
        assert_eq!(reader.newest_snapshot().await.expect("none"), None);
        append_range(&wal, 1, 700).await;
        // Records, bytes (the first record always comes back), and whole-log continuation.
        assert_eq!(
            reader.read_from(5, 3, 1 << 20).await.expect("read").len(),
            3
        );
        let one = reader.read_from(5, 100, 1).await.expect("read");
        assert_eq!(one, vec![(5, payload(5))]);
        for max in [1, 5, 64, 1000] {
            assert_eq!(read_all(&mut reader, 1, max).await, 701, "max {max}");
        }
        let mut other = wal.handle().reader();
        assert_eq!(read_all(&mut other, 350, 33).await, 701);
        // Appended but not yet durable (the committer has not run: no await since): not
        // returned.
        let o = wal.append(&payload(701)).expect("append");
        assert_eq!(reader.durable(), 700);
        assert!(reader
            .read_from(701, 10, 1 << 20)
            .await
            .expect("read")
            .is_empty());
        wal.wait_durable(o).await.expect("durable");
        assert_eq!(
            reader.read_from(701, 10, 1 << 20).await.expect("read"),
            vec![(701, payload(701))]
        );
        assert_eq!(
            reader.read_from(0, 1, 1 << 20).await.expect("0 is 1")[0].0,
            1
        );
        wal.close().await.expect("close");
    });
}

/// A segment whose last record ends exactly at the file's end (the record filled it, so no end
/// marker fits): a reader goes on into the next segment. Found by the partition nemesis's soak:
/// a replica catching up through such a segment was refused ("torn record needing 4 bytes at
/// the file's end") on every reconnect, while recovery read the same segment as complete.
#[test]
fn a_segment_filled_to_its_last_byte_is_read_through() {
    const N: u64 = 400;
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    run(move || async move {
        let (wal, _) = open_collect(cfg.clone()).await.expect("open");
        append_range(&wal, 1, N).await;
        wal.close().await.expect("close");
        let segs = segment_files(&cfg);
        assert!(segs.len() >= 3, "several segments: {segs:?}");
        // The first segment as if its last record had filled it: the file ends right there.
        let end = data_end(&segs[0]);
        let file = std::fs::OpenOptions::new().write(true).open(&segs[0]);
        file.and_then(|f| f.set_len(end)).expect("truncate");
        let (wal, got) = open_collect(cfg.clone()).await.expect("reopen");
        assert_records(&got, 1, N);
        let mut reader = wal.handle().reader();
        assert_eq!(
            read_all(&mut reader, 1, 64).await,
            N + 1,
            "every record, in order"
        );
        wal.close().await.expect("close");
    });
}
