//! smdb: a thread-per-core state-machine database server on glommio.
//!
//! Module map (see docs/architecture.md), by executor over a channel layer:
//! * `boot`: the process: executors, placement, channels, listeners, start-up and shutdown.
//! * `front`: the front executors: connections (RCP1 and HTTP), admission, routing,
//!   subscriptions, the replication relay and the backup stream.
//! * `shard`: the shard executor runtime around the engine of the `shards` crate.
//! * `control`: the control executor: start-up fan-out, metrics serving, replication (hub and
//!   follower) and failover on etcd (the HA thread and its driver).
//! * `mesh`: the channel layer they share: shard messages, the router, fan-out, relay channels.
//! * `member`: this member's role, epoch, lease and drain state, read by every executor.
//! * `cluster`: cluster mode's etcd side: the slot map, the map copy every executor reads
//!   (kept on the HA thread), creating the map and adding a group.
//!
//! Below them, used by all: `protocol` (RCP1 frames, envelopes, the op table, the replication
//! stream's frames), `ops` (params of each op family), `auth` (tokens, scopes, the one check),
//! `security` (what SIGHUP reloads), `tls`, `proxy` (the PROXY header), `limits` (the limits
//! that must fit inside one another), `metrics` (counters per executor and the families),
//! `logging`, `config`, `datadir`, `timers_pause`, `util`. `restore` is offline
//! (`smdb-server restore`: a backup plus the WAL archive into a data dir).
//!
//! Habits a lint keeps: no `unwrap` outside tests (below), and every unsafe block states why
//! it is sound (`[workspace.lints]` in Cargo.toml).

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod auth;
pub mod boot;
pub mod cluster;
pub mod config;
pub mod control;
pub mod datadir;
pub mod front;
pub mod limits;
pub mod logging;
pub mod member;
pub mod mesh;
pub mod metrics;
pub mod ops;
pub mod protocol;
pub mod proxy;
pub mod restore;
pub mod security;
pub mod shard;
pub mod timers_pause;
pub mod tls;
pub mod util;
