//! MIGRATE_INSTANCES and DELETE_INSTANCES (the server's docs/lifecycle.md): the requests and
//! their replies. Each call examines at most `limit` instances and answers a `cursor` to call
//! again with, null once the machine is walked; `Client::migrate_pages` and
//! `Client::delete_pages` make those calls to the end, and `MigrateReply::add` /
//! `DeleteReply::add` sum them. Both ops are safe to resend (the op table's `Resend::Safe`): an
//! instance already moved is skipped, one already deleted is not found again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use smdb_protocol::op::Op;

use crate::ops::{Extra, Request};

/// MIGRATE_INSTANCES params: the instances of `machine` at `from_version` (those matching
/// `state` and `conditions`) move to `to_version`, each state renamed by `states` (old → new)
/// or kept; an instance whose state the new version lacks is skipped.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MigrateRequest {
    pub machine: String,
    pub from_version: u64,
    pub to_version: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub states: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `{"ctx.<path>": condition}` (any context path, as SCAN's) and/or `{"id": "<one id>"}`.
    #[serde(rename = "where", skip_serializing_if = "Map::is_empty")]
    pub conditions: Map<String, Value>,
    /// Only count what would move, per state: one call over the whole machine, no cursor.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Instances examined per call (server default 1000, at most 10000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl MigrateRequest {
    /// Every instance of `machine` at `from` to `to`, states kept.
    pub fn new(machine: &str, from: u64, to: u64) -> MigrateRequest {
        MigrateRequest {
            machine: machine.to_owned(),
            from_version: from,
            to_version: to,
            ..MigrateRequest::default()
        }
    }

    /// This request with state `old` renamed `new`.
    pub fn map_state(mut self, old: &str, new: &str) -> MigrateRequest {
        self.states.insert(old.to_owned(), new.to_owned());
        self
    }
}

/// DELETE_INSTANCES params: the instances of `machine` matching `state`, `conditions` and
/// `updated_before` (RFC 3339: last updated before it) are deleted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeleteRequest {
    pub machine: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(rename = "where", skip_serializing_if = "Map::is_empty")]
    pub conditions: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_before: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl DeleteRequest {
    /// Every instance of `machine`.
    pub fn new(machine: &str) -> DeleteRequest {
        DeleteRequest {
            machine: machine.to_owned(),
            ..DeleteRequest::default()
        }
    }
}

/// MIGRATE_INSTANCES's result. A dry run fills `would_migrate` (state → count), `skipped` and
/// `examined` only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrateReply {
    #[serde(default)]
    pub migrated: u64,
    /// Why instances were left: reason (`no_state`, ...) → count.
    #[serde(default)]
    pub skipped: BTreeMap<String, u64>,
    #[serde(default)]
    pub examined: u64,
    /// An estimate: instances of the machine not yet examined.
    #[serde(default)]
    pub remaining: u64,
    /// Pass back as `cursor` to go on; `None` once done.
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub would_migrate: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl MigrateReply {
    /// Adds the next call's reply: counts summed, `remaining` and `cursor` taken from it.
    pub fn add(&mut self, next: MigrateReply) {
        self.migrated += next.migrated;
        self.examined += next.examined;
        add_counts(&mut self.skipped, next.skipped);
        add_counts(&mut self.would_migrate, next.would_migrate);
        self.remaining = next.remaining;
        self.cursor = next.cursor;
    }
}

/// DELETE_INSTANCES's result. A dry run fills `would_delete` (state → count) and `examined`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeleteReply {
    #[serde(default)]
    pub deleted: u64,
    #[serde(default)]
    pub examined: u64,
    /// An estimate: instances of the machine not yet examined.
    #[serde(default)]
    pub remaining: u64,
    /// Pass back as `cursor` to go on; `None` once done.
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub would_delete: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl DeleteReply {
    /// Adds the next call's reply: counts summed, `remaining` and `cursor` taken from it.
    pub fn add(&mut self, next: DeleteReply) {
        self.deleted += next.deleted;
        self.examined += next.examined;
        add_counts(&mut self.would_delete, next.would_delete);
        self.remaining = next.remaining;
        self.cursor = next.cursor;
    }
}

fn add_counts(into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>) {
    for (k, n) in from {
        *into.entry(k).or_default() += n;
    }
}

pub fn migrate_instances(r: &MigrateRequest) -> Request<MigrateReply> {
    Request::of(Op::MigrateInstances, params(r))
}

pub fn delete_instances(r: &DeleteRequest) -> Request<DeleteReply> {
    Request::of(Op::DeleteInstances, params(r))
}

fn params(r: &impl Serialize) -> Value {
    // A struct of strings, maps and numbers always serialises.
    serde_json::to_value(r).unwrap_or(Value::Null)
}

/// The calls of a driver: `call` from `first`'s cursor until a reply has none or fails (the
/// error is the last item). Shared by the blocking client's `migrate_pages` / `delete_pages`.
pub(crate) fn pages<Q, R>(
    first: Q,
    mut call: impl FnMut(&Q) -> crate::Result<R>,
    cursor_of: fn(&R) -> Option<String>,
    with_cursor: fn(Q, String) -> Q,
) -> impl Iterator<Item = crate::Result<R>> {
    let mut next = Some(first);
    std::iter::from_fn(move || {
        let q = next.take()?;
        let reply = call(&q);
        if let Some(c) = reply.as_ref().ok().and_then(cursor_of) {
            next = Some(with_cursor(q, c));
        }
        Some(reply)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::ops::Retry;

    use super::*;

    #[test]
    fn requests_leave_defaults_out_and_are_safe_to_resend() {
        let r = migrate_instances(&MigrateRequest::new("job", 1, 2).map_state("open", "active"));
        assert_eq!(
            r.params,
            json!({"machine": "job", "from_version": 1, "to_version": 2,
                   "states": {"open": "active"}})
        );
        assert_eq!((r.op, r.retry), ("MIGRATE_INSTANCES", Retry::Safe));
        let d = delete_instances(&DeleteRequest {
            updated_before: Some("2020-01-01T00:00:00Z".into()),
            dry_run: true,
            ..DeleteRequest::new("t")
        });
        assert_eq!(
            d.params,
            json!({"machine": "t", "updated_before": "2020-01-01T00:00:00Z", "dry_run": true})
        );
        assert_eq!((d.op, d.retry), ("DELETE_INSTANCES", Retry::Safe));
    }

    #[test]
    fn replies_of_both_shapes_decode_and_add_up() {
        let a: MigrateReply = serde_json::from_value(json!({"migrated": 3,
            "skipped": {"no_state": 1}, "examined": 4, "remaining": 6, "cursor": "ab"}))
        .unwrap();
        let b: MigrateReply = serde_json::from_value(json!({"migrated": 2,
            "skipped": {"no_state": 2}, "examined": 6, "remaining": 0, "cursor": null}))
        .unwrap();
        let mut total = a;
        total.add(b);
        assert_eq!(
            (
                total.migrated,
                total.examined,
                total.remaining,
                total.cursor
            ),
            (5, 10, 0, None)
        );
        assert_eq!(total.skipped["no_state"], 3);
        let dry: DeleteReply =
            serde_json::from_value(json!({"would_delete": {"open": 4}, "examined": 9})).unwrap();
        assert_eq!((dry.would_delete["open"], dry.cursor), (4, None));
    }
}
