//! Unmeasured set-up through the project's blocking client: connect (HELLO, AUTH), ask INFO for
//! the shard count, define the bench machine and pre-create instances (pipelined).

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{json, Value};

use smdb_client::{into_result, Client, ClientError, ClientTlsOptions};

use super::workload::{machine_definition, with_indexed_fields, Plan, MACHINE, MACHINE_VERSION};

/// Requests the pre-create step keeps in flight on its one connection: enough to hide the
/// round trip and the group commit, far below `network.max_inflight_per_connection`.
const PRECREATE_WINDOW: usize = 128;
/// How long set-up waits for any one response before giving up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A connected client that has done HELLO and, with a token, AUTH (over TLS with `tls`).
pub fn connect(
    addr: &str,
    token: Option<&str>,
    tls: Option<&ClientTlsOptions>,
    name: &str,
) -> Result<Client, String> {
    let mut c = match tls {
        Some(tls) => Client::connect_tls(addr, tls, Some(SETUP_TIMEOUT)),
        None => Client::connect(addr),
    }
    .map_err(|e| format!("connect to {addr}: {e}"))?;
    c.set_timeout(Some(SETUP_TIMEOUT))
        .map_err(|e| format!("socket timeout: {e}"))?;
    c.hello(name).map_err(|e| format!("HELLO: {e}"))?;
    if let Some(token) = token {
        c.call("AUTH", json!({"method": "bearer", "token": token}))
            .map_err(|e| format!("AUTH: {e}"))?;
    }
    Ok(c)
}

/// The server's shard count from INFO (`shards`).
pub fn shard_count(c: &mut Client) -> Result<u32, String> {
    let info = c
        .call("INFO", json!({}))
        .map_err(|e| format!("INFO: {e}"))?;
    info.get("shards")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("INFO has no positive `shards`: {info}"))
}

/// Defines the bench machine (idempotent: the same definition again is `created: false`).
pub fn put_machine(c: &mut Client, indexes: Option<u8>) -> Result<(), String> {
    c.call(
        "PUT_MACHINE",
        json!({"machine": MACHINE, "version": MACHINE_VERSION, "definition": machine_definition(indexes)}),
    )
    .map(|_| ())
    .map_err(|e| format!("PUT_MACHINE {MACHINE}: {e}"))
}

/// Creates the plan's instances `0..plan.instances`, keeping `PRECREATE_WINDOW` requests in
/// flight. Fails on the first error response.
pub fn precreate(c: &mut Client, plan: &Plan) -> Result<(), String> {
    precreate_ids(c, plan, 0..plan.instances)
}

/// `precreate` of the plan's instances numbered by `ks` (`--cluster` gives each primary its
/// share).
pub fn precreate_ids(
    c: &mut Client,
    plan: &Plan,
    ks: impl Iterator<Item = u64>,
) -> Result<(), String> {
    let context: Value =
        serde_json::from_str(&plan.payload_json).map_err(|e| format!("payload JSON: {e}"))?;
    let mut ks = ks.peekable();
    let mut pending: VecDeque<String> = VecDeque::new();
    while ks.peek().is_some() || !pending.is_empty() {
        while pending.len() < PRECREATE_WINDOW {
            let Some(next) = ks.next() else { break };
            let id = plan.instance_id(next);
            let mut context = context.clone();
            with_indexed_fields(&mut context, plan.indexes, next);
            let params = json!({"machine": MACHINE, "version": MACHINE_VERSION, "id": id,
                                "context": context});
            c.send("CREATE_INSTANCE", &params)
                .map_err(|e| e.to_string())?;
            pending.push_back(id);
        }
        if pending.is_empty() {
            break;
        }
        let resp = c.recv_response().map_err(|e| e.to_string())?;
        let Some(id) = pending.pop_front() else {
            return Err("response without a request during pre-create".into());
        };
        match into_result(resp) {
            Ok(_) => {}
            Err(ClientError::Server { code, message, .. }) => {
                return Err(format!("pre-create {id}: {code}: {message}"));
            }
            Err(e) => return Err(format!("pre-create {id}: {e}")),
        }
    }
    Ok(())
}
