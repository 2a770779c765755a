//! What this member is right now, read by every executor: its role, epoch and lease
//! (`state`, written by the HA thread and the replication hub), the clock the lease is kept
//! on (`clock`), the one check that makes a replica read-only (`gate`), the answer of a
//! primary past its lease (`fence`), and whether the server is draining (`draining`).
//!
//! Plain shared state (atomics), no executor of its own: shards read it on the commit path
//! without waiting on anything.

pub mod clock;
mod draining;
pub mod fence;
pub mod gate;
mod state;

pub use draining::Draining;
pub use state::{FollowerView, ReplState, ReplStats, ReplicaView};
