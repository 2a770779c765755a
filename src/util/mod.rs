//! Small primitives shared by the front, the shard runtime and the server's other parts.

pub mod fd;
pub mod notify;
pub mod random;
pub mod slot;
pub mod time;
pub mod waiters;
