//! `smdb-cli cluster ...`: the operator's side of cluster mode (docs/cluster.md, docs/cli.md
//! "Cluster mode"). `create`, `add-group`, `move-slots` and `cancel` send one admin op each;
//! `status` shows `CLUSTER_SHARDS`; `rebalance` plans moves (`cluster_plan`) and runs them one
//! at a time; `check` reads every live member's `CLUSTER_INFO` (`cluster_check`). With `--json`
//! each prints the raw result.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use smdb_client::ops::Request;
use smdb_protocol::op::Op;

use super::cluster_check::{self, Member, NoAnswer};
use super::cluster_plan::{rebalance_plan, Move, Owners};
use super::commands::Output;
use super::error::{CliError, Kind};
use super::render::{cell, table};
use super::session::Session;

/// `smdb-cli cluster ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClusterCommand {
    /// Create the slot map (CLUSTER_CREATE): n groups split the 16384 slots evenly.
    Create {
        /// The groups, comma-separated (default: every group with a live primary).
        #[arg(long, value_delimiter = ',', value_name = "G,..")]
        groups: Option<Vec<String>>,
    },
    /// Add a group to the map, owning no slot yet (CLUSTER_ADD_GROUP).
    AddGroup {
        /// The group's name (its members' cluster.group).
        group: String,
    },
    /// Move slots LO-HI to group G (CLUSTER_MOVE_SLOTS); waits for the move to end.
    MoveSlots {
        /// The slot range, LO-HI (or one slot).
        range: String,
        /// The group to move them to.
        #[arg(long, value_name = "G")]
        to: String,
        /// Answer as soon as the move has started (its id), without waiting for its end.
        #[arg(long)]
        no_wait: bool,
    },
    /// Abort a running move (CLUSTER_CANCEL_MOVE).
    Cancel {
        /// The move's id.
        id: String,
    },
    /// Move slots until each group owns ⌊16384/n⌋ or ⌈16384/n⌉ of them, one move at a time.
    Rebalance {
        /// Print the plan, move nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The map: each group's slots, primary and members, and the moves (CLUSTER_SHARDS).
    Status,
    /// Exit 0 only when the map covers every slot once, each group has one primary, every
    /// live member has the map's epoch and owns what it says, and no move runs over 10 minutes;
    /// else exit 1 with one line per problem on stderr.
    Check,
}

/// Runs `cluster ...`.
pub fn run(cmd: &ClusterCommand, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    match cmd {
        ClusterCommand::Create { groups } => {
            let params = match groups {
                Some(g) => json!({ "groups": g }),
                None => json!({}),
            };
            let r = admin(s, Op::ClusterCreate, params)?;
            shards_out(&r, out, "map created")
        }
        ClusterCommand::AddGroup { group } => {
            let r = admin(s, Op::ClusterAddGroup, json!({ "group": group }))?;
            let said = match r["added"] == false {
                true => format!("group {group} was in the map already"),
                false => format!("group {group} added"),
            };
            shards_out(&r, out, &said)
        }
        ClusterCommand::MoveSlots { range, to, no_wait } => {
            let (lo, hi) = parse_range(range)?;
            let r = move_slots(s, lo, hi, to, !no_wait)?;
            match out.json {
                true => out.line(&r.to_string()),
                false => out.line(&moved_text(&r)),
            }
        }
        ClusterCommand::Cancel { id } => {
            let r = admin(s, Op::ClusterCancelMove, json!({ "id": id }))?;
            match out.json {
                true => out.line(&r.to_string()),
                false => out.line(&format!("move {}: {}", cell(&r["id"]), cell(&r["state"]))),
            }
        }
        ClusterCommand::Rebalance { dry_run } => rebalance(*dry_run, s, out),
        ClusterCommand::Status => {
            let r = shards(s)?;
            match out.json {
                true => out.line(&r.to_string()),
                false => out.line(&status(&r)),
            }
        }
        ClusterCommand::Check => check(s, out),
    }
}

/// An admin op: never resent once sent (the op table's `Resend::Never`).
fn admin(s: &mut Session, op: Op, params: Value) -> Result<Value, CliError> {
    s.run(|c| c.run(Request::<Value>::of(op, params.clone())))
}

fn shards(s: &mut Session) -> Result<Value, CliError> {
    s.run(|c| c.run(Request::<Value>::of(Op::ClusterShards, json!({}))))
}

/// `CLUSTER_MOVE_SLOTS`; a waited move may outlast `--timeout`, so the call has no limit.
fn move_slots(s: &mut Session, lo: u16, hi: u16, to: &str, wait: bool) -> Result<Value, CliError> {
    let params = json!({"slots": [lo, hi], "to": to, "wait": wait});
    let limit = s.timeout();
    s.run(|c| {
        if wait {
            c.set_timeout(None)?;
        }
        let r = c.run(Request::<Value>::of(Op::ClusterMoveSlots, params.clone()));
        c.set_timeout(limit)?;
        r
    })
}

/// `LO-HI` or `S`.
fn parse_range(text: &str) -> Result<(u16, u16), CliError> {
    let bad = || CliError::usage(format!("bad slot range {text:?}: want LO-HI, 0-16383"));
    let (lo, hi) = text.split_once('-').unwrap_or((text, text));
    let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
    match lo <= hi && hi < smdb_protocol::slot::SLOT_COUNT {
        true => Ok((lo, hi)),
        false => Err(bad()),
    }
}

fn shards_out(r: &Value, out: &mut Output<'_>, said: &str) -> Result<(), CliError> {
    match out.json {
        true => out.line(&r.to_string()),
        false => out.line(&format!("{said}\n\n{}", status(r))),
    }
}

fn moved_text(r: &Value) -> String {
    let slots = format!("{}-{}", cell(&r["slots"][0]), cell(&r["slots"][1]));
    match r["state"].as_str() {
        Some("done") => format!(
            "move {} done: slots {slots} {} -> {}, map_epoch {}, {} instances, freeze {} ms",
            cell(&r["id"]),
            cell(&r["from"]),
            cell(&r["to"]),
            cell(&r["map_epoch"]),
            cell(&r["instances"]),
            cell(&r["freeze_ms"])
        ),
        _ => format!(
            "move {} {}: slots {slots}",
            cell(&r["id"]),
            cell(&r["state"])
        ),
    }
}

/// `rebalance [--dry-run]`.
fn rebalance(dry_run: bool, s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let map = Owners::from_shards(&shards(s)?);
    let plan = rebalance_plan(&map);
    let planned: Vec<Value> = plan.iter().map(move_json).collect();
    if plan.is_empty() || dry_run {
        return match (out.json, plan.is_empty()) {
            (true, _) => {
                out.line(&json!({"balanced": plan.is_empty(), "plan": planned}).to_string())
            }
            (false, true) => out.line("balanced: nothing to move"),
            (false, false) => out.line(&plan_text(&plan)),
        };
    }
    let mut done = Vec::new();
    for m in &plan {
        let r = move_slots(s, m.lo, m.hi, &m.to, true)?;
        if !out.json {
            out.line(&moved_text(&r))?;
        }
        done.push(r);
    }
    match out.json {
        true => out.line(&json!({"balanced": false, "plan": planned, "moves": done}).to_string()),
        false => out.line(&format!("rebalanced: {} moves", done.len())),
    }
}

fn move_json(m: &Move) -> Value {
    json!({"slots": [m.lo, m.hi], "from": m.from, "to": m.to, "count": u32::from(m.hi - m.lo) + 1})
}

/// The plan, one row per move.
pub fn plan_text(plan: &[Move]) -> String {
    let rows: Vec<Vec<String>> = (plan.iter())
        .map(|m| {
            vec![
                format!("{}-{}", m.lo, m.hi),
                (u32::from(m.hi - m.lo) + 1).to_string(),
                m.from.clone(),
                m.to.clone(),
            ]
        })
        .collect();
    let head = format!("{} moves planned", plan.len());
    format!(
        "{head}\n{}",
        table(&["SLOTS", "COUNT", "FROM", "TO"], &rows)
    )
}

/// `CLUSTER_SHARDS` for people: one row per group, then the moves.
pub fn status(r: &Value) -> String {
    let groups: Vec<Vec<String>> = (r["shards"].as_array().into_iter().flatten())
        .map(|g| {
            let ranges: Vec<&Value> = g["slots"].as_array().into_iter().flatten().collect();
            let count: u64 = (ranges.iter())
                .map(|r| r[1].as_u64().unwrap_or(0) + 1 - r[0].as_u64().unwrap_or(0))
                .sum();
            let spans: Vec<String> = ranges
                .iter()
                .map(|r| format!("{}-{}", r[0], r[1]))
                .collect();
            let nodes: Vec<String> = (g["nodes"].as_array().into_iter().flatten())
                .map(|n| {
                    format!(
                        "{}@{} {}",
                        cell(&n["node_id"]),
                        cell(&n["addr"]),
                        cell(&n["role"])
                    )
                })
                .collect();
            vec![
                cell(&g["group"]),
                count.to_string(),
                spans.join(","),
                cell(&g["primary"]),
                nodes.join("; "),
            ]
        })
        .collect();
    let head = format!(
        "cluster {}  map_epoch {}",
        cell(&r["cluster"]),
        cell(&r["map_epoch"])
    );
    let mut text = format!(
        "{head}\n{}",
        table(&["GROUP", "SLOTS", "RANGES", "PRIMARY", "NODES"], &groups)
    );
    let moves: Vec<Vec<String>> = (r["migrations"].as_array().into_iter().flatten())
        .map(|m| {
            ["id", "slots", "from", "to", "state", "reason"]
                .iter()
                .map(|k| cell(&m[*k]))
                .collect()
        })
        .collect();
    if !moves.is_empty() {
        let t = table(&["MOVE", "SLOTS", "FROM", "TO", "STATE", "REASON"], &moves);
        text.push_str(&format!("\n\n{t}"));
    }
    text
}

/// `check`: problems to stderr, exit 1 when there is any.
fn check(s: &mut Session, out: &mut Output<'_>) -> Result<(), CliError> {
    let r = shards(s)?;
    let mut members = cluster_check::members(&r);
    for m in &mut members {
        m.info = info_at(s, m);
    }
    let now_ms = (SystemTime::now().duration_since(UNIX_EPOCH)).map_or(0, |d| d.as_millis() as u64);
    let problems = cluster_check::problems(&r, &members, now_ms);
    if out.json {
        out.line(&json!({"ok": problems.is_empty(), "problems": problems}).to_string())?;
    }
    if problems.is_empty() {
        return match out.json {
            true => Ok(()),
            false => out.line(&format!(
                "cluster ok: {} groups, {} members, map_epoch {}",
                r["shards"].as_array().map_or(0, Vec::len),
                members.len(),
                cell(&r["map_epoch"])
            )),
        };
    }
    for p in &problems {
        eprintln!("{p}");
    }
    Err(CliError::new(
        Kind::Server,
        "CLUSTER_CHECK_FAILED",
        format!("{} problems", problems.len()),
    ))
}

/// One member's `CLUSTER_INFO`, over a connection of its own (a short connect timeout).
fn info_at(s: &Session, m: &Member) -> Result<Value, NoAnswer> {
    let mut c = s
        .connect_to(&m.addr, Duration::from_secs(2))
        .map_err(|e| NoAnswer(e.render()))?;
    let r = c.run(Request::<Value>::of(Op::ClusterInfo, json!({})));
    let _ = c.bye();
    r.map_err(|e| NoAnswer(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("0-99").ok(), Some((0, 99)));
        assert_eq!(parse_range("7").ok(), Some((7, 7)));
        assert!(parse_range("9-3").is_err());
        assert!(parse_range("0-16384").is_err());
        assert!(parse_range("x").is_err());
    }

    #[test]
    fn status_has_one_row_per_group_and_the_moves() {
        let r = json!({"cluster": "c", "map_epoch": 3, "shards": [
            {"group": "g1", "slots": [[0, 9], [20, 29]], "primary": "a",
             "nodes": [{"node_id": "a", "addr": "h:1", "role": "primary"}]},
            {"group": "g2", "slots": [], "primary": null, "nodes": []}],
            "migrations": [{"id": "m1", "slots": [0, 9], "from": "g1", "to": "g2",
                            "state": "running", "reason": null}]});
        let text = status(&r);
        assert!(text.starts_with("cluster c  map_epoch 3"), "{text}");
        assert!(
            text.contains("g1     20     0-9,20-29  a        a@h:1 primary"),
            "{text}"
        );
        assert!(text.contains("m1"), "{text}");
    }
}
