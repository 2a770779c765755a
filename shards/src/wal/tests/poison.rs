//! The first I/O failure poisons the log for good; nothing is retried.

use std::time::Duration;

use super::helpers::*;
use crate::wal::WalError;

#[test]
fn failed_fsync_poisons_and_is_never_retried() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 1 << 20);
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
            wal.write_snapshot(11, b"s").await,
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
