//! The blocking client in cluster mode (docs/cluster.md, "Clients"). A client made by
//! `connect_with` whose seed's HELLO lists the `"cluster"` feature reads the slot map with
//! `CLUSTER_SHARDS` and sends each instance op to its slot's group primary, over one
//! connection per primary opened on first use. Those connections retry nothing themselves;
//! the routing paces every retry under the seed's policy (`crate::cluster::step`): `MOVED`
//! resends at once to `details.addr` and refreshes the map (at most once per 100 ms), at most
//! `MAX_REDIRECTS` per request; `TRYAGAIN` backs off (from 10 ms) and resends; `CLUSTERDOWN`,
//! `NO_PRIMARY` and a lost or refused primary back off, read the map again (from the seed,
//! else from any member the map named) and resend to the primary it names, so a failover in
//! one group costs that group's requests the election and nothing else. A best-effort BATCH is split by
//! group primary and its results put back in order; LIST_INSTANCES asks every group and
//! merges by id, with one cursor holding each group's (`crate::fanout`); FIND_INSTANCES and
//! SCAN_INSTANCES likewise, and MIGRATE_INSTANCES and DELETE_INSTANCES call every group not
//! yet done and sum the counts (`Client::fan_out`). Other ops go to the seed.

use std::collections::HashMap;

use serde_json::json;

use super::{Client, ConnectOptions};
use crate::cluster::{self, slot_of, Action, Refresh, Route, SlotMap};
use crate::error::{Error, Result};
use crate::fanout;
use crate::ops::{self, BatchMode, BatchOp, BatchResults, Request};
use crate::retry::Stage;

/// What a cluster client keeps beside its seed connection.
pub(super) struct Routing {
    map: SlotMap,
    /// Group primaries' connections by address, opened on first use.
    conns: HashMap<String, Client>,
    opts: ConnectOptions,
    refresh: Refresh,
    /// `MOVED` answers followed.
    moved: u64,
}

impl Routing {
    /// The routing of a fresh seed connection, when its HELLO says cluster mode.
    pub(super) fn detect(seed: &mut Client, opts: &ConnectOptions) -> Option<Routing> {
        let features = seed.hello.as_ref()?.get("features")?.as_array()?;
        if !features.iter().any(|f| f.as_str() == Some("cluster")) {
            return None;
        }
        let mut r = Routing {
            map: SlotMap::default(),
            conns: HashMap::new(),
            opts: ConnectOptions {
                retry: cluster::member_policy(),
                ..opts.clone()
            },
            refresh: Refresh::default(),
            moved: 0,
        };
        r.reload(seed);
        Some(r)
    }

    /// Reads the map from `seed`, else from the first member of the last map that answers
    /// (kept as is when none does: the errors of the next requests say why).
    fn reload(&mut self, seed: &mut Client) {
        let ask = |c: &mut Client| c.call("CLUSTER_SHARDS", json!({})).ok();
        let mut shards = ask(seed);
        for addr in self.map.nodes().to_vec() {
            if shards.is_some() {
                break;
            }
            shards = Client::connect_member(&addr, &self.opts)
                .ok()
                .and_then(|mut c| ask(&mut c));
        }
        if let Some(s) = shards {
            self.map = SlotMap::from_shards(&s);
        }
    }

    /// Closes the connection to `addr` when `e` says it is lost (the next use reconnects).
    fn forget(&mut self, addr: &str, e: &Error) {
        if e.is_connection_lost() || e.is_timeout() || matches!(e, Error::Io(_)) {
            self.conns.remove(addr);
        }
    }

    /// The connection to the primary at `addr`, opened now if need be.
    fn conn(&mut self, addr: &str) -> Result<&mut Client> {
        if !self.conns.contains_key(addr) {
            let c = Client::connect_member(addr, &self.opts)?;
            self.conns.insert(addr.to_string(), c);
        }
        self.conns
            .get_mut(addr)
            .ok_or_else(|| crate::error::Error::Config(format!("no connection to {addr}")))
    }
}

impl Client {
    /// Whether the seed runs in cluster mode (instance ops then route by slot).
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The epoch of the slot map this client routes by (0: none read, or not a cluster).
    pub fn cluster_map_epoch(&self) -> u64 {
        self.cluster.as_ref().map_or(0, |r| r.map.map_epoch)
    }

    /// `MOVED` answers this client followed (0 while its map is current).
    pub fn cluster_redirects(&self) -> u64 {
        self.cluster.as_ref().map_or(0, |r| r.moved)
    }

    /// Reads the slot map again from the seed now (cluster clients; no-op otherwise).
    pub fn refresh_cluster_map(&mut self) {
        if let Some(mut r) = self.cluster.take() {
            r.reload(self);
            self.cluster = Some(r);
        }
    }

    /// `run` for an instance op of a cluster client: to its slot's primary, following
    /// `MOVED` and map changes (see the module's documentation).
    pub(super) fn run_routed<T: serde::de::DeserializeOwned>(
        &mut self,
        req: Request<T>,
        key: &str,
    ) -> Result<T> {
        self.run_at_slot(req, slot_of(key))
    }

    /// `req` to the primary of `slot`, with the retries and redirects of `run_routed`.
    fn run_at_slot<T: serde::de::DeserializeOwned>(
        &mut self,
        req: Request<T>,
        slot: u16,
    ) -> Result<T> {
        let mut route = Route::new(self.retry_policy());
        let mut addr = self.primary_of(slot);
        loop {
            let again = Request::new(req.op, req.params.clone(), req.retry);
            let (r, stage) = match (&addr, self.cluster.as_mut()) {
                (Some(a), Some(routing)) => match routing.conn(a) {
                    Ok(c) => (c.run(again), Stage::Sent),
                    Err(e) => (Err(e), Stage::BeforeSend),
                },
                // No primary known for the slot: wait for the map to name one, else let the
                // seed say why (`CLUSTERDOWN`).
                _ if route.may_wait() => (Err(Error::eof("no primary")), Stage::BeforeSend),
                _ => return self.run_direct(again),
            };
            let e = match r {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match route.after(&e, req.retry, stage) {
                Action::Fail => return Err(e),
                Action::Moved(to) => {
                    self.note_moved();
                    addr = Some(to);
                }
                Action::Follow(to) => addr = Some(to),
                Action::Wait(d, to) => {
                    std::thread::sleep(d);
                    addr = to.or(addr);
                }
                Action::Refresh(d) => {
                    std::thread::sleep(d);
                    if let (Some(a), Some(r)) = (&addr, self.cluster.as_mut()) {
                        r.forget(a, &e);
                    }
                    self.refresh_if_due();
                    addr = self.primary_of(slot);
                }
            }
        }
    }

    /// A `MOVED` followed: counted, and the map read again (at most once per 100 ms).
    fn note_moved(&mut self) {
        if let Some(r) = self.cluster.as_mut() {
            r.moved += 1;
        }
        self.refresh_if_due();
    }

    fn refresh_if_due(&mut self) {
        if self.cluster.as_mut().is_some_and(|r| r.refresh.due()) {
            self.refresh_cluster_map();
        }
    }

    /// A best-effort BATCH of a cluster client: one BATCH per group primary, the results in
    /// the ops' order (a part that failed whole gives each of its ops that error).
    pub(super) fn batch_routed(&mut self, all: &[BatchOp]) -> Result<BatchResults> {
        let map = self
            .cluster
            .as_ref()
            .map(|r| r.map.clone())
            .unwrap_or_default();
        let mut done = Vec::new();
        for (_, idx) in fanout::split_batch(&map, all) {
            let part: Vec<BatchOp> = idx.iter().map(|&i| all[i].clone()).collect();
            let req = ops::batch(BatchMode::BestEffort, &part);
            // Every op of a part routes to one primary: the part follows its first op's slot
            // (an op whose slot moved meanwhile gets its own MOVED entry).
            let key = (part.first()).and_then(|o| cluster::route_key(o.op, &o.params));
            let r = match key {
                Some(k) => self.run_at_slot(req, slot_of(&k)),
                None => self.run_direct(req),
            };
            done.push((idx, r));
        }
        fanout::reassemble(all.len(), done)
    }

    /// A call to every group of a cluster client (LIST, FIND and SCAN_INSTANCES, MIGRATE and
    /// DELETE_INSTANCES): `req(cursor)` to every group's primary with its own cursor (a first
    /// call: every group, no cursor; else the groups the combined `cursor` names), each with
    /// the retries of `run_routed`, the answers merged (`fanout::merge`) with one combined
    /// cursor.
    pub(super) fn fan_out<T>(
        &mut self,
        cursor: Option<&str>,
        req: impl Fn(Option<String>) -> Request<T>,
    ) -> Result<T>
    where
        T: serde::de::DeserializeOwned + fanout::Merge,
    {
        let map = self
            .cluster
            .as_ref()
            .map(|r| r.map.clone())
            .unwrap_or_default();
        let cursors = fanout::cursors(&map, cursor)?;
        if cursors.is_empty() && cursor.is_none() {
            return self.run_direct(req(None));
        }
        let mut parts = Vec::new();
        for (addr, c) in cursors {
            parts.push(self.run_at_group(req(c), &addr)?);
        }
        Ok(fanout::merge(parts))
    }

    /// `req` to the primary of the group that `addr` is a member of (by the map now; `addr`
    /// itself when the map names no such member), with the retries and redirects of
    /// `run_routed`: a primary gone sends it, after a backoff and a new read of the map, to
    /// the group's next primary. The answer, with the address that gave it.
    fn run_at_group<T: serde::de::DeserializeOwned>(
        &mut self,
        req: Request<T>,
        addr: &str,
    ) -> Result<(String, T)> {
        let mut route = Route::new(self.retry_policy());
        let group = (self.cluster.as_ref())
            .and_then(|r| r.map.group_of(addr))
            .map(str::to_string);
        let mut at = self.group_primary(group.as_deref(), addr);
        loop {
            let again = Request::new(req.op, req.params.clone(), req.retry);
            let (r, stage) = match (&at, self.cluster.as_mut()) {
                (Some(a), Some(routing)) => match routing.conn(a) {
                    Ok(c) => (c.run(again), Stage::Sent),
                    Err(e) => (Err(e), Stage::BeforeSend),
                },
                _ => (Err(Error::eof("no primary")), Stage::BeforeSend),
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
                    self.note_moved();
                    at = Some(to);
                }
                Action::Follow(to) => at = Some(to),
                Action::Wait(d, to) => {
                    std::thread::sleep(d);
                    at = to.or(at);
                }
                Action::Refresh(d) => {
                    std::thread::sleep(d);
                    if let (Some(a), Some(r)) = (&at, self.cluster.as_mut()) {
                        r.forget(a, &e);
                    }
                    self.refresh_if_due();
                    at = self.group_primary(group.as_deref(), addr);
                }
            }
        }
    }

    /// The primary of `group` by the map now (`None`: it has none now), or `addr` when the
    /// map named no group at `addr`.
    fn group_primary(&self, group: Option<&str>, addr: &str) -> Option<String> {
        match (group, self.cluster.as_ref()) {
            (Some(g), Some(r)) => r.map.primary_of_group(g).map(str::to_string),
            _ => Some(addr.to_string()),
        }
    }

    fn primary_of(&self, slot: u16) -> Option<String> {
        let r = self.cluster.as_ref()?;
        r.map.primary_of(slot).map(str::to_string)
    }

    /// A connection to one group primary: as `connect_with`, without cluster routing of its
    /// own.
    pub(super) fn connect_member(addr: &str, opts: &ConnectOptions) -> Result<Client> {
        let addrs = vec![addr.to_string()];
        let (mut c, at) = Client::connect_from(&addrs, 0, opts, opts.retry)?;
        c.recipe = Some(super::Recipe {
            addrs,
            at,
            opts: opts.clone(),
        });
        Ok(c)
    }
}
