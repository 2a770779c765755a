//! Per-connection session state and request dispatch (docs/protocol.md, "Session"): HELLO
//! first (PING and BYE allowed before it), then the checks and routing every codec shares
//! (`request.rs`: authorization, the follower gate, the owning shard or a fan-out), or the ops
//! answered here.

use std::rc::Rc;
use std::time::Instant;

use serde::Deserialize;
use serde_json::{json, Value};
use shards::{ErrorCode, Rejection};

use super::connection::{completed, Conn, Pending};
use super::executor::Front;
use super::request::{self, Version};
use crate::auth::{AuthOutcome, SessionAuth};
use crate::ops::params::parse;
use crate::protocol::{encode_error, encode_ok, parse_request, routes, Op, Routed};

/// The protocol versions this server speaks (docs/protocol.md, "Session ops": the present protocol is 1).
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
    relay: Rc<crate::front::relay::Relay>,
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
    /// then the checks every codec shares (`request::admit`: authorization, the follower
    /// gate). Refusals name the op they are counted under.
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
        request::admit(op, &self.auth, front).map_err(|rej| (op, rej))?;
        Ok(op)
    }

    /// Runs an admitted request where the op table says it is answered (`Op::route`).
    async fn route(&mut self, req: Request<'_>, conn: &Rc<Conn>, front: &Rc<Front>) -> Flow {
        let op = req.op;
        let started = match op.route() {
            Routed::Session(s) => return self.session_op(s, req, conn, front),
            Routed::Stream(routes::Stream::Replicate) => self
                .replicate(req.params, conn, front)
                .await
                .map(|slot| (slot, None)),
            Routed::Stream(routes::Stream::Backup) => {
                self.backup(req, conn, front).await;
                return Flow::Continue;
            }
            Routed::Subscriptions(s) => {
                let slot = crate::front::subscriptions::dispatch(s, req.params, &conn.subs, front);
                Ok((slot, None))
            }
            Routed::Instance(_)
            | Routed::Definitions(_)
            | Routed::AllShards(_)
            | Routed::Batch(_)
            | Routed::Control(_)
            | Routed::Cluster(_)
            | Routed::Label(_) => {
                let mut instance_id = None;
                let version = Version::Untagged;
                request::start(op, req.params, front, &self.auth, version, &mut instance_id)
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

    /// BACKUP: the connection becomes the backup's stream (`crate::front::backup`).
    async fn backup(&mut self, req: Request<'_>, conn: &Rc<Conn>, front: &Rc<Front>) {
        let op = req.op;
        match crate::front::backup::open(front, conn, req.params).await {
            Ok((slot, stream)) => {
                conn.push(Pending::Reply {
                    id: req.id.into(),
                    op,
                    instance_id: None,
                    started: req.started,
                    slot,
                });
                if !crate::front::backup::spawn(stream) {
                    conn.push(Pending::Close);
                }
            }
            Err(rej) => respond_err(conn, front, Some(req.id), op, &rej, req.started),
        }
    }

    /// The ops the session answers itself: HELLO, PING, BYE, AUTH.
    fn session_op(
        &mut self,
        s: routes::Session,
        req: Request<'_>,
        conn: &Rc<Conn>,
        front: &Rc<Front>,
    ) -> Flow {
        let (op, started) = (req.op, req.started);
        let result = match s {
            routes::Session::Auth => {
                return self.authenticate(req.params, conn, front, req.id, started)
            }
            routes::Session::Hello => self.hello(req.params, front),
            routes::Session::Ping => Ok(json!({"pong": true})),
            routes::Session::Bye => Ok(json!({})),
        };
        match result {
            Ok(v) => respond_ok(conn, front, req.id, op, &v, started),
            Err(rej) => respond_err(conn, front, Some(req.id), op, &rej, started),
        }
        if s == routes::Session::Bye {
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
                    conn.subs.end_all(&front.subs);
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

    /// REPLICATE: the connection becomes a replication stream, relayed to the control
    /// executor; refused without a replication role.
    async fn replicate(
        &mut self,
        params: Option<&[u8]>,
        conn: &Rc<Conn>,
        front: &Rc<Front>,
    ) -> Result<crate::mesh::router::ReplySlot, Rejection> {
        let Some(relay) = &front.relay else {
            return Err(crate::front::relay::not_running());
        };
        let (link, slot) = relay.open(conn, params, String::new()).await;
        self.stream = Some(StreamLink {
            relay: relay.clone(),
            link,
        });
        Ok(slot)
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
        let mut hello = json!({
            "protocol_version": 1,
            "server_name": "smdb",
            "server_version": env!("CARGO_PKG_VERSION"),
            "auth_required": self.auth.required(),
            "role": front.info.replication.role_name(),
            "shards": front.router.shard_count(),
            "features": ["pipelining", "idempotency", "guards", "expectations"],
        });
        // Cluster mode (docs/cluster.md, "Per-group views"): the feature and the member's place.
        if let Some(member) = &front.info.cluster {
            if let Some(features) = hello["features"].as_array_mut() {
                features.push("cluster".into());
            }
            hello["cluster"] = crate::cluster::answers::hello(member);
        }
        Ok(hello)
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
