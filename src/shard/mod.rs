//! The shard executor: receives requests from front and control executors over bounded
//! channels, runs them against its engine, logs writes, and answers once they are durable.
//!
//! A shard alone owns its engine and log; nothing else touches them. Cross-core traffic is
//! messages only (`message.rs`).

mod batch;
pub mod bulk;
pub mod durability;
mod event;
mod install;
mod machines;
pub mod message;
pub mod moves;
mod os_yield;
mod outbox;
pub mod pause;
mod pump;
mod push_hold;
pub mod pushed;
mod replay;
mod replica;
pub mod runtime;
mod scan;
pub mod snapshot;
pub mod subs;
pub mod sync;
pub mod timers;
mod write;

#[cfg(test)]
mod tests;

pub use message::{
    ReplyBody, ShardCall, ShardMessage, ShardOp, ShardRequest, ShardResponse, SnapshotChunk,
};

/// Depth of each front→shard request channel and shard→front response channel (replies and
/// subscription pushes). Policy when full: the sender waits (a front stops reading that
/// connection's socket, so the client sees TCP backpressure; a shard's outbox holds its
/// replies and pushes); nothing is dropped. The front drains responses without ever waiting
/// for a subscriber (`subscriptions`), so a slow subscriber cannot fill this channel. docs/glommio.md measured that capacities below
/// ~1024 spend their time in sleep/wake.
pub const SHARD_QUEUE_DEPTH_MAX: usize = 1024;
