//! Cluster mode's fan-out, shared by the blocking and tokio clients (docs/cluster.md,
//! "Clients"): a best-effort BATCH split by group primary and its results put back in order,
//! and LIST_INSTANCES over every group, merged by id, with one cursor that holds every
//! group's. No socket here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cluster::{route_key, slot_of, SlotMap};
use crate::error::{Error, Result};
use crate::ops::{BatchEntry, BatchOp, BatchResults, Instance, InstancePage};

/// A combined cursor starts so (then hex of `{address: group cursor}`), which no server
/// cursor is taken for.
const CURSOR_PREFIX: &str = "cluster:";

/// The ops of a best-effort batch by the primary of their slot (`None`: ops that do not route
/// by instance, or whose slot has no known primary; they go to the seed). Each part keeps the
/// ops' indices, in order.
pub fn split_batch(map: &SlotMap, ops: &[BatchOp]) -> Vec<(Option<String>, Vec<usize>)> {
    let mut parts: Vec<(Option<String>, Vec<usize>)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let addr = route_key(op.op, &op.params)
            .and_then(|k| map.primary_of(slot_of(&k)).map(str::to_string));
        match parts.iter_mut().find(|p| p.0 == addr) {
            Some(p) => p.1.push(i),
            None => parts.push((addr, vec![i])),
        }
    }
    parts
}

/// The id an atomic batch routes by: its first op's that routes by instance (an atomic batch
/// keeps to one slot; the server answers `CROSS_SLOT` otherwise).
pub fn atomic_key(ops: &[BatchOp]) -> Option<String> {
    ops.iter().find_map(|op| route_key(op.op, &op.params))
}

/// The whole batch's results from each part's (in `split_batch`'s order): a part that failed
/// as a whole gives each of its ops that error as its entry.
pub fn reassemble(
    n: usize,
    parts: Vec<(Vec<usize>, Result<BatchResults>)>,
) -> Result<BatchResults> {
    let mut slots: Vec<Option<BatchEntry>> = vec![None; n];
    for (indices, r) in parts {
        match r {
            Ok(res) if res.results.len() == indices.len() => {
                for (i, e) in indices.into_iter().zip(res.results) {
                    slots[i] = Some(e);
                }
            }
            Ok(res) => {
                return Err(Error::Protocol(format!(
                    "BATCH answered {} entries for {} ops",
                    res.results.len(),
                    indices.len()
                )))
            }
            Err(e) => {
                for i in indices {
                    slots[i] = Some(error_entry(&e));
                }
            }
        }
    }
    let results = slots
        .into_iter()
        .map(|e| e.unwrap_or_else(missing))
        .collect();
    Ok(BatchResults { results })
}

fn error_entry(e: &Error) -> BatchEntry {
    let error = match e {
        Error::Server {
            code,
            message,
            retryable,
            details,
        } => json!({"code": code.as_str(), "message": message, "retryable": retryable,
                    "details": details}),
        other => json!({"code": "CONNECTION_LOST", "message": other.to_string(),
                        "retryable": false}),
    };
    BatchEntry {
        status: "error".into(),
        result: None,
        error: Some(error),
    }
}

fn missing() -> BatchEntry {
    error_entry(&Error::Protocol("no answer for this op".into()))
}

/// The group cursors of a LIST_INSTANCES call: `None` for a first page (every primary, no
/// cursor), else the combined cursor's `{address: cursor}`.
pub fn cursors(map: &SlotMap, cursor: Option<&str>) -> Result<BTreeMap<String, Option<String>>> {
    let Some(c) = cursor else {
        return Ok(map
            .primaries()
            .into_iter()
            .map(|a| (a.to_string(), None))
            .collect());
    };
    let m = decode_cursor(c)?;
    Ok(m.into_iter().map(|(a, c)| (a, Some(c))).collect())
}

/// The `{key: cursor}` of a combined cursor (`cluster:` then the hex of its JSON).
pub fn decode_cursor(c: &str) -> Result<BTreeMap<String, String>> {
    let bad = || Error::Config(format!("not a cluster cursor: {c:?}"));
    let hex = c.strip_prefix(CURSOR_PREFIX).ok_or_else(bad)?;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    serde_json::from_slice(&bytes).map_err(|_| bad())
}

/// The combined cursor of `{key: cursor}` (keys in order, compact JSON, hex).
pub fn encode_cursor(cursors: &BTreeMap<String, String>) -> String {
    let text = Value::from(serde_json::Map::from_iter(
        cursors
            .iter()
            .map(|(a, c)| (a.clone(), Value::String(c.clone()))),
    ))
    .to_string();
    let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{CURSOR_PREFIX}{hex}")
}

/// One merged page of each group's page (by address): instances by id, and a combined
/// cursor holding the groups with more to list (`None` when none has).
pub fn merge_pages(pages: Vec<(String, InstancePage)>) -> InstancePage {
    let mut instances: Vec<Instance> = Vec::new();
    let mut next: BTreeMap<String, String> = BTreeMap::new();
    for (addr, page) in pages {
        instances.extend(page.instances);
        if let Some(c) = page.next_cursor {
            next.insert(addr, c);
        }
    }
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    instances.dedup_by(|a, b| a.id == b.id);
    let next_cursor = (!next.is_empty()).then(|| encode_cursor(&next));
    InstancePage {
        instances,
        next_cursor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;

    fn map() -> SlotMap {
        SlotMap::from_shards(&json!({"map_epoch": 1, "shards": [
            {"group": "g1", "slots": [[0, 8191]], "primary": "a",
             "nodes": [{"node_id": "a", "addr": "h:1"}]},
            {"group": "g2", "slots": [[8192, 16383]], "primary": "b",
             "nodes": [{"node_id": "b", "addr": "h:2"}]}]}))
    }

    #[test]
    fn a_batch_splits_by_primary_and_comes_back_in_order() {
        // slot("hello") = 866 (g1), slot("foo") = 12182 (g2).
        let ops: Vec<BatchOp> = vec![
            ops::get_instance("foo").into(),
            ops::get_instance("hello").into(),
            ops::get_instance("{foo}:x").into(),
        ];
        let parts = split_batch(&map(), &ops);
        assert_eq!(
            parts,
            vec![
                (Some("h:2".into()), vec![0, 2]),
                (Some("h:1".into()), vec![1])
            ]
        );
        let ok = |r: i64| BatchEntry {
            status: "ok".into(),
            result: Some(json!(r)),
            error: None,
        };
        let down = Error::Io(std::io::Error::other("gone"));
        let r = reassemble(
            3,
            vec![
                (
                    vec![0, 2],
                    Ok(BatchResults {
                        results: vec![ok(0), ok(2)],
                    }),
                ),
                (vec![1], Err(down)),
            ],
        )
        .unwrap();
        assert_eq!(r.results[0], ok(0));
        assert_eq!(r.results[2], ok(2));
        assert_eq!(r.results[1].status, "error");
    }

    #[test]
    fn the_combined_cursor_holds_each_group_s() {
        let m = map();
        let first = cursors(&m, None).unwrap();
        assert_eq!(first.len(), 2);
        let inst = |id: &str| -> Instance {
            serde_json::from_value(json!({"id": id, "machine": "m", "version": 1,
                "state": "s", "context": {}, "created_at": "t", "updated_at": "t",
                "wal_offset": 1}))
            .unwrap()
        };
        let page = |ids: &[&str], next: Option<&str>| InstancePage {
            instances: ids.iter().map(|i| inst(i)).collect(),
            next_cursor: next.map(str::to_string),
        };
        let merged = merge_pages(vec![
            ("h:1".into(), page(&["b", "d"], Some("c1"))),
            ("h:2".into(), page(&["a", "c"], None)),
        ]);
        let ids: Vec<&str> = merged.instances.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b", "c", "d"]);
        let next = cursors(&m, merged.next_cursor.as_deref()).unwrap();
        assert_eq!(
            next.into_iter().collect::<Vec<_>>(),
            vec![("h:1".into(), Some("c1".into()))]
        );
        assert!(cursors(&m, Some("plain")).is_err());
        let last = merge_pages(vec![("h:1".into(), page(&[], None))]);
        assert_eq!(last.next_cursor, None);
    }
}
