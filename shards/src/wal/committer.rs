//! The committer task: the one writer of a shard's log.
//!
//! Loop: take everything appended so far (swap buffers), write it with as few block-aligned
//! writes as possible, make them durable (policy `Always`: ONE fdatasync, or none when the
//! segment is open O_DSYNC, see `WalConfig::sync_writes`), then publish the new durable
//! offset and wake its waiters. While a batch is being written and synced, appends accumulate
//! for the next one. The first I/O error poisons the log and ends the task; nothing is retried,
//! except creating a segment that failed for lack of space (`space.rs`): that is a full disk,
//! retried until it succeeds while appends are refused.

use std::rc::Rc;
use std::time::Instant;

use super::config::FsyncPolicy;
use super::error::WalError;
use super::limits::{BATCH_REUSE_BYTES_MAX, MARKER_BYTES};
use super::record::encode_marker;
use super::shared::{Batch, SegmentEpoch, Shared};
use super::space::{is_out_of_space, Alloc, SPACE_RETRY_INTERVAL};
use super::spare::Spare;
use super::writer::SegmentWriter;

struct Committer {
    shared: Rc<Shared>,
    w: SegmentWriter,
    /// The `synced_through` value of the last sync marker written.
    marked: u64,
    last_sync: Instant,
    /// The previous batch's buffers, reused for the next one.
    recycled: Batch,
    /// The pre-zeroed file for the next segment.
    spare: Spare,
    /// When the current segment received its first entry (`storage.archive_timeout_ms`
    /// closes it that long after).
    filled_at: Option<Instant>,
}

/// Runs until `close`, the `Wal` being dropped, or the first I/O error.
pub(crate) async fn run(shared: Rc<Shared>, w: SegmentWriter) {
    let mut spare = Spare::new(
        &shared.wal_dir,
        shared.cfg.segment_bytes,
        shared.space.clone(),
    );
    spare.start();
    // A recovered segment with entries: its timeout counts from now.
    let filled = shared
        .segments
        .borrow()
        .last()
        .is_some_and(|m| m.last >= m.first);
    let filled_at = filled.then(Instant::now);
    let mut c = Committer {
        shared,
        w,
        marked: 0,
        last_sync: Instant::now(),
        recycled: Batch::default(),
        spare,
        filled_at,
    };
    if let Err(e) = c.run_loop().await {
        // Closing while the disk is still full: what was not written was never acknowledged,
        // and the log on disk is sound; its waiters see `Closed`.
        if !(is_out_of_space(&e) && c.shared.closing.get()) {
            c.shared.poison(&e);
        }
    }
    let Committer {
        shared,
        w,
        mut spare,
        ..
    } = c;
    shared.stop();
    w.close().await;
    spare.discard().await;
}

impl Committer {
    async fn run_loop(&mut self) -> Result<(), WalError> {
        loop {
            if self.shared.poisoned.get() {
                return Ok(());
            }
            if self.timed_out() && self.holds_entries() && !self.shared.closing.get() {
                let next = self.shared.written.get() + 1;
                self.rotate(next, None).await?;
            }
            let batch = self.take_pending();
            if batch.ends.is_empty() {
                self.recycled = batch;
                if self.shared.closing.get() {
                    return self.finish().await;
                }
                self.idle().await?;
                continue;
            }
            self.commit(&batch).await?;
            if batch.bytes.capacity() <= BATCH_REUSE_BYTES_MAX {
                self.recycled = batch;
                self.recycled.clear();
            }
        }
    }

    fn take_pending(&mut self) -> Batch {
        let empty = std::mem::take(&mut self.recycled);
        std::mem::replace(&mut *self.shared.pending.borrow_mut(), empty)
    }

    /// Whether the current segment has held entries for `archive_timeout` (then it is closed).
    fn timed_out(&self) -> bool {
        match (self.filled_at, self.shared.cfg.archive_timeout) {
            (Some(at), Some(timeout)) => at.elapsed() >= timeout,
            _ => false,
        }
    }

    /// Waits for appends (`idle_policy`), or until the current segment times out.
    async fn idle(&mut self) -> Result<(), WalError> {
        let due = match (self.filled_at, self.shared.cfg.archive_timeout) {
            (Some(at), Some(timeout)) => (at + timeout).saturating_duration_since(Instant::now()),
            _ => return self.idle_policy().await,
        };
        let timer = async {
            glommio::timer::sleep(due).await;
            Ok(())
        };
        futures_lite::future::or(self.idle_policy(), timer).await
    }

    /// Waits for appends; under `Interval`, syncs when the interval is up.
    async fn idle_policy(&mut self) -> Result<(), WalError> {
        let s = &self.shared;
        match s.policy() {
            FsyncPolicy::Interval(every) if s.synced.get() < s.written.get() => {
                let due = self.last_sync + every;
                let now = Instant::now();
                if now >= due {
                    return self.sync_all().await;
                }
                let sleep = async { glommio::timer::sleep(due - now).await };
                futures_lite::future::or(s.doorbell.wait(), sleep).await;
            }
            _ => s.doorbell.wait().await,
        }
        Ok(())
    }

    /// Syncs the current segment; everything written is then synced.
    async fn sync_all(&mut self) -> Result<(), WalError> {
        let written = self.shared.written.get();
        self.w.sync(&self.shared).await?;
        self.synced_through(written);
        Ok(())
    }

    /// Records that everything up to `offset` is on stable storage.
    fn synced_through(&mut self, offset: u64) {
        let s = &self.shared;
        s.synced.set(s.synced.get().max(offset));
        self.last_sync = Instant::now();
    }

    async fn commit(&mut self, batch: &Batch) -> Result<(), WalError> {
        let n = batch.ends.len();
        let written = self.shared.written.get();
        assert_eq!(
            batch.first,
            written + 1,
            "batches must continue the log: expected offset {}, got {}",
            written + 1,
            batch.first
        );
        let mut i = 0;
        while i < n {
            i = self.write_run(batch, i).await?;
        }
        let last = batch.first + n as u64 - 1;
        {
            let mut c = self.shared.counters.borrow_mut();
            c.batches_total += 1;
            c.entries_total += n as u64;
            c.batch_entries.observe(n as f64);
        }
        match self.shared.policy() {
            FsyncPolicy::Always if self.shared.cfg.durable_writes() => {
                // The segment is open O_DSYNC: every write above completed durable.
                self.shared.counters.borrow_mut().fsyncs_total += 1;
                self.synced_through(last);
                self.shared.publish_durable(last);
            }
            FsyncPolicy::Always => {
                self.sync_all().await?;
                self.shared.publish_durable(last);
            }
            FsyncPolicy::Interval(every) => {
                self.shared.publish_durable(last);
                if self.last_sync.elapsed() >= every {
                    self.sync_all().await?;
                }
            }
            FsyncPolicy::Never => self.shared.publish_durable(last),
        }
        Ok(())
    }

    /// Writes records `i..j` (as many as fit in the current segment, preceded by a sync marker
    /// if `synced` moved since the last one) and returns `j`; rotates first if none fits.
    async fn write_run(&mut self, batch: &Batch, i: usize) -> Result<usize, WalError> {
        let segment_bytes = self.shared.cfg.segment_bytes;
        let next = batch.first + i as u64;
        let stop = self.epoch_break(batch, next).await?;
        let synced = self.shared.synced.get();
        let marker = (synced > self.marked).then(|| encode_marker(next, synced));
        let marker_len = marker.as_ref().map_or(0, |m| m.len()) as u64;
        let room = self.w.room(segment_bytes).saturating_sub(marker_len);
        let start = batch.start_of(i);
        let j = i + batch.ends[i..stop].partition_point(|&e| (e - start) as u64 <= room);
        if j == i {
            // Proof that this terminates: `append` limits a record to a size that fits, with a
            // marker, in an empty segment.
            assert!(
                self.w.pos > super::limits::SEGMENT_HEADER_BYTES,
                "a record of {} bytes does not fit in an empty segment",
                batch.ends[i] - start
            );
            self.rotate(next, None).await?;
            return Ok(i);
        }
        let records = &batch.bytes[start..batch.ends[j - 1]];
        let run_pos = self.w.pos + marker_len;
        match &marker {
            Some(m) => self.w.append(&self.shared, &[m, records]).await?,
            None => self.w.append(&self.shared, &[records]).await?,
        }
        if marker.is_some() {
            self.marked = synced;
        }
        if self.filled_at.is_none() {
            self.filled_at = Some(Instant::now());
        }
        let last = batch.first + j as u64 - 1;
        self.shared.written.set(last);
        let mut segs = self.shared.segments.borrow_mut();
        if let Some(meta) = segs.last_mut() {
            debug_assert_eq!(meta.first, self.w.first);
            for k in i..j {
                meta.note_entry(
                    batch.first + k as u64,
                    run_pos + (batch.start_of(k) - start) as u64,
                );
            }
            meta.last = last;
            meta.end = self.w.pos;
        }
        Ok(j)
    }

    /// When the entry `next` begins an epoch, starts its segment; returns the index in `batch`
    /// of the next entry that begins one (the run must stop before it), or the batch's end.
    async fn epoch_break(&mut self, batch: &Batch, next: u64) -> Result<usize, WalError> {
        let starts = {
            let mut breaks = self.shared.epoch_breaks.borrow_mut();
            // Announced for an entry that was never appended (the append failed).
            while breaks.front().is_some_and(|b| b.offset < next) {
                breaks.pop_front();
            }
            let now = breaks.front().copied().filter(|b| b.offset == next);
            if now.is_some() {
                breaks.pop_front();
            }
            now
        };
        if let Some(b) = starts {
            let epoch = SegmentEpoch {
                epoch: b.epoch,
                follows: b.follows,
                starts: true,
            };
            if self.holds_entries() {
                self.rotate(next, Some(epoch)).await?;
            } else {
                self.w.set_epoch(&self.shared, epoch).await?;
            }
            self.shared.archive_bell.ring();
        }
        let n = batch.ends.len();
        let breaks = self.shared.epoch_breaks.borrow();
        Ok(breaks.front().map_or(n, |b| {
            usize::try_from(b.offset - batch.first).map_or(n, |k| k.min(n))
        }))
    }

    /// Whether the current segment holds at least one entry (a segment without any must not
    /// be closed: the next one would take its name).
    fn holds_entries(&self) -> bool {
        let segs = self.shared.segments.borrow();
        segs.last().is_some_and(|m| m.last >= m.first)
    }

    /// Seals the current segment (fdatasync, whatever the policy) and starts segment `first`,
    /// of `epoch` (None: the current segment's epoch, not starting it). A segment closed
    /// before it was full (a timeout or an epoch) gives back its unused space.
    async fn rotate(&mut self, first: u64, epoch: Option<SegmentEpoch>) -> Result<(), WalError> {
        let written = self.shared.written.get();
        assert_eq!(
            first,
            written + 1,
            "a new segment must start at offset {}",
            written + 1
        );
        self.sync_all().await?;
        let early = epoch.is_some() || self.timed_out();
        let epoch = epoch.unwrap_or_else(|| self.next_epoch());
        let (new, prezeroed) = self.create_segment(first, epoch).await?;
        {
            let mut c = self.shared.counters.borrow_mut();
            c.rotations_total += 1;
            c.rotations_prezeroed_total += u64::from(prezeroed);
        }
        let old = std::mem::replace(&mut self.w, new);
        self.filled_at = None;
        if early {
            old.trim().await?;
        }
        old.close().await;
        self.spare.start();
        self.shared.archive_bell.ring();
        Ok(())
    }

    /// The label of a segment that continues the current one's epoch.
    fn next_epoch(&self) -> SegmentEpoch {
        let segs = self.shared.segments.borrow();
        let epoch = segs.last().map_or(0, |m| m.epoch.epoch);
        SegmentEpoch {
            epoch,
            follows: 0,
            starts: false,
        }
    }

    /// Creates segment `first`, from the spare when it is ready. While the disk has no room
    /// for it, marks the disk full (appends are refused; the batch in hand waits) and tries
    /// again every `SPACE_RETRY_INTERVAL` until it succeeds, or fails when the log is closing.
    async fn create_segment(
        &mut self,
        first: u64,
        epoch: SegmentEpoch,
    ) -> Result<(SegmentWriter, bool), WalError> {
        loop {
            let spare = self.spare.take_ready().await;
            let prezeroed = spare.is_some();
            let spare_path = self.spare.path().to_path_buf();
            let spare = spare.map(|file| (file, spare_path.as_path()));
            match SegmentWriter::create(&self.shared, first, epoch, spare).await {
                Ok(w) => {
                    self.shared.space.succeeded(Alloc::Segment);
                    return Ok((w, prezeroed));
                }
                Err(e) if is_out_of_space(&e) && !self.shared.poisoned.get() => {
                    self.shared.space.failed(Alloc::Segment, &e);
                    if self.shared.closing.get() {
                        return Err(e);
                    }
                    self.spare.start();
                    glommio::timer::sleep(SPACE_RETRY_INTERVAL).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Graceful stop: sync what was written, then leave a sync marker saying so, so that
    /// recovery can tell later damage to these records from a torn tail.
    async fn finish(&mut self) -> Result<(), WalError> {
        let s = self.shared.clone();
        if s.synced.get() < s.written.get() {
            self.sync_all().await?;
        }
        let synced = s.synced.get();
        if synced > self.marked && self.w.room(s.cfg.segment_bytes) >= MARKER_BYTES as u64 {
            let m = encode_marker(s.written.get() + 1, synced);
            self.w.append(&s, &[&m]).await?;
            self.w.sync(&s).await?;
            self.marked = synced;
        }
        Ok(())
    }
}
