//! Cluster mode's fan-out, shared by the blocking and tokio clients (docs/cluster.md,
//! "Clients"): a best-effort BATCH split by group primary and its results put back in order,
//! and the ops that walk the instances (LIST_INSTANCES, FIND_INSTANCES, SCAN_INSTANCES,
//! MIGRATE_INSTANCES, DELETE_INSTANCES) over every group, their answers merged (`Merge`), with
//! one cursor that holds every group's. No socket here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cluster::{route_key, slot_of, SlotMap};
use crate::error::{Error, Result};
use crate::lifecycle::{DeleteReply, MigrateReply};
use crate::ops::{BatchEntry, BatchOp, BatchResults, Instance, InstancePage};
use crate::queries::FoundPage;

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

/// The group cursors of a call to every group: `None` for a first call (every group's
/// primary, or a member of a group without one, no cursor), else the combined cursor's
/// `{address: cursor}`.
pub fn cursors(map: &SlotMap, cursor: Option<&str>) -> Result<BTreeMap<String, Option<String>>> {
    let Some(c) = cursor else {
        return Ok(map
            .group_addrs()
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

/// An answer of a call that every group makes: merged from each group's by `merge`.
pub trait Merge: Default {
    /// The cursor to call again with (`next_cursor` or `cursor`).
    fn cursor_mut(&mut self) -> &mut Option<String>;
    /// Adds another group's answer (its cursor already taken).
    fn fold(&mut self, other: Self);
    /// After the last `fold`.
    fn finish(&mut self) {}
}

/// One answer of each group's (by address): folded together (`Merge`), with a combined
/// cursor holding the groups with more to do (`None` when every group is done).
pub fn merge<R: Merge>(parts: Vec<(String, R)>) -> R {
    let mut out = R::default();
    let mut next: BTreeMap<String, String> = BTreeMap::new();
    for (addr, mut r) in parts {
        if let Some(c) = r.cursor_mut().take() {
            next.insert(addr, c);
        }
        out.fold(r);
    }
    out.finish();
    *out.cursor_mut() = (!next.is_empty()).then(|| encode_cursor(&next));
    out
}

/// Instances by id, each once.
fn by_id(instances: &mut Vec<Instance>) {
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    instances.dedup_by(|a, b| a.id == b.id);
}

/// LIST_INSTANCES: the instances by id (up to `limit` per group).
impl Merge for InstancePage {
    fn cursor_mut(&mut self) -> &mut Option<String> {
        &mut self.next_cursor
    }
    fn fold(&mut self, other: Self) {
        self.instances.extend(other.instances);
    }
    fn finish(&mut self) {
        by_id(&mut self.instances);
    }
}

/// FIND_INSTANCES / SCAN_INSTANCES: the instances by id (up to `limit` per group), the
/// versions searched of every group (each once, in order), `examined` summed.
impl Merge for FoundPage {
    fn cursor_mut(&mut self) -> &mut Option<String> {
        &mut self.next_cursor
    }
    fn fold(&mut self, other: Self) {
        self.instances.extend(other.instances);
        self.versions.extend(other.versions);
        self.examined += other.examined;
    }
    fn finish(&mut self) {
        by_id(&mut self.instances);
        self.versions.sort_unstable();
        self.versions.dedup();
    }
}

/// The fields of one group's reply that a sum does not add up: kept from the first that
/// has each.
fn union_extra(into: &mut crate::ops::Extra, from: crate::ops::Extra) {
    for (k, v) in from {
        into.entry(k).or_insert(v);
    }
}

/// MIGRATE_INSTANCES: every count summed (`remaining` too: each group's estimate).
impl Merge for MigrateReply {
    fn cursor_mut(&mut self) -> &mut Option<String> {
        &mut self.cursor
    }
    fn fold(&mut self, mut other: Self) {
        let remaining = self.remaining + other.remaining;
        union_extra(&mut self.extra, std::mem::take(&mut other.extra));
        self.add(other);
        self.remaining = remaining;
    }
}

/// DELETE_INSTANCES: every count summed (`remaining` too).
impl Merge for DeleteReply {
    fn cursor_mut(&mut self) -> &mut Option<String> {
        &mut self.cursor
    }
    fn fold(&mut self, mut other: Self) {
        let remaining = self.remaining + other.remaining;
        union_extra(&mut self.extra, std::mem::take(&mut other.extra));
        self.add(other);
        self.remaining = remaining;
    }
}

/// One merged page of each group's LIST_INSTANCES page (by address): `merge`.
pub fn merge_pages(pages: Vec<(String, InstancePage)>) -> InstancePage {
    merge(pages)
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

    #[test]
    fn found_pages_and_bulk_replies_merge_across_groups() {
        let inst = |id: &str| -> Instance {
            serde_json::from_value(json!({"id": id, "machine": "m", "version": 1,
                "state": "s", "wal_offset": 1}))
            .unwrap()
        };
        let found = |ids: &[&str], next: Option<&str>, versions: Vec<u64>| FoundPage {
            instances: ids.iter().map(|i| inst(i)).collect(),
            next_cursor: next.map(str::to_string),
            versions,
            examined: 3,
        };
        let f = merge(vec![
            ("h:1".into(), found(&["b", "x"], None, vec![2])),
            ("h:2".into(), found(&["a"], Some("c2"), vec![1, 2])),
        ]);
        let ids: Vec<&str> = f.instances.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(
            (ids, f.versions, f.examined),
            (vec!["a", "b", "x"], vec![1, 2], 6)
        );
        let next = decode_cursor(f.next_cursor.as_deref().unwrap()).unwrap();
        assert_eq!(
            next.into_iter().collect::<Vec<_>>(),
            vec![("h:2".into(), "c2".into())]
        );

        let reply = |v: Value| -> MigrateReply { serde_json::from_value(v).unwrap() };
        let m = merge(vec![
            (
                "h:1".into(),
                reply(json!({"migrated": 3, "skipped": {"no_state": 1},
                "examined": 4, "remaining": 6, "cursor": "k1", "note": "x"})),
            ),
            (
                "h:2".into(),
                reply(
                    json!({"migrated": 2, "skipped": {"no_state": 2, "other": 1},
                "examined": 5, "remaining": 1, "cursor": null}),
                ),
            ),
        ]);
        assert_eq!((m.migrated, m.examined, m.remaining), (5, 9, 7));
        assert_eq!((m.skipped["no_state"], m.skipped["other"]), (3, 1));
        assert_eq!(m.extra["note"], "x");
        let next = decode_cursor(m.cursor.as_deref().unwrap()).unwrap();
        assert_eq!(
            next.into_iter().collect::<Vec<_>>(),
            vec![("h:1".into(), "k1".into())]
        );
        let del = |v: Value| -> DeleteReply { serde_json::from_value(v).unwrap() };
        let d = merge(vec![
            (
                "h:1".into(),
                del(json!({"deleted": 4, "examined": 4, "remaining": 0})),
            ),
            (
                "h:2".into(),
                del(json!({"deleted": 1, "examined": 2, "remaining": 0,
                "would_delete": {}})),
            ),
        ]);
        assert_eq!(
            (d.deleted, d.examined, d.remaining, d.cursor),
            (5, 6, 0, None)
        );
    }
}
