//! The record codec is the format crate's (`smdb_format::record`): bytes in, bytes out, no I/O.

pub use smdb_format::record::*;
