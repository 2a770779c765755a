//! Per-connection session state and request dispatch (CONTRACT §3): HELLO first (PING and BYE
//! allowed before it), then the authorization check (`auth::SessionAuth::check`) that every
//! op passes, then ops answered here, routed to the owning shard, or fanned out.

use std::rc::Rc;
use std::time::Instant;

use serde::Deserialize;
use serde_json::{json, Value};
use shards::routing::shard_for;
use shards::{ErrorCode, Rejection};

use super::connection::{completed, Conn, Pending};
use super::fanout;
use super::front::Front;
use super::router::Reply;
use crate::auth::{AuthOutcome, SessionAuth};
use crate::ops::params::parse;
use crate::ops::route::route_key;
use crate::protocol::{encode_error, encode_ok, parse_request, Op, Route};
use crate::shard::{ReplyBody, ShardCall};
use crate::util::slot::Slot;

/// The protocol versions this server speaks (spec §9: the present protocol is 1).
pub const SUPPORTED_PROTOCOLS: [i64; 1] = [1];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Close,
}

pub struct Session {
    hello: bool,
    auth: SessionAuth,
    /// Set once REPLICATE succeeded: the connection is a replication stream from then on.
    stream: Option<StreamLink>,
}

/// A connection turned into a replication stream; tells the control executor when it ends.
struct StreamLink {
    relay: Rc<crate::replication::relay::Relay>,
    link: u64,
}

impl Drop for StreamLink {
    fn drop(&mut self) {
        self.relay.closed(self.link);
    }
}

impl Session {
    /// A new session; `auth_required` is `auth.required` when the connection was accepted.
    pub fn new(auth_required: bool) -> Session {
        Session {
            hello: false,
            auth: SessionAuth::new(auth_required),
            stream: None,
        }
    }

    /// Handles one request payload: queues its response (or a reply slot) on `conn`.
    pub async fn handle(&mut self, payload: &[u8], conn: &Rc<Conn>, front: &Rc<Front>) -> Flow {
        if let Some(s) = &self.stream {
            // A replica's ack: the control executor reads it.
            s.relay.frame(s.link, payload).await;
            return Flow::Continue;
        }
        let started = Instant::now();
        let req = match parse_request(payload) {
            Ok(r) => r,
            Err(bad) => {
                let rej = Rejection::new(ErrorCode::BadRequest, bad.message);
                respond_err(conn, front, bad.id, Op::Unknown, &rej, started);
                return Flow::Continue;
            }
        };
        let params = req.params.map(|p| p.get().as_bytes());
        let op = match self.admit(&req.op, front) {
            Ok(op) => op,
            Err((op, rej)) => {
                respond_err(conn, front, Some(req.id), op, &rej, started);
                return Flow::Continue;
            }
        };
        let request = Request {
            id: req.id,
            op,
            params,
            started,
        };
        self.route(request, conn, front).await
    }

    /// The checks every request passes before it runs, in order: a known op, HELLO first,
    /// authorization, the follower gate. Refusals name the op they are counted under.
    fn admit(&self, name: &str, front: &Front) -> Result<Op, (Op, Rejection)> {
        let Some(op) = Op::parse(name) else {
            let rej = Rejection::new(
                ErrorCode::UnknownOperation,
                format!("unknown op {:?}", smdb_protocol::codes::quote(name)),
            )
            .with("op", smdb_protocol::codes::quote(name));
            return Err((Op::Unknown, rej));
        };
        if !self.hello && !op.allowed_before_hello() {
            let rej = Rejection::new(ErrorCode::HelloRequired, "send HELLO first");
            return Err((op, rej));
        }
        self.auth.check(op).map_err(|rej| (op, rej))?;
        crate::replication::gate::check(&front.info.replication, op).map_err(|rej| (op, rej))?;
        Ok(op)
    }

    /// Runs an admitted request where the op table says it is answered (`Facts::route`).
    async fn route(&mut self, req: Request<'_>, conn: &Rc<Conn>, front: &Rc<Front>) -> Flow {
        let op = req.op;
        let started = match op.facts().route {
            Route::Session => return self.session_op(req, conn, front),
            Route::Control => Ok((self.replication_op(op, req.params, conn, front).await, None)),
            Route::Subscriptions => {
                crate::subscriptions::dispatch(op, req.params, &conn.subs, front)
                    .map(|slot| (slot, None))
                    .ok_or_else(no_dispatcher)
            }
            Route::Instance
            | Route::Definitions
            | Route::AllShards
            | Route::Batch
            | Route::Label => {
                let mut instance_id = None;
                dispatch(op, req.params, front, &self.auth, &mut instance_id)
                    .await
                    .map(|slot| (slot, instance_id))
            }
        };
        match started {
            Ok((slot, instance_id)) => conn.push(Pending::Reply {
                id: req.id.into(),
                op,
                instance_id,
                started: req.started,
                slot,
            }),
            Err(rej) => respond_err(conn, front, Some(req.id), op, &rej, req.started),
        }
        Flow::Continue
    }

    /// The ops the session answers itself: HELLO, PING, BYE, AUTH.
    fn session_op(&mut self, req: Request<'_>, conn: &Rc<Conn>, front: &Rc<Front>) -> Flow {
        let (op, started) = (req.op, req.started);
        let result = match op {
            Op::Auth => return self.authenticate(req.params, conn, front, req.id, started),
            Op::Hello => self.hello(req.params, front),
            Op::Ping => Ok(json!({"pong": true})),
            Op::Bye => Ok(json!({})),
            _ => Err(Rejection::new(
                ErrorCode::InternalError,
                "op is not a session op",
            )),
        };
        match result {
            Ok(v) => respond_ok(conn, front, req.id, op, &v, started),
            Err(rej) => respond_err(conn, front, Some(req.id), op, &rej, started),
        }
        if op == Op::Bye {
            conn.push(Pending::Close);
            return Flow::Close;
        }
        Flow::Continue
    }

    /// AUTH: checks the token against the table in force now. A success whose token lacks
    /// the read scope ends this connection's subscriptions (no push reaches a session that may
    /// not read); the last allowed failure closes the connection.
    fn authenticate(
        &mut self,
        params: Option<&[u8]>,
        conn: &Rc<Conn>,
        front: &Rc<Front>,
        id: &str,
        started: Instant,
    ) -> Flow {
        let settings = front.live.current();
        match self.auth.authenticate(&settings.auth, params) {
            AuthOutcome::Granted(result) => {
                if !self.auth.may_read() {
                    conn.subs.end_all(&front.router.subs);
                }
                respond_ok(conn, front, id, Op::Auth, &result, started);
                Flow::Continue
            }
            AuthOutcome::Refused(rej) => {
                respond_err(conn, front, Some(id), Op::Auth, &rej, started);
                Flow::Continue
            }
            AuthOutcome::RefusedAndClose(rej) => {
                respond_err(conn, front, Some(id), Op::Auth, &rej, started);
                conn.push(Pending::Close);
                Flow::Close
            }
        }
    }

    /// REPLICATE (the connection becomes a stream), REPLICATION_STATUS and PROMOTE: relayed to
    /// the control executor. Without a replication role: REPLICATION_STATUS says so, the
    /// others are refused.
    async fn replication_op(
        &mut self,
        op: Op,
        params: Option<&[u8]>,
        conn: &Rc<Conn>,
        front: &Rc<Front>,
    ) -> super::router::ReplySlot {
        let Some(relay) = &front.relay else {
            let slot = Slot::new();
            slot.fill(match op {
                Op::ReplicationStatus => Ok(ReplyBody::Json(
                    br#"{"role":"standalone","replicas":[]}"#.to_vec(),
                )),
                _ => Err(crate::replication::relay::not_running()),
            });
            return slot;
        };
        if op != Op::Replicate {
            return relay.call(op, params).await;
        }
        let (link, slot) = relay.open(conn, params, String::new()).await;
        self.stream = Some(StreamLink {
            relay: relay.clone(),
            link,
        });
        slot
    }

    fn hello(&mut self, params: Option<&[u8]>, front: &Front) -> Result<Value, Rejection> {
        #[derive(Deserialize)]
        struct Hello {
            protocol_version: i64,
            #[serde(default)]
            client_name: Option<String>,
            #[serde(default)]
            client_version: Option<String>,
        }
        let h: Hello = parse(params)?;
        if !SUPPORTED_PROTOCOLS.contains(&h.protocol_version) {
            return Err(Rejection::new(
                ErrorCode::UnsupportedProtocol,
                format!("protocol_version {} is not supported", h.protocol_version),
            )
            .with("supported", SUPPORTED_PROTOCOLS.to_vec()));
        }
        log::debug!(
            "HELLO from {} {}",
            h.client_name.as_deref().unwrap_or("?"),
            h.client_version.as_deref().unwrap_or("?")
        );
        self.hello = true;
        Ok(json!({
            "protocol_version": 1,
            "server_name": "smdb",
            "server_version": env!("CARGO_PKG_VERSION"),
            "auth_required": self.auth.required(),
            "role": front.info.replication.role_name(),
            "shards": front.router.shard_count(),
            "features": ["pipelining", "idempotency", "guards", "expectations"],
        }))
    }
}

/// One admitted request.
struct Request<'a> {
    /// The raw request id, echoed verbatim.
    id: &'a str,
    op: Op,
    params: Option<&'a [u8]>,
    started: Instant,
}

/// Starts an op that a shard (or several) answers; returns the slot its reply lands in and sets
/// `instance_id` to the instance the op names, if any (for its log line).
async fn dispatch(
    op: Op,
    params: Option<&[u8]>,
    front: &Rc<Front>,
    auth: &SessionAuth,
    instance_id: &mut Option<Box<str>>,
) -> Result<super::router::ReplySlot, Rejection> {
    let router = &front.router;
    let owned = || params.map(<[u8]>::to_vec);
    match (op.facts().route, op) {
        (Route::Instance, _) => {
            let id = route_key(params)?;
            let shard = shard_for(&id, router.shard_count());
            *instance_id = Some(id.into());
            Ok(router
                .start(
                    shard,
                    ShardCall::Op {
                        op,
                        params: owned(),
                    },
                )
                .await)
        }
        (Route::Batch, _) => {
            // The batch's ops, typed, parsed once; each passes the session's check.
            let batch = crate::ops::batch::parse_batch(params)?;
            auth.check_each(batch.ops.iter().map(|item| item.op))?;
            let repl = &front.info.replication;
            crate::replication::gate::check_batch(repl, batch.ops.iter().map(|item| item.op))?;
            super::batch::start(front, batch).await
        }
        (Route::Definitions, _) => {
            let call = ShardCall::Op {
                op,
                params: owned(),
            };
            Ok(router.start(fanout::DEFINITIONS_SHARD, call).await)
        }
        (Route::AllShards, Op::PutMachine) => Ok(spawn_fanout(front, owned(), |f, p| async move {
            fanout::put_machine(&f.router, p).await
        })),
        (Route::AllShards, Op::ListInstances) => {
            Ok(spawn_fanout(front, owned(), |f, p| async move {
                fanout::list_instances(&f.router, p).await
            }))
        }
        (Route::AllShards, Op::Info) => Ok(spawn_fanout(front, owned(), |f, _| async move {
            info(&f).await
        })),
        _ => Err(no_dispatcher()),
    }
}

/// An op whose route has no code to run it: a bug, answered as one.
fn no_dispatcher() -> Rejection {
    Rejection::new(ErrorCode::InternalError, "op has no dispatcher")
}

/// Runs a multi-shard op as its own task; its result lands in the returned slot.
fn spawn_fanout<F, Fut>(
    front: &Rc<Front>,
    params: Option<Vec<u8>>,
    f: F,
) -> super::router::ReplySlot
where
    F: FnOnce(Rc<Front>, Option<Vec<u8>>) -> Fut,
    Fut: std::future::Future<Output = Reply> + 'static,
{
    let slot = Slot::new();
    let fill = slot.clone();
    let fut = f(front.clone(), params);
    glommio::spawn_local(async move { fill.fill(fut.await) }).detach();
    slot
}

async fn info(front: &Front) -> Reply {
    let shards = fanout::shard_infos(&front.router).await?;
    let sum = |k: &str| shards.iter().filter_map(|s| s[k].as_u64()).sum::<u64>();
    let l = &front.limits;
    let body = json!({
        "server_name": "smdb",
        "server_version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": front.info.started.elapsed().as_secs(),
        "role": front.info.replication.role_name(),
        "shards": front.router.shard_count(),
        "acceptor_cores": front.info.acceptor_cores,
        "limits": {
            "max_connections": l.max_connections,
            "max_frame_bytes": l.max_frame_bytes,
            "max_inflight_per_connection": l.max_inflight,
            "idle_timeout_secs": l.idle_timeout.map_or(0, |d| d.as_secs()),
        },
        "connections": front.peers.info(l.proxy_protocol),
        "instances": sum("instances"),
        "machines": shards.first().and_then(|s| s["machines"].as_u64()).unwrap_or(0),
        "wal": { "offset": sum("wal_offset"), "durable_offset": sum("wal_durable_offset") },
        "shard_details": shards,
    });
    Ok(ReplyBody::Json(
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

fn respond_ok(conn: &Conn, front: &Front, id: &str, op: Op, v: &Value, started: Instant) {
    let mut out = Vec::new();
    encode_ok(&mut out, id, &serde_json::to_vec(v).unwrap_or_default());
    completed(front, op, None, started, None);
    conn.push(Pending::Frame(out));
}

fn respond_err(
    conn: &Conn,
    front: &Front,
    id: Option<&str>,
    op: Op,
    rej: &Rejection,
    started: Instant,
) {
    let mut out = Vec::new();
    encode_error(&mut out, id, rej);
    completed(front, op, None, started, Some(rej.code));
    conn.push(Pending::Frame(out));
}
