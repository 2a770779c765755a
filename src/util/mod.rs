//! Small executor-local primitives shared by the front and the shard runtime.

pub mod notify;
pub mod slot;
pub mod time;
