//! Snapshot format 1: the whole engine (definitions, instances with histories and idempotency
//! records, counters) as one JSON document, and back. Written by builds before streamed
//! snapshots (a snapshot file of version 1 still loads), and kept as the engine's canonical
//! form: equal engines give equal bytes, which tests compare.
//!
//! Form: `{"v":1, "machines":[<PutMachine entry>..], "instances":[<record>..], "stats":{..},
//! "epochs":[[epoch,offset]..]}`, machines by name and version, instances by id, so equal
//! engines give equal bytes. `epochs` is left out while empty, and reads as empty when absent
//! (snapshots written before replication); so is `moved_in` (`[[lo, hi, offset]..]`, the
//! slots' latest move-ins, `engine::moves::MovedIn`).
//! Definitions are recompiled on restore, the same path `apply` takes.

use serde::{Deserialize, Serialize};

use crate::engine::index::InstanceMap;
use crate::engine::instance::{RecordOut, RestoredRecords, UNKNOWN};
use crate::engine::stats::StatsForm;
use crate::engine::{Engine, Entry};

/// Snapshot format version; restore refuses others.
const SNAPSHOT_VERSION: u32 = 1;

#[derive(Serialize)]
struct SnapshotOut<'a> {
    v: u32,
    machines: Vec<Entry>,
    instances: Vec<RecordOut<'a>>,
    stats: StatsForm,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    epochs: &'a [(u64, u64)],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    moved_in: &'a [(u16, u16, u64)],
}

/// Bytes. An instance's snapshot form without its context members and history: the id,
/// machine, state, times, offsets and member names.
const SNAPSHOT_RECORD_BYTES: usize = 320;
/// Bytes. One context member in the snapshot, about, with a short name and value.
const SNAPSHOT_MEMBER_BYTES: usize = 32;

#[derive(Deserialize)]
struct SnapshotIn {
    v: u32,
    machines: Vec<Entry>,
    instances: RestoredRecords,
    stats: StatsForm,
    #[serde(default)]
    epochs: Vec<(u64, u64)>,
    #[serde(default)]
    moved_in: Vec<(u16, u16, u64)>,
}

impl Engine {
    /// The full state as one JSON document (format 1), for `Engine::restore`.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut records: Vec<_> = self.instances.records().collect();
        records.sort_by(|a, b| a.instance.id.cmp(&b.instance.id));
        let instances = (records.iter())
            .map(|r| r.snapshot_form(&self.names))
            .collect();
        let snapshot = SnapshotOut {
            v: SNAPSHOT_VERSION,
            machines: self.machine_entries(),
            instances,
            stats: StatsForm::from(&self.stats),
            epochs: &self.epochs,
            moved_in: self.moved_in.ranges(),
        };
        // Sized up front: a snapshot can be hundreds of megabytes, and growing it by doubling
        // page-faults and copies it while the shard is paused.
        let mut out = Vec::with_capacity(self.snapshot_bytes_estimate());
        // Cannot fail: every map in the snapshot has string keys and no Serialize impl here
        // returns an error, which are serde_json's only failure causes when writing to a Vec.
        #[allow(clippy::expect_used)]
        serde_json::to_writer(&mut out, &snapshot).expect("snapshot serializes");
        out
    }

    /// About the bytes of `snapshot()`: each instance's record (`SNAPSHOT_RECORD_BYTES`, plus
    /// `SNAPSHOT_MEMBER_BYTES` per context member) and its history. Long context values make
    /// it short, and then the buffer grows as before.
    pub(crate) fn snapshot_bytes_estimate(&self) -> usize {
        let records = self.instances.records().map(|r| {
            let history = r
                .history
                .as_ref()
                .map_or(0, |h| h.snapshot_bytes_estimate());
            SNAPSHOT_RECORD_BYTES + SNAPSHOT_MEMBER_BYTES * r.instance.context.len() + history
        });
        let total: usize = records.sum();
        total + total / 16
    }

    /// Rebuilds an engine from a format-1 snapshot (one JSON document).
    pub fn restore(bytes: &[u8]) -> Result<Engine, String> {
        let snapshot: SnapshotIn =
            serde_json::from_slice(bytes).map_err(|e| format!("snapshot does not parse: {e}"))?;
        if snapshot.v != SNAPSHOT_VERSION {
            return Err(format!(
                "snapshot version {} is not {SNAPSHOT_VERSION}",
                snapshot.v
            ));
        }
        let mut engine = Engine::new();
        for entry in snapshot.machines {
            let (name, version) = match &entry {
                Entry::PutMachine {
                    machine, version, ..
                } => (machine.clone(), *version),
                _ => return Err("snapshot machine list holds a non-machine entry".into()),
            };
            if let Err(reason) = engine.store_machine(entry) {
                return Err(format!("snapshot machine `{name}` v{version}: {reason}"));
            }
        }
        let RestoredRecords { records, names } = snapshot.instances;
        let mut instances = InstanceMap::with_capacity(records.len());
        for mut record in records {
            if record.entered_offset == UNKNOWN || record.entered_at_ms == UNKNOWN {
                // Written before state-entry times were kept: the last change is the best guess.
                record.entered_at_ms = record.instance.updated_at_ms;
                record.entered_offset = record.instance.wal_offset;
            }
            if let Err(record) = instances.insert(Box::new(record)) {
                let id = &record.instance.id;
                return Err(format!("snapshot holds instance `{id}` twice"));
            }
        }
        engine.instances = instances;
        // The names of the records, their histories' ids among them (machines compiled above
        // intern none).
        engine.names = names;
        engine.stats = snapshot.stats.into();
        engine.set_epochs(snapshot.epochs)?;
        engine.moved_in = crate::engine::moves::MovedIn::from_ranges(snapshot.moved_in)
            .ok_or("snapshot moved-in slots are not sorted ranges")?;
        engine.build_indexes();
        Ok(engine)
    }
}
