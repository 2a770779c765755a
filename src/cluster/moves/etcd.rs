//! A move's etcd transactions (docs/cluster.md, "Moving slots"), run on the HA thread: the
//! intent (`start`), the switch (`switch`) and the abort (`abort`). Each is one transaction
//! that compares the map key's `mod_revision`; the start and the switch also compare both
//! groups' leader keys, so a move begun in an earlier term of either group can never switch.
//! Each writes `migrations/<id>` in the same transaction as its map change.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use super::super::error::ClusterError;
use super::super::keys::ClusterKeys;
use super::super::map::{ClusterMap, Migration, MigrationRecord, MigrationState};
use crate::control::ha::etcd::Etcd;
use crate::control::ha::keys::Leader;
use crate::util::time::now_ms;

/// How often a transaction that lost a race with another map change is tried again.
const RETRIES: usize = 8;

/// What a move's end tells its record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    pub instances: u64,
    pub entries: u64,
    pub freeze_ms: u64,
    pub attempts: u32,
    /// Bytes of instance images shipped (the throttle's measure).
    pub bytes: u64,
}

/// The map and its `mod_revision`.
async fn map_at(etcd: &Etcd, keys: &ClusterKeys) -> Result<(ClusterMap, i64), ClusterError> {
    let resp = etcd
        .get("cluster map", keys.map(), GetOptions::new())
        .await?;
    let kv = resp.kvs().first().ok_or(ClusterError::NoMap)?;
    Ok((ClusterMap::parse(kv.value())?, kv.mod_revision()))
}

/// A group's leader (its value and `create_revision`, the term), if it has one.
async fn leader_of(
    etcd: &Etcd,
    keys: &ClusterKeys,
    group: &str,
) -> Result<Option<(Leader, i64)>, ClusterError> {
    let resp = etcd
        .get(
            "cluster leader",
            keys.group(group).leader(),
            GetOptions::new(),
        )
        .await?;
    Ok(resp.kvs().first().and_then(|kv| {
        let leader = serde_json::from_slice::<Leader>(kv.value()).ok()?;
        Some((leader, kv.create_revision()))
    }))
}

/// `migrations/<id>`, if written.
pub async fn record(
    etcd: &Etcd,
    keys: &ClusterKeys,
    id: &str,
) -> Result<Option<MigrationRecord>, ClusterError> {
    let resp = etcd
        .get("cluster migration", keys.migration(id), GetOptions::new())
        .await?;
    Ok(resp
        .kvs()
        .first()
        .and_then(|kv| serde_json::from_slice(kv.value()).ok()))
}

/// Why a range cannot move now (`BAD_REQUEST` naming it).
fn check_range(map: &ClusterMap, lo: u16, hi: u16, to: &str) -> Result<String, ClusterError> {
    let bad = |why: String| ClusterError::BadMove { why };
    if lo > hi || hi > super::super::map::SLOT_MAX {
        return Err(bad(format!(
            "slots [{lo}, {hi}] are not a range within 0..=16383"
        )));
    }
    if !map.groups.iter().any(|g| g == to) {
        return Err(bad(format!("group {to:?} is not in the map")));
    }
    let from = map.owner(lo).unwrap_or_default().to_string();
    if let Some((a, b, g)) = (map.slots.iter()).find(|(a, b, g)| *a <= hi && *b >= lo && *g != from)
    {
        return Err(bad(format!(
            "slots [{lo}, {hi}] are not owned by one group: [{a}, {b}] is {g}'s, slot {lo} is {from}'s"
        )));
    }
    if from == to {
        return Err(bad(format!("group {to} owns slots [{lo}, {hi}] already")));
    }
    if let Some(m) = (map.migrations.iter()).find(|m| m.lo <= hi && m.hi >= lo) {
        return Err(bad(format!(
            "slots [{}, {}] are in running move {}",
            m.lo, m.hi, m.id
        )));
    }
    Ok(from)
}

/// `CLUSTER_MOVE_SLOTS`: records the intent: the move added to `map.migrations` (no epoch
/// change) and `migrations/<id>` written as running, comparing the map's revision and both
/// groups' leader keys.
pub async fn start(
    etcd: &Etcd,
    keys: &ClusterKeys,
    lo: u16,
    hi: u16,
    to: &str,
) -> Result<MigrationRecord, ClusterError> {
    for _ in 0..RETRIES {
        let (map, rev) = map_at(etcd, keys).await?;
        let from = check_range(&map, lo, hi, to)?;
        let (Some((fl, from_rev)), Some((tl, to_rev))) = (
            leader_of(etcd, keys, &from).await?,
            leader_of(etcd, keys, to).await?,
        ) else {
            let mut groups = Vec::new();
            for g in [&from, &to.to_string()] {
                if leader_of(etcd, keys, g).await?.is_none() {
                    groups.push(g.clone());
                }
            }
            return Err(ClusterError::NoPrimary { groups });
        };
        let id = format!("{:016x}", crate::util::random::random_u64());
        let started_at_ms = now_ms();
        let migration = Migration {
            id: id.clone(),
            lo,
            hi,
            from: from.clone(),
            to: to.to_string(),
            from_rev,
            to_rev,
            from_epoch: fl.epoch,
            to_epoch: tl.epoch,
            started_at_ms,
        };
        let record = running(&migration);
        let mut next = map.clone();
        next.migrations.push(migration);
        let txn = Txn::new()
            .when([
                Compare::mod_revision(keys.map(), CompareOp::Equal, rev),
                Compare::create_revision(keys.group(&from).leader(), CompareOp::Equal, from_rev),
                Compare::create_revision(keys.group(to).leader(), CompareOp::Equal, to_rev),
            ])
            .and_then([
                TxnOp::put(keys.map(), next.to_bytes(), None),
                TxnOp::put(keys.migration(&id), to_json(&record), None),
            ]);
        if etcd.txn("cluster move start", txn).await?.succeeded() {
            log::info!("cluster: move {id} of slots [{lo}, {hi}] from {from} to {to} started");
            return Ok(record);
        }
    }
    Err(ClusterError::Contended)
}

fn to_json(r: &MigrationRecord) -> Vec<u8> {
    serde_json::to_vec(r).unwrap_or_default()
}

/// The outcome of a switch's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switched {
    /// Committed: the map at its new epoch.
    Done { map_epoch: u64 },
    /// A compare failed: the move must abort, for this reason.
    Refused { reason: &'static str },
}

/// The switch (step 5): `If(map.mod_revision == R ∧ leader(from).create_revision ==
/// from_rev ∧ leader(to).create_revision == to_rev) Then(map with the range owned by `to`,
/// map_epoch + 1, the move removed; migrations/<id> done)`. An unknown outcome (an error) is
/// settled by reading the map back.
pub async fn switch(
    etcd: &Etcd,
    keys: &ClusterKeys,
    id: &str,
    figures: &Figures,
) -> Result<Switched, ClusterError> {
    let (map, rev) = map_at(etcd, keys).await?;
    let Some(m) = map.migrations.iter().find(|m| m.id == id).cloned() else {
        return settled(etcd, keys, id).await;
    };
    let mut next = map.with_range_moved(m.lo, m.hi, &m.to)?;
    next.migrations.retain(|x| x.id != id);
    let mut record = running_record(etcd, keys, &m).await?;
    record.state = MigrationState::Done;
    record.finished_at_ms = Some(now_ms());
    fill(&mut record, figures);
    let txn = Txn::new()
        .when([
            Compare::mod_revision(keys.map(), CompareOp::Equal, rev),
            Compare::create_revision(keys.group(&m.from).leader(), CompareOp::Equal, m.from_rev),
            Compare::create_revision(keys.group(&m.to).leader(), CompareOp::Equal, m.to_rev),
        ])
        .and_then([
            TxnOp::put(keys.map(), next.to_bytes(), None),
            TxnOp::put(keys.migration(id), to_json(&record), None),
        ])
        .or_else([
            TxnOp::get(keys.group(&m.from).leader(), None),
            TxnOp::get(keys.group(&m.to).leader(), None),
        ]);
    let resp = match etcd.txn("cluster move switch", txn).await {
        Ok(resp) => resp,
        Err(e) => {
            log::warn!("cluster: move {id}: the switch's outcome is unknown ({e}); reading back");
            tokio::time::sleep(Duration::from_millis(100)).await;
            return settled(etcd, keys, id).await;
        }
    };
    if resp.succeeded() {
        return Ok(Switched::Done {
            map_epoch: next.map_epoch,
        });
    }
    let revs: Vec<i64> = (resp.op_responses().into_iter())
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map_or(0, |kv| kv.create_revision())),
            _ => None,
        })
        .collect();
    let reason = match revs.as_slice() {
        [f, _] if *f != m.from_rev => "source_failover",
        [_, t] if *t != m.to_rev => "target_failover",
        _ => "map_changed",
    };
    Ok(Switched::Refused { reason })
}

/// A switch whose transaction may or may not have applied: the record says.
async fn settled(etcd: &Etcd, keys: &ClusterKeys, id: &str) -> Result<Switched, ClusterError> {
    match record(etcd, keys, id).await? {
        Some(r) if r.state == MigrationState::Done => {
            let (map, _) = map_at(etcd, keys).await?;
            Ok(Switched::Done {
                map_epoch: map.map_epoch,
            })
        }
        Some(r) if r.state == MigrationState::Running => {
            // Still listed? Then the transaction did not apply: the caller may try again.
            Ok(Switched::Refused {
                reason: "map_changed",
            })
        }
        _ => Ok(Switched::Refused {
            reason: "cancelled",
        }),
    }
}

/// The record of move `m` as it starts: running, no figures yet.
fn running(m: &Migration) -> MigrationRecord {
    MigrationRecord {
        id: m.id.clone(),
        lo: m.lo,
        hi: m.hi,
        from: m.from.clone(),
        to: m.to.clone(),
        state: MigrationState::Running,
        reason: None,
        started_at_ms: m.started_at_ms,
        finished_at_ms: None,
        instances: 0,
        entries: 0,
        freeze_ms: 0,
        attempts: 0,
        bytes: 0,
    }
}

async fn running_record(
    etcd: &Etcd,
    keys: &ClusterKeys,
    m: &Migration,
) -> Result<MigrationRecord, ClusterError> {
    Ok(record(etcd, keys, &m.id).await?.unwrap_or_else(|| running(m)))
}

fn fill(record: &mut MigrationRecord, f: &Figures) {
    record.instances = f.instances;
    record.entries = f.entries;
    record.freeze_ms = f.freeze_ms;
    record.attempts = f.attempts;
    record.bytes = f.bytes;
}

/// The abort (step 7): the move removed from the map (no epoch change) and its record
/// `aborted` with `reason`, in one transaction. The record as it ends: `done` when the switch
/// had committed (nothing aborted), `aborted` otherwise (also when it was already).
pub async fn abort(
    etcd: &Etcd,
    keys: &ClusterKeys,
    id: &str,
    reason: &str,
    figures: &Figures,
) -> Result<MigrationRecord, ClusterError> {
    for _ in 0..RETRIES {
        let (map, rev) = map_at(etcd, keys).await?;
        let Some(m) = map.migrations.iter().find(|m| m.id == id).cloned() else {
            return record(etcd, keys, id)
                .await?
                .ok_or_else(|| ClusterError::BadMove {
                    why: format!("no move {id}"),
                });
        };
        let mut next = map.clone();
        next.migrations.retain(|x| x.id != id);
        let mut record = running_record(etcd, keys, &m).await?;
        record.state = MigrationState::Aborted;
        record.reason = Some(reason.to_string());
        record.finished_at_ms = Some(now_ms());
        fill(&mut record, figures);
        let txn = Txn::new()
            .when([Compare::mod_revision(keys.map(), CompareOp::Equal, rev)])
            .and_then([
                TxnOp::put(keys.map(), next.to_bytes(), None),
                TxnOp::put(keys.migration(id), to_json(&record), None),
            ]);
        if etcd.txn("cluster move abort", txn).await?.succeeded() {
            return Ok(record);
        }
    }
    Err(ClusterError::Contended)
}
