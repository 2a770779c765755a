//! A full disk (docs/wal.md "A full disk"): a segment that cannot be allocated for lack of
//! space refuses appends with `StorageFull`, never poisons, and heals by itself.

use std::time::{Duration, Instant};

use super::helpers::*;
use crate::wal::WalError;

#[test]
fn a_segment_that_finds_no_space_refuses_appends_then_heals_without_losing_any() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 10);
    let c = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(c).await.expect("open");
        wal.shared().faults.segment_enospc.set(2);
        // Enough entries to need a second segment: the rotation fails twice for space.
        let mut last = 0;
        let mut refused = false;
        let started = Instant::now();
        let mut i = 1;
        while i <= 600 {
            match wal.append(&payload(i)) {
                Ok(off) => {
                    last = off;
                    i += 1;
                }
                Err(WalError::StorageFull { .. }) => {
                    refused = true;
                    assert!(wal.is_storage_full());
                    assert!(wal.stats().storage_full);
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("append {i}: {e}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "appends never came back"
            );
            if i % 20 == 0 {
                // Let the committer keep up, so the rotation fails while appends still come.
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
        assert!(
            refused,
            "no append was refused while the segment could not be made"
        );
        wal.wait_durable(last)
            .await
            .expect("durable after the disk healed");
        assert!(!wal.is_storage_full());
        assert!(!wal.is_poisoned(), "a full disk must not poison the log");
        wal.close().await.expect("close");
    });
    run(move || async move {
        let (_, got) = open_collect(cfg).await.expect("reopen");
        assert_records(&got, 1, 600);
    });
}
