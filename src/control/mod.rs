//! The control executor (the "dedicated core" of the design) and what runs on it: start-up
//! work that spans shards and the metrics listener (`executor`), replication (`replication`:
//! the hub a primary streams from, the follower a replica runs), and failover (`ha`: the HA
//! thread and the driver that carries out its decisions on this executor).
//!
//! Talks to shards only over the channel layer (`crate::mesh`), and to the fronts only through
//! the replication relay's channels (`mesh::relay`). Reads this member's role and lease from
//! `crate::member`, which the HA thread and the hub write.

pub mod executor;
pub mod ha;
pub mod metrics;
pub mod replication;

pub use executor::{run, ControlSetup};
