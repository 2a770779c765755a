//! `subscribe_all` of a blocking cluster client (docs/cluster.md, "Clients"): one WATCH_ALL
//! per group, each on a connection of its own to the group's primary, read by a thread of its
//! own; the caller's iterator merges their pushes, each instance's events in order across slot
//! moves (the rule is `crate::watch_fanout::Order`, as in the tokio client's
//! `asyncio::watch_fanout`). A group's thread opens its subscription again from its own cursor,
//! at the primary a fresh map names, after a lost connection or a lag. A group the map gains,
//! or that a `slots_moved` names, is watched from `from_cursor: "0"`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::subscription::RESUBSCRIBE_FOR;
use super::{Client, ConnectOptions};
use crate::error::{Error, Result};
use crate::fanout;
use crate::ops::{self, Event, WatchAllFilter};
use crate::watch_fanout::{groups, Group, Merge, Msg, MAP_EVERY};

/// How long a group's thread waits for a push before it looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// Messages from the groups' threads not yet merged; a thread waits when it is full.
const QUEUE_MAX: usize = 4096;

type Tx = mpsc::SyncSender<(String, Msg)>;

/// Where and how a group's thread connects: the seed's addresses (for the map) and options.
#[derive(Clone)]
struct Dial {
    seeds: Vec<String>,
    opts: ConnectOptions,
}

impl Dial {
    /// The map, read on `conn` (connected to a seed first when `None`; dropped when the read
    /// fails, so the next one connects again).
    fn read_map_on(&self, conn: &mut Option<Client>) -> Result<(u64, Vec<Group>)> {
        let seed = match conn {
            Some(c) => c,
            None => conn.insert(Client::connect_any(&self.seeds, &self.opts)?),
        };
        let read = seed.call("CLUSTER_SHARDS", json!({}));
        if read.is_err() {
            *conn = None;
        }
        Ok(groups(&read?))
    }

    /// The map, read on a connection of its own (a group's thread, reopening).
    fn read_map(&self) -> Result<(u64, Vec<Group>)> {
        self.read_map_on(&mut None)
    }

    /// WATCH_ALL at `g`'s primary from `from` (else live): the connection, the subscription's
    /// id and the answer's cursor.
    fn open(&self, g: &Group, f: &WatchAllFilter, from: Option<String>) -> Result<Opened> {
        let Some(addr) = &g.primary else {
            return Err(Error::Config(format!("group {} has no primary", g.name)));
        };
        let mut client = Client::connect_member(addr, &self.opts)?;
        let f = WatchAllFilter {
            from_cursor: from.clone(),
            ..f.clone()
        };
        let w = client.run(ops::watch_all(&f))?;
        Ok(Opened {
            client,
            id: w.subscription_id,
            cursor: from.unwrap_or_else(|| w.cursor.clone()),
            answered: w.cursor,
        })
    }
}

struct Opened {
    client: Client,
    id: Value,
    cursor: String,
    answered: String,
}

/// WATCH_ALL over every group of the cluster `seed` belongs to, merged (`Merge`).
pub struct ClusterSubscription {
    dial: Dial,
    /// The merger's connection for its map reads (every `MAP_EVERY`), kept between them.
    map_conn: Option<Client>,
    filter: WatchAllFilter,
    merge: Merge,
    rx: mpsc::Receiver<(String, Msg)>,
    tx: Tx,
    stop: Arc<AtomicBool>,
    readers: BTreeMap<String, JoinHandle<()>>,
    ready: VecDeque<Result<Event>>,
    cursor: String,
    map_read: Instant,
    ended: bool,
}

impl ClusterSubscription {
    /// Opens one WATCH_ALL per group of `seed`'s map. `from_cursor` may be a combined cursor
    /// (`cursor()` of an earlier one) or one cursor for every group.
    pub(super) fn open(seed: &Client, filter: WatchAllFilter) -> Result<ClusterSubscription> {
        let recipe = seed.recipe.as_ref();
        let dial = Dial {
            seeds: recipe.map(|r| r.addrs.clone()).unwrap_or_default(),
            opts: ConnectOptions {
                retry: crate::cluster::member_policy(),
                ..recipe.map(|r| r.opts.clone()).unwrap_or_default()
            },
        };
        let start: BTreeMap<String, String> = match filter.from_cursor.as_deref() {
            Some(c) if c.starts_with("cluster:") => fanout::decode_cursor(c)?,
            _ => BTreeMap::new(),
        };
        let every = (filter.from_cursor.clone()).filter(|c| !c.starts_with("cluster:"));
        let (_, gs) = dial.read_map()?;
        let mut opened = Vec::new();
        for g in &gs {
            let from = start.get(&g.name).cloned().or(every.clone());
            opened.push((g.name.clone(), dial.open(g, &filter, from)?));
        }
        let (tx, rx) = mpsc::sync_channel(QUEUE_MAX);
        let mut s = ClusterSubscription {
            dial,
            map_conn: None,
            merge: Merge::new(&gs),
            filter,
            rx,
            tx,
            stop: Arc::new(AtomicBool::new(false)),
            readers: BTreeMap::new(),
            ready: VecDeque::new(),
            cursor: String::new(),
            map_read: Instant::now(),
            ended: false,
        };
        for (group, o) in opened {
            s.merge.opened(&group, &o.cursor, &o.answered);
            s.start(group, Some(o), None);
        }
        s.cursor = s.merge.cursor();
        Ok(s)
    }

    /// The combined cursor after the last event delivered (`from_cursor` of a later one).
    pub fn cursor(&self) -> &str {
        &self.cursor
    }

    fn start(&mut self, group: String, open: Option<Opened>, from: Option<String>) {
        let reader = Reader {
            dial: self.dial.clone(),
            group: group.clone(),
            filter: self.filter.clone(),
            cursor: open.as_ref().map(|o| o.cursor.clone()).or(from),
            tx: self.tx.clone(),
            stop: self.stop.clone(),
        };
        let name = format!("smdb-watch-{group}");
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || reader.run(open));
        match spawned {
            Ok(h) => drop(self.readers.insert(group, h)),
            Err(e) => self.ready.push_back(Err(Error::Io(e))),
        }
    }

    /// The next event, waiting at most `wait` (`None`: as long as it takes): `Ok(None)` when
    /// none came in time.
    pub fn next_timeout(&mut self, wait: Option<Duration>) -> Result<Option<Event>> {
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            if let Some(e) = self.ready.pop_front() {
                return e.map(Some);
            }
            if self.ended {
                return Err(Error::Config("the subscription has ended".into()));
            }
            let tick = MAP_EVERY.saturating_sub(self.map_read.elapsed());
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(None);
            }
            match self.rx.recv_timeout(left.map_or(tick, |l| l.min(tick))) {
                Ok((group, msg)) => self.handle(&group, msg),
                Err(RecvTimeoutError::Timeout) if self.map_read.elapsed() >= MAP_EVERY => {
                    self.watch_new_groups();
                    self.ready.extend(self.merge.expire().into_iter().map(Ok));
                    self.map_read = Instant::now();
                }
                Err(RecvTimeoutError::Timeout) => {}
                // This holds a sender itself: never disconnected.
                Err(RecvTimeoutError::Disconnected) => self.ended = true,
            }
            self.cursor = self.merge.cursor();
        }
    }

    fn handle(&mut self, group: &str, msg: Msg) {
        match msg {
            Msg::Opened { from, answered } => {
                let fresh = self.dial.read_map_on(&mut self.map_conn).ok();
                let fresh = fresh.map(|(_, gs)| gs);
                (self.merge).reopened(group, &from, &answered, fresh.as_deref());
            }
            Msg::Push(push) => match self.merge.push(group, push) {
                Ok((events, to)) => {
                    if let Some(to) = to.filter(|to| !self.readers.contains_key(to)) {
                        self.start(to, None, Some("0".into()));
                    }
                    self.ready.extend(events.into_iter().map(Ok));
                }
                Err(e) => self.ready.push_back(Err(e)),
            },
            Msg::Lagged(c) => self.ready.push_back(Err(self.merge.lagged(group, c))),
            Msg::Failed(e) => {
                self.ready.push_back(Err(e));
                self.ended = true;
            }
        }
    }

    /// Watches the groups of a fresh map it does not watch yet, from all they retain.
    fn watch_new_groups(&mut self) {
        let Ok((_, gs)) = self.dial.read_map_on(&mut self.map_conn) else {
            return;
        };
        for g in gs {
            if !self.readers.contains_key(&g.name) {
                self.start(g.name, None, Some("0".into()));
            }
        }
    }
}

impl Drop for ClusterSubscription {
    fn drop(&mut self) {
        // Each thread sees it within `POLL`, ends its subscription and exits.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A group's thread.
struct Reader {
    dial: Dial,
    group: String,
    filter: WatchAllFilter,
    cursor: Option<String>,
    tx: Tx,
    stop: Arc<AtomicBool>,
}

impl Reader {
    fn run(mut self, mut open: Option<Opened>) {
        while !self.stop.load(Ordering::Relaxed) {
            let mut o = match open.take() {
                Some(o) => o,
                None => match self.reopen() {
                    Ok(o) => o,
                    Err(e) => {
                        let _ = self.tx.send((self.group.clone(), Msg::Failed(e)));
                        return;
                    }
                },
            };
            if self.read(&mut o).is_err() {
                return;
            }
        }
    }

    /// Forwards `o`'s pushes until its connection is lost, it lags or the merger stops.
    /// `Err` when the merger is gone.
    fn read(&mut self, o: &mut Opened) -> std::result::Result<(), ()> {
        while !self.stop.load(Ordering::Relaxed) {
            let push = match o.client.next_push(Some(POLL)) {
                Ok(Some(p)) => p,
                Ok(None) => continue,
                Err(_) => return Ok(()),
            };
            if push["subscription_id"] != o.id {
                continue;
            }
            if let Some(c) = push["cursor"].as_str() {
                self.cursor = Some(c.to_string());
            }
            let lag = push["type"] == "subscription_lagged";
            let msg = match lag {
                true => {
                    let c = push["resume_cursor"].as_str().unwrap_or("0").to_string();
                    self.cursor = Some(c.clone());
                    Msg::Lagged(c)
                }
                false => Msg::Push(push),
            };
            self.tx.send((self.group.clone(), msg)).map_err(|_| ())?;
            if lag {
                return Ok(());
            }
        }
        let _ = o.client.unwatch(&o.id);
        Ok(())
    }

    /// Opens the group's subscription again from its cursor, at its primary by a fresh map,
    /// retrying for `RESUBSCRIBE_FOR`; tells the merger where it resumed.
    fn reopen(&mut self) -> Result<Opened> {
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let r = self.dial.read_map().and_then(|(_, gs)| {
                match gs.iter().find(|g| g.name == self.group) {
                    Some(g) => self.dial.open(g, &self.filter, self.cursor.clone()),
                    None => Err(Error::Config(format!("group {} left the map", self.group))),
                }
            });
            match r {
                Ok(o) => {
                    self.cursor = Some(o.cursor.clone());
                    let msg = Msg::Opened {
                        from: o.cursor.clone(),
                        answered: o.answered.clone(),
                    };
                    let _ = self.tx.send((self.group.clone(), msg));
                    return Ok(o);
                }
                Err(e) if started.elapsed() < RESUBSCRIBE_FOR && retry(&e) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(e);
                    }
                    std::thread::sleep(self.dial.opts.retry.backoff(attempt).max(POLL));
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
