//! The router: one executor's channels to every shard, the routing that picks the shard of an
//! instance id (the member's `shards::routing::Routing`: every id-to-shard choice of the
//! process asks it), and the table of replies it awaits.
//!
//! Each request carries a `token` naming a reply slot on this executor; one pump task per shard
//! drains that shard's responses into the slots. Nothing here is shared across threads.

use std::cell::RefCell;
use std::rc::Rc;

use glommio::channels::shared_channel::{
    ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};
use shards::routing::{Layout, Routing};
use shards::{ErrorCode, Rejection};

use crate::shard::subs::{PushMsg, SubsEnded};
use crate::shard::{ReplyBody, ShardCall, ShardMessage, ShardRequest, ShardResponse};
use crate::util::slot::Slot;

pub type Reply = Result<ReplyBody, Rejection>;
pub type ReplySlot = Rc<Slot<Reply>>;

/// One executor's half of the channels to each shard, created in `main`, with the member's
/// routing (the same for every executor of the process).
#[derive(Default)]
pub struct RouterChannels {
    pub shards: Vec<(SharedSender<ShardRequest>, SharedReceiver<ShardMessage>)>,
    pub routing: Routing,
}

pub struct Router {
    senders: Vec<ConnectedSender<ShardRequest>>,
    routing: Routing,
    pending: RefCell<Tokens>,
    /// Where the pumps hand subscription pushes (a front's subscription table).
    pushes: Rc<dyn Pushes>,
}

/// What receives the subscription pushes shards send this executor. Must never wait: the
/// pump that calls it also completes replies (a front's `subscriptions::Table` queues or ends).
pub trait Pushes {
    fn deliver(&self, push: PushMsg);
    fn ended(&self, ended: SubsEnded);
}

/// For an executor that never subscribes (the control executor): a push cannot be meant for
/// it, so one is logged and dropped.
pub struct NoPushes;

impl Pushes for NoPushes {
    fn deliver(&self, push: PushMsg) {
        log::error!(
            "push for subscriptions {:?} on an executor without any",
            push.subs
        );
    }

    fn ended(&self, _: SubsEnded) {}
}

/// Reply slots by token; freed tokens are reused so the table stays as large as the peak
/// number of outstanding requests (bounded by connections x in-flight limit).
#[derive(Default)]
struct Tokens {
    slots: Vec<Option<ReplySlot>>,
    free: Vec<u32>,
}

impl Router {
    /// Connects every channel concurrently (sequential connects can deadlock, docs/glommio.md §0.6)
    /// and starts one response pump per shard, which hands pushes to `pushes`.
    pub async fn connect(channels: RouterChannels, pushes: Rc<dyn Pushes>) -> Rc<Router> {
        let routing = channels.routing;
        let connects: Vec<_> = (channels.shards.into_iter())
            .map(|(tx, rx)| {
                glommio::spawn_local(async move {
                    futures_lite::future::zip(tx.connect(), rx.connect()).await
                })
            })
            .collect();
        let mut senders = Vec::with_capacity(connects.len());
        let mut receivers = Vec::with_capacity(connects.len());
        for c in connects {
            let (tx, rx) = c.await;
            senders.push(tx);
            receivers.push(rx);
        }
        let router = Rc::new(Router {
            senders,
            routing,
            pending: RefCell::new(Tokens::default()),
            pushes,
        });
        for rx in receivers {
            glommio::spawn_local(pump(Rc::downgrade(&router), rx)).detach();
        }
        router
    }

    pub fn shard_count(&self) -> u32 {
        self.senders.len() as u32
    }

    /// The shards as ids see them (count and routing).
    pub fn layout(&self) -> Layout {
        Layout {
            routing: self.routing,
            count: self.shard_count().max(1),
        }
    }

    /// The shard that owns instance `id`.
    pub fn shard_of(&self, id: &str) -> u32 {
        self.layout().shard_of(id)
    }

    /// Sends `call` to `shard` (waiting for room if its queue is full) and returns the slot its
    /// reply will land in.
    pub async fn start(&self, shard: u32, call: ShardCall) -> ReplySlot {
        let slot = Slot::new();
        let token = self.pending.borrow_mut().insert(slot.clone());
        let Some(tx) = self.senders.get(shard as usize) else {
            self.pending.borrow_mut().remove(token);
            slot.fill(Err(Rejection::new(
                ErrorCode::InternalError,
                "no such shard",
            )));
            return slot;
        };
        if tx.send(ShardRequest { token, call }).await.is_err() {
            self.pending.borrow_mut().remove(token);
            slot.fill(Err(Rejection::new(
                ErrorCode::ShuttingDown,
                "shard is shutting down",
            )));
        }
        slot
    }

    /// Sends and waits for the reply.
    pub async fn call(&self, shard: u32, call: ShardCall) -> Reply {
        self.start(shard, call).await.wait().await
    }

    fn complete(&self, resp: ShardResponse) {
        let slot = self.pending.borrow_mut().remove(resp.token);
        match slot {
            Some(slot) => slot.fill(resp.result),
            None => log::error!("reply for unknown token {}", resp.token),
        }
    }

    /// Closes every request channel so shards see the end of this client's stream.
    pub fn close(&self) {
        for tx in &self.senders {
            tx.close();
        }
    }
}

impl Tokens {
    fn insert(&mut self, slot: ReplySlot) -> u32 {
        match self.free.pop() {
            Some(t) => {
                self.slots[t as usize] = Some(slot);
                t
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, token: u32) -> Option<ReplySlot> {
        let slot = self.slots.get_mut(token as usize)?.take()?;
        self.free.push(token);
        Some(slot)
    }
}

/// Drains one shard's messages; never waits on anything but the channel (a push goes to its
/// subscription's bounded queue or ends it), so a slow subscriber cannot stall replies.
async fn pump(router: std::rc::Weak<Router>, rx: ConnectedReceiver<ShardMessage>) {
    while let Some(msg) = rx.recv().await {
        let Some(r) = router.upgrade() else { return };
        match msg {
            ShardMessage::Reply(resp) => r.complete(resp),
            ShardMessage::Push(push) => r.pushes.deliver(push),
            ShardMessage::SubsEnded(m) => r.pushes.ended(m),
        }
    }
}
