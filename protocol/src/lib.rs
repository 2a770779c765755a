//! `smdb-protocol`: the smdb wire protocol, shared by the server and every Rust client.
//!
//! * [`frame`]: the RCP1 frame codec (docs/protocol.md, "Frames");
//! * [`envelope`]: request envelopes in, response envelopes out;
//! * [`op`]: the op table, every op's facts in one place;
//! * [`codes`]: the error codes, with their retryability and what a failed request did;
//! * [`slot`]: hash slots of cluster mode (`slot_of`, `routing_key`, CRC16-XMODEM);
//! * [`tls`]: TLS and mutual TLS settings (PEM files, client configs) for RCP1 peers.
//!
//! Nothing here touches a socket or a runtime: codecs are functions over byte slices, so the
//! server, the clients, tests and fuzzers call them directly.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
pub mod codes;
pub mod envelope;
pub mod frame;
pub mod op;
pub mod slot;
pub mod tls;

pub use codes::{ErrorCode, Execution, Rejection};
pub use envelope::{encode_error, encode_ok, parse_request, RequestEnvelope};
pub use frame::{decode_frame, encode_frame, FrameError, HEADER_LEN, MAGIC};
pub use op::{routes, Effect, Facts, Follower, Need, Op, Resend, Role, Route, Routed, Scope};
