//! The async client on tokio (feature `tokio`). A `Client` is cheap to clone and safe to share
//! between tasks: every call is pipelined on one connection (answers matched by id), so eight
//! tasks calling at once keep eight requests in flight. A lost connection is replaced on the
//! next call; calls that are safe to repeat are retried with capped backoff (see `retry`).
//!
//! Given every member of a failover cluster (`Client::connect("a:7401,b:7401,c:7401", ..)`),
//! typed calls follow the primary as the blocking client's do (docs/ha.md, "Clients";
//! `retry::next_step`): a follower's `READ_ONLY_MODE` sends the request to the primary it names,
//! `NO_PRIMARY` (not maybe committed), `SHUTTING_DOWN` and a lost or refused connection move to
//! the next address after a backoff, and a request that may have executed is resent only when
//! it is safe.

mod call;
mod cluster;
mod conn;
mod fast;
mod lifecycle;
mod reader;
mod scan;
mod subscription;
#[cfg(test)]
mod tests;
mod watch_fanout;
mod write;

pub use conn::SUBSCRIPTION_QUEUE_MAX;
pub use subscription::Subscription;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde_json::Value;

pub use crate::blocking::ConnectOptions;
use crate::error::{Error, Result};
use crate::ops::{self, *};
use crate::retry::{next_step, Next, Stage};
use conn::Conn;
use reader::{Answer, Expect};
use smdb_protocol::op::Op;
use write::Params;

/// Redirects (`READ_ONLY_MODE` naming a primary) one typed call follows beyond its policy's
/// tries, as the blocking client's.
const EXTRA_REDIRECTS: u32 = 2;

#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// Never empty (`connect` refuses an empty list).
    addrs: Mutex<Vec<String>>,
    /// The index in `addrs` of the address connections go to.
    at: Mutex<usize>,
    opts: ConnectOptions,
    conn: Mutex<Option<Arc<Conn>>>,
    /// One reconnect at a time; the others wait for its connection.
    reconnecting: tokio::sync::Mutex<()>,
    hello: Mutex<Option<Hello>>,
    /// Cluster mode (the seed's HELLO lists `"cluster"`): the slot map and the group
    /// primaries' clients (`cluster`); set once, right after the seed's HELLO.
    cluster: std::sync::OnceLock<cluster::Routing>,
}

impl Client {
    /// Connects, sends HELLO and, with a token, AUTH; retries per `opts.retry` while the server
    /// is unreachable or refuses for a retryable reason. `addr` may list several addresses
    /// separated by commas (the members of a failover cluster): each try takes the next.
    ///
    /// When the seed's HELLO lists the `"cluster"` feature, the client reads the slot map and
    /// routes instance ops by slot (`cluster`; docs/cluster.md, "Clients").
    pub async fn connect(addr: &str, opts: ConnectOptions) -> Result<Client> {
        let c = Client::connect_plain(addr, opts.clone()).await?;
        if let Some(r) = cluster::Routing::detect(&c, &opts).await {
            // Just made: nothing else has set it.
            let _ = c.inner.cluster.set(r);
        }
        Ok(c)
    }

    /// `connect` without cluster routing (a group primary's client uses it).
    async fn connect_plain(addr: &str, opts: ConnectOptions) -> Result<Client> {
        let addrs = crate::blocking::parse_addrs(addr);
        if addrs.is_empty() {
            return Err(Error::Config("no server address given".into()));
        }
        let c = Client {
            inner: Arc::new(Inner {
                addrs: Mutex::new(addrs),
                at: Mutex::new(0),
                opts,
                conn: Mutex::new(None),
                reconnecting: tokio::sync::Mutex::new(()),
                hello: Mutex::new(None),
                cluster: std::sync::OnceLock::new(),
            }),
        };
        c.connection().await?;
        Ok(c)
    }

    /// The address connections go to now.
    pub fn address(&self) -> String {
        let at = *lock(&self.inner.at);
        lock(&self.inner.addrs)[at].clone()
    }

    /// Connections go to the next address from now on (one address: no change).
    fn next_address(&self) {
        let n = lock(&self.inner.addrs).len();
        let mut at = lock(&self.inner.at);
        *at = (*at + 1) % n;
    }

    /// Connections go to `addr` (a primary a follower named) from now on.
    fn go_to(&self, addr: String) {
        let mut addrs = lock(&self.inner.addrs);
        let i = match addrs.iter().position(|a| *a == addr) {
            Some(i) => i,
            None => {
                addrs.push(addr);
                addrs.len() - 1
            }
        };
        *lock(&self.inner.at) = i;
    }

    /// The HELLO result of the current connection.
    pub fn hello_result(&self) -> Option<Hello> {
        lock(&self.inner.hello).clone()
    }

    fn current(&self) -> Option<Arc<Conn>> {
        lock(&self.inner.conn).clone().filter(|c| c.is_alive())
    }

    /// The live connection, connecting (HELLO, AUTH) when there is none.
    async fn connection(&self) -> Result<Arc<Conn>> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _one = self.inner.reconnecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let policy = self.inner.opts.retry;
        let mut attempt = 1;
        loop {
            match self.open().await {
                Ok(c) => {
                    *lock(&self.inner.conn) = Some(c.clone());
                    return Ok(c);
                }
                Err(e) if policy.should_retry(&e, Retry::Safe, attempt) => {
                    self.next_address();
                    tokio::time::sleep(policy.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn open(&self) -> Result<Arc<Conn>> {
        let o = &self.inner.opts;
        let conn = Conn::open(&self.address(), o).await?;
        let hello = ops::hello(&o.client_name);
        let h = call_on(&conn, hello.op.into(), params_of(&hello.params), None).await?;
        *lock(&self.inner.hello) = Some(hello.decode_raw(&h)?);
        if let Some(token) = &o.token {
            let a = ops::auth(token);
            call_on(&conn, a.op.into(), params_of(&a.params), None).await?;
        }
        Ok(conn)
    }

    /// Sends one request (raw op name and params) and returns its `result`. No retry.
    pub async fn call(&self, op: &str, params: Value) -> Result<Value> {
        let conn = self.connection().await?;
        let raw = call_on(&conn, Cow::Owned(op.to_string()), params_of(&params), None).await?;
        serde_json::from_str(raw.get())
            .map_err(|e| Error::Protocol(format!("{op} result is not JSON: {e}")))
    }

    /// Sends one typed request and decodes its result, retrying per the policy where that is
    /// safe, on a new connection when the old one was lost.
    ///
    /// In cluster mode an instance op goes to its slot's group primary instead (`cluster`).
    pub async fn run<T: DeserializeOwned>(&self, req: Request<T>) -> Result<T> {
        if self.inner.cluster.get().is_some() {
            if let Some(key) = crate::cluster::route_key(req.op, &req.params) {
                return self.run_routed(req, &key).await;
            }
        }
        self.run_direct(req).await
    }

    /// `run` on this client's own connection (the seed's, in cluster mode).
    async fn run_direct<T: DeserializeOwned>(&self, req: Request<T>) -> Result<T> {
        let params = params_of(&req.params);
        self.run_params(req.op, params, req.retry, Expect::Raw, decode_answer)
            .await
    }

    /// `run` for params of any type the client writes (`None`: no params member), with the
    /// result expected as `expect` says and decoded by `decode`.
    async fn run_params<T, P: Params + ?Sized>(
        &self,
        op: &'static str,
        params: Option<&P>,
        retry: Retry,
        expect: Expect,
        decode: fn(&'static str, Answer) -> Result<T>,
    ) -> Result<T> {
        let policy = self.inner.opts.retry;
        let (mut attempt, mut redirects) = (1, 0);
        loop {
            let (r, stage) = match self.connection().await {
                Ok(conn) => (
                    conn.call(op.into(), params, None, expect).await,
                    Stage::Sent,
                ),
                Err(e) => (Err(e), Stage::BeforeSend),
            };
            let e = match r {
                Ok(answer) => return decode(op, answer),
                Err(e) => e,
            };
            match next_step(&e, retry, stage) {
                Next::Fail => return Err(e),
                Next::Redirect(primary) => {
                    if redirects >= policy.attempts + EXTRA_REDIRECTS {
                        return Err(e);
                    }
                    if redirects > 0 {
                        // Followers pointing at each other, or at a primary just lost.
                        tokio::time::sleep(policy.backoff(redirects)).await;
                    }
                    redirects += 1;
                    self.drop_connection();
                    self.go_to(primary);
                }
                next @ (Next::Again | Next::Elsewhere) => {
                    if attempt >= policy.attempts {
                        return Err(e);
                    }
                    if e.is_shutting_down() || next == Next::Elsewhere {
                        self.drop_connection();
                    }
                    if next == Next::Elsewhere {
                        self.next_address();
                    }
                    tokio::time::sleep(policy.backoff(attempt)).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Many typed requests at once on one connection, results in request order. A server
    /// error fails only its entry; a lost connection fails the entries still waiting.
    pub async fn pipeline<T: DeserializeOwned>(
        &self,
        reqs: &[Request<T>],
    ) -> Result<Vec<Result<T>>> {
        let conn = self.connection().await?;
        let mut waiting = Vec::with_capacity(reqs.len());
        for r in reqs {
            let params = params_of(&r.params);
            waiting.push(conn.send(r.op.into(), params, None, Expect::Raw)?);
        }
        let mut out = Vec::with_capacity(reqs.len());
        for (call, r) in waiting.into_iter().zip(reqs) {
            let v = call.await;
            out.push(v.and_then(|a| r.decode_raw(&a.into_raw()?)));
        }
        Ok(out)
    }

    /// Forgets the current connection (the next call opens a new one).
    pub fn drop_connection(&self) {
        if let Some(c) = lock(&self.inner.conn).take() {
            c.close();
        }
    }

    /// WATCH on the current connection with a queue for its pushes.
    pub(crate) async fn watch(
        &self,
        req: &Request<Watching>,
        pushes: tokio::sync::mpsc::Sender<Value>,
    ) -> Result<(Arc<Conn>, Watching)> {
        let conn = self.connection().await?;
        let v = call_on(&conn, req.op.into(), params_of(&req.params), Some(pushes)).await?;
        Ok((conn, req.decode_raw(&v)?))
    }

    pub async fn ping(&self) -> Result<Pong> {
        self.run(ops::ping()).await
    }

    pub async fn info(&self) -> Result<Info> {
        self.run(ops::info()).await
    }

    pub async fn auth(&self, token: &str) -> Result<Authenticated> {
        self.run(ops::auth(token)).await
    }

    /// BYE: the server answers and closes; the next call reconnects.
    pub async fn bye(&self) -> Result<Value> {
        let r = self.run(ops::bye()).await;
        self.drop_connection();
        r
    }

    pub async fn put_machine(
        &self,
        machine: &str,
        version: u64,
        definition: &Value,
    ) -> Result<MachinePut> {
        self.run(ops::put_machine(machine, version, definition))
            .await
    }

    pub async fn get_machine(&self, machine: &str, version: Option<u64>) -> Result<Machine> {
        self.run(ops::get_machine(machine, version)).await
    }

    pub async fn list_machines(&self) -> Result<Machines> {
        self.run(ops::list_machines()).await
    }

    pub async fn create_instance(
        &self,
        machine: &str,
        version: u64,
        id: &str,
        context: &Value,
        opts: &CreateOptions,
    ) -> Result<Created> {
        self.run(ops::create_instance(machine, version, id, context, opts))
            .await
    }

    pub async fn get_instance(&self, id: &str) -> Result<Instance> {
        self.run(ops::get_instance(id)).await
    }

    /// In cluster mode: every group's page, merged by id, with one combined cursor.
    pub async fn list_instances(&self, filter: &ListFilter) -> Result<InstancePage> {
        if self.is_cluster() {
            let f = |cursor| {
                ops::list_instances(&ListFilter {
                    cursor,
                    ..filter.clone()
                })
            };
            return self.fan_out(filter.cursor.as_deref(), f).await;
        }
        self.run(ops::list_instances(filter)).await
    }

    /// FIND_INSTANCES: one page.
    /// In cluster mode: every group's page, merged by id (up to `limit` per group; `versions`
    /// of every group), with one combined cursor.
    pub async fn find_instances(
        &self,
        q: &crate::queries::FindQuery,
    ) -> Result<crate::queries::FoundPage> {
        use crate::queries::{find_instances, FindQuery};
        if self.is_cluster() {
            let f = |cursor| {
                find_instances(&FindQuery {
                    cursor,
                    ..q.clone()
                })
            };
            return self.fan_out(q.cursor.as_deref(), f).await;
        }
        self.run(find_instances(q)).await
    }

    /// SCAN_INSTANCES: one page.
    /// In cluster mode: as `find_instances` (`examined` summed).
    pub async fn scan_instances(
        &self,
        q: &crate::queries::FindQuery,
    ) -> Result<crate::queries::FoundPage> {
        use crate::queries::{scan_instances, FindQuery};
        if self.is_cluster() {
            let f = |cursor| {
                scan_instances(&FindQuery {
                    cursor,
                    ..q.clone()
                })
            };
            return self.fan_out(q.cursor.as_deref(), f).await;
        }
        self.run(scan_instances(q)).await
    }

    pub async fn delete_instance(&self, id: &str) -> Result<Deleted> {
        self.run(ops::delete_instance(id)).await
    }

    pub async fn apply_event(
        &self,
        instance_id: &str,
        event: &str,
        payload: Option<&Value>,
        opts: &ApplyOptions,
    ) -> Result<Applied> {
        if self.is_cluster() {
            return self
                .run(ops::apply_event(instance_id, event, payload, opts))
                .await;
        }
        // Params written straight into the frame (`ops::apply_event` builds the same object as
        // a `Value`), the result decoded by the reader when the response has the usual shape:
        // the hot call of most services.
        let p = ops::ApplyParams::new(instance_id, event, payload, opts);
        let decode = |op, answer| match answer {
            Answer::Applied(a) => Ok(a),
            Answer::Raw(raw) => ops::decode_raw(op, &raw),
        };
        self.run_params(
            Op::ApplyEvent.as_str(),
            Some(&p),
            p.retry(),
            Expect::Applied,
            decode,
        )
        .await
    }

    pub async fn history(
        &self,
        id: &str,
        from: Option<u64>,
        limit: Option<u64>,
    ) -> Result<History> {
        self.run(ops::get_history(id, from, limit)).await
    }

    /// In cluster mode a best-effort batch is split by group primary (results in order), and
    /// an atomic one goes to its slot's group primary.
    pub async fn batch(&self, mode: BatchMode, ops: &[BatchOp]) -> Result<BatchResults> {
        if mode == BatchMode::BestEffort && self.is_cluster() {
            return self.batch_routed(ops).await;
        }
        if let Some(key) = crate::fanout::atomic_key(ops).filter(|_| self.is_cluster()) {
            return self.run_routed(ops::batch(mode, ops), &key).await;
        }
        self.run(ops::batch(mode, ops)).await
    }

    pub async fn replication_status(&self) -> Result<ReplicationStatus> {
        self.run(ops::replication_status()).await
    }

    pub async fn promote(&self) -> Result<Value> {
        self.run(ops::promote()).await
    }

    /// TIMERS_RESUME: a data dir restored with paused timers fires them from now on.
    pub async fn timers_resume(&self) -> Result<Value> {
        self.run(ops::timers_resume()).await
    }

    /// UNWATCH of a subscription id on the current connection.
    pub async fn unwatch(&self, subscription_id: &Value) -> Result<Unwatched> {
        self.run(ops::unwatch(subscription_id)).await
    }

    /// WATCH_ALL as a `Stream` of events that resumes from its cursor after a reconnect; a
    /// `subscription_lagged` comes as `Error::Lagged` (the stream then resumes by itself).
    /// In cluster mode: one subscription per group, merged (`watch_fanout`).
    pub async fn subscribe_all(&self, filter: WatchAllFilter) -> Result<Subscription> {
        if self.is_cluster() {
            return watch_fanout::subscribe_all(self, filter).await;
        }
        Subscription::open(self.clone(), crate::resume::Target::All(filter)).await
    }

    /// WATCH_INSTANCE as a `Stream` (see `subscribe_all`).
    pub async fn subscribe_instance(
        &self,
        instance_id: &str,
        opts: WatchOptions,
    ) -> Result<Subscription> {
        let target = crate::resume::Target::Instance {
            id: instance_id.to_string(),
            opts,
        };
        Subscription::open(self.clone(), target).await
    }

    pub(crate) fn policy(&self) -> crate::retry::RetryPolicy {
        self.inner.opts.retry
    }
}

/// Sends one request on `conn` and waits for its result as raw text (the connection enforces
/// the timeout).
pub(crate) async fn call_on<P: Params + ?Sized>(
    conn: &Conn,
    op: Cow<'static, str>,
    params: Option<&P>,
    pushes: Option<tokio::sync::mpsc::Sender<Value>>,
) -> reader::RawResult {
    conn.call(op, params, pushes, Expect::Raw).await?.into_raw()
}

/// A result handed over as raw text, decoded into `T`.
fn decode_answer<T: DeserializeOwned>(op: &'static str, answer: Answer) -> Result<T> {
    ops::decode_raw(op, &answer.into_raw()?)
}

/// A request's params as sent: a `Null` value means no params member.
fn params_of(v: &Value) -> Option<&Value> {
    (!v.is_null()).then_some(v)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only plain assignments happen under these locks; a poisoned one still holds a value.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
