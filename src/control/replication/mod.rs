//! Replication (docs/replication.md, docs/replication.md). A primary streams every shard's log to its
//! replicas from the control executor; a replica follows, mirroring the primary's layout
//! (same shards, same offsets), and serves reads.
//!
//! - `hub`: the control executor's side: REPLICATE, acks, sync quorum, REPLICATION_STATUS.
//! - `sender`: one replica's stream on the primary.
//! - `follower`: the replica's side of the stream.
//! - `promote`: PROMOTE, and the epoch a primary starts with.
//! - `status`: REPLICATION_STATUS.
//! - `preflight`: a new replica learns the primary's shard count before its shards start.
//! - `error`: what ends a replica's stream on the primary (or stops a primary's start-up), with
//!   its context; the replica's side has its own (`follower::FollowError`).
//!
//! Elsewhere: the role and epoch every executor reads (`crate::member`), the front's side of a
//! REPLICATE link (`crate::front::relay`) and the stream's frames (`crate::protocol::stream`).

mod error;
pub mod follower;
pub mod hub;
pub mod preflight;
pub mod promote;
mod sender;
mod status;
