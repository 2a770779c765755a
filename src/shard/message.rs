//! Messages between front/control executors and shards.

use serde_json::Value;
use shards::engine::{Entry, ListPage};
use shards::Rejection;

use crate::metrics::ShardStats;
use crate::protocol::Op;

/// A request to one shard. `token` names the caller's reply slot on the sending executor.
pub struct ShardRequest {
    pub token: u32,
    pub call: ShardCall,
}

pub enum ShardCall {
    /// A client op the shard executes from raw params (it parses them: the front stays light).
    Op { op: Op, params: Option<Vec<u8>> },
    /// Store machine definitions decided on shard 0 (idempotent).
    InstallMachines(Vec<Entry>),
    /// All machine definitions this shard holds, as log entries.
    MachineEntries,
    /// One page of instances ordered by id.
    List {
        machine: Option<String>,
        state: Option<String>,
        after: Option<String>,
        limit: usize,
    },
    /// Counts and log position for INFO.
    Info,
    /// Figures for a metrics scrape or health check.
    Stats,
}

pub enum ReplyBody {
    /// The `result` object, already encoded as JSON text.
    Json(Vec<u8>),
    /// PUT_MACHINE on shard 0: the result and the definition entry to copy to other shards.
    Machine {
        result: Vec<u8>,
        entry: Entry,
    },
    Entries(Vec<Entry>),
    Page(ListPage),
    Value(Value),
    Stats(Box<ShardStats>),
}

pub struct ShardResponse {
    pub token: u32,
    pub result: Result<ReplyBody, Rejection>,
}
