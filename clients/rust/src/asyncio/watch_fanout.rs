//! `subscribe_all` of a cluster client (docs/cluster.md, "Clients"): one WATCH_ALL per group,
//! to each group's primary by the map, on a connection of its own; the pushes merged into one
//! `Subscription`, each instance's events in order across slot moves (the rule is
//! `crate::watch_fanout::Order`). Each group's subscription resumes from its own cursor after
//! a lost connection or a lag (at the group's primary by a fresh map). A group that the map
//! gains, or that a `slots_moved` names, is watched from `from_cursor: "0"` (all it retains:
//! it holds nothing from before this subscription began). The one entry point is
//! `subscribe_all`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::conn::Conn;
use super::subscription::{Subscription, RESUBSCRIBE_FOR};
use super::{call_on, lock, Client, SUBSCRIPTION_QUEUE_MAX};
use crate::error::{Error, Result};
use crate::fanout;
use crate::ops::{self, Event, WatchAllFilter};
use crate::watch_fanout::{groups, Group, Merge, Msg, MAP_EVERY};
use smdb_protocol::op::Op;

/// Tries to open every group's subscription under one map epoch.
const OPEN_TRIES: u32 = 5;

type Tx = mpsc::Sender<(String, Msg)>;

/// WATCH_ALL over every group of `seed`'s cluster, as one `Subscription`. `from_cursor` may
/// be a combined cursor (`Subscription::cursor` of an earlier one: each group from its own)
/// or one cursor for every group (`"0"`).
pub(super) async fn subscribe_all(seed: &Client, filter: WatchAllFilter) -> Result<Subscription> {
    let start: BTreeMap<String, String> = match filter.from_cursor.as_deref() {
        Some(c) if c.starts_with("cluster:") => fanout::decode_cursor(c)?,
        _ => BTreeMap::new(),
    };
    let every = (filter.from_cursor.clone()).filter(|c| !c.starts_with("cluster:"));
    let from = |g: &str| start.get(g).cloned().or(every.clone());
    let mut tries = 0;
    let (gs, opened) = loop {
        let (epoch, gs) = read_map(seed).await?;
        let mut opened = Vec::new();
        for g in &gs {
            match Opened::open(seed, g, &filter, from(&g.name)).await {
                Ok(o) => opened.push(o),
                Err(e) => {
                    for o in opened {
                        o.unwatch().await;
                    }
                    return Err(e);
                }
            }
        }
        // A move that switched while they opened gave no slots_moved to a subscription
        // opened after it: open them all again under one epoch.
        tries += 1;
        if read_map(seed).await?.0 == epoch || tries >= OPEN_TRIES {
            break (gs, opened);
        }
        for o in opened {
            o.unwatch().await;
        }
    };
    let (tx, rx) = mpsc::channel(SUBSCRIPTION_QUEUE_MAX);
    let mut merger = Merger {
        seed: seed.clone(),
        filter,
        readers: BTreeMap::new(),
        tx,
        merge: Merge::new(&gs),
        cursor: Arc::new(Mutex::new(None)),
    };
    for o in opened {
        merger.merge.opened(&o.group, &o.cursor, &o.answered);
        merger.start(o.group.clone(), Some(o), None);
    }
    merger.publish_cursor();
    let cursor = merger.cursor.clone();
    let (out, sub_rx) = mpsc::channel(256);
    let task = tokio::spawn(merger.run(rx, out));
    Ok(Subscription::from_parts(sub_rx, cursor, task))
}

async fn read_map(seed: &Client) -> Result<(u64, Vec<Group>)> {
    Ok(groups(&seed.call("CLUSTER_SHARDS", json!({})).await?))
}

/// One group's subscription, open.
struct Opened {
    group: String,
    client: Client,
    conn: Arc<Conn>,
    id: Value,
    queue: mpsc::Receiver<Value>,
    /// Where it stands: the cursor it resumes from.
    cursor: String,
    /// The WATCH answer's cursor (one position per shard of the group).
    answered: String,
}

impl Opened {
    /// WATCH_ALL at `g`'s primary, from `from` (else live).
    async fn open(
        seed: &Client,
        g: &Group,
        f: &WatchAllFilter,
        from: Option<String>,
    ) -> Result<Opened> {
        let Some(addr) = &g.primary else {
            return Err(Error::Config(format!("group {} has no primary", g.name)));
        };
        let client = Client::connect_plain(addr, seed.inner.opts.clone()).await?;
        let f = WatchAllFilter {
            from_cursor: from.clone(),
            ..f.clone()
        };
        let (qtx, queue) = mpsc::channel(SUBSCRIPTION_QUEUE_MAX);
        let (conn, w) = client.watch(&ops::watch_all(&f), qtx).await?;
        Ok(Opened {
            group: g.name.clone(),
            client,
            conn,
            id: w.subscription_id,
            queue,
            cursor: from.unwrap_or_else(|| w.cursor.clone()),
            answered: w.cursor,
        })
    }

    /// Ends it on its connection, if that still lives.
    async fn unwatch(&self) {
        self.conn.forget(&self.id);
        if self.conn.is_alive() {
            let p = json!({"subscription_id": self.id});
            let _ = call_on(&self.conn, Op::Unwatch.as_str().into(), Some(&p), None).await;
        }
        self.client.drop_connection();
    }
}

/// A group's reader: forwards its subscription's pushes, and opens it again from its cursor
/// (at the group's primary by a fresh map) when its connection is lost or it lags.
struct Reader {
    seed: Client,
    group: String,
    filter: WatchAllFilter,
    /// The cursor it resumes from (`None`: never opened, and live).
    cursor: Option<String>,
    tx: Tx,
}

impl Reader {
    async fn run(mut self, mut open: Option<Opened>) {
        loop {
            let mut o = match open.take() {
                Some(o) => o,
                None => match self.reopen().await {
                    Ok(o) => o,
                    Err(e) => {
                        let _ = self.tx.send((self.group.clone(), Msg::Failed(e))).await;
                        return;
                    }
                },
            };
            while let Some(push) = o.queue.recv().await {
                if push["subscription_id"] != o.id {
                    continue;
                }
                if let Some(c) = push["cursor"].as_str() {
                    self.cursor = Some(c.to_string());
                }
                let msg = match push["type"].as_str() {
                    Some("subscription_lagged") => {
                        let c = push["resume_cursor"].as_str().unwrap_or("0").to_string();
                        self.cursor = Some(c.clone());
                        Msg::Lagged(c)
                    }
                    _ => Msg::Push(push),
                };
                let lagged = matches!(msg, Msg::Lagged(_));
                if self.tx.send((self.group.clone(), msg)).await.is_err() {
                    o.unwatch().await;
                    return;
                }
                if lagged {
                    break;
                }
            }
            // The connection is gone, the queue overflowed, or it lagged: open it again.
            o.unwatch().await;
        }
    }

    /// Opens the group's subscription again from its cursor, at its primary by a fresh map,
    /// retrying a lost connection (or no primary) for `RESUBSCRIBE_FOR`.
    async fn reopen(&mut self) -> Result<Opened> {
        let started = Instant::now();
        let policy = self.seed.policy();
        let mut attempt = 1;
        loop {
            let r = match read_map(&self.seed).await {
                Ok((_, gs)) => match gs.iter().find(|g| g.name == self.group) {
                    Some(g) => Opened::open(&self.seed, g, &self.filter, self.cursor.clone()).await,
                    None => Err(Error::Config(format!("group {} left the map", self.group))),
                },
                Err(e) => Err(e),
            };
            match r {
                Ok(o) => {
                    self.cursor = Some(o.cursor.clone());
                    let msg = Msg::Opened {
                        from: o.cursor.clone(),
                        answered: o.answered.clone(),
                    };
                    // A merger that is gone ends this task at its next send.
                    let _ = self.tx.send((self.group.clone(), msg)).await;
                    return Ok(o);
                }
                Err(e) if started.elapsed() < RESUBSCRIBE_FOR && retry(&e) => {
                    tokio::time::sleep(policy.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Errors a reopen waits out: a lost connection, no primary yet, a map in change.
fn retry(e: &Error) -> bool {
    e.is_connection_lost() || matches!(e, Error::Config(_)) || e.is_retryable()
}

/// The merger: the readers' pushes in, events out in order (`Merge`).
struct Merger {
    seed: Client,
    filter: WatchAllFilter,
    readers: BTreeMap<String, JoinHandle<()>>,
    tx: Tx,
    merge: Merge,
    cursor: Arc<Mutex<Option<String>>>,
}

impl Drop for Merger {
    fn drop(&mut self) {
        for r in self.readers.values() {
            r.abort();
        }
    }
}

impl Merger {
    /// Starts `group`'s reader, opened already or from `from`.
    fn start(&mut self, group: String, open: Option<Opened>, from: Option<String>) {
        let reader = Reader {
            seed: self.seed.clone(),
            group: group.clone(),
            filter: self.filter.clone(),
            cursor: open.as_ref().map(|o| o.cursor.clone()).or(from),
            tx: self.tx.clone(),
        };
        self.readers.insert(group, tokio::spawn(reader.run(open)));
    }

    /// Watches the groups of a fresh map it does not watch yet, from all they retain.
    async fn watch_new_groups(&mut self) {
        let Ok((_, gs)) = read_map(&self.seed).await else {
            return;
        };
        for g in gs {
            if !self.readers.contains_key(&g.name) {
                self.start(g.name, None, Some("0".into()));
            }
        }
    }

    fn publish_cursor(&mut self) {
        *lock(&self.cursor) = Some(self.merge.cursor());
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<(String, Msg)>,
        out: mpsc::Sender<Result<Event>>,
    ) {
        let mut tick = tokio::time::interval(MAP_EVERY);
        loop {
            let (events, fail) = tokio::select! {
                m = rx.recv() => match m {
                    Some((group, msg)) => self.handle(&group, msg).await,
                    None => return,
                },
                _ = tick.tick() => {
                    self.watch_new_groups().await;
                    (self.merge.expire().into_iter().map(Ok).collect(), None)
                }
            };
            for e in events {
                if out.send(e).await.is_err() {
                    return;
                }
            }
            self.publish_cursor();
            if let Some(e) = fail {
                let _ = out.send(Err(e)).await;
                return;
            }
        }
    }

    /// One message of `group`'s reader: what goes out now, and an error that ends it all.
    async fn handle(&mut self, group: &str, msg: Msg) -> (Vec<Result<Event>>, Option<Error>) {
        match msg {
            Msg::Opened { from, answered } => {
                let fresh = read_map(&self.seed).await.ok().map(|(_, gs)| gs);
                (self.merge).reopened(group, &from, &answered, fresh.as_deref());
                (Vec::new(), None)
            }
            Msg::Push(push) => match self.merge.push(group, push) {
                Ok((events, to)) => {
                    if let Some(to) = to.filter(|to| !self.readers.contains_key(to)) {
                        self.start(to, None, Some("0".into()));
                    }
                    (events.into_iter().map(Ok).collect(), None)
                }
                Err(e) => (Vec::new(), Some(e)),
            },
            Msg::Lagged(resume_cursor) => {
                (vec![Err(self.merge.lagged(group, resume_cursor))], None)
            }
            Msg::Failed(e) => (Vec::new(), Some(e)),
        }
    }
}
