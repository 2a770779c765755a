//! The RCP1 wire protocol: frame codec, request envelope parsing, response encoding, op names.
//!
//! Nothing here touches a socket: codecs are functions over byte slices so tests and fuzzers
//! call them directly.

pub mod frame;
pub mod message;
pub mod op;

pub use frame::{decode_frame, encode_frame, FrameError, HEADER_LEN, MAGIC};
pub use message::{encode_error, encode_ok, parse_request, RequestEnvelope};
pub use op::Op;
