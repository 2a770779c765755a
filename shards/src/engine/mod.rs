//! The state-machine engine of one shard: machine definitions, the guard language, instances,
//! and the decide/apply split.
//!
//! * `decide` reads state and returns what to log (`Decision::Write(Entry)`) or an answer that
//!   needs no log write (`Decision::Answer`), or a `Rejection`. It never mutates.
//! * `apply` mutates state from a logged entry. It never fails on an entry that `decide`
//!   produced, never reads the clock, and is the only thing recovery and replicas call.
//!
//! The engine owns no I/O. The shard runtime (server crate) logs entries and releases answers
//! once they are durable.

mod batch;
mod command;
mod entry;

pub use batch::{BatchAbort, BatchOp, DecidedBatch};
pub use command::{Command, EventCommand};
pub use entry::{
    batch_records, utf8, BatchRecord, DecodeError, DeleteReason, Entry, EventRef, Record,
};

mod bulk;
mod catalog;
mod clock;
mod context;
pub mod definition;
mod departed;
mod divergence;
mod epochs;
mod find;
pub mod guard;
mod history;
mod idempotency;
mod index;
mod indexes;
mod instance;
mod json_text;
mod json_write;
pub mod limits;
mod listing;
mod moves;
mod names;
mod ops;
mod replay;
pub mod rfc3339;
mod scan;
mod small_str;
mod snapshot;
mod state;
mod stats;
mod timers;

pub use bulk::{BulkSlice, Selection, Selector};
pub use clock::entry_time_of;
pub use context::{Context, Fields};
pub use definition::{CompiledMachine, Definition};
pub use divergence::Divergence;
pub use find::{Condition, FindPage, FindQuery, Matcher, IN_VALUES_MAX};
pub use index::set_index_key;
pub use instance::{HistoryItem, Instance};
pub use json_text::JsonText;
pub use json_write::write_u64;
pub use moves::StagedMove;
pub use names::{CountMap, Name};
pub use ops::create_instance::LATEST_VERSION;
pub use ops::migrate::{MigratePlan, Step};
pub use replay::Replay;
pub use scan::{ScanQuery, ScanSlice};
pub use small_str::SmallStr;
pub use snapshot::{SliceBudget, SnapshotLoader, WalkProgress, SNAPSHOT_FORMAT};
pub use state::{Decision, Engine, EngineStats, ListPage};
pub use timers::{Armed, Fire};

#[cfg(test)]
mod tests;
