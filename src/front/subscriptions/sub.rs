//! One subscription on the front: its cursor positions, the live pushes it holds per shard
//! while that shard is being set up or replayed, and its bounded queue of encoded frames.
//!
//! Everything here is synchronous (no await), so the pump delivering live pushes, the driver
//! replaying and the connection writer taking frames never see each other half-way.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use glommio::task::JoinHandle;

use super::conn::ConnSubs;
use super::cursor;
use crate::metrics::SubsStats;
use crate::protocol::frame::{begin_frame, finish_frame};
use crate::util::notify::Notify;

/// Why a subscription ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Its queue (or a held buffer) was full, or replay failed: a `subscription_lagged` notice
    /// with the resume cursor is its last frame.
    Lagged,
    /// UNWATCH: nothing more is written.
    Unwatched,
    /// The connection closed.
    Closed,
    /// Set-up failed; the WATCH response carries the error.
    Failed,
}

/// How a subscription's frames are written: the codec of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// RCP1 frames around the push objects (docs/protocol.md, "Subscriptions").
    #[default]
    Rcp1,
    /// Server-Sent Events: `id: <cursor>` and `data: <push object>` per event; the lag
    /// notice is `event: lagged` (docs/http.md, "Event streams").
    Sse,
}

/// A live push held while its shard is set up or replayed.
struct Held {
    shard: u32,
    epoch: u64,
    offset: u64,
    body: Rc<[u8]>,
}

/// A frame waiting for the connection writer; `shard` is `None` for the lag notice.
struct Queued {
    shard: Option<u32>,
    frame: Vec<u8>,
}

struct Inner {
    /// Last delivered (or starting) `(epoch, offset)` per shard: the cursor.
    positions: Vec<(u64, u64)>,
    /// Per shard, the highest offset this subscription has delivered, holds or will replay
    /// through: a rewind of the shard's log below it ends the subscription (`diverge`).
    reach: Vec<u64>,
    /// The lag notice says `details.diverged` (the log no longer has what was delivered).
    diverged: bool,
    /// Rewinds heard before set-up finished (`diverge`), applied once it has.
    rewound: Vec<(u32, u64, u64)>,
    /// Per shard: live pushes held while the shard is set up or replayed (`None` once live).
    held: Vec<Option<VecDeque<Held>>>,
    watched: Vec<bool>,
    queue: VecDeque<Queued>,
}

pub struct Sub {
    pub id: u64,
    /// `subscriptions.queue_max`: frames queued (and pushes held per shard) at most. Policy
    /// when full: the subscription ends with a lag notice; writers never wait.
    queue_max: usize,
    framing: Framing,
    stats: Arc<SubsStats>,
    conn: Weak<ConnSubs>,
    inner: RefCell<Inner>,
    ended: Cell<Option<End>>,
    setup_done: Cell<bool>,
    /// The WATCH response was written: frames may follow it.
    announced: Cell<bool>,
    /// Counted in `SubsStats::active`.
    counted: Cell<bool>,
    /// Wakes the driver when the queue drains below half or the subscription ends.
    pub(super) space: Notify,
    /// The task that sets up, replays and finally unsubscribes.
    pub(super) driver: RefCell<Option<JoinHandle<()>>>,
}

impl Sub {
    pub fn new(
        id: u64,
        watched: Vec<bool>,
        queue_max: usize,
        framing: Framing,
        stats: Arc<SubsStats>,
        conn: Weak<ConnSubs>,
    ) -> Rc<Sub> {
        let n = watched.len();
        let held = watched.iter().map(|w| w.then(VecDeque::new)).collect();
        Rc::new(Sub {
            id,
            queue_max: queue_max.max(1),
            framing,
            stats,
            conn,
            inner: RefCell::new(Inner {
                positions: vec![(0, 0); n],
                reach: vec![0; n],
                diverged: false,
                rewound: Vec::new(),
                held,
                watched,
                queue: VecDeque::new(),
            }),
            ended: Cell::new(None),
            setup_done: Cell::new(false),
            announced: Cell::new(false),
            counted: Cell::new(false),
            space: Notify::default(),
            driver: RefCell::new(None),
        })
    }

    pub fn is_ended(&self) -> bool {
        self.ended.get().is_some()
    }

    pub fn ended(&self) -> Option<End> {
        self.ended.get()
    }

    pub fn queue_len(&self) -> usize {
        self.inner.borrow().queue.len()
    }

    pub fn queue_max(&self) -> usize {
        self.queue_max
    }

    pub fn cursor(&self) -> String {
        cursor::encode(&self.inner.borrow().positions)
    }

    /// A live push (event `offset` of `shard`, written in `epoch`) from the pump: held while
    /// its shard is not live yet, else queued.
    pub fn deliver(&self, shard: u32, epoch: u64, offset: u64, body: &Rc<[u8]>) {
        if self.is_ended() {
            return;
        }
        let k = shard as usize;
        {
            let mut inner = self.inner.borrow_mut();
            if !inner.watched.get(k).copied().unwrap_or(false) {
                return;
            }
            if let Some(held) = inner.held[k].as_mut() {
                if held.len() < self.queue_max {
                    held.push_back(Held {
                        shard,
                        epoch,
                        offset,
                        body: body.clone(),
                    });
                    inner.reach[k] = inner.reach[k].max(offset);
                    return;
                }
                drop(inner);
                self.end(End::Lagged);
                return;
            }
        }
        self.enqueue(shard, epoch, offset, body);
    }

    /// Queues the push of event `offset` of `shard` (of `epoch`); false if the subscription
    /// ended (now or before).
    pub fn enqueue(&self, shard: u32, epoch: u64, offset: u64, body: &[u8]) -> bool {
        if self.is_ended() {
            return false;
        }
        {
            let mut inner = self.inner.borrow_mut();
            if inner.queue.len() < self.queue_max {
                inner.positions[shard as usize] = (epoch, offset);
                let k = shard as usize;
                inner.reach[k] = inner.reach[k].max(offset);
                let cursor = cursor::encode(&inner.positions);
                let frame = match self.framing {
                    Framing::Rcp1 => push_frame(self.id, shard, offset, body, &cursor),
                    Framing::Sse => sse_push(self.id, shard, offset, body, &cursor),
                };
                inner.queue.push_back(Queued {
                    shard: Some(shard),
                    frame,
                });
                self.stats.queued_add(shard, 1);
                drop(inner);
                self.wake_writer();
                return true;
            }
        }
        self.end(End::Lagged);
        false
    }

    /// `shard` caught up: queue what was held for it, then take its pushes live. False if the
    /// subscription ended.
    pub fn go_live(&self, shard: u32) -> bool {
        let held = self.inner.borrow_mut().held[shard as usize].take();
        for p in held.into_iter().flatten() {
            if !self.enqueue(p.shard, p.epoch, p.offset, &p.body) {
                return false;
            }
        }
        !self.is_ended()
    }

    /// Set-up is over: `positions` are the starting cursor, `heads` what replay goes through.
    pub fn finish_setup(&self, positions: Vec<(u64, u64)>, heads: &[u64]) {
        {
            let mut inner = self.inner.borrow_mut();
            for (k, reach) in inner.reach.iter_mut().enumerate() {
                let start = positions.get(k).map_or(0, |p| p.1);
                *reach = (*reach).max(start).max(heads.get(k).copied().unwrap_or(0));
            }
            inner.positions = positions;
        }
        self.setup_done.set(true);
        match self.ended.get() {
            Some(End::Lagged) => self.queue_lag_notice(),
            Some(_) => {}
            None => {
                self.counted.set(true);
                SubsStats::add(&self.stats.active, 1);
            }
        }
        let rewound = std::mem::take(&mut self.inner.borrow_mut().rewound);
        if !rewound.is_empty() {
            self.diverge(&rewound);
        }
    }

    /// The WATCH response has been written.
    pub fn announce(&self) {
        self.announced.set(true);
        self.wake_writer();
    }

    /// Ended with nothing left to write (a lag notice still to come counts as something).
    pub fn is_finished(&self) -> bool {
        match self.ended.get() {
            None => false,
            Some(End::Lagged) if !self.setup_done.get() => false,
            Some(_) => self.inner.borrow().queue.is_empty(),
        }
    }

    pub fn is_announced(&self) -> bool {
        self.announced.get()
    }

    /// Ends the subscription (first reason wins).
    pub fn end(&self, why: End) {
        if self.is_ended() {
            return;
        }
        self.ended.set(Some(why));
        {
            let mut inner = self.inner.borrow_mut();
            inner.held.iter_mut().for_each(|h| *h = None);
            if why != End::Lagged {
                for q in inner.queue.drain(..) {
                    if let Some(k) = q.shard {
                        self.stats.queued_sub(k, 1);
                    }
                }
            }
        }
        if why == End::Lagged {
            SubsStats::add(&self.stats.lagged, 1);
            if self.setup_done.get() {
                self.queue_lag_notice();
            }
        }
        if self.counted.replace(false) {
            SubsStats::sub(&self.stats.active, 1);
        }
        self.space.notify();
        self.wake_writer();
    }

    /// The log of each `(shard, epoch, offset)` no longer agrees with what this subscription
    /// delivered (or was to replay) past `offset`: it ends with a lag notice whose resume
    /// cursor has those positions and `details.diverged: true`. A shard it has not gone past
    /// is left alone; false if none applied (the subscription goes on).
    pub fn diverge(&self, points: &[(u32, u64, u64)]) -> bool {
        if self.is_ended() {
            return false;
        }
        if !self.setup_done.get() {
            // Where it starts and what it replays are not known yet: `finish_setup` applies
            // these once they are.
            self.inner.borrow_mut().rewound.extend_from_slice(points);
            return false;
        }
        let mut hit = false;
        {
            let mut inner = self.inner.borrow_mut();
            for &(shard, epoch, offset) in points {
                let k = shard as usize;
                let watched = inner.watched.get(k).copied().unwrap_or(false);
                if !watched || inner.reach[k] <= offset {
                    continue;
                }
                hit = true;
                inner.diverged = true;
                if inner.positions[k].1 > offset {
                    inner.positions[k] = (epoch, offset);
                }
            }
        }
        if hit {
            self.end(End::Lagged);
        }
        hit
    }

    /// The last frame of a lagged subscription: resume after the last push queued.
    fn queue_lag_notice(&self) {
        let mut inner = self.inner.borrow_mut();
        let cursor = cursor::encode(&inner.positions);
        let frame = match self.framing {
            Framing::Rcp1 => lagged_frame(self.id, &cursor, inner.diverged),
            Framing::Sse => sse_lagged(self.id, &cursor, inner.diverged),
        };
        inner.queue.push_back(Queued { shard: None, frame });
        drop(inner);
        self.wake_writer();
    }

    /// Ended by lag (its notice may still be queued).
    pub fn is_lagged(&self) -> bool {
        self.ended.get() == Some(End::Lagged)
    }

    /// Moves queued frames into `out` until it reaches `limit` bytes; true if some are left.
    pub fn take_frames(&self, out: &mut Vec<u8>, limit: usize) -> bool {
        let mut inner = self.inner.borrow_mut();
        let mut sent = 0;
        while out.len() < limit {
            let Some(q) = inner.queue.pop_front() else {
                break;
            };
            out.extend_from_slice(&q.frame);
            if let Some(k) = q.shard {
                self.stats.queued_sub(k, 1);
                sent += 1;
            }
        }
        SubsStats::add(&self.stats.broadcast, sent);
        let left = inner.queue.len();
        drop(inner);
        if left <= self.queue_max / 2 {
            self.space.notify();
        }
        left > 0
    }

    fn wake_writer(&self) {
        if let Some(c) = self.conn.upgrade() {
            c.ready.notify();
        }
    }
}

/// A push body's own `"type":"<kind>"` member (a lifecycle notice's, `shard::pushed`), and
/// the body after it; an event's body has none and reads as `"type":"event"`.
fn typed(body: &[u8]) -> (&[u8], &[u8]) {
    const EVENT: &[u8] = br#""type":"event""#;
    if !body.starts_with(br#""type":""#) {
        return (EVENT, body);
    }
    // The kind is a plain word the shard wrote (`migrated`, `deleted`): no escapes, no comma.
    match body.iter().position(|&b| b == b',') {
        Some(comma) => (&body[..comma], &body[comma + 1..]),
        None => (body, b""),
    }
}

/// `{"type":"event","subscription_id":S,<body>,"shard":K,"wal_offset":N,"cursor":"C"}`
/// (another `type` when the body names its own: `typed`).
fn push_frame(sub: u64, shard: u32, offset: u64, body: &[u8], cursor: &str) -> Vec<u8> {
    let (kind, body) = typed(body);
    let mut out = Vec::with_capacity(body.len() + cursor.len() + 112);
    let start = begin_frame(&mut out);
    out.push(b'{');
    out.extend_from_slice(kind);
    out.extend_from_slice(br#","subscription_id":"#);
    out.extend_from_slice(sub.to_string().as_bytes());
    out.push(b',');
    out.extend_from_slice(body);
    out.extend_from_slice(br#","shard":"#);
    out.extend_from_slice(shard.to_string().as_bytes());
    out.extend_from_slice(br#","wal_offset":"#);
    out.extend_from_slice(offset.to_string().as_bytes());
    // A cursor is ASCII digits, letters and dashes: no escaping needed.
    out.extend_from_slice(br#","cursor":""#);
    out.extend_from_slice(cursor.as_bytes());
    out.extend_from_slice(b"\"}");
    finish_frame(&mut out, start);
    out
}

/// The push object of `push_frame` as one Server-Sent Event whose id is its cursor:
/// `id: C\ndata: {...}\n\n`. The object is compact JSON (no raw line break can occur in
/// it: inside strings they are escaped, and the shard writes no whitespace between tokens);
/// any CR or LF is still written as a space, so an event can never be split.
fn sse_push(sub: u64, shard: u32, offset: u64, body: &[u8], cursor: &str) -> Vec<u8> {
    let (kind, body) = typed(body);
    let mut out = Vec::with_capacity(body.len() + 2 * cursor.len() + 128);
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(cursor.as_bytes());
    out.extend_from_slice(b"\ndata: {");
    out.extend_from_slice(kind);
    out.extend_from_slice(b",\"subscription_id\":");
    out.extend_from_slice(sub.to_string().as_bytes());
    out.push(b',');
    out.extend(
        body.iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
    );
    out.extend_from_slice(br#","shard":"#);
    out.extend_from_slice(shard.to_string().as_bytes());
    out.extend_from_slice(br#","wal_offset":"#);
    out.extend_from_slice(offset.to_string().as_bytes());
    out.extend_from_slice(br#","cursor":""#);
    out.extend_from_slice(cursor.as_bytes());
    out.extend_from_slice(b"\"}\n\n");
    out
}

/// The lag notice as the event `lagged`; the stream ends after it.
fn sse_lagged(sub: u64, cursor: &str, diverged: bool) -> Vec<u8> {
    format!(
        "event: lagged\ndata: {{\"type\":\"subscription_lagged\",\"subscription_id\":{sub},\
         \"resume_cursor\":\"{cursor}\"{}}}\n\n",
        diverged_member(diverged)
    )
    .into_bytes()
}

/// `,"details":{"diverged":true}` for a notice of a log that no longer agrees, else nothing.
fn diverged_member(diverged: bool) -> &'static str {
    match diverged {
        true => r#","details":{"diverged":true}"#,
        false => "",
    }
}

/// `{"type":"subscription_lagged","subscription_id":S,"resume_cursor":"C"}`, with
/// `"details":{"diverged":true}` when the log no longer agrees with what was delivered.
fn lagged_frame(sub: u64, cursor: &str, diverged: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + cursor.len());
    let start = begin_frame(&mut out);
    out.extend_from_slice(br#"{"type":"subscription_lagged","subscription_id":"#);
    out.extend_from_slice(sub.to_string().as_bytes());
    out.extend_from_slice(br#","resume_cursor":""#);
    out.extend_from_slice(cursor.as_bytes());
    out.push(b'"');
    out.extend_from_slice(diverged_member(diverged).as_bytes());
    out.extend_from_slice(b"}");
    finish_frame(&mut out, start);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{decode_frame, FRAME_PAYLOAD_BYTES_DEFAULT};
    use serde_json::{json, Value};

    fn frames(mut bytes: &[u8]) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some((range, used)) = decode_frame(bytes, FRAME_PAYLOAD_BYTES_DEFAULT).unwrap() {
            out.push(serde_json::from_slice(&bytes[range]).unwrap());
            bytes = &bytes[used..];
        }
        out
    }

    fn sub(queue_max: usize) -> Rc<Sub> {
        let stats = Arc::new(SubsStats::new(2));
        Sub::new(
            7,
            vec![true, true],
            queue_max,
            Framing::Rcp1,
            stats,
            Weak::new(),
        )
    }

    fn push(shard: u32, offset: u64) -> (u32, u64, Rc<[u8]>) {
        (shard, offset, br#""instance_id":"a""#.to_vec().into())
    }

    /// `finish_setup` with epoch-0 positions and no replay.
    fn setup(s: &Sub, offsets: &[u64]) {
        s.finish_setup(offsets.iter().map(|&o| (0, o)).collect(), &[]);
    }

    /// `Sub::deliver` with a `push` tuple.
    trait Deliver {
        fn give(&self, p: (u32, u64, Rc<[u8]>));
    }

    impl Deliver for Sub {
        fn give(&self, p: (u32, u64, Rc<[u8]>)) {
            self.deliver(p.0, 0, p.1, &p.2);
        }
    }

    #[test]
    fn held_pushes_follow_replay_and_cursors_track_every_shard() {
        let s = sub(8);
        setup(&s, &[3, 10]);
        s.give(push(0, 5)); // shard 0 is replaying: held
        assert!(s.enqueue(0, 0, 4, br#""instance_id":"r""#)); // replayed
        assert!(s.go_live(0));
        assert!(s.go_live(1));
        s.give(push(1, 11));
        let mut out = Vec::new();
        assert!(!s.take_frames(&mut out, usize::MAX));
        let got = frames(&out);
        let seen: Vec<_> = got
            .iter()
            .map(|v| (v["wal_offset"].clone(), v["cursor"].clone()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (json!(4), json!("c1-4-10")),
                (json!(5), json!("c1-5-10")),
                (json!(11), json!("c1-5-11")),
            ]
        );
        assert_eq!(got[0]["type"], "event");
        assert_eq!(got[0]["subscription_id"], 7);
        assert_eq!(got[0]["shard"], 0);
    }

    #[test]
    fn a_full_queue_ends_with_a_lag_notice_naming_the_last_queued_push() {
        let s = sub(2);
        setup(&s, &[0, 0]);
        assert!(s.go_live(0) && s.go_live(1));
        s.give(push(0, 1));
        s.give(push(1, 1));
        s.give(push(0, 2)); // full
        s.give(push(0, 3)); // dropped: ended
        assert_eq!(s.ended(), Some(End::Lagged));
        let mut out = Vec::new();
        s.take_frames(&mut out, usize::MAX);
        let got = frames(&out);
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[2],
            json!({"type": "subscription_lagged", "subscription_id": 7, "resume_cursor": "c1-1-1"})
        );
    }

    #[test]
    fn sse_framing_gives_one_event_per_push_with_the_cursor_as_id() {
        let stats = Arc::new(SubsStats::new(2));
        let s = Sub::new(3, vec![true, true], 2, Framing::Sse, stats, Weak::new());
        setup(&s, &[0, 0]);
        assert!(s.go_live(0) && s.go_live(1));
        s.deliver(
            1,
            0,
            9,
            &b"\"instance_id\":\"a\",\n\"payload\":{}".to_vec().into(),
        );
        s.give(push(0, 1));
        s.give(push(0, 2)); // full: lagged
        let mut out = Vec::new();
        s.take_frames(&mut out, usize::MAX);
        let text = String::from_utf8(out).unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 3, "{text}");
        let (id, data) = events[0].split_once('\n').unwrap();
        assert_eq!(id, "id: c1-0-9");
        let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(
            (v["wal_offset"].clone(), v["cursor"].clone()),
            (json!(9), json!("c1-0-9"))
        );
        assert!(
            events[2].starts_with("event: lagged\ndata: {"),
            "{}",
            events[2]
        );
        assert!(
            events[2].contains("\"resume_cursor\":\"c1-1-9\""),
            "{}",
            events[2]
        );
    }

    #[test]
    fn a_rewind_below_what_was_delivered_ends_with_a_diverged_notice() {
        let s = sub(8);
        s.finish_setup(vec![(1, 0), (1, 0)], &[0, 4]);
        assert!(s.go_live(0) && s.go_live(1));
        s.deliver(0, 2, 5, &br#""instance_id":"a""#.to_vec().into());
        // Shard 1 was rewound to 6: above everything this subscription reached there.
        assert!(!s.diverge(&[(1, 1, 6)]));
        assert!(!s.is_ended());
        // Shard 0 was rewound to 3 (of epoch 1): it delivered 5.
        assert!(s.diverge(&[(0, 1, 3)]));
        assert_eq!(s.ended(), Some(End::Lagged));
        let mut out = Vec::new();
        s.take_frames(&mut out, usize::MAX);
        let got = frames(&out);
        assert_eq!(got[0]["cursor"], "c2-2.5-1.0");
        assert_eq!(
            got[1],
            json!({"type": "subscription_lagged", "subscription_id": 7,
                   "resume_cursor": "c2-1.3-1.0", "details": {"diverged": true}})
        );
    }

    #[test]
    fn a_rewind_heard_during_set_up_applies_once_it_is_known_where_it_starts() {
        let s = sub(8);
        assert!(!s.diverge(&[(0, 1, 3)]));
        assert!(!s.is_ended());
        s.finish_setup(vec![(1, 2), (1, 0)], &[9, 0]); // was to replay shard 0 through 9
        assert_eq!(s.ended(), Some(End::Lagged));
        let mut out = Vec::new();
        s.take_frames(&mut out, usize::MAX);
        assert_eq!(frames(&out)[0]["resume_cursor"], "c2-1.2-1.0");
    }

    #[test]
    fn unwatch_drops_what_is_queued() {
        let s = sub(4);
        setup(&s, &[0, 0]);
        assert!(s.go_live(0));
        s.give(push(0, 1));
        s.end(End::Unwatched);
        let mut out = Vec::new();
        assert!(!s.take_frames(&mut out, usize::MAX));
        assert!(out.is_empty());
        assert_eq!(
            s.stats.queued[0].load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }
}
