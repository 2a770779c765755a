//! The README's quick start with the blocking client: define a machine, create an instance,
//! watch it, apply a refused and an accepted event, read it back.
//!
//! `SMDB_ADDR=127.0.0.1:7401 cargo run -p smdb-client --example blocking_quickstart`

use std::time::Duration;

use serde_json::json;
use smdb_client::{Client, ConnectOptions, Error, WatchOptions};

/// Runs the quick start against `addr`; returns the lines it prints.
pub fn quickstart(addr: &str) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    let opts = ConnectOptions {
        client_name: "blocking-quickstart".into(),
        ..ConnectOptions::default()
    };
    let mut c = Client::connect_with(addr, &opts)?;
    out.push(format!("ping: {}", c.ping()?.pong));
    let definition = json!({
        "states": ["new", "paid", "shipped"], "initial": "new", "final": ["shipped"],
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
            {"from": "paid", "event": "ship", "to": "shipped"}]});
    let put = c.put_machine("order", 1, &definition)?;
    out.push(format!(
        "machine {} v{} created={}",
        put.machine, put.version, put.created
    ));
    let created = c.create_instance("order", 1, "order-1", &json!({"total": 30}))?;
    out.push(format!("created {} in {}", created.id, created.state));

    // A second connection watches the instance while the first moves it.
    let mut events = Client::connect_with(addr, &opts)?
        .subscribe_instance("order-1", WatchOptions::default())?;

    match c.apply_event("order-1", "pay", Some(&json!({"amount": 10}))) {
        Err(e) => out.push(format!("refused: {e}")),
        Ok(r) => out.push(format!("unexpected: {} -> {}", r.from_state, r.to_state)),
    }
    let paid = c.apply_event("order-1", "pay", Some(&json!({"amount": 30})))?;
    out.push(format!(
        "{}: {} -> {} (wal offset {})",
        paid.instance_id, paid.from_state, paid.to_state, paid.wal_offset
    ));
    if let Some(ev) = events.next_timeout(Duration::from_secs(10))? {
        out.push(format!(
            "event: {} {} -> {}",
            ev.event, ev.from_state, ev.to_state
        ));
    }
    let got = c.get_instance("order-1")?;
    out.push(format!("state: {}, context: {}", got.state, got.context));
    Ok(out)
}

#[allow(dead_code)]
fn main() {
    let addr = std::env::var("SMDB_ADDR").unwrap_or_else(|_| "127.0.0.1:7401".into());
    match quickstart(&addr) {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
