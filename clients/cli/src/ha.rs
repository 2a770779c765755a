//! `smdb-cli ha status|history|pause|resume` and `smdb-cli switchover [--to NODE]`: the
//! operator's view of automatic failover (docs/ha.md, "Operations"). `ha status` and
//! `ha history` read `REPLICATION_STATUS.ha`; `ha pause` / `ha resume` send `HA_PAUSE` /
//! `HA_RESUME`; `switchover` sends `SWITCHOVER`. With `--json` each prints the raw object.

use serde_json::{json, Value};
use smdb_client::ops::Request;
use smdb_protocol::op::Op;

use super::args::HaCommand;
use super::commands::Output;
use super::error::{CliError, Kind};
use super::render::{cell, kv, table};
use super::session::Session;

/// Runs `ha ...`.
pub fn run(cmd: &HaCommand, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    match cmd {
        HaCommand::Status => {
            let ha = ha_object(s)?;
            match out.json {
                true => out.line(&ha.to_string()),
                false => out.line(&status(&ha)),
            }
        }
        HaCommand::History => {
            let ha = ha_object(s)?;
            match out.json {
                true => out.line(&ha["history"].to_string()),
                false => out.line(&history(&ha["history"])),
            }
        }
        HaCommand::Pause | HaCommand::Resume => {
            let op = match cmd {
                HaCommand::Pause => Op::HaPause,
                _ => Op::HaResume,
            };
            let r = s.run(|c| c.run(admin(op, json!({}))))?;
            match out.json {
                true => out.line(&r.to_string()),
                false if r["paused"] == true => out.line("automatic failover paused"),
                false => out.line("automatic failover resumed"),
            }
        }
    }
}

/// A failover admin op as a typed request: with several `--addr`, the client follows a
/// follower's `READ_ONLY_MODE` to the primary it names. Never resent once sent (it acts: the
/// op table's `Resend::Never`).
fn admin(op: Op, params: Value) -> Request<Value> {
    Request::of(op, params)
}

/// `switchover [--to NODE]`.
pub fn switchover(to: Option<&str>, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let params = match to {
        Some(to) => json!({ "to": to }),
        None => json!({}),
    };
    let r = s.run(|c| c.run(admin(Op::Switchover, params.clone())))?;
    match out.json {
        true => out.line(&r.to_string()),
        false => out.line(&format!(
            "switchover done: {} -> {}, epoch {}",
            cell(&r["from"]),
            cell(&r["to"]),
            cell(&r["epoch"])
        )),
    }
}

/// `REPLICATION_STATUS.ha`, or an error when failover is off on that server.
fn ha_object(s: &mut Session) -> Result<Value, CliError> {
    let mut r = s.value(|c| c.replication_status())?;
    match r.get_mut("ha").map(Value::take) {
        Some(ha) if ha.is_object() => Ok(ha),
        _ => Err(CliError::new(
            Kind::Server,
            "BAD_REQUEST",
            "automatic failover is off on this server (ha.enabled = false)",
        )),
    }
}

/// The human view: who leads, why not when nobody does, then one row per live member.
pub fn status(ha: &Value) -> String {
    let primary = match (&ha["primary"], &ha["primary_addr"]) {
        (Value::Null, _) => "- (none)".to_string(),
        (p, a) => format!("{} ({})", cell(p), cell(a)),
    };
    let sync_set: Vec<String> = (ha["sync_set"].as_array().into_iter().flatten())
        .map(cell)
        .collect();
    let head = json!({
        "cluster": ha["cluster"],
        "node_id": ha["node_id"],
        "epoch": ha["epoch"],
        "primary": primary,
        "lease_remaining_ms": ha["lease_remaining_ms"],
        "paused": ha["paused"],
        "blocked_reason": ha["blocked_reason"],
        "sync_set": sync_set.join(", "),
        "etcd_reachable": ha["etcd_reachable"],
    });
    let rows: Vec<Vec<String>> = (ha["members"].as_array().into_iter().flatten())
        .map(|m| {
            ["node_id", "addr", "role", "positions_sum", "lag_entries"]
                .iter()
                .map(|k| cell(&m[*k]))
                .collect()
        })
        .collect();
    let members = table(&["NODE", "ADDR", "ROLE", "POSITIONS", "LAG"], &rows);
    format!("{}\n\n{members}", kv(&head, &[]))
}

/// One row per term, oldest first.
pub fn history(h: &Value) -> String {
    let rows: Vec<Vec<String>> = (h.as_array().into_iter().flatten())
        .map(|t| {
            vec![
                cell(&t["epoch"]),
                cell(&t["node_id"]),
                cell(&t["started_at_ms"]),
                cell(&t["start_offsets"]),
            ]
        })
        .collect();
    table(&["EPOCH", "NODE", "STARTED_AT_MS", "START_OFFSETS"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_the_primary_the_reason_and_each_member() {
        let ha = json!({
            "cluster": "c", "node_id": "n1", "epoch": 4, "primary": null,
            "primary_addr": null, "paused": true, "sync_set": ["n1", "n2"],
            "blocked_reason": "automatic failover is paused",
            "members": [{"node_id": "n1", "addr": "h:1", "role": "follower",
                         "positions_sum": 10, "lag_entries": 2}],
        });
        let text = status(&ha);
        assert!(text.contains("- (none)"), "{text}");
        assert!(text.contains("automatic failover is paused"), "{text}");
        assert!(text.contains("n1, n2"), "{text}");
        assert!(
            text.contains("n1    h:1   follower  10         2"),
            "{text}"
        );
    }

    #[test]
    fn history_has_one_row_per_term() {
        let h = json!([{"epoch": 1, "node_id": "n0", "started_at_ms": 5, "start_offsets": [1]},
                       {"epoch": 2, "node_id": "n1", "started_at_ms": 9, "start_offsets": []}]);
        let text = history(&h);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.lines().nth(2).unwrap().starts_with("2      n1"),
            "{text}"
        );
    }
}
