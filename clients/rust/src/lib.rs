//! `smdb-client`: the Rust client of smdb, the state-machine database.
//!
//! * [`frame`]: the RCP1 frame codec (shared with the server, which re-exports it);
//! * [`message`], [`ops`]: envelopes, one typed request and result per operation;
//!   [`queries`] (FIND, SCAN) and [`lifecycle`] (MIGRATE_INSTANCES, DELETE_INSTANCES) too;
//! * [`Client`] (blocking, `std::net`), with pipelining, subscriptions as an iterator that
//!   resumes after a reconnect, and retries of safe calls ([`RetryPolicy`]);
//! * `asyncio::Client` on tokio, behind the default-off `tokio` feature;
//! * [`Error`]: one enum for server refusals (code, `retryable`, `details`), lost connections,
//!   malformed frames and lagged subscriptions.
//!
//! No glommio, no engine: a service that calls smdb compiles this crate, rustls and serde.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
pub mod blocking;
pub mod cluster;
pub mod error;
pub mod fanout;
pub use smdb_protocol::frame;
pub mod lifecycle;
pub mod message;
pub mod ops;
pub mod queries;
pub mod resume;
pub mod retry;
pub use smdb_protocol::tls;
pub mod watch_fanout;

#[cfg(feature = "tokio")]
pub mod asyncio;

pub use blocking::{Client, ConnectOptions, Subscription, Transport};
pub use error::{ClientError, Code, Error, ErrorCode, Result};
pub use lifecycle::{DeleteReply, DeleteRequest, MigrateReply, MigrateRequest};
pub use message::{into_result, Incoming};
pub use ops::*;
pub use queries::{FindQuery, FoundPage};
pub use retry::RetryPolicy;
pub use tls::ClientTlsOptions;

/// Largest response frame a client accepts (`smdb_protocol::frame::RESPONSE_FRAME_BYTES_MAX`:
/// a read of the largest log record fits).
pub const CLIENT_FRAME_BYTES_MAX: u32 = smdb_protocol::frame::RESPONSE_FRAME_BYTES_MAX;
