//! Recovery speed: `cargo test --release -p smdb-shards -- --ignored --nocapture`.

use std::time::Instant;

use super::helpers::*;

#[test]
#[ignore]
fn recovery_speed_million_records() {
    const N: u64 = 1_000_000;
    let dir = tmpdir();
    let mut cfg = cfg(dir.path(), 64 << 20);
    cfg.retain_bytes = 256 << 20;
    let c = cfg.clone();
    run(move || async move {
        let (wal, _) = open_collect(c).await.expect("open");
        let t = Instant::now();
        let rec = [0x5Au8; 150];
        let mut i = 0;
        while i < N {
            let mut last = 0;
            for _ in 0..10_000 {
                last = wal.append(&rec).expect("append");
            }
            i += 10_000;
            wal.wait_durable(last).await.expect("durable");
        }
        let st = wal.stats();
        println!(
            "wrote {N} x 150 B in {:?}: {} segments, {} MiB, {} writes, {} fsyncs",
            t.elapsed(),
            st.segments,
            st.size_bytes >> 20,
            st.writes_total,
            st.fsyncs_total
        );
        wal.close().await.expect("close");
    });
    run(move || async move {
        let t = Instant::now();
        let mut count = 0u64;
        let mut bytes = 0usize;
        let wal = crate::wal::Wal::open(cfg, &mut |r| {
            if let crate::wal::Recovered::Record { payload, .. } = r {
                count += 1;
                bytes += payload.len();
            }
            Ok(())
        })
        .await
        .expect("reopen");
        let took = t.elapsed();
        assert_eq!(count, N);
        println!(
            "recovered {count} records ({} MiB of payload) in {took:?}: {:.0} records/s",
            bytes >> 20,
            count as f64 / took.as_secs_f64()
        );
        wal.close().await.expect("close");
    });
}
