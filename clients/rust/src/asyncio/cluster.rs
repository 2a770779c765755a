//! The tokio client in cluster mode (docs/cluster.md, "Clients"), as the blocking client's
//! (`blocking::cluster`) with the same shared map logic (`crate::cluster`). A client made by
//! `connect` whose seed's HELLO lists the `"cluster"` feature reads the slot map with
//! `CLUSTER_SHARDS` and sends each instance op to its slot's group primary, over one client
//! per primary opened on first use with the seed's options, so each retries as §12 says
//! (`TRYAGAIN`, `CLUSTERDOWN` and `NO_PRIMARY` with backoff, `READ_ONLY_MODE` to the named
//! primary, lost connections). On top of that: `MOVED` resends at once to `details.addr` and
//! refreshes the map (at most once per 100 ms); `CLUSTERDOWN` / `NO_PRIMARY` that outlast the
//! retries refresh it and resend when it names another primary; at most `MAX_REDIRECTS` per
//! request. A best-effort BATCH is split by group primary and LIST_INSTANCES asks every group
//! (`crate::fanout`), as in the blocking client. Other ops go to the seed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde_json::json;

use super::{lock, Client, ConnectOptions};
use crate::cluster::{self, slot_of, Refresh, SlotMap, Step, MAX_REDIRECTS};
use crate::error::Result;
use crate::fanout;
use crate::ops::{self, BatchMode, BatchOp, BatchResults, InstancePage, ListFilter, Request};

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
            opts: opts.clone(),
            refresh: Mutex::new(Refresh::default()),
            moved: AtomicU64::new(0),
        };
        r.reload(seed).await;
        Some(r)
    }

    /// Reads the map from `seed` (kept as is when that fails: the errors of the next requests
    /// say why).
    async fn reload(&self, seed: &Client) {
        if let Ok(shards) = seed.call("CLUSTER_SHARDS", json!({})).await {
            *lock(&self.map) = SlotMap::from_shards(&shards);
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
        let slot = slot_of(key);
        let Some(routing) = self.inner.cluster.get() else {
            return self.run_direct(req).await;
        };
        let mut addr = routing.primary_of(slot);
        let mut redirects = 0;
        loop {
            let again = Request::new(req.op, req.params.clone(), req.retry);
            let r = match &addr {
                Some(a) => match routing.conn(a).await {
                    // The member's client has no routing of its own: straight to its primary.
                    Ok(c) => c.run_direct(again).await,
                    Err(e) => Err(e),
                },
                None => self.run_direct(again).await,
            };
            let e = match r {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let step = cluster::step(&e);
            if step == Step::Fail || redirects >= MAX_REDIRECTS {
                return Err(e);
            }
            redirects += 1;
            let due = lock(&routing.refresh).due();
            if due {
                routing.reload(self).await;
            }
            match step {
                Step::Moved(to) => {
                    routing.moved.fetch_add(1, Ordering::Relaxed);
                    addr = Some(to);
                }
                _ => {
                    let fresh = routing.primary_of(slot);
                    if fresh.is_none() || fresh == addr {
                        return Err(e);
                    }
                    addr = fresh;
                }
            }
        }
    }

    fn map_now(&self) -> SlotMap {
        (self.inner.cluster.get()).map_or_else(SlotMap::default, |r| lock(&r.map).clone())
    }

    /// The client of the primary at `addr`, or this one when not a cluster client.
    async fn member(&self, addr: Option<&str>) -> Result<Client> {
        match (addr, self.inner.cluster.get()) {
            (Some(a), Some(routing)) => routing.conn(a).await,
            _ => Ok(self.clone()),
        }
    }

    /// A best-effort BATCH of a cluster client: one BATCH per group primary, one after
    /// another, the results in the ops' order (a part that failed whole gives each of its ops
    /// that error).
    pub(super) async fn batch_routed(&self, all: &[BatchOp]) -> Result<BatchResults> {
        let map = self.map_now();
        let mut done = Vec::new();
        for (addr, idx) in fanout::split_batch(&map, all) {
            let part: Vec<BatchOp> = idx.iter().map(|&i| all[i].clone()).collect();
            let req = ops::batch(BatchMode::BestEffort, &part);
            let r = match self.member(addr.as_deref()).await {
                Ok(c) => c.run_direct(req).await,
                Err(e) => Err(e),
            };
            done.push((idx, r));
        }
        fanout::reassemble(all.len(), done)
    }

    /// LIST_INSTANCES of a cluster client: a page from every group primary (or those the
    /// cursor names), merged by id, with one combined cursor.
    pub(super) async fn list_routed(&self, filter: &ListFilter) -> Result<InstancePage> {
        let cursors = fanout::cursors(&self.map_now(), filter.cursor.as_deref())?;
        if cursors.is_empty() && filter.cursor.is_none() {
            return self.run_direct(ops::list_instances(filter)).await;
        }
        let mut pages = Vec::new();
        for (addr, cursor) in cursors {
            let f = ListFilter {
                cursor,
                ..filter.clone()
            };
            let c = self.member(Some(&addr)).await?;
            pages.push((addr, c.run_direct(ops::list_instances(&f)).await?));
        }
        Ok(fanout::merge_pages(pages))
    }
}
