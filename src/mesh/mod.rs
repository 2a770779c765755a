//! The channel layer the fronts and the control executor use to reach the shards and each
//! other: one executor's channels to every shard with its table of awaited replies (`router`),
//! calls fanned out to every shard (`fanout`), and the channels between the fronts and the
//! control executor that carry replication (`relay`).
//!
//! It speaks the shard's messages (`crate::shard::message`, which stay beside the shard: their
//! payloads are shard types) and knows no front or control executor: those are built on top of
//! it (see docs/architecture.md). A shard never uses it.

pub mod bulk;
pub mod fanout;
pub mod relay;
pub mod router;
