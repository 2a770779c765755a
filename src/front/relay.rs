//! The front's side of replication. A `REPLICATE` connection is accepted by a front like any
//! other, but the stream is produced on the control executor (docs/replication.md: replication is
//! served from the dedicated core): the front only relays. Its reader forwards the replica's
//! acks up; the control executor's encoded frames come down and are queued on the connection
//! like responses. REPLICATION_STATUS and PROMOTE are relayed the same way.
//!
//! One pair of channels per front (`mesh::relay`) carries every link of that front, each named
//! by a link number the front chooses.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use glommio::channels::shared_channel::ConnectedSender;
use shards::{ErrorCode, Rejection};

use crate::front::connection::{Conn, Pending};
use crate::mesh::relay::{Down, FrontEnds, Up};
use crate::mesh::router::{Reply, ReplySlot};
use crate::protocol::routes;
use crate::shard::ReplyBody;
use crate::util::slot::Slot;

/// The front's relay: its end of the channels and the links and calls it is serving.
pub struct Relay {
    up: ConnectedSender<Up>,
    links: RefCell<HashMap<u64, LinkEnd>>,
    calls: RefCell<HashMap<u64, ReplySlot>>,
    next: Cell<u64>,
}

struct LinkEnd {
    conn: Weak<Conn>,
    opened: Option<ReplySlot>,
}

impl Relay {
    /// Connects this front's ends and starts the task that delivers what comes down.
    pub async fn connect(ends: FrontEnds, front_index: u32) -> Rc<Relay> {
        let (up, down) = ends;
        let (up, down) = futures_lite::future::zip(up.connect(), down.connect()).await;
        let relay = Rc::new(Relay {
            up,
            links: RefCell::new(HashMap::new()),
            calls: RefCell::new(HashMap::new()),
            // Link numbers are unique per front; the front index keeps them unique overall.
            next: Cell::new(u64::from(front_index) << 48),
        });
        let weak = Rc::downgrade(&relay);
        glommio::spawn_local(async move {
            while let Some(msg) = down.recv().await {
                let Some(relay) = weak.upgrade() else { return };
                relay.deliver(msg);
            }
        })
        .detach();
        relay
    }

    fn next_id(&self) -> u64 {
        let id = self.next.get();
        self.next.set(id + 1);
        id
    }

    /// Starts a `REPLICATE` on `conn`: returns the link number and the slot its response
    /// lands in. The connection is a stream from now on (`frame` for what the replica sends).
    pub async fn open(
        &self,
        conn: &Rc<Conn>,
        params: Option<&[u8]>,
        peer: String,
    ) -> (u64, ReplySlot) {
        let link = self.next_id();
        let slot = Slot::new();
        self.links.borrow_mut().insert(
            link,
            LinkEnd {
                conn: Rc::downgrade(conn),
                opened: Some(slot.clone()),
            },
        );
        let msg = Up::Open {
            link,
            params: params.map(<[u8]>::to_vec),
            peer,
        };
        if self.up.send(msg).await.is_err() {
            self.fail(link, "replication is not running");
        }
        (link, slot)
    }

    /// A frame from the replica on `link`.
    pub async fn frame(&self, link: u64, payload: &[u8]) {
        let msg = Up::Frame {
            link,
            payload: payload.to_vec(),
        };
        if self.up.send(msg).await.is_err() {
            self.fail(link, "replication is not running");
        }
    }

    /// The link's connection ended (its reader stopped).
    pub fn closed(self: &Rc<Self>, link: u64) {
        self.links.borrow_mut().remove(&link);
        let relay = self.clone();
        glommio::spawn_local(async move {
            let _ = relay.up.send(Up::Closed { link }).await;
        })
        .detach();
    }

    /// A control op: the slot its answer lands in.
    pub async fn call(&self, op: routes::Control, params: Option<&[u8]>) -> ReplySlot {
        let token = self.next_id();
        let slot = Slot::new();
        self.calls.borrow_mut().insert(token, slot.clone());
        let msg = Up::Call {
            token,
            op,
            params: params.map(<[u8]>::to_vec),
        };
        if self.up.send(msg).await.is_err() {
            self.calls.borrow_mut().remove(&token);
            slot.fill(Err(not_running()));
        }
        slot
    }

    fn fail(&self, link: u64, why: &str) {
        let end = self.links.borrow_mut().remove(&link);
        if let Some(LinkEnd {
            opened: Some(slot), ..
        }) = end
        {
            slot.fill(Err(Rejection::new(ErrorCode::InternalError, why)));
        }
    }

    fn deliver(&self, msg: Down) {
        match msg {
            Down::Opened { link, result } => {
                let slot = self
                    .links
                    .borrow_mut()
                    .get_mut(&link)
                    .and_then(|l| l.opened.take());
                if let Some(slot) = slot {
                    slot.fill(as_reply(result));
                }
            }
            Down::Frames { link, bytes } => {
                if let Some(conn) = self.conn(link) {
                    conn.push(Pending::Frame(bytes));
                }
            }
            Down::Close { link } => {
                if let Some(conn) = self.conn(link) {
                    conn.push(Pending::Close);
                }
            }
            Down::Answer { token, result } => {
                if let Some(slot) = self.calls.borrow_mut().remove(&token) {
                    slot.fill(as_reply(result));
                }
            }
        }
    }

    fn conn(&self, link: u64) -> Option<Rc<Conn>> {
        self.links.borrow().get(&link)?.conn.upgrade()
    }
}

fn as_reply(result: Result<Vec<u8>, Rejection>) -> Reply {
    result.map(ReplyBody::Json)
}

pub fn not_running() -> Rejection {
    Rejection::new(
        ErrorCode::BadRequest,
        "replication is not configured on this server (replication.role is unset)",
    )
}
