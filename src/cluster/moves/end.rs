//! How a move ends on the source (docs/cluster.md, "Moving slots", steps 5-7): the reasons,
//! the abort written, the `warn` line; and the reading of log records the catch-up ships.

use std::collections::BTreeSet;

use serde_json::Value;
use shards::engine::{Entry, Record};
use shards::routing::slot_of;

use super::super::admin::{self, MoveAsk};
use super::super::map::Migration;
use super::etcd::Figures;
use super::source::Mover;

/// Why a move ends without switching: a reason of docs/cluster.md's list.
pub type Reason = &'static str;

/// The reason a target's refusal names (`details.reason`), else `target_refused`; a full
/// disk there is `target_full`.
pub(super) fn refusal(error: &Value) -> Reason {
    match (error["code"].as_str(), error["details"]["reason"].as_str()) {
        (Some("STORAGE_FULL"), _) => "target_full",
        (_, Some("definition_conflict")) => "definition_conflict",
        _ => {
            log::warn!("cluster: the move's target refused: {error}");
            "target_refused"
        }
    }
}

/// Adds the ids of the instances of slots `lo..=hi` a log record changes.
pub(super) fn collect_ids(bytes: &[u8], lo: u16, hi: u16, ids: &mut BTreeSet<String>) {
    let mut add = |id: &str| {
        let s = slot_of(id);
        if lo <= s && s <= hi {
            ids.insert(id.to_string());
        }
    };
    match Record::decode(bytes) {
        Ok(Record::Event(ev)) => add(ev.instance_id),
        Ok(Record::Entry(Entry::Batch { entries })) => {
            for e in &entries {
                if let Some(id) = e.instance_id() {
                    add(id);
                }
            }
        }
        Ok(Record::Entry(e)) => {
            if let Some(id) = e.instance_id() {
                add(id);
            }
        }
        Err(_) => {}
    }
}

/// Ends move `m` on the source: the abort written (unless it was cancelled, which wrote
/// it), the target told, one `warn` line.
pub async fn finish(mover: &Mover, m: &Migration, outcome: Result<u64, Reason>, figures: Figures) {
    let (what, map_epoch, reason) = match outcome {
        Ok(epoch) => ("switched", epoch, ""),
        Err(reason) => {
            let ask = MoveAsk::Abort {
                id: m.id.clone(),
                reason: reason.to_string(),
                figures: figures.clone(),
            };
            if let Err(e) = admin::move_txn(&mover.cluster, ask).await {
                log::error!("cluster: move {}: writing its abort: {e}", m.id);
            }
            ("aborted", mover.cluster.view.get().map_epoch(), reason)
        }
    };
    mover.cluster.counters.count_migration(what == "switched");
    log::warn!(
        migration = m.id.as_str(), slots:? = [m.lo, m.hi], from = m.from.as_str(),
        to = m.to.as_str(), map_epoch, reason;
        "cluster: move {} {what}: slots [{}, {}] from {} to {} (map epoch {map_epoch}{}{})",
        m.id, m.lo, m.hi, m.from, m.to,
        if reason.is_empty() { "" } else { ", reason " },
        reason
    );
}
