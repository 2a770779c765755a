//! The super::executor executors: accept client connections (RCP1 and HTTP), decode requests, admit
//! them (auth, limits, the member's gate) and route each to the shard that owns it over the
//! channel layer (`crate::mesh`), then write the replies and subscription pushes back.
//!
//! * `executor`: one super::executor executor's state (`Front`) and its accept loops;
//! * `peer`, `idle`, `drain`: who a connection is, its idle timer, the SIGTERM drain;
//! * `connection`: one RCP1 connection (reader, writer, in-flight limit); `session`: its
//!   session-scoped ops (HELLO, AUTH, PING...) and hand-offs to streams;
//! * `request`: the admission and routing every request passes, RCP1 or HTTP; `batch`: BATCH;
//! * `http`: the HTTP API and the console, a second codec over the same `request`;
//! * `subscriptions`: WATCH_* and UNWATCH, and the pushes they bring;
//! * `relay`: REPLICATE connections and the replication ops, relayed to the control executor;
//! * `backup`: BACKUP, a consistent cut of every shard streamed on the connection;
//! * `demotion`: a primary that loses its role closes its clients' connections.

pub mod backup;
mod batch;
pub mod connection;
mod demotion;
pub mod drain;
pub mod executor;
pub mod http;
pub mod idle;
pub mod peer;
pub mod relay;
pub mod request;
pub mod session;
pub mod subscriptions;

pub use executor::Front;
