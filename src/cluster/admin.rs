//! Creating the map and adding a group (docs/cluster.md, "Who writes the map"): the etcd
//! work of `CLUSTER_CREATE` and `CLUSTER_ADD_GROUP`. Only the HA thread talks to etcd: an
//! executor calls `create` or `add_group`, which queue a request and wait for its outcome; the
//! map follower (`cluster::follow`) starts each request as a task of its own on the HA
//! thread's runtime (`create_in_etcd`, `add_group_in_etcd`), so waiting for primaries holds up
//! neither the copy nor the lease. Every write is one transaction that compares the map key's
//! `mod_revision`.
//!
//! Bounds: at most `PENDING_MAX` requests wait or run at once (one more is refused, `Busy`),
//! and at most `OUTCOMES_MAX` outcomes are kept for their askers (the oldest is dropped: its
//! asker has given up).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use super::error::ClusterError;
use super::keys::ClusterKeys;
use super::map::{ClusterMap, MapError, MigrationRecord};
use super::moves::etcd::{Figures, Switched};
use super::Cluster;
use crate::config::cluster::is_group_name;
use crate::control::ha::etcd::Etcd;

/// Requests waiting for, or running on, the HA thread.
const PENDING_MAX: usize = 16;
/// Outcomes kept for askers that have not read them yet.
const OUTCOMES_MAX: usize = 64;
/// How long an asker waits past its own timeout for the transaction (a few etcd calls).
const ANSWER_SLACK: Duration = Duration::from_secs(5);
/// How long an asker waits for its copy to show the change it made (the follower reads at
/// once when woken).
const COPY_WAIT: Duration = Duration::from_secs(1);
/// How often an asker looks for its outcome, and a request for primaries.
const LOOK_EVERY: Duration = Duration::from_millis(20);
const PRIMARIES_EVERY: Duration = Duration::from_millis(100);

/// What an executor asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ask {
    Create {
        groups: Option<Vec<String>>,
        timeout: Duration,
    },
    AddGroup {
        group: String,
        timeout: Duration,
    },
    /// A move's transactions (`cluster::moves::etcd`).
    Move(MoveAsk),
}

/// A move's etcd work, asked by an executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveAsk {
    /// `CLUSTER_MOVE_SLOTS`: the intent.
    Start { lo: u16, hi: u16, to: String },
    /// The source's switch.
    Switch { id: String, figures: Figures },
    /// An abort (`CLUSTER_CANCEL_MOVE`, or the source or target giving up).
    Abort {
        id: String,
        reason: String,
        figures: Figures,
    },
}

/// What a move's transaction gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveAnswer {
    /// The record as written (start, abort).
    Record(MigrationRecord),
    Switch(Switched),
}

/// A change made (or found made).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// The map in etcd after it.
    pub map: ClusterMap,
    /// The etcd revision that holds it.
    pub revision: i64,
    /// `add_group`: false when the group was in the map already (nothing written).
    pub added: bool,
}

/// What a request gave.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Map(Done),
    Move(MoveAnswer),
}

type Outcome = Result<Answer, ClusterError>;

#[derive(Debug, Default)]
pub(crate) struct Requests {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// Requests taken by the follower and not finished yet.
    running: usize,
    pending: VecDeque<(u64, Ask)>,
    done: VecDeque<(u64, Outcome)>,
}

impl Requests {
    fn ask(&self, ask: Ask) -> Result<u64, ClusterError> {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let pending = i.pending.len() + i.running;
        if pending >= PENDING_MAX {
            return Err(ClusterError::Busy { pending });
        }
        i.next += 1;
        let ticket = i.next;
        i.pending.push_back((ticket, ask));
        Ok(ticket)
    }

    fn outcome(&self, ticket: u64) -> Option<Outcome> {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let at = i.done.iter().position(|(t, _)| *t == ticket)?;
        i.done.remove(at).map(|(_, r)| r)
    }

    fn take(&self) -> Vec<(u64, Ask)> {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let taken: Vec<_> = i.pending.drain(..).collect();
        i.running += taken.len();
        taken
    }

    fn finish(&self, ticket: u64, outcome: Outcome) {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        i.running = i.running.saturating_sub(1);
        if i.done.len() >= OUTCOMES_MAX {
            i.done.pop_front();
        }
        i.done.push_back((ticket, outcome));
    }
}

/// `CLUSTER_CREATE` (on an executor): creates the map of `groups` (default: every group with
/// a live primary, in name order) once each has a primary, waiting up to `timeout` for them.
/// Answers once etcd holds the map and this member's copy shows it (or 1 s has passed).
pub async fn create(
    cluster: &Cluster,
    groups: Option<Vec<String>>,
    timeout: Duration,
) -> Result<Done, ClusterError> {
    let done = asked(cluster, Ask::Create { groups, timeout }, timeout).await?;
    map_done(cluster, done).await
}

/// `CLUSTER_ADD_GROUP` (on an executor): adds `group`, owning no slot, once it has a primary
/// (waiting up to `timeout`); `added` false when it is in the map already.
pub async fn add_group(
    cluster: &Cluster,
    group: &str,
    timeout: Duration,
) -> Result<Done, ClusterError> {
    let group = group.to_string();
    let done = asked(cluster, Ask::AddGroup { group, timeout }, timeout).await?;
    map_done(cluster, done).await
}

/// A move's transaction (on an executor), answered once etcd answered it; the copy catches up
/// by itself (the follower reads at once).
pub async fn move_txn(cluster: &Cluster, ask: MoveAsk) -> Result<MoveAnswer, ClusterError> {
    match asked(cluster, Ask::Move(ask), Duration::ZERO).await? {
        Answer::Move(m) => Ok(m),
        Answer::Map(_) => Err(ClusterError::Contended),
    }
}

/// A map change's answer, once the copy shows it (or `COPY_WAIT` has passed).
async fn map_done(cluster: &Cluster, answer: Answer) -> Result<Done, ClusterError> {
    let Answer::Map(done) = answer else {
        return Err(ClusterError::Contended);
    };
    let shown = Instant::now() + COPY_WAIT;
    while cluster.view.get().map_epoch() < done.map.map_epoch && Instant::now() < shown {
        glommio::timer::sleep(LOOK_EVERY).await;
    }
    Ok(done)
}

/// Queues `ask` and waits for its outcome.
async fn asked(cluster: &Cluster, ask: Ask, timeout: Duration) -> Outcome {
    let ticket = cluster.requests.ask(ask)?;
    cluster.wake.signal();
    let waited = timeout + ANSWER_SLACK;
    let deadline = Instant::now() + waited;
    loop {
        if let Some(outcome) = cluster.requests.outcome(ticket) {
            return outcome;
        }
        if Instant::now() >= deadline {
            return Err(ClusterError::NoAnswer { waited });
        }
        glommio::timer::sleep(LOOK_EVERY).await;
    }
}

/// The follower (HA thread): starts each queued request as a task of its own.
pub(crate) fn start_requests(cluster: &Arc<Cluster>, etcd: &Arc<Etcd>) {
    for (ticket, ask) in cluster.requests.take() {
        let (cluster, etcd) = (cluster.clone(), etcd.clone());
        tokio::spawn(async move {
            let keys = &cluster.keys;
            let outcome = match ask {
                Ask::Create { groups, timeout } => create_in_etcd(&etcd, keys, groups, timeout)
                    .await
                    .map(Answer::Map),
                Ask::AddGroup { group, timeout } => add_group_in_etcd(&etcd, keys, &group, timeout)
                    .await
                    .map(Answer::Map),
                Ask::Move(m) => move_in_etcd(&etcd, keys, m).await.map(Answer::Move),
            };
            match &outcome {
                Ok(Answer::Map(d)) if d.added => log::warn!(
                    "cluster: map epoch {} written: groups {:?}",
                    d.map.map_epoch,
                    d.map.groups
                ),
                Ok(_) => {}
                Err(e) => log::info!("cluster: request refused: {e}"),
            }
            cluster.requests.finish(ticket, outcome);
            cluster.wake.signal(); // the copy reads the new map at once
        });
    }
}

async fn move_in_etcd(
    etcd: &Etcd,
    keys: &ClusterKeys,
    ask: MoveAsk,
) -> Result<MoveAnswer, ClusterError> {
    use super::moves::etcd;
    Ok(match ask {
        MoveAsk::Start { lo, hi, to } => {
            MoveAnswer::Record(etcd::start(etcd, keys, lo, hi, &to).await?)
        }
        MoveAsk::Switch { id, figures } => {
            MoveAnswer::Switch(etcd::switch(etcd, keys, &id, &figures).await?)
        }
        MoveAsk::Abort {
            id,
            reason,
            figures,
        } => MoveAnswer::Record(etcd::abort(etcd, keys, &id, &reason, &figures).await?),
    })
}

/// Creates the map in one transaction, only if it is absent and the name is not a standalone
/// group's: `groups` (default: those with a live primary, in name order) split as
/// `ClusterMap::create` does, once each has a primary (waiting until `timeout`).
pub async fn create_in_etcd(
    etcd: &Etcd,
    keys: &ClusterKeys,
    groups: Option<Vec<String>>,
    timeout: Duration,
) -> Result<Done, ClusterError> {
    let deadline = Instant::now() + timeout;
    if let Some(e) = taken(etcd, keys).await? {
        return Err(e);
    }
    let groups = match groups {
        Some(g) => g,
        None => with_primaries(etcd, keys, deadline).await?,
    };
    let map = ClusterMap::create(&groups)?;
    wait_for_primaries(etcd, keys, &groups, deadline).await?;
    let txn = Txn::new()
        .when([
            Compare::mod_revision(keys.map(), CompareOp::Equal, 0),
            Compare::create_revision(keys.standalone_leader(), CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::put(keys.map(), map.to_bytes(), None)]);
    let resp = etcd.txn("cluster create", txn).await?;
    if !resp.succeeded() {
        return Err(taken(etcd, keys).await?.unwrap_or(ClusterError::Contended));
    }
    let revision = resp.header().map_or(0, |h| h.revision());
    Ok(Done {
        map,
        revision,
        added: true,
    })
}

/// Why the map cannot be created now: it exists, or the name is a standalone group's.
async fn taken(etcd: &Etcd, keys: &ClusterKeys) -> Result<Option<ClusterError>, ClusterError> {
    let txn = Txn::new().and_then([
        TxnOp::get(keys.map(), None),
        TxnOp::get(
            keys.standalone_leader(),
            Some(GetOptions::new().with_count_only()),
        ),
    ]);
    let resp = etcd.txn("cluster create check", txn).await?;
    let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    });
    if let Some(kv) = gets.next().and_then(|g| g.kvs().first().cloned()) {
        let map_epoch = ClusterMap::parse(kv.value()).map_or(0, |m| m.map_epoch);
        return Ok(Some(ClusterError::Exists { map_epoch }));
    }
    if gets.next().is_some_and(|g| g.count() > 0) {
        let cluster = keys
            .prefix()
            .trim_start_matches("/smdb/")
            .trim_end_matches('/');
        let cluster = cluster.to_string();
        return Ok(Some(ClusterError::NotACluster { cluster }));
    }
    Ok(None)
}

/// Every group with a live primary, in name order, once there is one (until `deadline`).
async fn with_primaries(
    etcd: &Etcd,
    keys: &ClusterKeys,
    deadline: Instant,
) -> Result<Vec<String>, ClusterError> {
    loop {
        let opts = GetOptions::new().with_prefix().with_keys_only();
        let resp = etcd
            .get("cluster groups", keys.groups_prefix(), opts)
            .await?;
        let mut groups: Vec<String> = (resp.kvs().iter())
            .filter_map(|kv| match keys.split_group(kv.key_str().ok()?) {
                Some((g, "leader")) => Some(g.to_string()),
                _ => None,
            })
            .collect();
        groups.sort();
        if !groups.is_empty() {
            return Ok(groups);
        }
        if Instant::now() >= deadline {
            return Err(ClusterError::NoPrimary { groups });
        }
        tokio::time::sleep(PRIMARIES_EVERY).await;
    }
}

/// Waits until each of `groups` has a primary; past `deadline`, the error names those
/// without one.
async fn wait_for_primaries(
    etcd: &Etcd,
    keys: &ClusterKeys,
    groups: &[String],
    deadline: Instant,
) -> Result<(), ClusterError> {
    loop {
        let read = super::read::read(etcd, keys, groups).await?;
        let mut missing: Vec<String> = (read.groups.iter())
            .filter(|(_, (leader, _))| leader.is_none())
            .map(|(g, _)| g.clone())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            missing.sort();
            return Err(ClusterError::NoPrimary { groups: missing });
        }
        tokio::time::sleep(PRIMARIES_EVERY).await;
    }
}

/// Adds `group` to the map with no slot (`map_epoch` + 1) once it has a primary (waiting
/// until `timeout`); the map as it is, `added` false, when the group is there already.
pub async fn add_group_in_etcd(
    etcd: &Etcd,
    keys: &ClusterKeys,
    group: &str,
    timeout: Duration,
) -> Result<Done, ClusterError> {
    if !is_group_name(group) {
        return Err(MapError::BadGroupName(group.to_string()).into());
    }
    let deadline = Instant::now() + timeout;
    wait_for_primaries(etcd, keys, &[group.to_string()], deadline).await?;
    loop {
        let resp = etcd
            .get("cluster map", keys.map(), GetOptions::new())
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let Some(kv) = resp.kvs().first() else {
            return Err(ClusterError::NoMap);
        };
        let (map, rev) = (ClusterMap::parse(kv.value())?, kv.mod_revision());
        let (next, added) = map.with_group_added(group)?;
        if !added {
            return Ok(Done {
                map,
                revision,
                added,
            });
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(keys.map(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(keys.map(), next.to_bytes(), None)]);
        let resp = etcd.txn("cluster add group", txn).await?;
        if resp.succeeded() {
            let revision = resp.header().map_or(0, |h| h.revision());
            return Ok(Done {
                map: next,
                revision,
                added,
            });
        }
        if Instant::now() >= deadline {
            return Err(ClusterError::Contended);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_bounded_while_they_wait_or_run() {
        let r = Requests::default();
        let ask = || Ask::AddGroup {
            group: "g".into(),
            timeout: Duration::ZERO,
        };
        let first = r.ask(ask()).unwrap();
        assert_eq!(r.take().len(), 1);
        for _ in 1..PENDING_MAX {
            r.ask(ask()).unwrap();
        }
        assert!(matches!(r.ask(ask()), Err(ClusterError::Busy { .. })));
        r.finish(first, Err(ClusterError::NoMap));
        assert!(r.ask(ask()).is_ok(), "a finished request frees its place");
        assert!(matches!(r.outcome(first), Some(Err(ClusterError::NoMap))));
        assert!(r.outcome(first).is_none(), "taken once");
    }
}
