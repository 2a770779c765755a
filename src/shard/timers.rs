//! Durable timers on the shard (docs/protocol.md, "Timed transitions"): one entry point,
//! `Timers::run`, a task beside the client tasks that fires due timers through the same
//! decide → log → apply path as a client's APPLY_EVENT (`Shard::log_and_apply`), so history,
//! metrics and subscriptions see a fired timer like any event.
//!
//! Arming: after every logged entry, each instance it moved into a new state (or created) gets
//! its state's timer queued (`Timers::arm_after`); leaving the state cancels lazily (the engine
//! clears the instance's timer; the queued entry is skipped when popped). Recovery arms every
//! instance from its state (`Timers::rebuild`); overdue timers fire at once.
//!
//! Pacing: at most `FIRES_PER_BATCH` fires, then the task yields, so client requests queued on
//! this shard run between batches however many timers are due.
//!
//! Only a primary or standalone server fires timers (`fires_timers`). A replica arms timers in
//! the engine (so reads and `timers_pending` show them) but queues and fires nothing; `promote`
//! turns firing on and rebuilds the queue from state, so overdue timers fire at once.
//!
//! Paused (a data dir marked `timers.paused`, `crate::timers_pause`): the queue is built and
//! armed exactly as when firing, but the task fires nothing until `resume`; then overdue
//! timers fire on its next turn through the usual path. Pausing is independent of the role:
//! a paused replica promoted later still fires nothing until resumed.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use shards::engine::{Engine, Entry, Fire};
use shards::timers::TimerQueue;
use shards::wal::Histogram;
use shards::ErrorCode;

use super::runtime::Shard;
use crate::metrics::shard::LATENESS_BOUNDS_SECONDS;
use crate::util::notify::Notify;
use crate::util::time::now_ms;

/// Timers fired (or found stale) per turn before the task yields to client requests.
pub const FIRES_PER_BATCH: usize = 256;

/// How long a fire that could not be logged (log I/O failure) waits before it is retried.
const RETRY_AFTER_LOG_FAILURE_MS: u64 = 1000;
/// Milliseconds. When a timer of a slot frozen by a move is looked at again.
const FROZEN_RETRY_MS: u64 = 20;

/// The timer state of one shard.
pub struct Timers {
    /// Off on a replica: timers are armed in the engine, never queued or fired.
    fires_timers: Cell<bool>,
    /// The data dir was marked `timers.paused`: queued as usual, fired only after `resume`.
    paused: Cell<bool>,
    queue: RefCell<TimerQueue>,
    /// Wakes the task when a timer earlier than the one it sleeps for is armed, or at stop.
    wake: Notify,
    /// The deadline the task currently sleeps until (u64::MAX: none).
    sleeping_until: Cell<u64>,
    stopped: Cell<bool>,
    lateness: RefCell<Histogram>,
}

impl Timers {
    pub fn new(fires_timers: bool, paused: bool) -> Self {
        Timers {
            fires_timers: Cell::new(fires_timers),
            paused: Cell::new(paused),
            queue: RefCell::new(TimerQueue::default()),
            wake: Notify::default(),
            sleeping_until: Cell::new(u64::MAX),
            stopped: Cell::new(false),
            lateness: RefCell::new(Histogram::new(&LATENESS_BOUNDS_SECONDS)),
        }
    }

    /// Whether this shard fires timers (primary or standalone).
    pub fn fires(&self) -> bool {
        self.fires_timers.get()
    }

    /// Whether firing is paused (`timers.paused`).
    pub fn paused(&self) -> bool {
        self.paused.get()
    }

    /// Ends the pause (`ShardCall::TimersResume`): overdue timers fire on the task's next
    /// turn. Returns whether it was paused; a no-op otherwise.
    pub fn resume(&self) -> bool {
        let was = self.paused.replace(false);
        self.wake.notify();
        was
    }

    /// Starts firing (a replica promoted to primary): the queue is rebuilt from state and
    /// overdue timers fire on the task's next turn. No-op when already firing.
    pub fn promote(&self, engine: &mut Engine) {
        if self.fires_timers.replace(true) {
            return;
        }
        self.rebuild(engine);
    }

    /// Stops firing (failover: a primary stepped down). The engine keeps its timers armed; a
    /// later promotion rebuilds the queue from state.
    pub fn demote(&self) {
        self.fires_timers.set(false);
        *self.queue.borrow_mut() = TimerQueue::default();
        self.wake.notify();
    }

    /// Arms every instance's timer from its state (after recovery, a rebuilt engine, or
    /// promotion); queues them when this shard fires timers.
    pub fn rebuild(&self, engine: &mut Engine) {
        let started = Instant::now();
        let armed = engine.arm_all_timers();
        let n = armed.len();
        if !self.fires_timers.get() {
            *self.queue.borrow_mut() = TimerQueue::default();
            return;
        }
        *self.queue.borrow_mut() = TimerQueue::from_armed(armed);
        log::info!(
            "timers: {n} armed from state in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        self.wake.notify();
    }

    /// The instances `entry` may have moved into a new state: what `arm_after` looks at.
    pub fn touched(&self, entry: &Entry) -> Vec<String> {
        match entry {
            Entry::Create { id, .. } | Entry::Migrate { id, .. } => vec![id.clone()],
            Entry::Apply {
                instance_id,
                from,
                to,
                ..
            } if from != to => vec![instance_id.clone()],
            Entry::Batch { entries } => entries.iter().flat_map(|e| self.touched(e)).collect(),
            _ => Vec::new(),
        }
    }

    /// Queues the timers of `ids` that entered their state in the record at `offset`.
    pub fn arm_after<S: AsRef<str>>(&self, engine: &mut Engine, ids: &[S], offset: u64) {
        for id in ids.iter().map(AsRef::as_ref) {
            if let Some(due) = engine.arm_timer(id, offset) {
                if !self.fires_timers.get() {
                    continue; // a replica: armed in the engine, fired by no one until promoted
                }
                self.queue.borrow_mut().push(due, offset, id);
                if due < self.sleeping_until.get() {
                    self.wake.notify();
                }
            }
        }
    }

    /// Queues the timers of `ids` from their own state entries (instances moved in from
    /// another group: due times as the source had them, overdue ones at once).
    pub fn arm_at_entry(&self, engine: &mut Engine, ids: &[String]) {
        for id in ids {
            if let Some(offset) = engine.entered_offset(id) {
                self.arm_after(engine, std::slice::from_ref(id), offset);
            }
        }
    }

    /// Entries in the queue, live or cancelled (INFO).
    pub fn queued(&self) -> usize {
        self.queue.borrow().len()
    }

    pub fn lateness(&self) -> Histogram {
        *self.lateness.borrow()
    }

    /// Ends `run` (shard shutdown).
    pub fn stop(&self) {
        self.stopped.set(true);
        self.wake.notify();
    }

    /// The firing task: sleeps until the earliest deadline (or a wake-up), fires what is due
    /// in batches of `FIRES_PER_BATCH`, yields between batches.
    pub async fn run(shard: Rc<Shard>) {
        let timers = &shard.timers;
        while !timers.stopped.get() {
            if !timers.fires_timers.get() || timers.paused.get() {
                // A replica: until promoted or stopped; paused: until resumed or stopped.
                timers.wake.wait().await;
                continue;
            }
            let now = now_ms();
            let next = timers.queue.borrow().next_due();
            match next {
                Some(due) if due <= now => {
                    fire_batch(&shard, now);
                    futures_lite::future::yield_now().await;
                }
                _ => {
                    let until = next.unwrap_or(u64::MAX);
                    timers.sleeping_until.set(until);
                    let wait = Duration::from_millis((until - now).min(60_000));
                    futures_lite::future::or(glommio::timer::sleep(wait), timers.wake.wait()).await;
                    timers.sleeping_until.set(u64::MAX);
                }
            }
        }
    }
}

impl Shard {
    /// `ShardCall::TimersResume`: the pause ends; answers `{"was_paused": bool}`.
    pub(super) fn resume_timers(&self) -> super::runtime::Outcome {
        let was_paused = self.timers.resume();
        let body = serde_json::json!({ "was_paused": was_paused });
        (
            Ok(super::message::ReplyBody::Value(body)),
            super::runtime::Needs::NOTHING,
        )
    }
}

/// Fires up to `FIRES_PER_BATCH` timers due at `now`.
fn fire_batch(shard: &Shard, now: u64) {
    let timers = &shard.timers;
    for _ in 0..FIRES_PER_BATCH {
        let Some((due, generation, id)) = timers.queue.borrow_mut().pop_due(now) else {
            break;
        };
        // A slot frozen by a move fires nothing during the freeze (docs/cluster.md).
        if shard.frozen.covers(shards::routing::slot_of(&id)).is_some() {
            let retry = now_ms() + FROZEN_RETRY_MS;
            timers.queue.borrow_mut().push(retry, generation, &id);
            continue;
        }
        let fire = shard
            .engine
            .borrow()
            .decide_timer(&id, generation, now_ms());
        match fire {
            Fire::Stale => continue,
            Fire::Refused(rejection) => {
                log::debug!("timer of `{id}` refused: {}", rejection.message);
            }
            Fire::Write(entry) => {
                if let Err(rejection) = shard.log_and_apply(entry) {
                    // A full disk is logged once by the log itself; the timer just waits.
                    if rejection.code == ErrorCode::StorageFull {
                        log::debug!("timer of `{id}` waits for space: {}", rejection.message);
                    } else {
                        log::error!("timer of `{id}` not logged: {}", rejection.message);
                    }
                    let retry = now_ms() + RETRY_AFTER_LOG_FAILURE_MS;
                    timers.queue.borrow_mut().push(retry, generation, &id);
                    continue;
                }
            }
        }
        let late_ms = now_ms().saturating_sub(due);
        timers
            .lateness
            .borrow_mut()
            .observe(late_ms as f64 / 1000.0);
        shard.engine.borrow_mut().spend_timer(&id, generation);
    }
    let engine = shard.engine.borrow();
    let armed = engine.timers_armed();
    timers
        .queue
        .borrow_mut()
        .compact(armed, |(_, generation, id)| {
            engine.timer_generation(id) == Some(*generation)
        });
}
