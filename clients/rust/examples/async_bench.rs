//! Throughput of the async client: APPLY_EVENT with N requests in flight on one connection
//! (N tasks sharing one `Client`), against a running server. Compare with
//! `smdb-bench --connections 1 --in-flight 8` on the same server (benches/RESULTS.md).
//!
//! `cargo run --release -p smdb-client --features tokio --example async_bench -- ADDR [SECONDS] [IN_FLIGHT] [INSTANCES]`
//!
//! The counted window is opened and closed by a timer task that flips a phase flag, so the
//! loop reads no clock per op: an op counts when it completes while the flag says "counting",
//! and ops/s divides by the window as measured when the flag flipped (the runtime has one
//! thread, so no op completes between a flip and its clock read). The process's CPU time over
//! the same window (`/proc/self/stat`, clock ticks) is printed per op.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use smdb_client::asyncio::Client;
use smdb_client::{ops, ApplyOptions, ConnectOptions, CreateOptions};

/// The phases of a run: ops complete in all three, only those of `COUNTING` are counted.
const WARMUP: u8 = 0;
const COUNTING: u8 = 1;
const DONE: u8 = 2;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:7401".into());
    let secs: u64 = args.get(2).map_or(Ok(10), |s| s.parse())?;
    let in_flight: usize = args.get(3).map_or(Ok(8), |s| s.parse())?;
    let instances: usize = args.get(4).map_or(Ok(1000), |s| s.parse())?;

    let c = Client::connect(&addr, ConnectOptions::default()).await?;
    let ids = Arc::new(create_instances(&c, instances).await?);
    let done = Arc::new(AtomicU64::new(0));
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let tasks: Vec<_> = (0..in_flight)
        .map(|t| {
            let (c, ids, done, phase) = (c.clone(), ids.clone(), done.clone(), phase.clone());
            tokio::spawn(async move {
                let none = ApplyOptions::default();
                // The payload smdb-bench sends by default: {"p": "<64 x>"}.
                let payload = json!({"p": "x".repeat(64)});
                let mut i = t;
                loop {
                    let id = &ids[i % ids.len()];
                    c.apply_event(id, "tick", Some(&payload), &none).await?;
                    match phase.load(Ordering::Relaxed) {
                        WARMUP => {}
                        COUNTING => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => break,
                    }
                    i += in_flight;
                }
                Ok::<_, smdb_client::Error>(())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    phase.store(COUNTING, Ordering::Relaxed);
    let (start, cpu_start) = (Instant::now(), cpu_ticks());
    tokio::time::sleep(Duration::from_secs(secs)).await;
    phase.store(DONE, Ordering::Relaxed);
    let (window, cpu_end) = (start.elapsed(), cpu_ticks());
    let n = done.load(Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    println!(
        "async client: APPLY_EVENT, {in_flight} in flight on 1 connection, {:.3} s: {n} ops, {:.0} ops/s",
        window.as_secs_f64(),
        n as f64 / window.as_secs_f64()
    );
    if let (Some((u0, s0)), Some((u1, s1))) = (cpu_start, cpu_end) {
        let per_op = |ticks: u64| ticks as f64 * 1e6 / TICKS_PER_SECOND / n.max(1) as f64;
        println!(
            "cpu per op (counted window): user {:.2} us, sys {:.2} us",
            per_op(u1 - u0),
            per_op(s1 - s0)
        );
    }
    Ok(())
}

/// The instances the run applies to, created through one pipeline.
async fn create_instances(c: &Client, n: usize) -> Result<Vec<String>, smdb_client::Error> {
    let def = json!({"states": ["s"], "initial": "s",
                     "transitions": [{"from": "s", "event": "tick", "to": "s"}]});
    c.put_machine("async-bench", 1, &def).await?;
    let run = std::process::id();
    let ids: Vec<String> = (0..n).map(|i| format!("ab-{run}-{i}")).collect();
    let creates: Vec<_> = ids
        .iter()
        .map(|id| ops::create_instance("async-bench", 1, id, &json!({}), &CreateOptions::default()))
        .collect();
    for r in c.pipeline(&creates).await? {
        r?;
    }
    Ok(ids)
}

/// `USER_HZ`: the unit of the CPU times in `/proc/self/stat` (100 on every Linux ABI).
const TICKS_PER_SECOND: f64 = 100.0;

/// The process's (user, system) CPU time so far in clock ticks, `None` where there is no
/// `/proc`.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3, `state`;
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ').skip(11);
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}
