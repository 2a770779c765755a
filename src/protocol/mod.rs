//! The RCP1 wire protocol. The codecs, the op table and the error codes live in the
//! `smdb-protocol` crate (`protocol/`), shared with the Rust client; re-exported here under the
//! server's paths.

pub use smdb_protocol::{decode_frame, encode_frame, FrameError, HEADER_LEN, MAGIC};
pub use smdb_protocol::{encode_error, encode_ok, parse_request, RequestEnvelope};
pub use smdb_protocol::{envelope as message, frame, op};
pub use smdb_protocol::{routes, Effect, Facts, Follower, Need, Op, Route, Routed};

pub mod base64;
pub mod stream;
