//! The shard executor's main loop: one task per client channel (each front executor and the
//! control executor), an outbox per channel whose pump releases replies once their log offset
//! is durable (in sync mode a client write's, once replicas acknowledged it too), in arrival
//! order (`outbox.rs`, `pump.rs`), and the dispatch of each call: writes in
//! `write.rs` (APPLY_EVENT's fast path `event.rs`, BATCH `batch.rs`), machine definitions in
//! `machines.rs`, instance reads and INFO here.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use glommio::channels::shared_channel::{ConnectedReceiver, SharedReceiver, SharedSender};
use serde_json::{json, Value};
use shards::engine::Engine;
use shards::wal::WalConfig;
use shards::{ErrorCode, Rejection};

use super::durability::Durability;
use super::message::{
    Query, ReplyBody, ShardCall, ShardMessage, ShardOp, ShardRequest, ShardResponse,
};
use super::os_yield::OsYield;
use super::replica::ReplState;
use super::snapshot::Snapshots;
use super::subs::{self, Registry};
use super::sync::{self as sync_mode, SyncSetup, SyncState};
use super::timers::Timers;
use crate::metrics::{LogStats, ShardStats};
use crate::ops;
use crate::protocol::{routes, Op};

pub(super) use super::outbox::{Needs, Outbox};

/// One client's channel pair, created in `main` and moved into the shard executor.
pub type ClientChannels = (SharedReceiver<ShardRequest>, SharedSender<ShardMessage>);

pub struct ShardSetup {
    pub index: u32,
    pub clients: Vec<ClientChannels>,
    pub wal: WalConfig,
    /// Entries between snapshots (`storage.snapshot_every_entries`).
    pub snapshot_every: u64,
    /// Fire durable timers (primary or standalone; a replica will set false).
    pub fires_timers: bool,
    /// The data dir is marked `timers.paused` (`crate::timers_pause`): timers are armed and
    /// queued but none fires until `ShardCall::TimersResume`.
    pub timers_paused: bool,
    /// Sync replication (a primary in `replication.mode = "sync"`): write replies wait for
    /// replica acknowledgement (`shard/sync.rs`). None: they wait for the local log only.
    pub sync: Option<SyncSetup>,
    /// The member's role in force now (the front's gate reads the same), so the shard refuses
    /// a client write on a follower by itself.
    pub member: std::sync::Arc<crate::member::ReplState>,
    /// Cluster mode: the member's group, which every push names with its instance's slot
    /// (docs/cluster.md, "Subscriptions"). None otherwise.
    pub cluster_group: Option<String>,
    pub ready: std::sync::mpsc::Sender<Result<(), String>>,
}

/// What one shard owns.
pub struct Shard {
    pub index: u32,
    pub(super) engine: RefCell<Engine>,
    pub(super) log: Durability,
    pub(super) snapshots: Snapshots,
    /// A snapshot being received from the primary (`shard/install.rs`).
    pub(super) incoming: RefCell<Option<super::install::Incoming>>,
    /// Replies waiting in this shard's outboxes (a metrics gauge).
    pub(super) queued: Cell<u64>,
    pub(super) subs: Registry,
    pub(super) timers: Timers,
    pub(super) repl: ReplState,
    pub(super) member: std::sync::Arc<crate::member::ReplState>,
    pub(super) sync: Option<SyncState>,
    /// Failover is on (docs/ha.md): client write replies are checked against the lease when
    /// released. Fixed at start-up.
    pub(super) ha: bool,
    /// The APPLY_EVENT record being decided, reused across events (`shard/event.rs`).
    pub(super) record_buf: RefCell<Vec<u8>>,
    /// The atomic BATCH record being decided, kept between batches like `record_buf`.
    pub(super) batch_record: RefCell<shards::engine::BatchRecord>,
    /// Offers the core to the log's completion worker between requests (`os_yield`).
    os_yield: OsYield,
    /// Where a write's result JSON is built before its exact-size copy (`result_bytes`).
    pub(super) result_buf: RefCell<Vec<u8>>,
    /// A backup's barrier (`pause.rs`): requests wait while it holds.
    pub(super) pause: super::pause::Pause,
    /// Slots frozen by a move this shard's group is the source of (`moves.rs`).
    pub(super) frozen: super::moves::Frozen,
}

/// Runs a shard until every client has hung up.
pub async fn run(setup: ShardSetup) {
    let mut engine = Engine::new();
    let log = match Durability::open(setup.wal, &mut engine).await {
        Ok(log) => log,
        Err(e) => {
            let _ = setup.ready.send(Err(format!("shard {}: {e}", setup.index)));
            return;
        }
    };
    let head = log.head();
    let shard = Rc::new(Shard {
        index: setup.index,
        engine: RefCell::new(engine),
        log,
        snapshots: Snapshots::new(setup.snapshot_every, head),
        incoming: RefCell::new(None),
        queued: Cell::new(0),
        // Pushes wait for sync acknowledgement only with failover on in sync mode.
        subs: Registry::start(
            setup.member.ha() && setup.sync.is_some(),
            setup.cluster_group.clone(),
        ),
        timers: Timers::new(setup.fires_timers, setup.timers_paused),
        repl: ReplState::default(),
        ha: setup.member.ha(),
        member: setup.member,
        sync: setup.sync.map(SyncState::new),
        record_buf: RefCell::new(Vec::new()),
        batch_record: RefCell::default(),
        os_yield: OsYield::default(),
        result_buf: RefCell::new(Vec::with_capacity(RESULT_BYTES_HINT)),
        pause: super::pause::Pause::default(),
        frozen: super::moves::Frozen::default(),
    });
    shard.timers.rebuild(&mut shard.engine.borrow_mut());
    let timer_task = glommio::spawn_local(Timers::run(shard.clone()));
    // The receiver may be gone if start-up already failed elsewhere; nothing to do then.
    let _ = setup.ready.send(Ok(()));
    let tasks: Vec<_> = setup
        .clients
        .into_iter()
        .enumerate()
        .map(|(i, (rx, tx))| glommio::spawn_local(serve_client(shard.clone(), i, rx, tx)))
        .collect();
    for t in tasks {
        t.await;
    }
    shard.timers.stop();
    timer_task.await;
    shard.subs.close().await;
    shard.log.close().await;
    log::debug!("shard {} stopped", shard.index);
}

async fn serve_client(
    shard: Rc<Shard>,
    client: usize,
    rx: SharedReceiver<ShardRequest>,
    tx: SharedSender<ShardMessage>,
) {
    // Connect both ends concurrently: sequential connects can deadlock (docs/glommio.md pitfall 6).
    let (rx, tx) = futures_lite::future::zip(rx.connect(), tx.connect()).await;
    let outbox = Rc::new(Outbox::default());
    shard.subs.attach(client, outbox.clone());
    // One pump per outbox; its release rule follows the replication mode (`pump.rs`).
    let pump = glommio::spawn_local(outbox.clone().run(shard.clone(), tx));
    receive(&shard, client, &rx, &outbox).await;
    shard.subs.detach(client);
    outbox.close();
    pump.await;
}

async fn receive(
    shard: &Rc<Shard>,
    client: usize,
    rx: &ConnectedReceiver<ShardRequest>,
    outbox: &Rc<Outbox>,
) {
    let mut since_yield = 0;
    while let Some(req) = rx.recv().await {
        shard.os_yield.tick();
        since_yield += 1;
        if since_yield >= YIELD_EVERY_REQUESTS {
            since_yield = 0;
            futures_lite::future::yield_now().await;
        }
        // Every request gets exactly one reply through the outbox (some later: replay reads).
        shard.queued.set(shard.queued.get() + 1);
        let Some(((result, needs), gate)) = shard.handle(client, req.token, req.call, outbox).await
        else {
            continue; // answered through the outbox already (subscriptions)
        };
        let resp = ShardResponse {
            token: req.token,
            result,
        };
        outbox.push(needs, resp, gate);
        shard.maybe_snapshot();
    }
}

/// A shard call's answer and what it waits for before it leaves the outbox.
pub(super) type Outcome = (Result<ReplyBody, Rejection>, Needs);

impl Shard {
    /// Serves one call of client `client`: every kind of shard call, in one exhaustive match.
    /// Returns the reply, the offset that must be durable before it leaves, and, for a client
    /// write on a shard that gates them (sync mode, or failover), the time it was queued
    /// (`sync::Gate`: it then waits for replicas too, and is checked against the lease); None
    /// when the call answers through the outbox itself (subscriptions, replay reads).
    pub(super) async fn handle(
        self: &Rc<Self>,
        client: usize,
        token: u32,
        call: ShardCall,
        outbox: &Rc<Outbox>,
    ) -> Option<(Outcome, Option<Instant>)> {
        // A backup's barrier: nothing but subscriptions executes while it holds (`pause.rs`).
        if !call.answers_through_outbox() {
            self.pause.wait().await;
        }
        let gate = sync_mode::Gate::before(self, &call);
        let outcome = match call {
            ShardCall::Subscribe { sub, filter } => {
                subs::subscribe(self, (client, token), sub, filter, outbox);
                return None;
            }
            ShardCall::Unsubscribe { sub } => {
                subs::unsubscribe(self, (client, token), sub, outbox);
                return None;
            }
            ShardCall::ReadEvents {
                filter,
                from,
                to,
                max,
            } => {
                subs::read_events_later(self, token, (filter, from, to, max), outbox);
                return None;
            }
            ShardCall::BackupPause { release, timeout } => self.backup_pause(release, timeout),
            // Replication rewinds close and reopen the log: this client's requests wait.
            ShardCall::Truncate { after } => self.truncate(after).await,
            ShardCall::InstallSnapshot(chunk) => self.install_chunk(chunk).await,
            ShardCall::Op { op, params } => self.client_op(op, params.as_deref()),
            ShardCall::Versioned {
                op,
                params,
                if_match,
            } => self.client_versioned(op, params.as_deref(), if_match),
            ShardCall::Batch(ops) => self.client_batch(&ops),
            ShardCall::InstallMachines(entries) => self.install_machines(entries),
            ShardCall::MachineEntries => (
                Ok(ReplyBody::Entries(self.engine.borrow().machine_entries())),
                Needs::NOTHING,
            ),
            ShardCall::Query(q) => self.query(q).await,
            ShardCall::Bulk(part) => {
                self.bulk_later(token, part, outbox, gate);
                return None;
            }
            ShardCall::Info => (Ok(ReplyBody::Value(self.info())), Needs::NOTHING),
            ShardCall::Stats => (Ok(ReplyBody::Stats(Box::new(self.stats()))), Needs::NOTHING),
            ShardCall::LogPosition => (Ok(self.position()), Needs::NOTHING),
            ShardCall::ReplicaAppend {
                epoch,
                first,
                entries,
            } => self.replica_append(epoch, first, entries),
            ShardCall::BeginEpoch { epoch } => self.begin_epoch(epoch),
            ShardCall::Promote => self.promote(),
            ShardCall::Demote => self.demote(),
            ShardCall::TimersResume => self.resume_timers(),
            ShardCall::ReplicaAcked { through } => self.replica_acked(through),
            ShardCall::Move(step) => self.move_step(step),
        };
        let queued = gate.and_then(|g| g.after(self, &outcome));
        Some((outcome, queued))
    }

    /// An outbox sent (or failed) one reply.
    pub(super) fn reply_left(&self) {
        self.queued.set(self.queued.get().saturating_sub(1));
    }

    /// A query's page (docs/queries.md).
    async fn query(&self, q: Query) -> Outcome {
        match q {
            Query::List(q) => self.list_page(&q),
            Query::Find(q) => self.find_page(&q),
            Query::Scan(q) => self.scan(&q).await,
        }
    }

    /// One page of LIST_INSTANCES (ordered by id), once the log is durable to the head.
    fn list_page(&self, q: &crate::ops::instances::ListQuery) -> Outcome {
        let (machine, state, after) =
            (q.machine.as_deref(), q.state.as_deref(), q.after.as_deref());
        let engine = self.engine.borrow();
        let page = engine.list_instances(machine, state, after, q.has_timer, q.limit);
        (Ok(ReplyBody::Page(page)), Needs::durable(self.log.head()))
    }

    /// One page of FIND_INSTANCES (ordered by id), once the log is durable to the head.
    fn find_page(&self, q: &shards::engine::FindQuery) -> Outcome {
        let page = self.engine.borrow().find_instances(q);
        let needs = Needs::durable(self.log.head());
        (page.map(ReplyBody::Found), needs)
    }

    /// A client op, refused on a follower (`follower_refuses`).
    fn client_op(&self, op: ShardOp, params: Option<&[u8]>) -> Outcome {
        if let Some((_, rej)) = self.follower_refuses(std::iter::once(op.op())) {
            return (Err(rej), Needs::NOTHING);
        }
        if let ShardOp::Instance(i) = op {
            if let Some(rej) = self.moving_refuses(i.op(), params) {
                return (Err(rej), Needs::NOTHING);
            }
        }
        self.execute_op(op, params)
    }

    /// An instance op whose reply carries its version (HTTP), refused on a follower.
    fn client_versioned(
        &self,
        op: routes::Instance,
        params: Option<&[u8]>,
        if_match: Option<(u64, u64)>,
    ) -> Outcome {
        if let Some((_, rej)) = self.follower_refuses(std::iter::once(op.op())) {
            return (Err(rej), Needs::NOTHING);
        }
        if let Some(rej) = self.moving_refuses(op.op(), params) {
            return (Err(rej), Needs::NOTHING);
        }
        self.execute_versioned(op, params, if_match)
    }

    /// An atomic BATCH, refused on a follower if any op inside is (naming its index).
    fn client_batch(&self, ops: &crate::ops::batch::BatchOps) -> Outcome {
        if let Some((index, rej)) = self.follower_refuses(ops.iter().map(|i| i.op.op())) {
            return (Err(rej.with("index", index)), Needs::NOTHING);
        }
        // An atomic batch is one slot (cluster mode): its first op speaks for it.
        if let Some(item) = ops.iter().next() {
            let writes = ops
                .iter()
                .find(|i| i.op.op().facts().writes())
                .unwrap_or(item);
            if let Some(rej) = self.moving_refuses(writes.op.op(), ops.params(item)) {
                return (Err(rej), Needs::NOTHING);
            }
        }
        self.execute_batch(ops)
    }

    /// Defence in depth behind the front's gate (`member::gate`): on a follower, the
    /// first op the op table says a follower may not serve refuses the call.
    /// Returns the refused op's index and the refusal.
    pub(super) fn follower_refuses(
        &self,
        ops: impl Iterator<Item = Op>,
    ) -> Option<(usize, Rejection)> {
        let role = self.member.table_role();
        let (index, op) = ops
            .enumerate()
            .find(|(_, op)| op.facts().refused_on(role))?;
        Some((index, crate::member::gate::read_only(&self.member, op)))
    }

    fn execute_op(&self, op: ShardOp, params: Option<&[u8]>) -> Outcome {
        use routes::{Definitions as D, Instance as I};
        let head = Needs::durable(self.log.head());
        let result = match op {
            ShardOp::PutMachine => return self.put_machine(params),
            ShardOp::MachineStats => return (self.machine_stats(params), head),
            ShardOp::Definitions(D::GetMachine) => return (self.get_machine(params), head),
            ShardOp::Definitions(D::ListMachines) => return (self.list_machines(params), head),
            ShardOp::Instance(I::CreateInstance) => ops::instances::create_command(params),
            ShardOp::Instance(I::ApplyEvent) => {
                return match ops::events::apply_event_params(params) {
                    Ok(cmd) => self.write_event(&cmd),
                    Err(rej) => (Err(rej), Needs::NOTHING),
                }
            }
            ShardOp::Instance(I::DeleteInstance) => ops::instances::delete_command(params),
            ShardOp::Instance(I::GetInstance) => return self.get_instance(params),
            ShardOp::Instance(I::GetHistory) => return self.get_history(params),
        };
        match result {
            Ok(cmd) => self.write(&cmd),
            Err(rej) => (Err(rej), Needs::NOTHING),
        }
    }

    /// An instance op whose success carries the instance's version: `needs` is the offset of
    /// the instance's last entry on every success (a read's, a write's own, a replay's), so
    /// the version is `(epoch_of(needs), needs)`.
    fn execute_versioned(
        &self,
        op: routes::Instance,
        params: Option<&[u8]>,
        if_match: Option<(u64, u64)>,
    ) -> Outcome {
        if let Some((epoch, offset)) = if_match {
            let actual = self.engine.borrow().epoch_of(offset);
            if actual != epoch {
                let msg = format!("If-Match names epoch {epoch} at offset {offset}; that entry is of epoch {actual}");
                let rej = Rejection::new(ErrorCode::Conflict, msg)
                    .with("expected_epoch", epoch)
                    .with("actual_epoch", actual);
                return (Err(rej), Needs::NOTHING);
            }
        }
        let (result, needs) = self.execute_op(ShardOp::Instance(op), params);
        let result = result.map(|body| match body {
            ReplyBody::Json(result) => ReplyBody::Versioned {
                result,
                epoch: self.engine.borrow().epoch_of(needs.offset()),
                offset: needs.offset(),
            },
            other => other,
        });
        (result, needs)
    }

    fn get_instance(&self, params: Option<&[u8]>) -> Outcome {
        let id = match ops::instances::id_param(params) {
            Ok(id) => id,
            Err(rej) => return (Err(rej), Needs::NOTHING),
        };
        let engine = self.engine.borrow();
        let mut out = Vec::with_capacity(RESULT_BYTES_HINT);
        match engine.write_instance_json(&id, &mut out) {
            Some(wal_offset) => (Ok(ReplyBody::Json(out)), Needs::durable(wal_offset)),
            // "Not found" may stem from a delete that is not durable yet: wait for the head.
            _ => (Err(not_found(&id)), Needs::durable(self.log.head())),
        }
    }

    fn get_history(&self, params: Option<&[u8]>) -> Outcome {
        let (id, from, limit) = match ops::events::history_query(params) {
            Ok(q) => q,
            Err(rej) => return (Err(rej), Needs::NOTHING),
        };
        let engine = self.engine.borrow();
        let at = engine
            .instance(&id)
            .map_or(self.log.head(), |i| i.wal_offset);
        (
            engine
                .history(&id, from, limit)
                .map(|v| ReplyBody::Json(to_json(&v))),
            Needs::durable(at),
        )
    }

    fn info(&self) -> Value {
        let engine = self.engine.borrow();
        json!({
            "shard": self.index,
            "instances": engine.instance_count(),
            "machines": engine.machine_count(),
            "wal_offset": self.log.head(),
            "wal_oldest_offset": self.log.wal().oldest_offset(),
            "wal_durable_offset": self.log.durable(),
            "subscriptions": self.subs.count(),
            "pushes_pending": self.subs.pending_pushes(),
            "pushes_held": self.subs.held.get(),
            "timers_pending": engine.timers_armed(),
            "timers_queued": self.timers.queued(),
            "timers_paused": self.timers.paused(),
        })
    }
}

impl Shard {
    fn stats(&self) -> ShardStats {
        let engine = self.engine.borrow();
        ShardStats {
            shard: self.index,
            engine: engine.stats().clone(),
            instances: engine.instance_count() as u64,
            machines: engine.machine_count() as u64,
            queue_depth: self.queued.get(),
            timers_pending: engine.timers_armed(),
            index_entries: engine.index_sizes(),
            timer_lateness: crate::metrics::shard::snapshot(&self.timers.lateness()),
            sync_timeouts: self.sync.as_ref().map_or(0, SyncState::timeouts),
            log: LogStats::from(&self.log.stats()),
            diverged: engine.divergence().cloned(),
            snapshots: self.snapshot_figures(),
        }
    }
}

/// Requests a client task runs before it lets the shard's other tasks in (the log committer
/// above all): without it a burst is decided whole before its first byte goes to disk.
const YIELD_EVERY_REQUESTS: usize = 32;

/// Initial capacity of a write's result buffer: an APPLY_EVENT result with a small context.
const RESULT_BYTES_HINT: usize = 256;

pub(super) fn to_json(v: &Value) -> Vec<u8> {
    // Serialising a Value into a Vec cannot fail: no I/O and every map key is a string.
    serde_json::to_vec(v).unwrap_or_default()
}

pub(super) fn internal(msg: &str) -> Rejection {
    Rejection::new(ErrorCode::InternalError, msg)
}

pub(super) fn not_found(id: &str) -> Rejection {
    Rejection::new(
        ErrorCode::InstanceNotFound,
        format!("no instance with id {id:?}"),
    )
    .with("id", id)
}
