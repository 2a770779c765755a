//! Recovery fixtures: torn tails, corruption, crash images.

use super::helpers::*;
use crate::wal::record::{encode, KIND_ENTRY};
use crate::wal::WalError;

/// Writes `1..=n` with one batch per `batch` entries, then closes.
fn build_log(cfg: &crate::wal::WalConfig, n: u64, batch: u64) {
    let cfg = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        let mut i = 1;
        while i <= n {
            let to = (i + batch - 1).min(n);
            append_range(&wal, i, to).await;
            i = to + 1;
        }
        wal.close().await.expect("close");
    });
}

fn expect_corrupt(res: Result<(), WalError>) -> (std::path::PathBuf, u64, String) {
    match res {
        Err(WalError::Corrupt {
            segment,
            offset,
            reason,
        }) => (segment, offset, reason),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

fn open_result(cfg: &crate::wal::WalConfig) -> Result<(), WalError> {
    let cfg = cfg.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    run(move || async move {
        let res = open_collect(cfg).await.map(|(wal, _)| drop(wal));
        tx.send(res).expect("send result");
    });
    rx.recv().expect("result")
}

#[test]
fn torn_tail_in_last_segment_is_truncated() {
    for garbage in [false, true] {
        let dir = tmpdir();
        let cfg = cfg(dir.path(), 64 << 10);
        build_log(&cfg, 600, 37);
        let segs = segment_files(&cfg);
        assert!(segs.len() >= 2);
        let newest = segs.last().expect("newest").clone();
        let end = data_end(&newest);
        if garbage {
            write_bytes(&newest, end, &[0xA5; 700]);
        } else {
            // Half of the record that would come next, as a crash mid-write leaves it.
            let mut rec = Vec::new();
            encode(&mut rec, 601, KIND_ENTRY, &payload(601));
            write_bytes(&newest, end, &rec[..rec.len() / 2]);
        }
        let c = cfg.clone();
        run(move || async move {
            let (wal, got) = open_collect(c).await.expect("open truncates the tail");
            assert_records(&got, 1, 600);
            append_range(&wal, 601, 650).await;
            wal.close().await.expect("close");
        });
        let c = cfg.clone();
        run(move || async move {
            let (wal, got) = open_collect(c).await.expect("reopen");
            assert_records(&got, 1, 650);
            wal.close().await.expect("close");
        });
    }
}

#[test]
fn bad_record_in_older_segment_is_corrupt() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    build_log(&cfg, 600, 600);
    let segs = segment_files(&cfg);
    assert!(segs.len() >= 3);
    // A fresh log's first record starts right after the header block.
    write_bytes(&segs[0], 4096 + 30, &[0xFF]);
    let (segment, offset, reason) = expect_corrupt(open_result(&cfg));
    assert_eq!(segment, segs[0]);
    assert_eq!(offset, 4096);
    assert!(reason.contains("checksum"), "{reason}");
}

#[test]
fn synced_record_damaged_in_newest_segment_is_corrupt() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    // Many batches: later sync markers vouch for the earlier records.
    build_log(&cfg, 300, 10);
    let seg = segment_files(&cfg).remove(0);
    write_bytes(&seg, 4096 + 30, &[0xFF]);
    let (segment, offset, reason) = expect_corrupt(open_result(&cfg));
    assert_eq!((segment, offset), (seg, 4096));
    assert!(reason.contains("sync marker"), "{reason}");
}

#[test]
fn zero_padding_after_crash_is_a_clean_end() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    let image = dir.path().join("crash-image");
    let (c, img) = (cfg.clone(), image.clone());
    run(move || async move {
        let (wal, _) = open_collect(c.clone()).await.expect("open");
        append_range(&wal, 1, 120).await;
        // Copy while open: no close marker, like a crash right after the last fdatasync.
        copy_dir(&c.dir, &img.join("shard-0"));
        wal.close().await.expect("close");
    });
    let mut crashed = cfg.clone();
    crashed.dir = image.join("shard-0");
    // The crash leaves the file zero-padded to a block, or shorter than preallocated.
    let seg = segment_files(&crashed).remove(0);
    let end = data_end(&seg);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open");
    f.set_len(end.div_ceil(4096) * 4096)
        .expect("truncate to block");
    drop(f);
    run(move || async move {
        let (wal, got) = open_collect(crashed).await.expect("open crash image");
        assert_records(&got, 1, 120);
        append_range(&wal, 121, 130).await;
        wal.close().await.expect("close");
    });
}

#[test]
fn missing_segment_is_corrupt() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 32 << 10);
    build_log(&cfg, 600, 600);
    let segs = segment_files(&cfg);
    assert!(segs.len() >= 3);
    std::fs::remove_file(&segs[1]).expect("remove");
    let (segment, offset, reason) = expect_corrupt(open_result(&cfg));
    assert_eq!((segment, offset), (segs[2].clone(), 0));
    assert!(reason.contains("missing offsets"), "{reason}");
}

#[test]
fn segment_of_another_shard_is_corrupt() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 10);
    build_log(&cfg, 10, 10);
    let mut other = cfg.clone();
    other.shard = 1;
    let (_, _, reason) = expect_corrupt(open_result(&other));
    assert!(reason.contains("shard 0"), "{reason}");
}

#[test]
fn leftover_temp_segment_is_removed() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 10);
    build_log(&cfg, 10, 10);
    let tmp = cfg.dir.join("wal/00000000000000000011.seg.tmp");
    std::fs::write(&tmp, [1u8; 100]).expect("write tmp");
    let c = cfg.clone();
    run(move || async move {
        let (wal, got) = open_collect(c).await.expect("open");
        assert_records(&got, 1, 10);
        wal.close().await.expect("close");
    });
    assert!(!tmp.exists());
}

#[test]
fn unvouched_records_after_a_torn_record_are_discarded() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    build_log(&cfg, 100, 10);
    let seg = segment_files(&cfg).remove(0);
    let end = data_end(&seg);
    // An unsynced batch the device persisted out of order: a marker that vouches only for
    // what is already there, a torn record 101, then an intact record 102.
    let mut tail = crate::wal::record::encode_marker(101, 100).to_vec();
    let mut r101 = Vec::new();
    encode(&mut r101, 101, KIND_ENTRY, &payload(101));
    r101[20] ^= 0xFF;
    tail.extend_from_slice(&r101);
    encode(&mut tail, 102, KIND_ENTRY, &payload(102));
    write_bytes(&seg, end, &tail);
    let c = cfg.clone();
    run(move || async move {
        let (wal, got) = open_collect(c)
            .await
            .expect("a torn tail is not corruption");
        assert_records(&got, 1, 100);
        wal.close().await.expect("close");
    });
    // After reopen and close: the injected marker stays, the close marker follows it, and
    // everything after is zero.
    let bytes = std::fs::read(&seg).expect("read");
    let markers_end = end as usize + 2 * crate::wal::limits::MARKER_BYTES;
    assert_eq!(data_end(&seg) as usize, markers_end);
    assert!(
        bytes[markers_end..].iter().all(|&b| b == 0),
        "the discarded records are zeroed"
    );
}

#[test]
fn callback_error_aborts_open() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    build_log(&cfg, 5, 5);
    run(move || async move {
        let res = crate::wal::Wal::open(cfg, &mut |r| match r {
            crate::wal::Recovered::Record { offset: 3, .. } => Err("boom".into()),
            _ => Ok(()),
        })
        .await;
        match res {
            Err(WalError::Apply { offset: 3, reason }) => assert_eq!(reason, "boom"),
            Err(e) => panic!("expected Apply, got {e}"),
            Ok(_) => panic!("expected Apply, got a log"),
        }
    });
}

#[test]
fn bad_segment_size_is_a_config_error() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 5000);
    run(move || async move {
        assert!(matches!(open_collect(cfg).await, Err(WalError::Config(_))));
    });
}
