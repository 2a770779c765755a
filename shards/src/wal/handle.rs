//! `LogHandle`: what another executor may know about a shard's log without touching it.
//!
//! The `Wal` lives on its shard's executor and is `!Send`. A `LogHandle` is `Send + Sync` and
//! holds only the log's paths and the atomics the `Wal` publishes as they move: the durable
//! offset, the oldest retained offset, a generation that changes whenever the log is
//! rewound or replaced (`truncate_after`, `install_snapshot`), and whether the log is poisoned
//! or refuses appends for lack of space (the HA thread gives up the lease on either). Readers on any executor make a
//! `LogReader` from it, which opens its own read-only files (`log_reader.rs`).
//!
//! A handle survives the reopen that follows a rewind: the shard passes it to `Wal::open_with`,
//! so one taken earlier keeps reporting the live log.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::config::WalConfig;
use super::log_reader::LogReader;

/// The figures a `Wal` publishes for other executors.
#[derive(Debug, Default)]
pub(crate) struct Published {
    durable: AtomicU64,
    oldest: AtomicU64,
    generation: AtomicU64,
    /// Pins against compaction (`LogPin`): `(id, offset)`. Bounded by the pins held at once,
    /// one per shard per running backup.
    pins: Mutex<Vec<(u64, u64)>>,
    next_pin: AtomicU64,
    /// The log is poisoned (`Shared::poison`): no write succeeds until a restart.
    poisoned: AtomicBool,
    /// An allocation is failing for lack of space (`SpaceFlags`): appends get STORAGE_FULL.
    storage_full: AtomicBool,
}

/// Holds a shard's log from a snapshot on against compaction while it lives: the snapshot at
/// `offset` (if any) is not pruned and no segment holding an offset after it is deleted.
/// Dropping it releases the pin (a backup that ends or whose client disconnects). It knows
/// offsets only, never payloads.
#[derive(Debug)]
pub struct LogPin {
    published: Arc<Published>,
    id: u64,
    offset: u64,
}

impl LogPin {
    /// The pinned snapshot offset (0: no snapshot; the whole log is pinned).
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Drop for LogPin {
    fn drop(&mut self) {
        let mut pins = lock_pins(&self.published.pins);
        pins.retain(|(id, _)| *id != self.id);
    }
}

/// The pin list even after a panic while it was held (it is a plain list, always consistent).
fn lock_pins(m: &Mutex<Vec<(u64, u64)>>) -> std::sync::MutexGuard<'_, Vec<(u64, u64)>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A cloneable, thread-safe view of one shard's log: its durable and oldest offsets, and
/// `reader()` for reading it from any glommio executor.
#[derive(Debug, Clone)]
pub struct LogHandle {
    pub(crate) published: Arc<Published>,
    pub(crate) dir: PathBuf,
    pub(crate) shard: u32,
}

impl LogHandle {
    pub(crate) fn new(cfg: &WalConfig) -> LogHandle {
        LogHandle {
            published: Arc::new(Published::default()),
            dir: cfg.dir.clone(),
            shard: cfg.shard,
        }
    }

    /// A reader for the executor this is called on (the reader is `!Send`).
    pub fn reader(&self) -> LogReader {
        LogReader::new(self.clone())
    }

    /// Highest durable offset (0 while the log is empty).
    pub fn durable(&self) -> u64 {
        self.published.durable.load(Ordering::Acquire)
    }

    /// Oldest offset a reader can read from the log; older ones are only in a snapshot.
    pub fn oldest(&self) -> u64 {
        self.published.oldest.load(Ordering::Acquire)
    }

    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// The log is poisoned: it takes no write until the process restarts.
    pub fn is_poisoned(&self) -> bool {
        self.published.poisoned.load(Ordering::Acquire)
    }

    /// The log refuses appends for lack of space (it takes them again by itself).
    pub fn is_storage_full(&self) -> bool {
        self.published.storage_full.load(Ordering::Acquire)
    }

    /// Pins the log from the snapshot at `offset` on (0: from the start) until the returned
    /// guard is dropped (`LogPin`). `compaction::compact` and snapshot pruning respect it.
    pub fn pin(&self, offset: u64) -> LogPin {
        let id = self.published.next_pin.fetch_add(1, Ordering::AcqRel);
        lock_pins(&self.published.pins).push((id, offset));
        LogPin {
            published: self.published.clone(),
            id,
            offset,
        }
    }

    /// The lowest pinned offset, if anything is pinned.
    pub(crate) fn pinned_floor(&self) -> Option<u64> {
        lock_pins(&self.published.pins).iter().map(|p| p.1).min()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.published.generation.load(Ordering::Acquire)
    }

    pub(crate) fn wal_dir(&self) -> PathBuf {
        self.dir.join("wal")
    }

    pub(crate) fn snapshot_dir(&self) -> PathBuf {
        self.dir.join("snapshots")
    }
}

impl Published {
    pub fn set_durable(&self, offset: u64) {
        self.durable.store(offset, Ordering::Release);
    }

    pub fn set_oldest(&self, offset: u64) {
        self.oldest.store(offset, Ordering::Release);
    }

    pub fn set_poisoned(&self, poisoned: bool) {
        self.poisoned.store(poisoned, Ordering::Release);
    }

    pub fn set_storage_full(&self, full: bool) {
        self.storage_full.store(full, Ordering::Release);
    }

    /// The log was rewound or replaced: readers drop what they cached.
    pub fn bump_generation(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
