//! Log entries: everything `apply` needs, decided once.
//!
//! The WAL stores the binary form of `codec` (entry format 2). The serde (JSON) form is entry
//! format 1, which older logs hold and snapshots still use for definitions: it is part of the
//! on-disk format too, so add fields only as `Option` with `#[serde(default)]`, never rename.

mod batch_record;
mod codec;

pub use batch_record::{batch_records, BatchRecord};

pub(crate) use codec::record_instance_id;
pub use codec::{utf8, DecodeError, Record};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::JsonText;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "k")]
pub enum Entry {
    /// A machine definition version, already validated and normalised.
    #[serde(rename = "machine")]
    PutMachine {
        machine: String,
        version: u32,
        definition: Value,
        /// Hex CRC32C of the canonical definition JSON.
        checksum: String,
        at_ms: u64,
    },
    #[serde(rename = "create")]
    Create {
        id: String,
        machine: String,
        version: u32,
        /// Initial state, decided from the definition.
        state: String,
        context: Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
        at_ms: u64,
    },
    #[serde(rename = "apply")]
    Apply {
        instance_id: String,
        event: String,
        from: String,
        to: String,
        /// The event payload as compact JSON object text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<JsonText>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
        at_ms: u64,
        /// The instance's machine and version, so a log reader (subscription replay) can
        /// describe the event without engine state. Absent in entries written before they
        /// were added; `apply` does not use them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<u32>,
        /// Applied by the shard's timer, not a client (docs/protocol.md, "Timed transitions").
        #[serde(default, skip_serializing_if = "is_false")]
        timer: bool,
    },
    /// An instance removed: by DELETE_INSTANCE (no `machine`, no `reason`: written so before
    /// they existed, and still so), by DELETE_INSTANCES or by its machine's retention
    /// (docs/lifecycle.md), which name its machine so a log reader can push `deleted`.
    #[serde(rename = "delete")]
    Delete {
        id: String,
        at_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<DeleteReason>,
    },
    /// MIGRATE_INSTANCES moved one instance from `from_version` in `from_state` to
    /// `to_version` in `to_state` (docs/lifecycle.md). Context and history are kept.
    #[serde(rename = "migrate")]
    Migrate {
        id: String,
        machine: String,
        from_version: u32,
        to_version: u32,
        from_state: String,
        to_state: String,
        at_ms: u64,
    },
    /// An atomic BATCH: its CREATE, APPLY and DELETE entries, in order, logged as one record
    /// (one offset, one CRC) so recovery applies all of them or none. Never nested.
    #[serde(rename = "batch")]
    Batch { entries: Vec<Entry> },
    /// The start of a primary's term (replication epochs): every entry after it, up to the
    /// next epoch entry, was written under `epoch`. `decide` never makes one; the shard appends
    /// it directly when a term begins. Never inside a batch.
    #[serde(rename = "epoch")]
    Epoch { epoch: u64 },
    /// One instance of a slot move staged on the target (docs/cluster.md "Moving slots"):
    /// invisible until `MoveIn`. `image` is the instance's full record as compact JSON
    /// (`Engine::export_image`); None is a tombstone (the instance was deleted at the source
    /// since it was sent). Not an event: log readers that describe events skip it.
    #[serde(rename = "import")]
    Import {
        move_id: u64,
        lo: u16,
        hi: u16,
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<String>,
        at_ms: u64,
    },
    /// The move switched: every staged instance of `move_id` becomes a live instance.
    #[serde(rename = "move_in")]
    MoveIn {
        move_id: u64,
        lo: u16,
        hi: u16,
        map_epoch: u64,
        at_ms: u64,
    },
    /// The move aborted: the staged instances of `move_id` are dropped.
    #[serde(rename = "drop_staged")]
    DropStaged { move_id: u64, at_ms: u64 },
    /// The source's side of a switch (docs/cluster.md "Moving slots", step 6): slots
    /// `lo..=hi` now belong to group `to` at `map_epoch`. From here the engine leaves the
    /// instances of those slots out of its counts until the purge deletes them
    /// (`engine::departed`), and subscriptions that covered them hear `slots_moved` (live and
    /// replayed). Not an event.
    #[serde(rename = "slots_moved_out")]
    SlotsMovedOut {
        lo: u16,
        hi: u16,
        to: String,
        map_epoch: u64,
        at_ms: u64,
    },
}

/// An APPLY entry with borrowed fields: what `apply` reads, whether the entry was just decided
/// (borrowed from an `Entry`) or is being replayed (borrowed from the log record, no copies).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventRef<'a> {
    pub instance_id: &'a str,
    pub event: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    /// Compact JSON object text.
    pub payload: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub at_ms: u64,
    pub machine: Option<&'a str>,
    pub version: Option<u32>,
    /// Applied by a timer.
    pub timer: bool,
}

/// Why an instance was deleted by a bulk delete or retention (the `deleted` push's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeleteReason {
    /// DELETE_INSTANCES.
    Delete,
    /// The definition's `retention.final_after_ms` ran out in a final state.
    Retention,
    /// The source's cleanup of an instance whose slot moved to another group
    /// (docs/cluster.md "Moving slots"): removed like a delete, but pushed to no subscriber
    /// and counted as no client deletion.
    Moved,
}

impl DeleteReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteReason::Delete => "delete",
            DeleteReason::Retention => "retention",
            DeleteReason::Moved => "moved",
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl EventRef<'_> {
    pub fn to_entry(&self) -> Entry {
        Entry::Apply {
            instance_id: self.instance_id.to_owned(),
            event: self.event.to_owned(),
            from: self.from.to_owned(),
            to: self.to.to_owned(),
            payload: self.payload.map(JsonText::from_log),
            idempotency_key: self.idempotency_key.map(str::to_owned),
            at_ms: self.at_ms,
            machine: self.machine.map(str::to_owned),
            version: self.version,
            timer: self.timer,
        }
    }
}

impl Entry {
    /// True for the entries of a slot move (`Import`, `MoveIn`, `DropStaged`,
    /// `SlotsMovedOut`): not events, so every log reader that describes events skips them
    /// (docs/cluster.md "Moving slots").
    pub fn is_move(&self) -> bool {
        matches!(
            self,
            Entry::Import { .. }
                | Entry::MoveIn { .. }
                | Entry::DropStaged { .. }
                | Entry::SlotsMovedOut { .. }
        )
    }

    /// The borrowed view of an APPLY entry; None for other kinds.
    pub fn as_event(&self) -> Option<EventRef<'_>> {
        match self {
            Entry::Apply {
                instance_id,
                event,
                from,
                to,
                payload,
                idempotency_key,
                at_ms,
                machine,
                version,
                timer,
            } => Some(EventRef {
                instance_id,
                event,
                from,
                to,
                payload: payload.as_ref().map(JsonText::as_str),
                idempotency_key: idempotency_key.as_deref(),
                at_ms: *at_ms,
                machine: machine.as_deref(),
                version: *version,
                timer: *timer,
            }),
            _ => None,
        }
    }

    /// The instance this entry concerns, if any.
    pub fn instance_id(&self) -> Option<&str> {
        match self {
            Entry::PutMachine { .. }
            | Entry::Batch { .. }
            | Entry::Epoch { .. }
            | Entry::Import { .. }
            | Entry::MoveIn { .. }
            | Entry::DropStaged { .. }
            | Entry::SlotsMovedOut { .. } => None,
            Entry::Create { id, .. } | Entry::Delete { id, .. } | Entry::Migrate { id, .. } => {
                Some(id)
            }
            Entry::Apply { instance_id, .. } => Some(instance_id),
        }
    }
}
