//! smdb: a thread-per-core state-machine database server on glommio.
//!
//! Module map (see docs/architecture.md):
//! * `auth`: bearer tokens, scopes, and the one check every op passes.
//! * `security`: the settings SIGHUP reloads (auth, TLS) and the reload itself.
//! * `protocol`: RCP1 frames, request/response envelopes, op names.
//! * `ops`: params of each op family.
//! * `server`: executors and wiring; fronts (accept, sessions, routing); control executor.
//! * `shard`: the shard executor runtime around the engine of the `shards` crate.
//! * `subscriptions`: WATCH_* and UNWATCH on the front, pushes to subscribers.
//! * `http`: the HTTP API and the web console, a second codec on the fronts.
//! * `metrics`: counters per executor, gathered on the control executor and served over HTTP.
//! * `logging`: text or JSON log lines, request-completed lines.
//! * `tls`: TLS (and mutual TLS) on the client port (the client side is in `smdb_protocol::tls`).
//! * `limits`: the limits that must fit inside one another, checked together.
//! * `replication`: a primary's log streamed to replicas (the hub, senders, the follower).
//! * `ha`: automatic failover on etcd (the HA thread, its decisions, the driver).
//! * `backup`: BACKUP, a consistent cut of every shard streamed to a client.
//! * `restore`: `smdb-server restore`, offline: a backup plus the WAL archive into a data dir.
//! * `proxy`: the PROXY protocol header a TCP load balancer puts before a connection.
//! * `timers_pause`: a data dir whose timers start paused (`timers.paused`, TIMERS_RESUME).
//! * `config`, `datadir`, `util`.
//!
//! Habits a lint keeps: no `unwrap` outside tests (below), and every unsafe block states why
//! it is sound (`[workspace.lints]` in Cargo.toml).

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod auth;
pub mod backup;
pub mod config;
pub mod datadir;
pub mod ha;
pub mod http;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod ops;
pub mod protocol;
pub mod proxy;
pub mod replication;
pub mod restore;
pub mod security;
pub mod server;
pub mod shard;
pub mod subscriptions;
pub mod timers_pause;
pub mod tls;
pub mod util;
