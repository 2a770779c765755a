//! Messages between front/control executors and shards.

use serde_json::Value;
use shards::engine::{Entry, FindPage, FindQuery, ListPage, ScanQuery, ScanSlice};
use shards::wal::LogHandle;
use shards::Rejection;

use super::subs::{Filter, PushMsg, SubsEnded};
use crate::metrics::ShardStats;
use crate::ops::batch::BatchOps;
use crate::protocol::{routes, Op};

/// A request to one shard. `token` names the caller's reply slot on the sending executor.
pub struct ShardRequest {
    pub token: u32,
    pub call: ShardCall,
}

/// A client op a shard executes from raw params: the instance ops, the definition reads, and
/// each shard's part of two fan-outs. `Shard::execute_op` matches it with no `_`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardOp {
    Instance(routes::Instance),
    Definitions(routes::Definitions),
    /// PUT_MACHINE's decision on the definitions shard (`mesh::fanout::put_machine`).
    PutMachine,
    /// One shard's counts for MACHINE_STATS (`mesh::fanout::machine_stats`).
    MachineStats,
}

impl ShardOp {
    /// The shard op for `op`, if a shard executes it (tests).
    #[cfg(test)]
    pub fn of(op: Op) -> Option<ShardOp> {
        use crate::protocol::Routed;
        match op.route() {
            Routed::Instance(i) => Some(ShardOp::Instance(i)),
            Routed::Definitions(d) => Some(ShardOp::Definitions(d)),
            Routed::AllShards(routes::AllShards::PutMachine) => Some(ShardOp::PutMachine),
            Routed::AllShards(routes::AllShards::MachineStats) => Some(ShardOp::MachineStats),
            _ => None,
        }
    }

    /// The op this is (metrics, the follower check, the write gate).
    pub const fn op(self) -> Op {
        match self {
            ShardOp::Instance(i) => i.op(),
            ShardOp::Definitions(d) => d.op(),
            ShardOp::PutMachine => Op::PutMachine,
            ShardOp::MachineStats => Op::MachineStats,
        }
    }
}

/// The read-only queries every shard answers for its own instances, merged on the front
/// (`mesh::fanout`).
#[derive(Debug, Clone)]
pub enum Query {
    /// One page of instances ordered by id.
    List(crate::ops::instances::ListQuery),
    /// One page of FIND_INSTANCES, ordered by id.
    Find(Box<FindQuery>),
    /// One call of SCAN_INSTANCES: a bounded walk in slices (`shard::scan`).
    Scan(Box<ScanQuery>),
}

pub enum ShardCall {
    /// A client op the shard executes from raw params (it parses them: the front stays light).
    Op {
        op: ShardOp,
        params: Option<Vec<u8>>,
    },
    /// An instance op whose reply carries the instance's version (HTTP's `ETag`,
    /// docs/http.md): answered `Versioned` when it succeeds. With `if_match = (epoch, offset)`
    /// the op runs only if the log's entry at `offset` was written in `epoch` (else
    /// `CONFLICT`); the op's own `expected_wal_offset` checks the offset.
    Versioned {
        op: routes::Instance,
        params: Option<Vec<u8>>,
        if_match: Option<(u64, u64)>,
    },
    /// An atomic BATCH whose ops all route to this shard (`shard::batch`).
    Batch(BatchOps),
    /// Store machine definitions decided on shard 0 (idempotent).
    InstallMachines(Vec<Entry>),
    /// All machine definitions this shard holds, as log entries.
    MachineEntries,
    /// A page of LIST, FIND or SCAN_INSTANCES (docs/queries.md).
    Query(Query),
    /// This shard's part of one MIGRATE_INSTANCES or DELETE_INSTANCES call (`shard::bulk`),
    /// refused on a follower. Answered `Bulk` once what it logged is durable.
    Bulk(Box<super::bulk::BulkPart>),
    /// Counts and log position for INFO.
    Info,
    /// Figures for a metrics scrape or health check.
    Stats,
    /// Subscriptions (`subs.rs`): register `sub` of this client at the current head; pushes
    /// follow for later entries. Answered with `Watching`.
    Subscribe { sub: u64, filter: Filter },
    /// End `sub` of this client; answered `{"removed": bool}`.
    Unsubscribe { sub: u64 },
    /// Replay: matching events among the records `from..=to` (at most `max` records read),
    /// once durable (and, on a primary in HA sync mode, sync-acknowledged). Answered with
    /// `Events`.
    ReadEvents {
        filter: Filter,
        from: u64,
        to: u64,
        max: usize,
    },
    /// Replication (`shard/replica.rs`): the log's position, epochs and a handle to read it
    /// from another executor. Answered with `Position`.
    LogPosition,
    /// Replication, on a replica: `entries[k]` is the primary's record payload at offset
    /// `first + k`, sent under the primary's `epoch`. Appended unchanged, applied as recovery
    /// does, answered with `Replicated` once durable. `BAD_REQUEST` (details `expected`) unless
    /// `first` is head + 1; `STALE_EPOCH` if `epoch` is older than one this shard has seen.
    ReplicaAppend {
        epoch: u64,
        first: u64,
        entries: Vec<Vec<u8>>,
    },
    /// Replication, on a primary: a term begins. Logs `Entry::Epoch`, answers `{"offset": n}`
    /// once durable; `STALE_EPOCH` unless `epoch` is above every epoch seen.
    BeginEpoch { epoch: u64 },
    /// A replica becomes primary: this shard starts firing timers. Answers `{}`.
    Promote,
    /// Failover (docs/ha.md): the primary steps down. Timers stop firing, write replies held
    /// for replica acknowledgement answer `NO_PRIMARY` (`maybe_committed`). Answers `{}`.
    Demote,
    /// TIMERS_RESUME: end a `timers.paused` pause; overdue timers fire on the timer task's
    /// next turn. Answers `{"was_paused": bool}` (Value).
    TimersResume,
    /// Replication, on a replica: drop every log entry after `after` (the primary's log
    /// diverged there), then rebuild the state from the log. Answered with `Truncated`.
    /// `BAD_REQUEST` (details `oldest`) when the retained log cannot keep that prefix.
    Truncate { after: u64 },
    /// Replication, on a replica: the primary's snapshot, received in order as `Begin`, its
    /// payload in `Part`s, and `End`, which replaces the log with it (the next entry is its
    /// offset + 1) and rebuilds the state (`shard/install.rs`). Each answers `{}`. A refusal
    /// (`BAD_REQUEST`: the payload does not load or fails its CRC, or a chunk out of order)
    /// deletes what was received; the log and the state do not change.
    InstallSnapshot(SnapshotChunk),
    /// Sync replication, on a primary (`shard/sync.rs`): `sync_replicas` replicas hold this
    /// shard's log through `through` (monotonic). Answers `{}` at once.
    ReplicaAcked { through: u64 },
    /// A backup's barrier (`shard/pause.rs`): stop executing requests, pin the log from the
    /// newest snapshot, answer `BackupCut` once the head is durable, resume at `release` or
    /// after `timeout`.
    BackupPause {
        release: std::sync::Arc<super::pause::BackupRelease>,
        timeout: std::time::Duration,
    },
    /// One step of moving slots between cluster groups (`shard/moves.rs`).
    Move(super::moves::MoveCall),
}

/// One step of receiving a snapshot (`ShardCall::InstallSnapshot`).
pub enum SnapshotChunk {
    /// The primary's state as of `offset`: a payload of `len` bytes (0: not said) in snapshot
    /// format `version`.
    Begin { offset: u64, version: u32, len: u64 },
    /// The next bytes of the payload.
    Part(Vec<u8>),
    /// The payload is complete; `crc` is its CRC32C per the primary (None: not said).
    End { crc: Option<u32> },
    /// The stream broke before `End`: delete what was received.
    Abandon,
}

pub enum ReplyBody {
    /// The `result` object, already encoded as JSON text.
    Json(Vec<u8>),
    /// `Versioned`: the result and the instance's version after the op, `(epoch, wal_offset)`.
    Versioned {
        result: Vec<u8>,
        epoch: u64,
        offset: u64,
    },
    /// PUT_MACHINE on shard 0: the result and the definition entry to copy to other shards.
    Machine {
        result: Vec<u8>,
        entry: Entry,
    },
    Entries(Vec<Entry>),
    Page(ListPage),
    Found(FindPage),
    Scanned(ScanSlice),
    Bulk(super::bulk::BulkDone),
    Value(Value),
    Stats(Box<ShardStats>),
    /// `Subscribe`: pushes follow for offsets above `head`; `oldest` is the oldest offset a
    /// replay can read; `epochs` the log's epoch history (`Engine::epochs`), which a resume
    /// position is checked against (`subscriptions/agree.rs`).
    Watching {
        head: u64,
        oldest: u64,
        epochs: Vec<(u64, u64)>,
    },
    /// `ReadEvents`: (offset, epoch, push body) of the matching events; `next` is where to go
    /// on. No events and `next == from`: nothing at `from` is sync-acknowledged yet (HA sync
    /// mode, `shard/replay.rs`); ask again.
    Events {
        events: Vec<(u64, u64, Vec<u8>)>,
        next: u64,
    },
    /// A WATCH result made on the front: once written, the subscription's pushes may follow.
    Watch {
        result: Vec<u8>,
        subscription: u64,
    },
    /// `ReplicaAppend`: durable through `through`; `last_at_ms` is the `at_ms` of the last
    /// entry in the call that has one (0: none).
    Replicated {
        through: u64,
        last_at_ms: u64,
    },
    /// `Truncate`: how many entries were dropped.
    Truncated {
        removed: u64,
    },
    /// `LogPosition`: head (appended), durable and oldest retained offsets, the newest epoch
    /// (0: none) and every `(epoch, first offset)`, and a handle for reading the log.
    Position {
        head: u64,
        durable: u64,
        oldest: u64,
        last_epoch: u64,
        epochs: Vec<(u64, u64)>,
        handle: LogHandle,
    },
    /// `BackupPause`: the shard's cut.
    BackupCut(Box<super::pause::BackupCut>),
    /// `Move`: what the step gave.
    Move(super::moves::MoveReply),
}

pub struct ShardResponse {
    pub token: u32,
    pub result: Result<ReplyBody, Rejection>,
}

/// What a shard sends a client executor: replies to its requests, and subscription pushes.
pub enum ShardMessage {
    Reply(ShardResponse),
    Push(PushMsg),
    /// Subscriptions the shard ends (a rewind of its log, pushes it could not hold).
    SubsEnded(SubsEnded),
}

impl ShardCall {
    /// Answered through the client's outbox by the subscription code itself (`subs.rs`), not
    /// by a reply `Shard::handle` returns: they also pass a backup's barrier.
    pub fn answers_through_outbox(&self) -> bool {
        matches!(
            self,
            ShardCall::Subscribe { .. }
                | ShardCall::Unsubscribe { .. }
                | ShardCall::ReadEvents { .. }
        )
    }
}
