//! A nemesis run's history (docs/ha.md, "Tested faults"): every request a workload client sent,
//! with its interval and outcome, and what the members held after healing. The workload
//! (`workload.rs`) writes it; the checker (`checker.rs`) judges it. Pure data: no I/O here.
//!
//! The model is Elle's list-append, per instance: each acknowledged APPLY_EVENT appends a
//! unique token (its payload `{"t": token}`) to the instance's history, and a GET_HISTORY read
//! returns the tokens in history order. A request resent with the same idempotency key reuses
//! its token: every answer to it is one `Op` with that token, and the checker counts the write
//! once, judged by the strongest promise any of its answers made.

use std::collections::BTreeMap;

/// What an answer promised about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Definite error: the op did not happen (the protocol's table of what a failed request
    /// did: e.g. `READ_ONLY_MODE`, `NO_PRIMARY` without `maybe_committed`, `INVALID_TRANSITION`).
    Fail,
    /// Indeterminate: it may or may not have happened (timeout, connection lost after the
    /// request was written, `NO_PRIMARY` with `maybe_committed`, `SYNC_TIMEOUT`).
    Info,
    /// Acknowledged (`status: ok`).
    Ok,
}

/// What the request was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// APPLY_EVENT appending `token` to the instance's history.
    Append { token: u64 },
    /// GET_HISTORY of the instance: the tokens it returned, in order (empty unless `Ok`).
    Read { tokens: Vec<u64> },
}

/// One request and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// The client that sent it (each client has one request in flight at a time).
    pub process: u32,
    /// The node id of the member it was sent to.
    pub member: String,
    pub instance: String,
    pub kind: Kind,
    /// Monotonic nanoseconds since the run began: just before the request was written, and
    /// just after its answer (or its failure) was seen.
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub outcome: Outcome,
    /// The error code when not `Ok` (`"TIMEOUT"`, `"CONNECTION_LOST"` for client-side ones).
    pub error: Option<String>,
    /// An `Ok` append: the shard the instance lives on and the entry's `wal_offset` (from the
    /// answer). Used to find the term that wrote the entry.
    pub shard: Option<usize>,
    pub wal_offset: Option<u64>,
}

/// One term of the cluster, from `REPLICATION_STATUS.ha.history` after healing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub epoch: u64,
    pub node_id: String,
    /// Per shard, the log offset at which the term's entries begin (its epoch record's).
    pub start_offsets: Vec<u64>,
}

/// Replication mode of the run: what "lost" is allowed to mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No acknowledged write may be lost.
    Sync,
    /// Acknowledged writes may be lost, but never more than the members reported truncated.
    Async,
}

/// What the members held once the faults were healed and the cluster converged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Final {
    /// Per member (node id): per instance, the tokens of its full history, in order.
    pub members: BTreeMap<String, BTreeMap<String, Vec<u64>>>,
    /// Entries the members reported truncated over the run
    /// (`svc_replication_truncated_entries_total`, summed over members).
    pub truncated: u64,
    /// The terms, oldest first.
    pub terms: Vec<Term>,
}

/// A whole run: the requests (any order) and the final state.
#[derive(Debug, Clone)]
pub struct History {
    pub mode: Mode,
    pub ops: Vec<Op>,
    pub fin: Final,
}
