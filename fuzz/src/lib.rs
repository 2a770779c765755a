//! The bodies of smdb's fuzz targets: one function per target, from arbitrary bytes to nothing,
//! that panics when the code under test breaks a property it must keep.
//!
//! Two drivers call them, so every target runs on the stable toolchain too:
//! * `tests/targets.rs` runs each body thousands of times under proptest, on arbitrary bytes
//!   and on generated inputs of the target's shape (valid frames, requests, headers and params,
//!   then bytes flipped, cut or inserted), in every `cargo test --workspace`;
//! * `fuzz/libfuzzer/` is the cargo-fuzz project whose targets are one-line wrappers around
//!   these functions, for coverage-guided runs (`fuzz/README.md`).
//!
//! Panics are this crate's findings: each `assert!` states a property of the server code, and
//! the code under test must never panic itself. The one other panic is a harness bug (the TLS
//! body's own certificate or in-memory handshake failing), which says so.

mod apply_event;
mod auth;
mod frame_decoder;
mod http;
mod proxy_header;
mod request_parser;
mod tls_frame_reader;

pub use apply_event::apply_event_differential;
pub use auth::{auth, AUTH_TOKEN};
pub use frame_decoder::{frame_decoder, FRAME_PAYLOAD_MAX};
pub use http::{http_request, http_router};
pub use proxy_header::proxy_header;
pub use request_parser::request_parser;
pub use tls_frame_reader::tls_frame_reader;
