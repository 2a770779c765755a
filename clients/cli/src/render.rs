//! Human-readable output: one renderer per op result, plus the table and key/value helpers they
//! share. Renderers read results leniently (a missing field shows as `-`), so a server that adds
//! fields never breaks the CLI; `--json` bypasses all of this.

use serde_json::Value;

/// A value as a table cell: strings bare, `null` as `-`, anything else as compact JSON.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Left-aligned columns separated by two spaces, with a header row.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(headers.to_vec())];
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

/// Fields shown first, in this order; the rest follow alphabetically.
const FIRST: &[&str] = &[
    "shard",
    "server_name",
    "server_version",
    "role",
    "uptime_seconds",
    "id",
    "instance_id",
    "machine",
    "version",
    "state",
    "context",
    "event_count",
    "wal_offset",
    "created_at",
    "updated_at",
];

fn rank(key: &str) -> usize {
    FIRST.iter().position(|k| *k == key).unwrap_or(FIRST.len())
}

/// An object's keys in display order.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .map_or(vec![], |m| m.keys().map(String::as_str).collect());
    k.sort_by_key(|k| (rank(k), *k));
    k
}

/// `key: value` lines for an object's fields (nested objects on one line as JSON), keys
/// aligned; `skip` names fields rendered elsewhere.
pub fn kv(v: &Value, skip: &[&str]) -> String {
    if !v.is_object() {
        return cell(v);
    }
    let fields: Vec<(&str, &Value)> = keys(v)
        .into_iter()
        .filter(|k| !skip.contains(k))
        .map(|k| (k, &v[k]))
        .collect();
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let lines: Vec<String> = fields
        .iter()
        .map(|(k, v)| {
            format!(
                "{:<width$}  {}",
                format!("{k}:"),
                cell(v),
                width = width + 1
            )
        })
        .collect();
    lines.join("\n")
}

/// Rows of `items` (an array of objects) for `columns`.
fn rows(items: &Value, columns: &[&str]) -> Vec<Vec<String>> {
    let empty = Vec::new();
    items
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|it| columns.iter().map(|c| cell(&it[*c])).collect())
        .collect()
}

/// The human rendering of `op`'s result.
pub fn result(op: &str, v: &Value) -> String {
    match op {
        "PING" => "pong".into(),
        "INFO" => info(v),
        "PUT_MACHINE" => put_machine(v),
        "GET_MACHINE" => get_machine(v),
        "LIST_MACHINES" => {
            let mut r = rows(&v["machines"], &["machine", "versions"]);
            for row in &mut r {
                row[1] = row[1].trim_matches(['[', ']']).replace(',', ", ");
            }
            table(&["MACHINE", "VERSIONS"], &r)
        }
        "LIST_INSTANCES" => list_instances(v),
        "DELETE_INSTANCE" => format!(
            "deleted {} (wal offset {})",
            cell(&v["id"]),
            cell(&v["wal_offset"])
        ),
        "APPLY_EVENT" => apply_event(v),
        "BATCH" => batch(v),
        "GET_HISTORY" => history(v),
        "WATCH_INSTANCE" | "WATCH_ALL" => format!(
            "subscription {} at cursor {}",
            cell(&v["subscription_id"]),
            cell(&v["cursor"])
        ),
        _ => kv(v, &[]),
    }
}

/// One line per op: its index, status and result (or error code and message) as JSON.
fn batch(v: &Value) -> String {
    let mut out = String::new();
    for (i, r) in v["results"].as_array().into_iter().flatten().enumerate() {
        let line = match r["status"].as_str() {
            Some("ok") => format!("{i} ok {}", r["result"]),
            _ => format!(
                "{i} error {}: {}",
                cell(&r["error"]["code"]),
                cell(&r["error"]["message"])
            ),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.trim_end().to_string()
}

fn info(v: &Value) -> String {
    let mut out = kv(v, &["limits", "wal", "shard_details"]);
    for section in ["limits", "wal"] {
        if v[section].is_object() {
            out.push_str(&format!("\n{section}:\n"));
            out.push_str(&indent(&kv(&v[section], &[])));
        }
    }
    if let Some(first) = v["shard_details"].as_array().and_then(|a| a.first()) {
        let cols = keys(first);
        let headers: Vec<String> = cols.iter().map(|c| c.to_uppercase()).collect();
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        out.push_str("\nshards:\n");
        out.push_str(&indent(&table(&headers, &rows(&v["shard_details"], &cols))));
    }
    out
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn put_machine(v: &Value) -> String {
    let what = if v["created"] == Value::Bool(true) {
        "created"
    } else {
        "unchanged (this exact definition was already stored)"
    };
    format!(
        "machine {} version {}: {what}\nchecksum: {}",
        cell(&v["machine"]),
        cell(&v["version"]),
        cell(&v["checksum"])
    )
}

fn get_machine(v: &Value) -> String {
    let d = &v["definition"];
    let list = |x: &Value| {
        x.as_array()
            .map(|a| a.iter().map(cell).collect::<Vec<_>>().join(", "))
            .unwrap_or_else(|| cell(x))
    };
    let mut out = kv(v, &["definition"]);
    out.push_str(&format!("\nstates:    {}", list(&d["states"])));
    out.push_str(&format!("\ninitial:   {}", cell(&d["initial"])));
    out.push_str(&format!("\nfinal:     {}", list(&d["final"])));
    let mut t = rows(&d["transitions"], &["from", "event", "to", "guard"]);
    for row in &mut t {
        if row[0].starts_with('[') {
            row[0] = list(&serde_json::from_str(&row[0]).unwrap_or(Value::Null));
        }
    }
    out.push_str("\ntransitions:\n");
    out.push_str(&indent(&table(&["FROM", "EVENT", "TO", "GUARD"], &t)));
    out
}

fn list_instances(v: &Value) -> String {
    let cols = [
        "id",
        "machine",
        "version",
        "state",
        "event_count",
        "updated_at",
    ];
    let r = rows(&v["instances"], &cols);
    let mut out = table(
        &["ID", "MACHINE", "VERSION", "STATE", "EVENTS", "UPDATED"],
        &r,
    );
    out.push_str(&format!(
        "\n({} instance{})",
        r.len(),
        if r.len() == 1 { "" } else { "s" }
    ));
    if let Some(c) = v["next_cursor"].as_str() {
        out.push_str(&format!("\nmore: --cursor {c}  (or --all)"));
    }
    out
}

fn apply_event(v: &Value) -> String {
    let mut out = format!(
        "{}: {} -> {} (wal offset {})",
        cell(&v["instance_id"]),
        cell(&v["from_state"]),
        cell(&v["to_state"]),
        cell(&v["wal_offset"])
    );
    if v["applied"] == Value::Bool(false) {
        out.push_str(" [not applied again: idempotency key seen before]");
    }
    out.push_str(&format!("\ncontext: {}", cell(&v["context"])));
    out
}

fn history(v: &Value) -> String {
    let cols = ["seq", "event", "from_state", "to_state", "at", "payload"];
    let t = table(
        &["SEQ", "EVENT", "FROM", "TO", "AT", "PAYLOAD"],
        &rows(&v["events"], &cols),
    );
    match &v["next"] {
        Value::Null => t,
        n => format!("{t}\nmore: --from {n}"),
    }
}

/// One line for a push: an event or the end of a lagging subscription.
pub fn push(v: &Value) -> String {
    match v["type"].as_str() {
        Some("event") => {
            let mut s = format!(
                "{}  {}  {} -> {}  payload={}  shard={} offset={} cursor={}",
                cell(&v["instance_id"]),
                cell(&v["event"]),
                cell(&v["from_state"]),
                cell(&v["to_state"]),
                cell(&v["payload"]),
                cell(&v["shard"]),
                cell(&v["wal_offset"]),
                cell(&v["cursor"])
            );
            if !v["context"].is_null() {
                s.push_str(&format!("  context={}", v["context"]));
            }
            s
        }
        Some("subscription_lagged") => format!(
            "subscription {} ended: this client fell behind; resume with --from-cursor {}",
            cell(&v["subscription_id"]),
            cell(&v["resume_cursor"])
        ),
        _ => format!("push: {v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_columns() {
        let t = table(&["ID", "STATE"], &[vec!["a-long-id".into(), "new".into()]]);
        assert_eq!(t, "ID         STATE\na-long-id  new");
    }

    #[test]
    fn list_shows_the_next_cursor() {
        let v = json!({"instances": [{"id": "o1", "machine": "order", "version": 1,
            "state": "new", "event_count": 0, "updated_at": "t"}], "next_cursor": "abc"});
        let out = result("LIST_INSTANCES", &v);
        assert!(
            out.contains("o1  order    1        new    0       t"),
            "{out}"
        );
        assert!(out.contains("--cursor abc"), "{out}");
    }

    #[test]
    fn kv_aligns_and_shows_null_as_dash() {
        assert_eq!(
            kv(&json!({"id": "x", "state": null}), &[]),
            "id:     x\nstate:  -"
        );
    }
}
