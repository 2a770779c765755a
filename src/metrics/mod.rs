//! Metrics: counters kept by each executor on its own cache lines, gathered when scraped.

pub mod front;
pub mod subs;

pub use front::FrontStats;
pub use subs::SubsStats;
