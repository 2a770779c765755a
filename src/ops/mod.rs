//! What each operation does with its params, one file per op family.
//!
//! * HELLO, PING, BYE and INFO are answered on the front core (`front::session`).
//! * `machines`: PUT_MACHINE, GET_MACHINE, LIST_MACHINES.
//! * `instances`: CREATE_INSTANCE, GET_INSTANCE, LIST_INSTANCES, DELETE_INSTANCE.
//! * `events`: APPLY_EVENT, GET_HISTORY.
//! * `lifecycle`: MIGRATE_INSTANCES, DELETE_INSTANCES (and their per-shard cursor).
//! * `batch`: BATCH (its op list; each op's params are parsed by the modules above).
//! * `cluster`: the `CLUSTER_*` ops (docs/cluster.md), answered on the front.
//! * `route`: the instance id a routed request (or batched op) names, read on the front.
//!
//! Param structs accept the spec's names and the aliases of docs/protocol.md, "Instances and events" and reject unknown
//! fields, so a typo is a `BAD_REQUEST` naming the field instead of a silently ignored option.

pub mod batch;
pub mod cluster;
pub mod events;
pub mod instances;
pub mod lifecycle;
pub mod machines;
pub mod params;
pub mod route;
mod scan;
