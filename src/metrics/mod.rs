//! Metrics: counters kept by each executor on its own cache lines, gathered when scraped.

pub mod front;

pub use front::FrontStats;
