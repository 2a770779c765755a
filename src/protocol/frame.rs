//! The RCP1 frame codec (spec §4.1) lives in the `smdb-client` crate (`clients/rust`), so the
//! server and every Rust client share one implementation; re-exported here under its old path.

pub use smdb_client::frame::*;
