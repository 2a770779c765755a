//! Replication (docs/replication.md, docs/replication.md). A primary streams every shard's log to its
//! replicas from the control executor; a replica follows, mirroring the primary's layout
//! (same shards, same offsets), and serves reads.
//!
//! - `state`: the role and epoch every executor reads, and the figures for metrics.
//! - `gate`: the one check that makes a replica read-only.
//! - `relay`: a front's side: REPLICATE connections and the replication ops are relayed to
//!   the control executor.
//! - `hub`: the control executor's side: REPLICATE, acks, sync quorum, REPLICATION_STATUS.
//! - `sender`: one replica's stream on the primary.
//! - `follower`: the replica's side of the stream.
//! - `promote`: PROMOTE, and the epoch a primary starts with.
//! - `status`: REPLICATION_STATUS.
//! - `preflight`: a new replica learns the primary's shard count before its shards start.
//! - `wire`: the stream's frames.

pub mod base64;
pub mod follower;
pub mod gate;
pub mod hub;
pub mod preflight;
pub mod promote;
pub mod relay;
mod sender;
pub mod state;
mod status;
pub mod wire;

pub use state::ReplState;
