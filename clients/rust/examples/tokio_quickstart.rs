//! The README's quick start with the async client on tokio, plus a pipelined burst: eight
//! tasks share one client, so eight requests are in flight on one connection.
//!
//! `SMDB_ADDR=127.0.0.1:7401 cargo run -p smdb-client --features tokio --example tokio_quickstart`

use serde_json::json;
use smdb_client::asyncio::Client;
use smdb_client::{ApplyOptions, ConnectOptions, CreateOptions, Error, WatchOptions};

/// Runs the quick start against `addr`; returns the lines it prints.
pub async fn quickstart(addr: &str) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    let opts = ConnectOptions {
        client_name: "tokio-quickstart".into(),
        ..ConnectOptions::default()
    };
    let c = Client::connect(addr, opts).await?;
    out.push(format!("ping: {}", c.ping().await?.pong));
    let definition = json!({
        "states": ["new", "paid", "shipped"], "initial": "new", "final": ["shipped"],
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
            {"from": "paid", "event": "ship", "to": "shipped"}]});
    let put = c.put_machine("order", 1, &definition).await?;
    out.push(format!(
        "machine {} v{} created={}",
        put.machine, put.version, put.created
    ));
    let ctx = json!({"total": 30});
    let created = c
        .create_instance("order", 1, "order-2", &ctx, &CreateOptions::default())
        .await?;
    out.push(format!("created {} in {}", created.id, created.state));
    let mut events = c
        .subscribe_instance("order-2", WatchOptions::default())
        .await?;

    let none = ApplyOptions::default();
    match c
        .apply_event("order-2", "pay", Some(&json!({"amount": 10})), &none)
        .await
    {
        Err(e) => out.push(format!("refused: {e}")),
        Ok(r) => out.push(format!("unexpected: {} -> {}", r.from_state, r.to_state)),
    }
    let paid = c
        .apply_event("order-2", "pay", Some(&json!({"amount": 30})), &none)
        .await?;
    out.push(format!(
        "{}: {} -> {} (wal offset {})",
        paid.instance_id, paid.from_state, paid.to_state, paid.wal_offset
    ));
    if let Some(ev) = events.next().await {
        let ev = ev?;
        out.push(format!(
            "event: {} {} -> {}",
            ev.event, ev.from_state, ev.to_state
        ));
    }

    // Eight tasks, one connection: their GET_INSTANCEs are pipelined.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.get_instance("order-2").await })
        })
        .collect();
    let mut states = Vec::new();
    for t in tasks {
        let got = t
            .await
            .map_err(|e| Error::Config(format!("task failed: {e}")))??;
        states.push(got.state);
    }
    out.push(format!("8 concurrent reads: {}", states.join(",")));
    Ok(out)
}

#[allow(dead_code)]
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr = std::env::var("SMDB_ADDR").unwrap_or_else(|_| "127.0.0.1:7401".into());
    match quickstart(&addr).await {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
