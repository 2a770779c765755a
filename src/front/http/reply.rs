//! One request, start to finish: the checks, the op started through `front::request` (the
//! path every codec shares), and its reply made into a response (docs/http.md, "Statuses").

use std::rc::Rc;
use std::time::Instant;

use serde_json::Value;
use shards::{ErrorCode, Rejection};
use smdb_diagram::Format;
use smdb_protocol::op::HttpReply;

use super::call::{self, Call};
use super::conn::{answer, Conn, Flow, Pending};
use super::console;
use super::guard;
use super::parse::Head;
use super::response::{plain, Response};
use super::router::{self, RouteError, Routed};
use super::target::{encode_segment, parse_target, Target};
use crate::auth::{SessionAuth, Table};
use crate::front::connection::completed;
use crate::front::executor::Front;
use crate::front::request;
use crate::mesh::router::ReplySlot;
use crate::protocol::Op;
use crate::shard::ReplyBody;

/// A bearer token's SHA-256 digest.
pub(super) type Digest = [u8; crate::auth::table::DIGEST_BYTES];

/// An op started for a request, waiting for its reply.
pub(super) struct Waiting {
    pub op: Op,
    pub slot: ReplySlot,
    pub started: Instant,
    pub instance_id: Option<Box<str>>,
    /// `If-Match` was given (a version `CONFLICT` is 412).
    pub if_match: bool,
    pub diagram: Option<Format>,
    /// The connection closes after this response.
    pub close: bool,
    /// An event stream's token, kept as its digest (`None`: no token): checked again when a
    /// reload changes the tokens.
    pub stream_token: Option<Digest>,
    /// INFO only: the caller's scopes, answered in `Smdb-Scopes` (the console shows write
    /// controls only to a token that may write).
    pub scopes: Option<String>,
}

/// Runs one parsed request: queues its response (or the op whose reply becomes it).
pub(super) async fn handle(
    head: Head,
    body: Option<Vec<u8>>,
    conn: &Rc<Conn>,
    front: &Rc<Front>,
) -> Flow {
    let started = Instant::now();
    let close = head.close;
    let fail = |op: Op, resp: Response| {
        answer(conn, front, op, started, resp, close);
        flow(close)
    };
    let (target, op, reply, path) = match route(&head, conn, front) {
        Ok((target, Routed::Op { op, reply, params })) => (target, op, reply, params),
        Ok((_, Routed::Asset(asset))) => return console_file(asset, &head, conn),
        Err(resp) => return fail(Op::Unknown, resp),
    };
    let op = call::op_for(op, reply, &target);
    match start(op, reply, &path, &target, body, &head, conn, front).await {
        Ok(s) => queue(s, reply, started, close, conn),
        Err(resp) => fail(op, resp),
    }
}

/// The reader's next step after a response: `close` ends the connection after it.
fn flow(close: bool) -> Flow {
    if close {
        Flow::Close
    } else {
        Flow::Continue
    }
}

/// The request's checks (HTTP on, `Host`/`Origin`, a valid target) and its route; `Err` is the
/// response that refuses it.
fn route(head: &Head, conn: &Conn, front: &Front) -> Result<(Target, Routed), Response> {
    let Some(http) = front.http.as_ref() else {
        return Err(plain(404, ErrorCode::NotFound, "HTTP is not enabled"));
    };
    guard::check(head, &http.hosts, conn.tls)?;
    let target =
        parse_target(&head.target).map_err(|why| plain(400, ErrorCode::BadRequest, why))?;
    match router::route(&head.method, &target.segments, http.console) {
        Ok(routed) => Ok((target, routed)),
        Err(RouteError::NotFound) => Err(plain(404, ErrorCode::NotFound, "no such path")),
        Err(RouteError::MethodNotAllowed(allow)) => {
            let msg = format!(
                "{} is not allowed here; use {}",
                head.method,
                allow.join(", ")
            );
            let resp = plain(405, ErrorCode::MethodNotAllowed, msg).with("Allow", allow.join(", "));
            Err(resp)
        }
    }
}

/// A console file. Console files are not ops: not counted as requests.
fn console_file(asset: &console::Asset, head: &Head, conn: &Conn) -> Flow {
    let close = head.close;
    let mut resp = Response::json(200, asset.body.as_bytes().to_vec());
    resp.content_type = asset.content_type;
    resp.console = true;
    resp.head_only = head.method == "HEAD";
    let mut bytes = Vec::new();
    resp.encode(&mut bytes, close);
    conn.push(Pending::Ready { bytes, close });
    flow(close)
}

/// Queues a started op, whose reply becomes the response (or starts the event stream).
fn queue(s: Started, reply: HttpReply, started: Instant, close: bool, conn: &Conn) -> Flow {
    let waiting = Box::new(Waiting {
        op: s.call.op,
        slot: s.slot,
        started,
        instance_id: s.instance_id,
        if_match: s.call.if_match,
        diagram: s.call.diagram,
        close: close || reply == HttpReply::Stream,
        stream_token: s.digest,
        scopes: (s.call.op == Op::Info).then_some(s.scopes),
    });
    match reply {
        HttpReply::Stream => {
            conn.push(Pending::Stream(waiting));
            Flow::Stream
        }
        _ => {
            conn.push(Pending::Reply(waiting));
            flow(close)
        }
    }
}

/// A started request.
struct Started {
    call: Call,
    slot: ReplySlot,
    instance_id: Option<Box<str>>,
    digest: Option<Digest>,
    /// The caller's scopes, space-separated (INFO answers them in `Smdb-Scopes`).
    scopes: String,
}

/// Authenticates, admits, builds the params and starts the op.
#[allow(clippy::too_many_arguments)] // the parts of one request, each used once
async fn start(
    op: Op,
    reply: HttpReply,
    path: &[(&'static str, String)],
    target: &Target,
    body: Option<Vec<u8>>,
    head: &Head,
    conn: &Rc<Conn>,
    front: &Rc<Front>,
) -> Result<Started, Response> {
    if body.is_some() {
        guard::check_json(head)?;
    }
    let settings = front.live.current();
    let (auth, digest) = authenticate(&settings.auth, head)?;
    request::admit(op, &auth, front).map_err(|rej| refusal(&rej, false))?;
    let shards = front.router.shard_count();
    let call = call::build(op, reply, path, target, body.as_deref(), head, shards)
        .map_err(|rej| refusal(&rej, head.if_match.is_some()))?;
    let params = Some(call.params.as_slice());
    let mut instance_id = None;
    let slot = match (reply, call.op.route()) {
        (HttpReply::Stream, crate::protocol::Routed::Subscriptions(s)) => Ok(
            crate::front::subscriptions::dispatch(s, params, &conn.subs, front),
        ),
        // The table's test: a stream path names a subscription op.
        (HttpReply::Stream, _) => Err(request::no_dispatcher()),
        (HttpReply::Result | HttpReply::Diagram, _) => {
            request::start(
                call.op,
                params,
                front,
                &auth,
                call.version,
                &mut instance_id,
            )
            .await
        }
    };
    let slot = slot.map_err(|rej| refusal(&rej, false))?;
    Ok(Started {
        call,
        slot,
        instance_id,
        digest,
        scopes: auth.scopes().names().join(" "),
    })
}

/// The bearer token checked against the tokens in force now.
fn authenticate(table: &Table, head: &Head) -> Result<(SessionAuth, Option<Digest>), Response> {
    let token = guard::bearer(head).map_err(|guard::NotBearer| {
        let rej = Rejection::new(
            ErrorCode::AuthFailed,
            "Authorization must be `Bearer <token>`",
        );
        refusal(&rej, false)
    })?;
    let auth =
        SessionAuth::bearer(table, token.map(str::as_bytes)).map_err(|rej| refusal(&rej, false))?;
    let digest = token.and_then(|t| Table::digest(t.as_bytes()));
    Ok((auth, digest))
}

/// The problem response for a refusal: its code's status, with the headers RFC 6750 and RFC
/// 9110 ask for (`WWW-Authenticate` on 401 and on a missing scope).
pub(super) fn refusal(rej: &Rejection, if_match: bool) -> Response {
    let version_conflict = rej.code == ErrorCode::Conflict
        && (rej.details.contains_key("expected_wal_offset")
            || rej.details.contains_key("expected_epoch")
            || rej.details.contains_key("if_match"));
    let status = (if_match && version_conflict).then_some(412);
    let resp = Response::problem(rej, status);
    match rej.code {
        ErrorCode::Unauthorized => resp.with("WWW-Authenticate", "Bearer realm=\"smdb\""),
        ErrorCode::AuthFailed => resp.with(
            "WWW-Authenticate",
            "Bearer realm=\"smdb\", error=\"invalid_token\"",
        ),
        ErrorCode::Forbidden => {
            let scope = rej
                .details
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("");
            let value =
                format!("Bearer realm=\"smdb\", error=\"insufficient_scope\", scope=\"{scope}\"");
            resp.with("WWW-Authenticate", value)
        }
        _ => resp,
    }
}

impl Waiting {
    /// Waits for the reply and appends its response; true when the connection closes after.
    pub(super) async fn render(self, out: &mut Vec<u8>, front: &Front) -> bool {
        let reply = self.slot.wait().await;
        let resp = match reply {
            Ok(body) => self.success(body),
            Err(rej) => refusal(&rej, self.if_match),
        };
        completed(
            front,
            self.op,
            self.instance_id.as_deref(),
            self.started,
            resp.code,
        );
        resp.encode(out, self.close);
        self.close
    }

    /// A success: the op's result as the body, with the status and headers of its path.
    fn success(&self, body: ReplyBody) -> Response {
        let (result, version) = match body {
            ReplyBody::Json(r) | ReplyBody::Machine { result: r, .. } => (r, None),
            ReplyBody::Versioned {
                result,
                epoch,
                offset,
            } => (result, Some((epoch, offset))),
            _ => {
                return refusal(
                    &Rejection::new(ErrorCode::InternalError, "bad reply"),
                    false,
                )
            }
        };
        if let Some(format) = self.diagram {
            return diagram(&result, format);
        }
        let status = match self.op {
            Op::PutMachine if field(&result, "created") == Some(Value::Bool(true)) => 201,
            Op::CreateInstance if field(&result, "applied") != Some(Value::Bool(false)) => 201,
            _ => 200,
        };
        let mut resp = Response::json(status, Vec::new());
        if status == 201 && self.op == Op::CreateInstance {
            if let Some(Value::String(id)) = field(&result, "id") {
                resp = resp.with("Location", format!("/instances/{}", encode_segment(&id)));
            }
        }
        if let Some((epoch, offset)) = version {
            resp = resp.with("ETag", format!("\"{epoch}.{offset}\""));
        }
        if let Some(scopes) = &self.scopes {
            resp = resp.with("Smdb-Scopes", scopes.clone());
        }
        resp.body = result;
        resp
    }
}

/// One top-level member of a result (for the rare paths whose status depends on it).
fn field(result: &[u8], name: &str) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(result).ok()?;
    v.get_mut(name).map(Value::take)
}

/// GET_MACHINE's result drawn.
fn diagram(result: &[u8], format: Format) -> Response {
    let drawn = serde_json::from_slice::<Value>(result)
        .map_err(|e| e.to_string())
        .and_then(|v| {
            let name = v["machine"].as_str().unwrap_or("");
            smdb_diagram::render(name, &v["definition"], format)
        });
    match drawn {
        Ok(text) => {
            let mut resp = Response::json(200, text.into_bytes());
            resp.content_type = format.content_type();
            resp
        }
        Err(why) => plain(500, ErrorCode::InternalError, format!("cannot draw: {why}")),
    }
}
