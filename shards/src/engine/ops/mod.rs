//! One module per write op family. Each holds that op's `decide_*` (pure, on `&Engine`) and
//! `apply_*` (mutating, on `&mut Engine`) as an `impl Engine` block.

mod apply_event;
pub(crate) mod create_instance;
mod delete_instance;
mod delete_instances;
pub(crate) mod migrate;
mod put_machine;
pub(crate) mod rejections;
