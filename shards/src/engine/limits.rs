//! Every bound the engine enforces, with its unit and the reason for it.
//!
//! Definitions are checked against these at PUT_MACHINE time; instance and key bounds at decide
//! time. Nothing here is configurable: the values are part of the behaviour clients see.

/// Bytes in a machine name: names appear in metric labels and log lines.
pub const MACHINE_NAME_BYTES_MAX: usize = 128;

/// Bytes in a state or event name: they appear in metric labels and every history item.
pub const NAME_BYTES_MAX: usize = 128;

/// States in one definition: keeps the per-transition state sets small (bitsets of 16 words).
pub const STATES_MAX: usize = 1024;

/// Transitions in one definition: bounds validation work and the per-event scan in decide.
pub const TRANSITIONS_MAX: usize = 4096;

/// Bytes of source in one guard expression: guards are conditions, not programs.
pub const GUARD_SOURCE_BYTES_MAX: usize = 4096;

/// Nesting depth of a guard expression: bounds parser and evaluator recursion (stack use).
pub const GUARD_DEPTH_MAX: usize = 64;

/// Declared indexes per machine version: each costs a B-tree entry per instance and work on
/// every write that changes its field (docs/queries.md).
pub const INDEXES_PER_VERSION_MAX: usize = 8;

/// Bytes in an instance id (docs/protocol.md, "Instances and events").
pub const INSTANCE_ID_BYTES_MAX: usize = 256;

/// Bytes in an idempotency key: keys are stored per instance, so they must stay small.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;

/// Idempotency records kept per instance (oldest evicted first): each holds a full result, so
/// memory per instance stays bounded while retries within a realistic window still replay.
pub const IDEMPOTENCY_KEYS_PER_INSTANCE_MAX: usize = 1024;

/// History items kept per instance (most recent): GET_HISTORY serves these from memory; older
/// events stay in the write-ahead log only. A GET_HISTORY result names the oldest kept seq.
pub const HISTORY_PER_INSTANCE_MAX: usize = 1000;

const _: () = assert!(STATES_MAX <= u16::MAX as usize, "state indexes are u16");
const _: () = assert!(GUARD_DEPTH_MAX >= 1);
const _: () = assert!(HISTORY_PER_INSTANCE_MAX >= 1);
const _: () = assert!(IDEMPOTENCY_KEYS_PER_INSTANCE_MAX >= 1);
