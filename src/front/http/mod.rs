//! The HTTP API and the web console (docs/http.md): HTTP/1.1 as a second codec on the front
//! executors, beside RCP1. A request is parsed here, authenticated with the same bearer tokens
//! and scopes, turned into the op and params an RCP1 frame carries, and run through the same
//! admission and routing (`front::request`); the reply comes back as JSON with the status of
//! its error code. Not a second server: no op has HTTP-only logic.
//!
//! Modules, by concept:
//! * `listen`: the listener on each front (connection limit, PROXY header, TLS);
//! * `conn`: one connection: keep-alive, pipelining in order, time limits, drain;
//! * `parse`, `chunked`, `target`: the request head, its body framing, the path and query;
//! * `router`: the op table's paths (and the console's files);
//! * `guard`: `Host`, `Origin`, `Content-Type` and bearer checks;
//! * `call`: the op and params a request runs;
//! * `reply`: an op's reply as an HTTP response (statuses, `ETag`, `Location`, diagrams);
//! * `response`: response encoding and RFC 9457 problem bodies;
//! * `sse`: event streams on the subscriptions (`Last-Event-ID`, keep-alive comments, lag);
//! * `console`: the console's files, compiled in.
//!
//! Must not: block a front on one client (every wait is in the connection's own task and
//! bounded), or hold a token longer than the request that carried it (an event stream keeps
//! its digest only).

pub mod call;
pub mod chunked;
mod conn;
pub mod console;
pub mod fuzz;
pub mod guard;
pub mod listen;
pub mod parse;
mod reply;
pub mod response;
pub mod router;
mod sse;
pub mod target;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// A request head must arrive within this long of its first byte (slow-loris clients).
pub const HEAD_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body must arrive within this long of its head.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// An event stream sends a comment this often, so proxies and browsers keep it open.
pub const STREAM_KEEPALIVE: Duration = Duration::from_secs(15);

/// The `[http]` settings every front shares, fixed at start-up.
#[derive(Debug)]
pub struct Settings {
    /// The bound address (port 0 resolved).
    pub bound: SocketAddr,
    pub hosts: guard::Hosts,
    pub console: bool,
    /// `http.max_connections`, across fronts.
    pub max_connections: u64,
    /// HTTP connections open now, across fronts.
    pub active: Arc<AtomicU64>,
}

impl Settings {
    pub fn new(bound: SocketAddr, config: &crate::config::Http) -> Arc<Settings> {
        Arc::new(Settings {
            bound,
            hosts: guard::Hosts::new(bound, &config.allowed_hosts),
            console: config.console,
            max_connections: u64::from(config.max_connections),
            active: Arc::new(AtomicU64::new(0)),
        })
    }
}

/// What one front needs to serve HTTP: its copy of the listening socket and the settings.
pub struct FrontHttp {
    /// A dup of the bound, listening socket, owned by this front.
    pub listener_fd: std::os::fd::OwnedFd,
    pub settings: Arc<Settings>,
}
