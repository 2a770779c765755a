//! WAL batch append micro bench: `append` N records of 150 B (a typical APPLY_EVENT entry),
//! then `wait_durable` on the last, one batch at a time, for N in 1, 16, 64, 256. Without fsync
//! (`FsyncPolicy::Never`: the cost of record encoding, the batch's O_DIRECT write and the
//! committer round trip); `-- --fsync` adds the same rows with `FsyncPolicy::Always`.
//!
//! Not listed in Cargo.toml until `shards::wal` is merged; then add
//! `[[bench]] name = "wal_append" harness = false` and run `cargo bench --bench wal_append`.
//! divan cannot drive glommio futures (the committer task must run on the same executor while
//! the bench waits), so this bench keeps its own timing loop inside one glommio executor and
//! prints a markdown table. Without `--bench` on the command line (`cargo test --benches`) it
//! runs a few batches per row as a smoke test. The log lives in a temp dir under /tmp (a real
//! filesystem: tmpfs would hide O_DIRECT costs).

use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};
use shards::wal::{FsyncPolicy, Wal, WalConfig};

/// Bytes per record: about one serialised APPLY_EVENT entry.
const PAYLOAD_BYTES: usize = 150;
/// Records per batch, one row each.
const BATCHES: [usize; 4] = [1, 16, 64, 256];
/// Time each row is measured for, after its warm-up.
const MEASURE: Duration = Duration::from_secs(2);
const WARMUP: Duration = Duration::from_millis(300);
/// Batches per row in smoke-test mode.
const SMOKE_BATCHES: u64 = 20;

struct Row {
    policy: &'static str,
    batch: usize,
    batches: u64,
    secs: f64,
    /// Per-batch latency (append of the batch .. wait_durable returned), µs, sorted.
    lat_us: Vec<f64>,
    write_mean_us: f64,
    fsync_mean_us: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let measuring = args.iter().any(|a| a == "--bench");
    let with_fsync = args.iter().any(|a| a == "--fsync");
    let started = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .name("wal-bench")
        .spawn(move || async move { run_all(measuring, with_fsync).await });
    let result = match started {
        Ok(handle) => handle.join().map_err(|e| format!("executor: {e}")),
        Err(e) => Err(format!("cannot start a glommio executor: {e}")),
    };
    match result.and_then(|r| r) {
        Ok(rows) => print_table(&rows),
        Err(e) => {
            eprintln!("wal_append: {e}");
            std::process::exit(1);
        }
    }
}

async fn run_all(measuring: bool, with_fsync: bool) -> Result<Vec<Row>, String> {
    let mut policies = vec![("never", FsyncPolicy::Never)];
    if with_fsync {
        policies.push(("always", FsyncPolicy::Always));
    }
    let mut rows = Vec::new();
    for (name, policy) in policies {
        for batch in BATCHES {
            rows.push(run_row(name, policy, batch, measuring).await?);
        }
    }
    Ok(rows)
}

async fn run_row(
    name: &'static str,
    policy: FsyncPolicy,
    batch: usize,
    measuring: bool,
) -> Result<Row, String> {
    let dir = tempfile::Builder::new()
        .prefix("smdb-wal-bench-")
        .tempdir_in("/tmp")
        .map_err(|e| format!("temp dir: {e}"))?;
    let cfg = WalConfig {
        dir: dir.path().to_path_buf(),
        shard: 0,
        segment_bytes: 64 << 20,
        fsync: policy,
        retain_bytes: 256 << 20,
    };
    let wal = Wal::open(cfg, &mut |_| Ok(()))
        .await
        .map_err(|e| format!("open: {e}"))?;
    // Let the background zeroing of the spare segment finish so it does not share the device
    // with the first measured batches.
    glommio::timer::sleep(Duration::from_millis(300)).await;
    let payload = [0x5Au8; PAYLOAD_BYTES];
    let (warm, limit) = if measuring {
        (WARMUP, u64::MAX)
    } else {
        (Duration::ZERO, SMOKE_BATCHES)
    };
    batches(&wal, &payload, batch, warm, limit).await?;
    let before = wal.stats();
    let t = Instant::now();
    let mut lat_us = batches(&wal, &payload, batch, MEASURE, limit).await?;
    let secs = t.elapsed().as_secs_f64();
    let after = wal.stats();
    wal.close().await.map_err(|e| format!("close: {e}"))?;
    lat_us.sort_by(f64::total_cmp);
    let mean = |sum: f64, n: u64| if n > 0 { sum / n as f64 * 1e6 } else { 0.0 };
    Ok(Row {
        policy: name,
        batch,
        batches: lat_us.len() as u64,
        secs,
        lat_us,
        write_mean_us: mean(
            after.write_seconds.sum - before.write_seconds.sum,
            after.write_seconds.count - before.write_seconds.count,
        ),
        fsync_mean_us: mean(
            after.fsync_seconds.sum - before.fsync_seconds.sum,
            after.fsync_seconds.count - before.fsync_seconds.count,
        ),
    })
}

/// Appends batches of `batch` records, each followed by `wait_durable` of its last offset,
/// for `dur` or `limit` batches; returns each batch's latency in µs.
async fn batches(
    wal: &Wal,
    payload: &[u8],
    batch: usize,
    dur: Duration,
    limit: u64,
) -> Result<Vec<f64>, String> {
    let mut lat = Vec::new();
    let start = Instant::now();
    while (lat.len() as u64) < limit && (start.elapsed() < dur || limit != u64::MAX) {
        let t = Instant::now();
        let mut last = 0;
        for _ in 0..batch {
            last = wal.append(payload).map_err(|e| format!("append: {e}"))?;
        }
        wal.wait_durable(last)
            .await
            .map_err(|e| format!("wait_durable: {e}"))?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(lat)
}

fn print_table(rows: &[Row]) {
    println!(
        "| fsync | batch | records/s | MB/s | ns/record | batch p50 us | batch p99 us | \
         write mean us | fsync mean us |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let records = (r.batches * r.batch as u64) as f64;
        let pct = |q: f64| {
            let i = ((r.lat_us.len() as f64 - 1.0) * q).round() as usize;
            r.lat_us.get(i).copied().unwrap_or(0.0)
        };
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.policy,
            r.batch,
            records / r.secs,
            records * PAYLOAD_BYTES as f64 / r.secs / 1e6,
            r.secs * 1e9 / records.max(1.0),
            pct(0.5),
            pct(0.99),
            r.write_mean_us,
            r.fsync_mean_us,
        );
    }
}
