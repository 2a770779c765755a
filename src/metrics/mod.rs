//! Metrics: counters kept by each executor on its own cache lines, gathered when scraped.
//!
//! * `front`: per-front request and connection counters (single-writer atomics).
//! * `shard`: what a shard reports when asked (`ShardCall::Stats`), log figures included.
//! * `histogram`: histogram figures as plain data.
//! * `families`: the spec's metric families, built into a `prometheus_client` registry
//!   (`snapshots`: the snapshot families).
//! * `exposition`: Prometheus text 0.0.4 (the spec's names) or OpenMetrics, by `Accept`.
//! * `ha`: the failover families (`svc_ha_*`), when `ha.enabled`.
//! * `cluster`: the cluster families (`svc_cluster_*`), in cluster mode only.
//!
//! Gathering a scrape and serving it are the control executor's (`control::metrics`).
//!
//! Hot paths never lock or write another core's cache line to count: the control executor
//! reads the fronts' atomics and asks each shard for its figures over the existing channels.

pub mod cluster;
pub mod exposition;
pub mod families;
pub mod front;
pub mod ha;
pub mod histogram;
pub mod scrape;
pub mod shard;
pub mod snapshots;
pub mod subs;

pub use front::FrontStats;
pub use histogram::HistogramSnapshot;
pub use shard::{LogStats, ShardStats};
pub use subs::SubsStats;
