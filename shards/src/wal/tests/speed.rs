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

#[test]
#[ignore]
fn commit_latency_single_appender() {
    let dir = tmpdir();
    let cfg = cfg(dir.path(), 64 << 20);
    run(move || async move {
        let (wal, _) = open_collect(cfg).await.expect("open");
        // Let the spare segment's zeroing finish so it does not share the device.
        glommio::timer::sleep(std::time::Duration::from_millis(200)).await;
        let mut lat = Vec::with_capacity(2000);
        for _ in 0..2000 {
            let t = Instant::now();
            let off = wal.append(&[1u8; 150]).expect("append");
            wal.wait_durable(off).await.expect("durable");
            lat.push(t.elapsed().as_micros() as u64);
        }
        lat.sort_unstable();
        let st = wal.stats();
        println!(
            "append+wait_durable, 1 appender, 150 B: p50 {} us, p99 {} us, max {} us; \
             write mean {:.1} us, fdatasync mean {:.1} us",
            lat[lat.len() / 2],
            lat[lat.len() * 99 / 100],
            lat[lat.len() - 1],
            st.write_seconds.sum / st.write_seconds.count as f64 * 1e6,
            st.fsync_seconds.sum / st.fsync_seconds.count as f64 * 1e6,
        );
        println!("fsync buckets {:?}", st.fsync_seconds.buckets);
        println!("write buckets {:?}", st.write_seconds.buckets);
        wal.close().await.expect("close");
    });
}
