//! What one smdb shard owns: the state-machine engine and (later) its write-ahead log.
//!
//! Nothing in this crate touches a socket. The engine is pure logic: `decide` reads state and
//! returns an entry to log (or a rejection); `apply` mutates state from a logged entry and never
//! fails. Time, ids and guard outcomes travel inside the entry, so recovery and replicas call only
//! `apply` and reach the same state.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
pub mod engine;
pub mod routing;
pub mod timers;
pub mod wal;

/// The error codes and the rejection value live in the protocol crate (the wire's table).
pub use smdb_protocol::{ErrorCode, Rejection};
