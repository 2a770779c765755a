//! The first I/O failure poisons the log for good; nothing is retried.

use std::time::Duration;

use super::helpers::*;
use crate::wal::{WalConfig, WalError};

#[test]
fn failed_fsync_poisons_and_is_never_retried() {
    let dir = tmpdir();
    // An fdatasync per batch (not O_DSYNC writes, whose failure is a failed write, below).
    let cfg = WalConfig {
        sync_writes: false,
        ..cfg(dir.path(), 1 << 20)
    };
    let c = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(c).await.expect("open");
        append_range(&wal, 1, 10).await;
        let faults = &wal.shared().faults;
        faults.fail_next_fsync.set(true);
        let off = wal.append(b"doomed").expect("append before the failure");
        assert!(matches!(
            wal.wait_durable(off).await,
            Err(WalError::Poisoned)
        ));
        assert!(wal.is_poisoned());
        assert_eq!(wal.durable_offset(), 10);
        assert!(
            wal.wait_durable(10).await.is_ok(),
            "durable before the failure stays durable"
        );
        assert!(matches!(wal.append(b"later"), Err(WalError::Poisoned)));
        let attempts = faults.fsync_attempts.get();
        glommio::timer::sleep(Duration::from_millis(20)).await;
        assert!(matches!(wal.close().await, Err(WalError::Poisoned)));
        assert!(matches!(
            wal.write_snapshot(11, V, b"s").await,
            Err(WalError::NotDurable { .. })
        ));
        assert_eq!(
            faults.fsync_attempts.get(),
            attempts,
            "fdatasync must never be retried"
        );
        assert!(wal.stats().poisoned);
    });
    run(move || async move {
        let (wal, got) = open_collect(cfg).await.expect("reopen after poisoning");
        // The written but unsynced record may or may not survive; the durable ones must.
        assert!(got.records.len() >= 10);
        assert_records(
            &Collected {
                snapshot: None,
                discarded: Vec::new(),
                records: got.records[..10].to_vec(),
            },
            1,
            10,
        );
        wal.close().await.expect("close");
    });
}

#[test]
fn failed_write_poisons_every_waiter() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        append_range(&wal, 1, 5).await;
        let faults = &wal.shared().faults;
        faults.fail_next_write.set(true);
        let fsyncs = faults.fsync_attempts.get();
        let a = wal.append(b"a").expect("append");
        let b = wal.append(b"b").expect("append");
        let (ra, rb) = futures_lite::future::zip(wal.wait_durable(a), wal.wait_durable(b)).await;
        assert!(matches!(ra, Err(WalError::Poisoned)));
        assert!(matches!(rb, Err(WalError::Poisoned)));
        assert_eq!(
            faults.fsync_attempts.get(),
            fsyncs,
            "no fsync after a failed write"
        );
        assert!(matches!(wal.append(b"c"), Err(WalError::Poisoned)));
        assert!(matches!(wal.close().await, Err(WalError::Poisoned)));
    });
}

/// The open flags of `fd` in this process (`flags:` of /proc/self/fdinfo, octal).
fn open_flags(fd: i32) -> i32 {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).expect("fdinfo");
    let flags = (info.lines())
        .find_map(|l| l.strip_prefix("flags:"))
        .expect("a flags line");
    i32::from_str_radix(flags.trim(), 8).expect("octal flags")
}

#[test]
fn always_writes_o_dsync_without_an_fdatasync_per_batch_unless_told_not_to() {
    for sync_writes in [true, false] {
        let dir = tmpdir();
        let cfg = WalConfig {
            sync_writes,
            ..cfg(dir.path(), 1 << 20)
        };
        run(move || async move {
            let (wal, _) = open_collect(cfg).await.expect("open");
            append_range(&wal, 1, 3).await;
            let fd = {
                let current = wal.shared().current.borrow();
                let (file, _) = current.as_ref().expect("a live segment");
                std::os::fd::AsRawFd::as_raw_fd(&**file)
            };
            assert_eq!(open_flags(fd) & libc::O_DSYNC != 0, sync_writes);
            let attempts = wal.shared().faults.fsync_attempts.get();
            let before = wal.stats().fsyncs_total;
            append_range(&wal, 4, 20).await;
            let fdatasyncs = wal.shared().faults.fsync_attempts.get() - attempts;
            assert_eq!(fdatasyncs == 0, sync_writes, "{fdatasyncs} fdatasyncs");
            // Either way every durable batch counts as one fsync operation.
            assert!(wal.stats().fsyncs_total > before);
            assert_eq!(wal.durable_offset(), 20);
            wal.close().await.expect("close");
        });
    }
}
