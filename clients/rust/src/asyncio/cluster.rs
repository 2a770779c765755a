//! The tokio client in cluster mode (docs/cluster.md, "Clients"), as the blocking client's
//! (`blocking::cluster`) with the same shared map logic (`crate::cluster`). A client made by
//! `connect` whose seed's HELLO lists the `"cluster"` feature reads the slot map with
//! `CLUSTER_SHARDS` and sends each instance op to its slot's group primary, over one client
//! per primary opened on first use. Those clients retry nothing themselves; the routing paces
//! every retry under the seed's policy (`crate::cluster::step`), as the blocking client does:
//! `MOVED` at once (at most `MAX_REDIRECTS`), `TRYAGAIN` after a backoff, and a group whose
//! primary is gone (`CLUSTERDOWN`, `NO_PRIMARY`, a lost or refused connection) after a
//! backoff and a new read of the map, from the seed or any member the map named. A best-effort BATCH is split by group primary, and LIST, FIND and SCAN_INSTANCES, MIGRATE
//! and DELETE_INSTANCES ask every group (`crate::fanout`, `Client::fan_out`), as in the
//! blocking client. Other ops go to the seed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde_json::json;

use super::{lock, Client, ConnectOptions};
use crate::cluster::{self, slot_of, Action, Refresh, Route, SlotMap};
use crate::error::{Error, Result};
use crate::fanout;
use crate::ops::{self, BatchMode, BatchOp, BatchResults, Request};
use crate::retry::Stage;

/// What a cluster client keeps beside its seed connection, shared by its clones.
pub(super) struct Routing {
    map: Mutex<SlotMap>,
    /// Group primaries' clients by address, opened on first use.
    conns: tokio::sync::Mutex<HashMap<String, Client>>,
    opts: ConnectOptions,
    refresh: Mutex<Refresh>,
    /// `MOVED` answers followed.
    moved: AtomicU64,
}

impl Routing {
    /// The routing of a fresh seed client, when its HELLO says cluster mode (map read from it).
    pub(super) async fn detect(seed: &Client, opts: &ConnectOptions) -> Option<Routing> {
        let hello = seed.hello_result()?;
        if !hello.features.iter().any(|f| f == "cluster") {
            return None;
        }
        let r = Routing {
            map: Mutex::new(SlotMap::default()),
            conns: tokio::sync::Mutex::new(HashMap::new()),
            opts: ConnectOptions {
                retry: cluster::member_policy(),
                ..opts.clone()
            },
            refresh: Mutex::new(Refresh::default()),
            moved: AtomicU64::new(0),
        };
        r.reload(seed).await;
        Some(r)
    }

    /// Reads the map from `seed`, else from the first member of the last map that answers
    /// (kept as is when none does: the errors of the next requests say why).
    async fn reload(&self, seed: &Client) {
        let mut shards = seed.call("CLUSTER_SHARDS", json!({})).await.ok();
        let nodes = lock(&self.map).nodes().to_vec();
        for addr in nodes {
            if shards.is_some() {
                break;
            }
            if let Ok(c) = Client::connect_plain(&addr, self.opts.clone()).await {
                shards = c.call("CLUSTER_SHARDS", json!({})).await.ok();
            }
        }
        if let Some(s) = shards {
            *lock(&self.map) = SlotMap::from_shards(&s);
        }
    }

    /// Closes the client of `addr` when `e` says its connection is lost (the next use
    /// reconnects).
    async fn forget(&self, addr: &str, e: &Error) {
        if e.is_connection_lost() || e.is_timeout() || matches!(e, Error::Io(_)) {
            self.conns.lock().await.remove(addr);
        }
    }

    /// The client of the primary at `addr` (a clone sharing its connection), opened now if
    /// need be.
    async fn conn(&self, addr: &str) -> Result<Client> {
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(addr) {
            return Ok(c.clone());
        }
        let c = Client::connect_plain(addr, self.opts.clone()).await?;
        conns.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    fn primary_of(&self, slot: u16) -> Option<String> {
        lock(&self.map).primary_of(slot).map(str::to_string)
    }
}

impl Client {
    /// Whether the seed runs in cluster mode (instance ops then route by slot).
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster.get().is_some()
    }

    /// The epoch of the slot map this client routes by (0: none read, or not a cluster).
    pub fn cluster_map_epoch(&self) -> u64 {
        (self.inner.cluster.get()).map_or(0, |r| lock(&r.map).map_epoch)
    }

    /// `MOVED` answers this client followed (0 while its map is current).
    pub fn cluster_redirects(&self) -> u64 {
        (self.inner.cluster.get()).map_or(0, |r| r.moved.load(Ordering::Relaxed))
    }

    /// Reads the slot map again from the seed now (cluster clients; no-op otherwise).
    pub async fn refresh_cluster_map(&self) {
        if let Some(r) = self.inner.cluster.get() {
            r.reload(self).await;
        }
    }

    /// `run` for an instance op of a cluster client: to its slot's primary, following `MOVED`
    /// and map changes (see the module's documentation).
    pub(super) async fn run_routed<T: DeserializeOwned>(
        &self,
        req: Request<T>,
        key: &str,
    ) -> Result<T> {
        self.run_at_slot(req, slot_of(key)).await
    }

    /// `req` to the primary of `slot`, with the retries and redirects of `run_routed`.
    async fn run_at_slot<T: DeserializeOwned>(&self, req: Request<T>, slot: u16) -> Result<T> {
        let Some(routing) = self.inner.cluster.get() else {
            return self.run_direct(req).await;
        };
        let mut route = Route::new(self.inner.opts.retry);
        let mut addr = routing.primary_of(slot);
        loop {
            let again = Request::new(req.op, req.params.clone(), req.retry);
            let (r, stage) = match &addr {
                Some(a) => match routing.conn(a).await {
                    // The member's client has no routing of its own: straight to its primary.
                    Ok(c) => (c.run_direct(again).await, Stage::Sent),
                    Err(e) => (Err(e), Stage::BeforeSend),
                },
                // No primary known for the slot: wait for the map to name one, else let the
                // seed say why (`CLUSTERDOWN`).
                None if route.may_wait() => (Err(Error::eof("no primary")), Stage::BeforeSend),
                None => return self.run_direct(again).await,
            };
            let e = match r {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match route.after(&e, req.retry, stage) {
                Action::Fail => return Err(e),
                Action::Moved(to) => {
                    routing.moved.fetch_add(1, Ordering::Relaxed);
                    self.refresh_if_due(routing).await;
                    addr = Some(to);
                }
                Action::Follow(to) => addr = Some(to),
                Action::Wait(d, to) => {
                    tokio::time::sleep(d).await;
                    addr = to.or(addr);
                }
                Action::Refresh(d) => {
                    tokio::time::sleep(d).await;
                    if let Some(a) = &addr {
                        routing.forget(a, &e).await;
                    }
                    self.refresh_if_due(routing).await;
                    addr = routing.primary_of(slot);
                }
            }
        }
    }

    async fn refresh_if_due(&self, routing: &Routing) {
        let due = lock(&routing.refresh).due();
        if due {
            routing.reload(self).await;
        }
    }

    fn map_now(&self) -> SlotMap {
        (self.inner.cluster.get()).map_or_else(SlotMap::default, |r| lock(&r.map).clone())
    }

    /// A best-effort BATCH of a cluster client: one BATCH per group primary, one after
    /// another, the results in the ops' order (a part that failed whole gives each of its ops
    /// that error).
    pub(super) async fn batch_routed(&self, all: &[BatchOp]) -> Result<BatchResults> {
        let map = self.map_now();
        let mut done = Vec::new();
        for (_, idx) in fanout::split_batch(&map, all) {
            let part: Vec<BatchOp> = idx.iter().map(|&i| all[i].clone()).collect();
            let req = ops::batch(BatchMode::BestEffort, &part);
            // Every op of a part routes to one primary: the part follows its first op's slot
            // (an op whose slot moved meanwhile gets its own MOVED entry).
            let key = (part.first()).and_then(|o| cluster::route_key(o.op, &o.params));
            let r = match key {
                Some(k) => self.run_at_slot(req, slot_of(&k)).await,
                None => self.run_direct(req).await,
            };
            done.push((idx, r));
        }
        fanout::reassemble(all.len(), done)
    }

    /// A call to every group of a cluster client (LIST, FIND and SCAN_INSTANCES, MIGRATE and
    /// DELETE_INSTANCES), as the blocking client's `fan_out`: `req(cursor)` to every group's
    /// primary with its own cursor, one after another, each with the retries of
    /// `run_routed`, the answers merged (`fanout::merge`) with one combined cursor.
    pub(super) async fn fan_out<T>(
        &self,
        cursor: Option<&str>,
        req: impl Fn(Option<String>) -> Request<T>,
    ) -> Result<T>
    where
        T: DeserializeOwned + fanout::Merge,
    {
        let cursors = fanout::cursors(&self.map_now(), cursor)?;
        if cursors.is_empty() && cursor.is_none() {
            return self.run_direct(req(None)).await;
        }
        let mut parts = Vec::new();
        for (addr, c) in cursors {
            parts.push(self.run_at_group(req(c), &addr).await?);
        }
        Ok(fanout::merge(parts))
    }

    /// `req` to the primary of the group that `addr` is a member of (as the blocking client's
    /// `run_at_group`); the answer, with the address that gave it.
    async fn run_at_group<T: DeserializeOwned>(
        &self,
        req: Request<T>,
        addr: &str,
    ) -> Result<(String, T)> {
        let Some(routing) = self.inner.cluster.get() else {
            return Ok((addr.to_string(), self.run_direct(req).await?));
        };
        let mut route = Route::new(self.inner.opts.retry);
        let group = lock(&routing.map).group_of(addr).map(str::to_string);
        let primary = |group: Option<&str>| match group {
            Some(g) => lock(&routing.map).primary_of_group(g).map(str::to_string),
            None => Some(addr.to_string()),
        };
        let mut at = primary(group.as_deref());
        loop {
            let again = Request::new(req.op, req.params.clone(), req.retry);
            let (r, stage) = match &at {
                Some(a) => match routing.conn(a).await {
                    Ok(c) => (c.run_direct(again).await, Stage::Sent),
                    Err(e) => (Err(e), Stage::BeforeSend),
                },
                None => (Err(Error::eof("no primary")), Stage::BeforeSend),
            };
            let e = match r {
                Ok(v) => return Ok((at.unwrap_or_else(|| addr.to_string()), v)),
                Err(e) => e,
            };
            match route.after(&e, req.retry, stage) {
                Action::Fail if at.is_none() => {
                    return Err(Error::Config(format!("the group of {addr} has no primary")))
                }
                Action::Fail => return Err(e),
                Action::Moved(to) => {
                    routing.moved.fetch_add(1, Ordering::Relaxed);
                    self.refresh_if_due(routing).await;
                    at = Some(to);
                }
                Action::Follow(to) => at = Some(to),
                Action::Wait(d, to) => {
                    tokio::time::sleep(d).await;
                    at = to.or(at);
                }
                Action::Refresh(d) => {
                    tokio::time::sleep(d).await;
                    if let Some(a) = &at {
                        routing.forget(a, &e).await;
                    }
                    self.refresh_if_due(routing).await;
                    at = primary(group.as_deref());
                }
            }
        }
    }
}
