//! Subscriptions, shard side: which client subscriptions want which events, the push of every
//! applied event through the subscriber's outbox (so it leaves only once durable, in log
//! order), and replay reads from the log (`replay.rs`; in HA sync mode a primary's replay
//! delivers only sync-acknowledged entries, as its pushes do).
//!
//! Owns the registry of live subscriptions (per client channel: front-local subscription id and
//! filter) and the replay task queue. Filters are evaluated here, so unwanted events never cross
//! cores. It never touches engine state: the runtime hands it each applied entry, and replay
//! decodes entries from the log alone (an Apply entry names its machine and version).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use glommio::sync::Gate;
use glommio::{Latency, Shares, TaskQueueHandle};
use serde_json::json;
use shards::engine::{Engine, Entry};
use shards::{ErrorCode, Rejection};

use super::message::{ReplyBody, ShardMessage, ShardResponse};
use super::pushed::Pushed;
use super::replay::read_events;
pub use super::replay::trimmed;
use super::runtime::{Needs, Outbox, Shard};

/// Records scanned by one `ReadEvents` call at most: bounds the reply and the CPU time of one
/// replay step, so replay interleaves with writes.
pub const REPLAY_CHUNK_RECORDS_MAX: usize = 1024;
/// CPU shares of the replay task queue (the default queue, where writes run, has 1000): replay
/// reads get what writes leave.
const REPLAY_SHARES: usize = 100;

/// What a subscription wants. Empty lists mean "any". Sent from the front with `Subscribe` and
/// `ReadEvents`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// WATCH_INSTANCE: only this instance.
    pub instance_id: Option<String>,
    pub machines: Vec<String>,
    pub from_states: Vec<String>,
    pub to_states: Vec<String>,
    pub events: Vec<String>,
    /// Live pushes carry the context after the event (replayed ones cannot: the log does not
    /// hold historical contexts).
    pub include_context: bool,
}

/// One event on its way to the subscriptions `subs` of one client executor, which all get
/// the same `body`: the push's fields from `instance_id` to `payload` (and
/// `context`/`replayed`), as JSON object members without braces; the front adds `type`,
/// `subscription_id`, `shard`, `wal_offset` and `cursor` per subscription. One message per
/// (event, client, body), not per subscription: a thousand streams on one front cost the shard
/// one body and one channel message per event.
#[derive(Debug)]
pub struct PushMsg {
    pub subs: Vec<u64>,
    pub shard: u32,
    pub offset: u64,
    /// The epoch of the term that wrote the entry (the cursor carries it).
    pub epoch: u64,
    pub body: Vec<u8>,
    /// Whether it leaves only once the entry is sync-acknowledged (`push_hold.rs`).
    pub hold: Hold,
}

/// Whether a push waits for sync acknowledgement (failover on in sync mode, `push_hold.rs`),
/// and whose acknowledgement it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Leaves once durable (standalone, async, or failover off).
    No,
    /// An entry this member decided as primary: its own replicas' acknowledgement.
    Led,
    /// An entry replicated from the primary: the acknowledgement the primary reports in its
    /// heartbeats (`committed`).
    Followed,
}

/// Slots a switch moved away from this shard's group.
#[derive(Debug, Clone)]
pub struct SlotsMoved {
    pub lo: u16,
    pub hi: u16,
    pub to: String,
    pub map_epoch: u64,
}

impl SlotsMoved {
    /// The slots an `Entry::SlotsMovedOut` gave away; None for other entries.
    pub fn of(entry: &Entry) -> Option<SlotsMoved> {
        match entry {
            Entry::SlotsMovedOut {
                lo,
                hi,
                to,
                map_epoch,
                ..
            } => Some(SlotsMoved {
                lo: *lo,
                hi: *hi,
                to: to.clone(),
                map_epoch: *map_epoch,
            }),
            _ => None,
        }
    }

    /// Whether a subscription with `filter` covered the slots: a `WATCH_ALL` always, a
    /// `WATCH_INSTANCE` when its instance lies in them.
    pub fn covers(&self, filter: &Filter) -> bool {
        filter.instance_id.as_deref().is_none_or(|id| {
            let s = shards::routing::slot_of(id);
            self.lo <= s && s <= self.hi
        })
    }

    /// The push body (see `PushMsg`): the front adds `subscription_id`, `shard`, `wal_offset`
    /// and `cursor`. Live and replayed pushes are alike.
    pub fn body(&self) -> Vec<u8> {
        format!(
            r#""type":"slots_moved","slots":[{},{}],"to":{},"map_epoch":{}"#,
            self.lo,
            self.hi,
            json!(self.to),
            self.map_epoch
        )
        .into_bytes()
    }
}

/// A shard ends subscriptions of one client executor (`Table::ended` on the front).
#[derive(Debug)]
pub struct SubsEnded {
    pub subs: Vec<u64>,
    pub shard: u32,
    /// The shard's log was rewound to this `(epoch, offset)`: a subscription that went past it
    /// ends with `details.diverged`. `None`: its pushes could not be held for sync
    /// acknowledgement; it ends lagged after what it delivered.
    pub diverged_at: Option<(u64, u64)>,
}

/// Where one push is from, and whether it waits for sync acknowledgement.
struct Push {
    shard: u32,
    offset: u64,
    epoch: u64,
    hold: Hold,
}

/// The live subscriptions of one client channel (one front executor).
struct ClientSubs {
    outbox: Rc<Outbox>,
    subs: Vec<(u64, Filter)>,
}

/// Live subscriptions of every client of this shard, and the replay readers.
pub struct Registry {
    /// By client index (fixed at start-up); `None` once that client has hung up.
    clients: RefCell<Vec<Option<ClientSubs>>>,
    /// Registered subscriptions, all clients together.
    count: Cell<usize>,
    /// Push messages sitting in outboxes, waiting for durability or room on the channel (a
    /// gauge; one message serves every matching subscription of one client).
    /// Bound: entries not yet durable (bounded by the clients' in-flight requests) times the
    /// subscriptions they match; the outbox waits for channel room, which the front's pump
    /// frees without ever waiting for a subscriber.
    pending: Cell<u64>,
    replay_queue: TaskQueueHandle,
    readers: Gate,
    /// Pushes wait for sync acknowledgement (failover on, sync mode: `push_hold.rs`), both of
    /// entries this member decides and of entries it follows. Fixed at start-up.
    hold_local: bool,
    /// Push messages held for sync acknowledgement now (a gauge, INFO `pushes_held`).
    pub(super) held: Cell<u64>,
    /// Cluster mode: the member's group, named in every push with its slot. Fixed at start-up.
    pub(super) cluster_group: Option<String>,
}

impl Registry {
    /// Must run on the shard's executor (creates the replay task queue there). `hold_local`:
    /// see the field.
    pub fn start(hold_local: bool, cluster_group: Option<String>) -> Registry {
        let replay_queue = glommio::executor().create_task_queue(
            Shares::Static(REPLAY_SHARES),
            Latency::NotImportant,
            "replay",
        );
        Registry {
            clients: RefCell::new(Vec::new()),
            count: Cell::new(0),
            pending: Cell::new(0),
            replay_queue,
            readers: Gate::new(),
            hold_local,
            held: Cell::new(0),
            cluster_group,
        }
    }

    /// Client `client` connected; pushes for its subscriptions go to `outbox`.
    pub(super) fn attach(&self, client: usize, outbox: Rc<Outbox>) {
        let mut clients = self.clients.borrow_mut();
        if clients.len() <= client {
            clients.resize_with(client + 1, || None);
        }
        clients[client] = Some(ClientSubs {
            outbox,
            subs: Vec::new(),
        });
    }

    /// Client `client` hung up: its subscriptions end.
    pub fn detach(&self, client: usize) {
        let gone = self
            .clients
            .borrow_mut()
            .get_mut(client)
            .and_then(Option::take);
        if let Some(c) = gone {
            self.count.set(self.count.get() - c.subs.len());
        }
    }

    pub fn count(&self) -> usize {
        self.count.get()
    }

    /// Pushes wait for sync acknowledgement (`hold_local`); replay reads then wait too
    /// (`replay.rs`).
    pub(super) fn holds_local(&self) -> bool {
        self.hold_local
    }

    /// The outbox of every connected client.
    pub(super) fn outboxes(&self) -> Vec<Rc<Outbox>> {
        (self.clients.borrow().iter().flatten())
            .map(|c| c.outbox.clone())
            .collect()
    }

    pub fn pending_pushes(&self) -> u64 {
        self.pending.get()
    }

    /// An outbox sent (or dropped) one push.
    pub fn push_left(&self) {
        self.pending.set(self.pending.get().saturating_sub(1));
    }

    /// Whether an entry about to be applied must be published (decided before `apply`
    /// consumes it, so the entry is cloned only when someone listens).
    pub fn is_watched(&self, entry: &Entry) -> bool {
        self.count.get() > 0
            && (Pushed::pushes(entry) || matches!(entry, Entry::SlotsMovedOut { .. }))
    }

    /// Queues a push of the applied `entry` at `offset`, which this member decided, for every
    /// matching subscription, on its client's outbox, released once `offset` is durable (and
    /// sync-acknowledged, with `hold_local`). `engine` has applied the entry (the context
    /// after the event comes from there).
    pub fn publish(&self, shard: u32, entry: &Entry, offset: u64, engine: &Engine) {
        let hold = if self.hold_local { Hold::Led } else { Hold::No };
        self.publish_as(shard, entry, offset, engine, hold);
    }

    /// `publish` for a record replicated from the primary: released once durable here (and,
    /// with `hold_local`, once the primary reports it sync-acknowledged).
    pub fn publish_replicated(&self, shard: u32, entry: &Entry, offset: u64, engine: &Engine) {
        let hold = if self.hold_local {
            Hold::Followed
        } else {
            Hold::No
        };
        self.publish_as(shard, entry, offset, engine, hold);
    }

    fn publish_as(&self, shard: u32, entry: &Entry, offset: u64, engine: &Engine, hold: Hold) {
        let at = Push {
            shard,
            offset,
            epoch: engine.epoch_of(offset),
            hold,
        };
        if let Some(moved) = SlotsMoved::of(entry) {
            return self.slots_moved(&at, &moved);
        }
        let Some(ev) = Pushed::of(entry) else {
            return;
        };
        let mut plain: Option<Vec<u8>> = None;
        let mut with_context: Option<Vec<u8>> = None;
        for client in self.clients.borrow().iter().flatten() {
            let (mut subs, mut ctx_subs) = (Vec::new(), Vec::new());
            for (sub, filter) in client.subs.iter().filter(|(_, f)| ev.matches(f)) {
                match filter.include_context {
                    true => ctx_subs.push(*sub),
                    false => subs.push(*sub),
                }
            }
            if !ctx_subs.is_empty() {
                let body = with_context.get_or_insert_with(|| {
                    let ctx = engine.instance(ev.instance_id()).map(|i| &i.context);
                    ev.body_in(ctx, false, self.cluster_group.as_deref())
                });
                self.send(client, &at, ctx_subs, body.clone());
            }
            if !subs.is_empty() {
                let body = plain
                    .get_or_insert_with(|| ev.body_in(None, false, self.cluster_group.as_deref()));
                self.send(client, &at, subs, body.clone());
            }
        }
    }

    /// One push message on `client`'s outbox, released once `at.offset` is durable.
    fn send(&self, client: &ClientSubs, at: &Push, subs: Vec<u64>, body: Vec<u8>) {
        let push = PushMsg {
            subs,
            shard: at.shard,
            offset: at.offset,
            epoch: at.epoch,
            body,
            hold: at.hold,
        };
        self.pending.set(self.pending.get() + 1);
        client
            .outbox
            .push_message(Needs::durable(at.offset), ShardMessage::Push(push));
    }

    /// The log was rewound to `head` (of `epoch`): every client's subscriptions hear it after
    /// what their outbox still holds, and each that went past `head` ends `diverged`
    /// (docs/ha.md "Subscriptions across terms": a member that truncates ends its own subscriptions the same way).
    pub(super) fn rewound(&self, shard: u32, epoch: u64, head: u64) {
        for client in self.clients.borrow().iter().flatten() {
            if client.subs.is_empty() {
                continue;
            }
            let ended = SubsEnded {
                subs: client.subs.iter().map(|(s, _)| *s).collect(),
                shard,
                diverged_at: Some((epoch, head)),
            };
            client
                .outbox
                .push_message(Needs::NOTHING, ShardMessage::SubsEnded(ended));
        }
    }

    /// The `slots_moved_out` entry at `at` (a switch this shard's group made as the source,
    /// docs/cluster.md "Subscriptions"), on the primary that logged it or a follower: every
    /// subscription that covered the slots hears `slots_moved` after the events its outbox
    /// holds, released as a push of that entry is; a `WATCH_INSTANCE` of an instance in them
    /// gets nothing more from here.
    fn slots_moved(&self, at: &Push, moved: &SlotsMoved) {
        let body = moved.body();
        let mut removed = 0;
        for client in self.clients.borrow_mut().iter_mut().flatten() {
            let covered: Vec<u64> = (client.subs.iter())
                .filter(|(_, f)| moved.covers(f))
                .map(|(s, _)| *s)
                .collect();
            if covered.is_empty() {
                continue;
            }
            self.send(client, at, covered, body.clone());
            let before = client.subs.len();
            client
                .subs
                .retain(|(_, f)| f.instance_id.is_none() || !moved.covers(f));
            removed += before - client.subs.len();
        }
        self.count.set(self.count.get() - removed);
    }

    fn subscribe(&self, client: usize, sub: u64, filter: Filter) {
        let mut clients = self.clients.borrow_mut();
        if let Some(Some(c)) = clients.get_mut(client) {
            c.subs.retain(|(s, _)| *s != sub);
            c.subs.push((sub, filter));
            self.count.set(self.count.get() + 1);
        }
    }

    fn unsubscribe(&self, client: usize, sub: u64) -> bool {
        let mut clients = self.clients.borrow_mut();
        let Some(Some(c)) = clients.get_mut(client) else {
            return false;
        };
        let before = c.subs.len();
        c.subs.retain(|(s, _)| *s != sub);
        let removed = before - c.subs.len();
        self.count.set(self.count.get() - removed);
        removed > 0
    }

    /// Waits for replay reads in flight (shutdown).
    pub async fn close(&self) {
        let _ = self.readers.close().await;
    }
}

/// `ShardCall::Subscribe` of client `client`: registered at the head, answered `Watching`
/// through its outbox at once.
pub(super) fn subscribe(
    shard: &Shard,
    (client, token): (usize, u32),
    sub: u64,
    filter: Filter,
    outbox: &Outbox,
) {
    // Registered at `head`: every entry appended from now on (offset > head) is published to
    // it; replay covers the rest. No await between the two: no gap.
    shard.subs.subscribe(client, sub, filter);
    let head = shard.log.head();
    let oldest = shard.log.wal().oldest_offset();
    let epochs = shard.engine.borrow().epochs().to_vec();
    let watching = ReplyBody::Watching {
        head,
        oldest,
        epochs,
    };
    outbox.push_message(Needs::NOTHING, reply(token, Ok(watching)));
}

/// `ShardCall::Unsubscribe`: answered `{"removed": bool}` through the outbox at once.
pub(super) fn unsubscribe(shard: &Shard, (client, token): (usize, u32), sub: u64, outbox: &Outbox) {
    let removed = shard.subs.unsubscribe(client, sub);
    let body = ReplyBody::Json(json!({ "removed": removed }).to_string().into_bytes());
    outbox.push_message(Needs::NOTHING, reply(token, Ok(body)));
}

/// `ShardCall::ReadEvents`: a replay read, run as a task of the replay queue and answered
/// through the outbox when it is done.
pub(super) fn read_events_later(
    shard: &Rc<Shard>,
    token: u32,
    (filter, from, to, max): (Filter, u64, u64, usize),
    outbox: &Rc<Outbox>,
) {
    let (s, out) = (shard.clone(), outbox.clone());
    let task = async move {
        let result = read_events(&s, &filter, from, to, max).await;
        out.push_message(Needs::NOTHING, reply(token, result));
    };
    match shard.subs.readers.spawn_into(task, shard.subs.replay_queue) {
        Ok(t) => drop(t.detach()),
        Err(_) => {
            let rej = Rejection::new(ErrorCode::ShuttingDown, "the shard is stopping");
            outbox.push_message(Needs::NOTHING, reply(token, Err(rej)));
        }
    }
}

fn reply(token: u32, result: Result<ReplyBody, Rejection>) -> ShardMessage {
    ShardMessage::Reply(ShardResponse { token, result })
}
