//! Subscriptions, front side (docs/protocol.md, "Envelopes" and §5): WATCH_INSTANCE, WATCH_ALL, UNWATCH, and the
//! pushes they bring.
//!
//! Owns, per front executor, the table of its subscriptions (`table`, held by the router so its
//! pump can deliver pushes), and per connection the subscriptions its writer interleaves
//! between responses (`conn`). Each subscription (`sub`) has a cursor (last delivered offset in
//! every shard, `cursor`), a bounded queue of encoded frames and, per shard, the live pushes
//! held while that shard is being replayed. A driver task per subscription (`watch`) registers
//! it on the shards, replays the retained log up to the registration point, then lets live
//! pushes through. Filters and the push body are made on the shards (`crate::shard::subs`);
//! this module never parses an event.
//!
//! Bounds and policies (STYLE: every queue has a bound, a full-policy and a gauge):
//! * a subscription's frame queue and each per-shard held buffer: `subscriptions.queue_max`;
//!   full → the subscription ends with `subscription_lagged` (resume cursor = after the last
//!   push queued). Gauge: `SubsStats::queued` (per source shard).
//! * subscriptions per connection: `SUBSCRIPTIONS_PER_CONNECTION_MAX`; over → BAD_REQUEST.
//! * replay reads: `REPLAY_CHUNK_RECORDS_MAX` records per shard call, issued only while the
//!   queue is at most half full (only this subscriber waits).
//!
//! Must not: wait for a subscriber anywhere a shard reply or another connection could wait.

pub mod agree;
pub mod conn;
pub mod cursor;
pub mod params;
pub mod sub;
pub mod table;
mod watch;

pub use conn::ConnSubs;
pub use table::Table;
pub use watch::dispatch;

/// Subscriptions one connection may hold: each costs a registration on every shard it watches
/// and a filter check per applied event there.
pub const SUBSCRIPTIONS_PER_CONNECTION_MAX: usize = 64;
