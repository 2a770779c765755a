//! When and how a shard snapshots (docs/wal.md "The snapshot walk", docs/architecture.md "The
//! path of one snapshot").
//!
//! After `storage.snapshot_every_entries` entries since the last snapshot, `maybe_snapshot`
//! starts one task. It walks the engine (`Engine::snapshot_begin` / `snapshot_step`) in slices
//! of about `SLICE_TARGET`, yielding to the requests between slices; writes that land meanwhile
//! serialise what they change first, so the snapshot is exactly the state at the offset the walk
//! began at. The bytes go to the log's snapshot file as they come (`SnapshotWriter`, one write
//! of 1 MiB in flight at a time), and `Wal::commit_snapshot` puts the file in place once the
//! offset is durable, then prunes old snapshots and compacts the log.
//!
//! A walk that holds more serialised bytes the disk has not taken than its limit (writes
//! serialising faster than the disk drains) is abandoned: its file deleted, the next attempt
//! `RETRY_AFTER` later. The limit (`pending_max`) is the size the snapshot is expected to have,
//! with a margin, between `PENDING_BYTES_MIN` and `PENDING_BYTES_MAX`: a walk writes each
//! instance once, so it never holds more than its snapshot, and a hot write set that reaches
//! every instance before the walk does (a few thousand instances with long histories) still
//! completes. The expected size is the last snapshot's, or what an abandoned walk projected. A rewind, a snapshot install or a promotion cancels a running
//! walk (`cancel_snapshot`) and waits for its file to be deleted, so no snapshot lands above a
//! truncation point (the log also refuses a snapshot once rewound).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use shards::engine::{SliceBudget, WalkProgress, SNAPSHOT_FORMAT};
use shards::wal::{Histogram, Wal};

use super::runtime::Shard;
use crate::metrics::shard::SNAPSHOT_BOUNDS_SECONDS;

/// Bytes serialised by a walk and not yet taken by the disk: the limit never goes below this.
/// 64 MiB is a second of writes' pre-images at 600k 100-byte records/s, far beyond what a disk
/// that keeps up leaves waiting with writes spread over many instances.
pub const PENDING_BYTES_MIN: usize = 64 << 20;

/// ... and never above this (module doc): a shard whose whole state is written ahead of the
/// walk holds at most its snapshot's size once more in memory, and past 2 GiB of that the walk
/// is abandoned (and logged) rather than doubling a very large shard's memory.
pub const PENDING_BYTES_MAX: usize = 2 << 30;

/// Bytes waiting at which a slice writes nothing (the walk waits for the disk; writes do not).
const PENDING_BYTES_SOFT: usize = 1 << 20;

/// How long a slice should take: short enough that a request behind it waits little, long
/// enough that slices are not all overhead. The instances per slice adapt to it.
const SLICE_TARGET: Duration = Duration::from_micros(250);

/// Instances per slice: first, least and most.
const SLICE_RECORDS: (usize, usize, usize) = (256, 16, 16384);

/// Bytes a slice serialises, about, at most.
const SLICE_BYTES: usize = 256 << 10;

/// After an abandoned or failed snapshot, the next attempt waits this long.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A shard's snapshot figures (ShardStats, metrics).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotStats {
    /// Snapshots completed.
    pub total: u64,
    /// Walks abandoned, cancelled or failed.
    pub given_up: u64,
    /// Seconds from a walk's start to its file in place.
    pub duration: Histogram,
    /// Payload bytes of the last completed snapshot.
    pub last_bytes: u64,
}

/// Scheduling state: one walk at a time.
pub(super) struct Snapshots {
    every: u64,
    /// Offset of the last snapshot begun (or of the head after a rewind).
    last_offset: Cell<u64>,
    running: Cell<bool>,
    /// Set by `cancel_snapshot`: the running task stops at its next slice.
    cancel: Cell<bool>,
    /// While a rewind or a snapshot install is under way, no walk starts.
    held: Cell<bool>,
    retry_at: Cell<Option<Instant>>,
    /// The size the next snapshot is expected to have (bytes): the last one's, or what an
    /// abandoned walk projected; sizes the walk's pending limit (`pending_max`).
    expected_bytes: Cell<u64>,
    stats: RefCell<SnapshotStats>,
}

impl Snapshots {
    pub(super) fn new(every: u64, head: u64) -> Snapshots {
        Snapshots {
            every,
            last_offset: Cell::new(head),
            running: Cell::new(false),
            cancel: Cell::new(false),
            held: Cell::new(false),
            retry_at: Cell::new(None),
            expected_bytes: Cell::new(0),
            stats: RefCell::new(SnapshotStats {
                total: 0,
                given_up: 0,
                duration: Histogram::new(&SNAPSHOT_BOUNDS_SECONDS),
                last_bytes: 0,
            }),
        }
    }

    pub(super) fn stats(&self) -> SnapshotStats {
        *self.stats.borrow()
    }

    /// The pending limit of the next walk: the expected size and a quarter more, within
    /// `PENDING_BYTES_MIN..=PENDING_BYTES_MAX`.
    fn pending_max(&self) -> usize {
        let expected = usize::try_from(self.expected_bytes.get()).unwrap_or(usize::MAX);
        let with_margin = expected.saturating_add(expected / 4);
        with_margin.clamp(PENDING_BYTES_MIN, PENDING_BYTES_MAX)
    }

    /// Keeps walks from starting (a rewind or an install is under way), or lets them again.
    pub(super) fn hold(&self, held: bool) {
        self.held.set(held);
    }
}

/// How one walk went.
struct Walked {
    bytes: u64,
    instances: u64,
    by_writes: u64,
    slices: u64,
    /// The longest slice in wall time (what a request behind it waited), and the longest in
    /// the shard thread's CPU time (the slice's own work, without the preemptions a busy host
    /// adds).
    longest: Duration,
    longest_cpu: Duration,
}

/// CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Shard {
    /// This shard's snapshot figures for a scrape.
    pub(super) fn snapshot_figures(&self) -> crate::metrics::shard::SnapshotFigures {
        let s = self.snapshots.stats();
        crate::metrics::shard::SnapshotFigures {
            total: s.total,
            duration: crate::metrics::shard::snapshot(&s.duration),
            last_bytes: s.last_bytes,
        }
    }

    /// Starts a snapshot task when enough entries have accumulated since the last one.
    pub(super) fn maybe_snapshot(self: &Rc<Self>) {
        let s = &self.snapshots;
        let head = self.log.head();
        if s.running.get() || s.held.get() || head < s.last_offset.get() + s.every {
            return;
        }
        if s.retry_at.get().is_some_and(|t| Instant::now() < t) {
            return;
        }
        // Staged slot-move imports are not snapshotted, nor the mark of slots moved out whose
        // instances wait for the purge: none starts while either is there, so a recovery
        // replays them from the log (docs/cluster.md "Moving slots"). It is due again once
        // the move has switched or been dropped, and once the purge is done.
        let engine = self.engine.borrow();
        if engine.has_staged() || engine.has_departed() {
            return;
        }
        drop(engine);
        s.running.set(true);
        s.cancel.set(false);
        s.last_offset.set(head);
        // The walk begins now, at `head`: every entry up to it is applied and none after. (It
        // must not wait for the file: entries applied meanwhile would be missed.)
        let walk = self
            .engine
            .borrow_mut()
            .snapshot_begin(head, s.pending_max());
        let shard = self.clone();
        glommio::spawn_local(async move { shard.snapshot_task(walk, head).await }).detach();
    }

    /// Stops a running snapshot and waits until its temp file is gone (before a rewind, an
    /// install or a promotion).
    pub(super) async fn cancel_snapshot(&self) {
        self.cancel_snapshot_now();
        self.snapshot_idle().await;
    }

    /// `cancel_snapshot` without waiting (a promotion): the task deletes its file at its next
    /// turn.
    pub(super) fn cancel_snapshot_now(&self) {
        if self.snapshots.running.get() {
            self.snapshots.cancel.set(true);
            self.engine.borrow_mut().snapshot_end();
        }
    }

    /// Waits until no snapshot task runs.
    pub(super) async fn snapshot_idle(&self) {
        while self.snapshots.running.get() {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The log was rewound to `head`: the next snapshot is due `every` entries from there.
    pub(super) fn snapshot_from(&self, head: u64) {
        self.snapshots.last_offset.set(head);
    }

    async fn snapshot_task(self: Rc<Self>, walk: u64, offset: u64) {
        let started = Instant::now();
        // The log whose state this is: after a rewind it refuses the snapshot.
        let wal = self.log.wal();
        let walked = self.walk_and_write(&wal, walk, offset).await;
        let s = &self.snapshots;
        {
            let mut engine = self.engine.borrow_mut();
            let projected = engine.snapshot_projected();
            if walked.is_err() && projected > s.expected_bytes.get() {
                s.expected_bytes.set(projected);
            }
            engine.snapshot_end();
        }
        match walked {
            Ok(w) => {
                s.expected_bytes.set(w.bytes);
                let took = started.elapsed();
                let mut stats = s.stats.borrow_mut();
                stats.total += 1;
                stats.duration.observe(took.as_secs_f64());
                stats.last_bytes = w.bytes;
                log::info!(
                    "shard {}: snapshot at offset {offset}: {} instances ({} written ahead of a \
                     change), {} bytes in {} ms; {} slices, the longest {} us ({} us of CPU)",
                    self.index,
                    w.instances,
                    w.by_writes,
                    w.bytes,
                    took.as_millis(),
                    w.slices,
                    w.longest.as_micros(),
                    w.longest_cpu.as_micros()
                );
            }
            Err(e) => {
                s.stats.borrow_mut().given_up += 1;
                if !s.cancel.get() {
                    s.retry_at.set(Some(Instant::now() + RETRY_AFTER));
                    s.last_offset.set(offset.saturating_sub(s.every));
                }
                log::warn!(
                    "shard {}: snapshot at offset {offset} not kept: {e}",
                    self.index
                );
            }
        }
        s.running.set(false);
    }

    /// Walks the engine (walk `walk`, begun at `offset`) into a snapshot file of `wal` and
    /// commits it.
    async fn walk_and_write(
        &self,
        wal: &Rc<Wal>,
        walk: u64,
        offset: u64,
    ) -> Result<Walked, String> {
        let file = wal.begin_snapshot(offset, SNAPSHOT_FORMAT).await;
        let mut file = file.map_err(|e| e.to_string())?;
        let (first, least, most) = SLICE_RECORDS;
        let mut budget = SliceBudget {
            records: first,
            bytes: SLICE_BYTES,
        };
        let mut w = Walked {
            bytes: 0,
            instances: 0,
            by_writes: 0,
            slices: 0,
            longest: Duration::ZERO,
            longest_cpu: Duration::ZERO,
        };
        let mut bytes = Vec::new();
        let outcome = loop {
            if self.snapshots.cancel.get() {
                break Err("cancelled".to_string());
            }
            let (t, cpu) = (Instant::now(), thread_cpu());
            let progress = {
                let mut engine = self.engine.borrow_mut();
                let progress = engine.snapshot_step(walk, budget, PENDING_BYTES_SOFT);
                engine.snapshot_take_chunk(walk, &mut bytes);
                progress
            };
            let took = t.elapsed();
            w.slices += 1;
            w.longest = w.longest.max(took);
            w.longest_cpu = w.longest_cpu.max(thread_cpu().saturating_sub(cpu));
            budget.records = match took {
                t if t > SLICE_TARGET => (budget.records / 2).max(least),
                t if t < SLICE_TARGET / 2 => (budget.records * 2).min(most),
                _ => budget.records,
            };
            if !bytes.is_empty() {
                if let Err(e) = file.write(&bytes).await {
                    break Err(e.to_string());
                }
                bytes.clear();
            }
            match progress {
                WalkProgress::Walking => futures_lite::future::yield_now().await,
                WalkProgress::Done {
                    instances,
                    by_writes,
                } => {
                    // Done once the disk has every chunk: the end item is the last.
                    if self.engine.borrow().snapshot_pending() == 0 {
                        (w.instances, w.by_writes) = (instances, by_writes);
                        break Ok(());
                    }
                }
                WalkProgress::Abandoned(why) => break Err(why),
                WalkProgress::Gone => break Err("cancelled".to_string()),
            }
        };
        if let Err(e) = outcome {
            file.abort().await;
            return Err(e);
        }
        w.bytes = file.len();
        wal.commit_snapshot(file).await.map_err(|e| e.to_string())?;
        Ok(w)
    }
}
