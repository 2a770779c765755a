//! Snapshots of one engine: its whole state as of one log offset.
//!
//! * Format 2 (`walk`, `load`; docs/wal.md "Snapshot payload, version 2"): binary items, ids
//!   and names by number, contexts and history items as stored. Written by a walk that runs
//!   beside the requests in bounded slices (`walk`: serialise-before-write), and loaded item by
//!   item from chunks (`SnapshotLoader`), so neither end holds a whole snapshot.
//! * Format 1 (`json`): one JSON document. Still loads; also the engine's canonical form,
//!   `Engine::snapshot`, which tests compare byte for byte.

mod json;
mod load;
mod preamble;
mod record;
mod value;
mod walk;

pub use load::SnapshotLoader;
pub(crate) use walk::Walk;
pub use walk::{SliceBudget, WalkProgress};

use smdb_format::snapshot::SNAPSHOT_VERSION_ITEMS;

use super::Engine;

impl Engine {
    /// The whole state as a format-2 payload, at once: a walk as of `offset` run to its end
    /// with no write in between (tests and tools; the shard walks in slices).
    pub fn snapshot_items(&mut self, offset: u64) -> Vec<u8> {
        let walk = self.snapshot_begin(offset, usize::MAX);
        let budget = SliceBudget {
            records: usize::MAX,
            bytes: usize::MAX,
        };
        let mut out = Vec::new();
        while let WalkProgress::Walking = self.snapshot_step(walk, budget, usize::MAX) {}
        self.snapshot_take(walk, &mut out);
        self.snapshot_end();
        out
    }

    /// An engine from a whole snapshot payload of `version` (1 or 2).
    pub fn load_snapshot(version: u32, payload: &[u8]) -> Result<Engine, String> {
        let mut loader = SnapshotLoader::new(version, payload.len() as u64)?;
        loader.feed(payload)?;
        loader.finish()
    }
}

/// The version `Engine::snapshot_items` writes.
pub const SNAPSHOT_FORMAT: u32 = SNAPSHOT_VERSION_ITEMS;
