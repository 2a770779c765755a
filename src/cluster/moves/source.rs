//! The source group's primary runs a move (docs/cluster.md, "Moving slots", steps 2-6): copy
//! the slots' instances to the target's primary, catch up on what changed since (read from
//! this member's own log after the cut), freeze, ship the rest and the end marker, switch in
//! one etcd transaction, or abort. A move is run only by the primary of the term it began
//! in: a move begun in an earlier term aborts (`source_failover`).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shards::wal::LogPin;

use super::super::admin::{self, MoveAnswer, MoveAsk};
use super::super::map::Migration;
use super::super::Cluster;
use super::end::{collect_ids, refusal};
use super::etcd::{Figures, Switched};
use super::link::Link;
use crate::control::replication::follower::Settings;
use crate::mesh::router::Router;
use crate::shard::moves::{MoveCall, MoveReply};
use crate::shard::{ReplyBody, ShardCall};

/// Ids whose images one shard call gathers.
const IDS_PER_CALL: usize = 256;
/// Log records read per call while catching up.
const RECORDS_PER_READ: usize = 4096;
/// Bytes of log read per call while catching up.
const BYTES_PER_READ: usize = 4 << 20;
/// How long a chunk of images may take to be answered (the target logs and syncs it).
const CHUNK_ANSWER: Duration = Duration::from_secs(10);
/// How often a wait on the target looks at both groups' terms.
const TERMS_EVERY: Duration = Duration::from_millis(100);
/// Times a broken link to the target is opened again within one move.
const RELINKS: u32 = 3;
/// How long the source waits for its copy to show the switch before it lifts the freeze
/// anyway (the front answers `MOVED` once it does).
const SWITCH_SHOWN_WAIT: Duration = Duration::from_secs(2);

pub use super::end::{finish, Reason};

/// What one move needs on the source.
pub struct Mover {
    pub router: Rc<Router>,
    pub cluster: Arc<Cluster>,
    pub template: Settings,
    /// `network.max_frame_bytes`: a chunk of images stays well under it.
    pub frame_bytes: usize,
}

/// One move in progress.
struct Run<'a> {
    mover: &'a Mover,
    m: &'a Migration,
    move_id: u64,
    link: Option<Link>,
    /// Per shard: the log offset read up to, and the pin keeping the rest.
    read_to: Vec<u64>,
    _pins: Vec<LogPin>,
    figures: Figures,
    /// Bytes shipped, for `move_bytes_per_sec`.
    sent: u64,
    started: Instant,
}

/// Runs move `m` to its end: switched (the new map epoch) or aborted (why).
pub async fn drive(mover: &Mover, m: &Migration) -> (Result<u64, Reason>, Figures) {
    let Ok(move_id) = u64::from_str_radix(&m.id, 16) else {
        return (Err("map_changed"), Figures::default());
    };
    let mut run = Run {
        mover,
        m,
        move_id,
        link: None,
        read_to: Vec::new(),
        _pins: Vec::new(),
        figures: Figures::default(),
        sent: 0,
        started: Instant::now(),
    };
    let outcome = run.go().await;
    if outcome.is_err() {
        run.freeze(false).await; // lift whatever freeze an attempt left
        run.tell_aborted().await;
    }
    (outcome, run.figures)
}

impl Run<'_> {
    async fn go(&mut self) -> Result<u64, Reason> {
        self.still_mine()?;
        self.begin().await?;
        self.copy().await?;
        self.catch_up().await?;
        let cfg = &self.mover.cluster.moves;
        for _ in 0..cfg.move_attempts.max(1) {
            self.still_mine()?;
            self.figures.attempts += 1;
            if let Some(epoch) = self.attempt().await? {
                return Ok(epoch);
            }
            // Abandoned: the slots stay unfrozen at least one freeze's time, catching up.
            glommio::timer::sleep(Duration::from_millis(cfg.move_freeze_max_ms)).await;
            self.catch_up().await?;
        }
        Err("no_convergence")
    }

    /// The move is still running and this member still the primary of the term it began
    /// in; the target still has the primary it had.
    fn still_mine(&self) -> Result<(), Reason> {
        still_mine(&self.mover.cluster, self.m)
    }

    /// The target's primary address, by the copy.
    fn target_addr(&self) -> Result<String, Reason> {
        let copy = self.mover.cluster.view.get();
        (copy.groups.get(&self.m.to))
            .and_then(|g| g.primary.as_ref())
            .filter(|p| p.create_rev == self.m.to_rev)
            .map(|p| p.addr.clone())
            .ok_or("target_failover")
    }

    /// Sends one request to the target, opening the link (again) as needed: a broken link
    /// resumes with `begin` and the request, as long as neither group's term changed.
    async fn send(&mut self, params: Value, within: Duration) -> Result<Value, Reason> {
        let mut tries = 0;
        loop {
            self.still_mine()?;
            if self.link.is_none() {
                let addr = self.target_addr()?;
                let mut link = match Link::open(&self.mover.template, &addr).await {
                    Ok(l) => l,
                    Err(e) => {
                        log::warn!("cluster: move {}: cannot reach {addr}: {e}", self.m.id);
                        tries += 1;
                        if tries > RELINKS {
                            return Err("target_refused");
                        }
                        glommio::timer::sleep(Duration::from_millis(200 * u64::from(tries))).await;
                        continue;
                    }
                };
                if params["step"] != "begin" {
                    let begin = self.begin_params().await?;
                    match link.import(begin, CHUNK_ANSWER).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Err(refusal(&e)),
                        Err(_) => {
                            tries += 1;
                            continue;
                        }
                    }
                }
                self.link = Some(link);
            }
            let Some(link) = self.link.as_mut() else {
                continue;
            };
            // Raced with the terms: a failover of either group ends the wait at once.
            let (cluster, m) = (&self.mover.cluster, self.m);
            let terms = async {
                loop {
                    glommio::timer::sleep(TERMS_EVERY).await;
                    still_mine(cluster, m)?;
                }
            };
            let answer = futures_lite::future::or(
                async { Ok::<_, Reason>(link.import(params.clone(), within).await) },
                terms,
            );
            match answer.await? {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => return Err(refusal(&e)),
                Err(e) => {
                    log::warn!(
                        "cluster: move {}: link to {} broke: {e}",
                        self.m.id,
                        link.addr
                    );
                    self.link = None;
                    tries += 1;
                    if tries > RELINKS {
                        return Err("target_refused");
                    }
                }
            }
        }
    }

    async fn begin_params(&self) -> Result<Value, Reason> {
        let definitions =
            (super::super::define::held(&self.mover.router).await).map_err(|_| "target_refused")?;
        Ok(self.params("begin", json!({"version": 1, "definitions": definitions})))
    }

    fn params(&self, step: &str, extra: Value) -> Value {
        let mut p = json!({"move": self.m.id, "step": step, "slots": [self.m.lo, self.m.hi],
                           "from": self.m.from});
        if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), extra) {
            p.extend(extra);
        }
        p
    }

    /// Step 2's start: the definitions to the target, then on every shard the cut.
    async fn begin(&mut self) -> Result<(), Reason> {
        let begin = self.begin_params().await?;
        self.send(begin, CHUNK_ANSWER).await?;
        Ok(())
    }

    /// Step 2: every live instance of the slots as of each shard's cut.
    async fn copy(&mut self) -> Result<(), Reason> {
        let router = self.mover.router.clone();
        for shard in 0..router.shard_count() {
            // Pinned before the cut (at or below it), so nothing after the cut is compacted.
            let pin = match router.call(shard, ShardCall::LogPosition).await {
                Ok(ReplyBody::Position { handle, head, .. }) => handle.pin(head),
                _ => return Err("map_changed"),
            };
            let (lo, hi) = (self.m.lo, self.m.hi);
            let (ids, head) = match router.call(shard, moves(MoveCall::Begin { lo, hi })).await {
                Ok(ReplyBody::Move(MoveReply::Begun { ids, head })) => (ids, head),
                _ => return Err("map_changed"),
            };
            self._pins.push(pin);
            self.read_to.push(head);
            self.figures.instances += ids.len() as u64;
            self.ship(shard, ids).await?;
        }
        Ok(())
    }

    /// Ships the images of `ids` (on `shard`) in chunks under the frame limit.
    async fn ship(&mut self, shard: u32, ids: Vec<String>) -> Result<(), Reason> {
        let budget = (self.mover.frame_bytes / 4).max(4096);
        let mut chunk: Vec<Value> = Vec::new();
        let mut bytes = 0;
        for part in ids.chunks(IDS_PER_CALL) {
            let call = moves(MoveCall::Images { ids: part.to_vec() });
            let images = match self.mover.router.call(shard, call).await {
                Ok(ReplyBody::Move(MoveReply::Images(images))) => images,
                _ => return Err("map_changed"),
            };
            for (id, image) in images {
                let image: Value = match image {
                    Some(text) => serde_json::from_str(&text).map_err(|_| "target_refused")?,
                    None => Value::Null,
                };
                let size = id.len() + image.to_string().len() + 8;
                if bytes + size > budget && !chunk.is_empty() {
                    self.flush(std::mem::take(&mut chunk), bytes).await?;
                    bytes = 0;
                }
                bytes += size;
                chunk.push(json!([id, image]));
            }
        }
        if !chunk.is_empty() {
            self.flush(chunk, bytes).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, images: Vec<Value>, bytes: usize) -> Result<(), Reason> {
        self.figures.entries += images.len() as u64;
        let n = images.len() as u64;
        (self.mover.cluster.counters.entries_out)
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let params = self.params("images", json!({ "images": images }));
        self.send(params, CHUNK_ANSWER).await?;
        self.sent += bytes as u64;
        self.figures.bytes = self.sent;
        self.throttle().await;
        Ok(())
    }

    /// Holds the stream to `move_bytes_per_sec` (0: unlimited).
    async fn throttle(&self) {
        let rate = self.mover.cluster.moves.move_bytes_per_sec;
        if rate == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.sent as f64 / rate as f64);
        let elapsed = self.started.elapsed();
        if due > elapsed {
            glommio::timer::sleep(due - elapsed).await;
        }
    }

    /// The ids of the slots' instances changed in each shard's log since it was last read (up
    /// to `upto[shard]`, or its durable head), per shard.
    async fn changed(&mut self, upto: Option<&[u64]>) -> Result<Vec<BTreeSet<String>>, Reason> {
        let mut out = Vec::new();
        for shard in 0..self.mover.router.shard_count() {
            let handle = match self.mover.router.call(shard, ShardCall::LogPosition).await {
                Ok(ReplyBody::Position { handle, .. }) => handle,
                _ => return Err("map_changed"),
            };
            let s = shard as usize;
            let end = upto.map_or(handle.durable(), |u| u[s]);
            let mut ids = BTreeSet::new();
            let mut reader = handle.reader();
            while self.read_to[s] < end {
                let records = reader
                    .read_from(self.read_to[s] + 1, RECORDS_PER_READ, BYTES_PER_READ)
                    .await
                    .map_err(|e| {
                        log::warn!(
                            "cluster: move {}: reading shard {shard}'s log: {e}",
                            self.m.id
                        );
                        "no_convergence"
                    })?;
                let Some(last) = records.last().map(|r| r.0) else {
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                for (_, bytes) in &records {
                    collect_ids(bytes, self.m.lo, self.m.hi, &mut ids);
                }
                self.read_to[s] = last;
            }
            out.push(ids);
        }
        Ok(out)
    }

    /// Ships what changed until one round's changes are at most `move_freeze_lag_entries`.
    async fn catch_up(&mut self) -> Result<(), Reason> {
        let cfg = &self.mover.cluster.moves;
        let deadline = Instant::now() + Duration::from_millis(cfg.move_catchup_timeout_ms);
        let threshold = cfg.move_freeze_lag_entries as usize;
        loop {
            self.still_mine()?;
            let changed = self.changed(None).await?;
            let n: usize = changed.iter().map(BTreeSet::len).sum();
            for (shard, ids) in changed.into_iter().enumerate() {
                self.ship(shard as u32, ids.into_iter().collect()).await?;
            }
            if n <= threshold {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err("no_convergence");
            }
        }
    }

    /// Freezes (or lifts the freeze of) the slots on every shard; the heads once durable.
    async fn freeze(&mut self, on: bool) -> Vec<u64> {
        let mut heads = Vec::new();
        for shard in 0..self.mover.router.shard_count() {
            let call = moves(MoveCall::Freeze {
                move_id: self.move_id,
                lo: self.m.lo,
                hi: self.m.hi,
                on,
            });
            match self.mover.router.call(shard, call).await {
                Ok(ReplyBody::Move(MoveReply::Head(h))) => heads.push(h),
                _ => heads.push(0),
            }
        }
        heads
    }

    /// Steps 4-5 once: freeze, ship the rest, the end marker, the switch. `None`: the attempt
    /// was abandoned (the target did not acknowledge within `move_freeze_max_ms`).
    async fn attempt(&mut self) -> Result<Option<u64>, Reason> {
        let max = Duration::from_millis(self.mover.cluster.moves.move_freeze_max_ms);
        let frozen = Instant::now();
        let heads = self.freeze(true).await;
        let shipped = async {
            let changed = self.changed(Some(&heads)).await?;
            for (shard, ids) in changed.into_iter().enumerate() {
                self.ship(shard as u32, ids.into_iter().collect()).await?;
            }
            let end = self.params("end", json!({}));
            self.send(end, max).await
        };
        let acked = glommio::timer::timeout(max, async { Ok(shipped.await) }).await;
        let elapsed = frozen.elapsed();
        self.mover.cluster.counters.observe_freeze(elapsed);
        match acked {
            Err(_) => {
                self.link = None; // an answer may still come on it: start clean
                self.freeze(false).await;
                log::info!(
                    "cluster: move {}: freeze attempt {} abandoned after {} ms",
                    self.m.id,
                    self.figures.attempts,
                    elapsed.as_millis()
                );
                return Ok(None);
            }
            Ok(Err(reason)) => return Err(reason),
            Ok(Ok(_)) => {}
        }
        self.figures.freeze_ms = elapsed.as_millis() as u64;
        let ask = MoveAsk::Switch {
            id: self.m.id.clone(),
            figures: self.figures.clone(),
        };
        match admin::move_txn(&self.mover.cluster, ask).await {
            Ok(MoveAnswer::Switch(Switched::Done { map_epoch })) => {
                self.switched(map_epoch).await;
                Ok(Some(map_epoch))
            }
            Ok(MoveAnswer::Switch(Switched::Refused { reason })) => Err(reason),
            Ok(MoveAnswer::Record(_)) | Err(_) => Err("map_changed"),
        }
    }

    /// After the switch: the target told (it also learns from its copy), the freeze held until
    /// this member's copy shows the new owner, so the front answers `MOVED` from then on.
    async fn switched(&mut self, map_epoch: u64) {
        let told = self.params("switched", json!({ "map_epoch": map_epoch }));
        if let Some(link) = self.link.as_mut() {
            let _ = link.import(told, Duration::from_secs(5)).await;
        }
        // Each shard logs the slots moved out: its counts leave them out from then on, and
        // every subscription that covered them hears it after its last event of them, here
        // and on the followers (as the entry is published, or replayed).
        for shard in 0..self.mover.router.shard_count() {
            let moved = crate::shard::subs::SlotsMoved {
                lo: self.m.lo,
                hi: self.m.hi,
                to: self.m.to.clone(),
                map_epoch,
            };
            if let Err(e) = (self.mover.router)
                .call(shard, moves(MoveCall::Moved(moved)))
                .await
            {
                log::warn!(
                    "cluster: move {}: logging slots moved out on shard {shard}: {}",
                    self.m.id,
                    e.message
                );
            }
        }
        let shown = Instant::now() + SWITCH_SHOWN_WAIT;
        while self.mover.cluster.view.get().map_epoch() < map_epoch && Instant::now() < shown {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        self.freeze(false).await;
    }

    /// Tells the target the move aborted (best effort: its copy tells it too).
    async fn tell_aborted(&mut self) {
        let told = self.params("aborted", json!({}));
        if let Some(link) = self.link.as_mut() {
            let _ = link.import(told, Duration::from_secs(5)).await;
        }
    }
}

/// The move is still running and this member still the primary of the term it began
/// in; the target still has the primary it had.
fn still_mine(cluster: &Cluster, m: &Migration) -> Result<(), Reason> {
    let copy = cluster.view.get();
    let listed = copy
        .map
        .as_ref()
        .is_some_and(|map| map.migrations.iter().any(|x| x.id == m.id));
    if !listed {
        return Err("cancelled");
    }
    let term = |g: &str| copy.groups.get(g).and_then(|v| v.primary.as_ref());
    match term(&m.from) {
        Some(p) if p.create_rev == m.from_rev && p.node_id == cluster.node_id => {}
        _ => return Err("source_failover"),
    }
    match term(&m.to) {
        Some(p) if p.create_rev == m.to_rev => Ok(()),
        _ => Err("target_failover"),
    }
}

fn moves(call: MoveCall) -> ShardCall {
    ShardCall::Move(call)
}
