//! Throughput of the async client: APPLY_EVENT with N requests in flight on one connection
//! (N tasks sharing one `Client`), against a running server. Compare with
//! `smdb-bench --connections 1 --in-flight 8` on the same server (benches/RESULTS.md).
//!
//! `cargo run --release -p smdb-client --features tokio --example async_bench -- ADDR [SECONDS] [IN_FLIGHT] [INSTANCES]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use smdb_client::asyncio::Client;
use smdb_client::{ops, ApplyOptions, ConnectOptions, CreateOptions};

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
    let def = json!({"states": ["s"], "initial": "s",
                     "transitions": [{"from": "s", "event": "tick", "to": "s"}]});
    c.put_machine("async-bench", 1, &def).await?;
    let run = std::process::id();
    let ids: Vec<String> = (0..instances).map(|i| format!("ab-{run}-{i}")).collect();
    let creates: Vec<_> = ids
        .iter()
        .map(|id| ops::create_instance("async-bench", 1, id, &json!({}), &CreateOptions::default()))
        .collect();
    for r in c.pipeline(&creates).await? {
        r?;
    }
    let ids = Arc::new(ids);
    let done = Arc::new(AtomicU64::new(0));
    let warmup = Duration::from_secs(1);
    let start = Instant::now();
    let end = start + warmup + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..in_flight)
        .map(|t| {
            let (c, ids, done) = (c.clone(), ids.clone(), done.clone());
            tokio::spawn(async move {
                let none = ApplyOptions::default();
                // The payload smdb-bench sends by default: {"p": "<64 x>"}.
                let payload = json!({"p": "x".repeat(64)});
                let mut i = t;
                while Instant::now() < end {
                    let id = &ids[i % ids.len()];
                    c.apply_event(id, "tick", Some(&payload), &none).await?;
                    if Instant::now() > start + warmup {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    i += in_flight;
                }
                Ok::<_, smdb_client::Error>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let n = done.load(Ordering::Relaxed);
    println!(
        "async client: APPLY_EVENT, {in_flight} in flight on 1 connection, {secs} s: {n} ops, {:.0} ops/s",
        n as f64 / secs as f64
    );
    Ok(())
}
