//! One request, start to finish: the checks, the op started through `front::request` (the
//! path every codec shares), and its reply made into a response (docs/http.md, "Statuses").

use std::rc::Rc;
use std::time::Instant;

use serde_json::Value;
use shards::{ErrorCode, Rejection};
use smdb_diagram::Format;
use smdb_protocol::op::{Created, HttpReply, HttpRoute};

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
    /// The path's facts: the status and headers of a success.
    pub route: &'static HttpRoute,
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
    /// The caller's scopes, answered in `Smdb-Scopes` where the path says so
    /// (`HttpRoute::scopes`, INFO's).
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
    let (target, op, route, path) = match route(&head, conn, front) {
        Ok((target, Routed::Op { op, route, params })) => (target, op, route, params),
        Ok((_, Routed::Asset(asset))) => return console_file(asset, &head, conn),
        Err(resp) => return fail(Op::Unknown, resp),
    };
    let op = call::op_for(op, route, &target);
    match start(op, route, &path, &target, body, &head, conn, front).await {
        Ok(s) => queue(s, route, started, close, conn),
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
fn queue(
    s: Started,
    route: &'static HttpRoute,
    started: Instant,
    close: bool,
    conn: &Conn,
) -> Flow {
    let waiting = Box::new(Waiting {
        op: s.call.op,
        route,
        slot: s.slot,
        started,
        instance_id: s.instance_id,
        if_match: s.call.if_match,
        diagram: s.call.diagram,
        close: close || route.reply == HttpReply::Stream,
        stream_token: s.digest,
        scopes: route.scopes.then_some(s.scopes),
    });
    match route.reply {
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
    /// The caller's scopes, space-separated (for `Smdb-Scopes`).
    scopes: String,
}

/// Authenticates, admits, builds the params and starts the op.
#[allow(clippy::too_many_arguments)] // the parts of one request, each used once
async fn start(
    op: Op,
    route: &HttpRoute,
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
    let shards = front.router.layout();
    let call = call::build(op, route, path, target, body.as_deref(), head, shards)
        .map_err(|rej| refusal(&rej, head.if_match.is_some()))?;
    let params = Some(call.params.as_slice());
    let mut instance_id = None;
    let slot = match (route.reply, call.op.route()) {
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
        let created = is_created(self.route.created, &result);
        let mut resp = Response::json(if created { 201 } else { 200 }, Vec::new());
        let location = self.route.location.filter(|_| created);
        if let Some(location) = location.and_then(|path| fill(path, &result)) {
            resp = resp.with("Location", location);
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

/// Whether a success is a 201, by the path's rule and the result.
fn is_created(rule: Created, result: &[u8]) -> bool {
    match rule {
        Created::Never => false,
        Created::IfTrue(member) => field(result, member) == Some(Value::Bool(true)),
        Created::UnlessFalse(member) => field(result, member) != Some(Value::Bool(false)),
    }
}

/// One top-level member of a result (for the rare paths whose status depends on it).
fn field(result: &[u8], name: &str) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(result).ok()?;
    v.get_mut(name).map(Value::take)
}

/// `path` (a `Location` template) with each `{name}` segment the result's string member
/// `name`, percent-encoded; `None` when one is missing.
fn fill(path: &str, result: &[u8]) -> Option<String> {
    let mut out = String::new();
    for seg in path.split('/').skip(1) {
        out.push('/');
        match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) => match field(result, name)? {
                Value::String(v) => out.push_str(&encode_segment(&v)),
                _ => return None,
            },
            None => out.push_str(seg),
        }
    }
    Some(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_and_location_follow_the_path_rule() {
        let put = |created: &str| format!(r#"{{"created":{created},"machine":"m"}}"#);
        let rule = Created::IfTrue("created");
        assert!(is_created(rule, put("true").as_bytes()));
        assert!(!is_created(rule, put("false").as_bytes()));
        assert!(!is_created(rule, b"{}"));
        let rule = Created::UnlessFalse("applied");
        assert!(is_created(rule, br#"{"applied":true}"#));
        assert!(is_created(rule, b"{}"));
        assert!(!is_created(rule, br#"{"applied":false}"#));
        assert!(!is_created(Created::Never, br#"{"created":true}"#));
        let made = br#"{"id":"a/b c","applied":true}"#;
        let at = fill("/instances/{id}", made);
        assert_eq!(at.as_deref(), Some("/instances/a%2Fb%20c"));
        assert_eq!(fill("/instances/{id}", br#"{"id":7}"#), None);
        assert_eq!(fill("/instances/{id}", b"{}"), None);
    }
}
