//! An HTTP request turned into the op and params an RCP1 frame would carry (docs/http.md,
//! "Paths"): path parameters, query parameters, the JSON body and a few headers
//! (`Idempotency-Key`, `If-Match`, `Last-Event-ID`) become params members. What each path
//! takes is its row's `HttpRoute` in the op table (`smdb_protocol::op`); the params are then
//! parsed by the op's own parser on the shard, exactly as over RCP1, so both codecs accept and
//! refuse the same things.
//!
//! Pure: no I/O, so the unit tests and the fuzz target call it directly.

use serde_json::value::RawValue;
use shards::routing::Layout;
use shards::{ErrorCode, Rejection};
use smdb_diagram::Format;
use smdb_protocol::codes::quote;
use smdb_protocol::op::{Body, HttpReply, HttpRoute, QueryKind, Resend};

use super::parse::Head;
use super::target::Target;
use crate::front::request::Version;
use crate::front::subscriptions::cursor::{self, Start};
use crate::protocol::Op;

/// What one request runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub op: Op,
    /// The params object, JSON.
    pub params: Vec<u8>,
    pub version: Version,
    /// `If-Match` was given: a `CONFLICT` about the version answers 412.
    pub if_match: bool,
    /// `Diagram` paths: the format asked for.
    pub diagram: Option<Format>,
}

/// Query parameters handled here rather than copied into params.
const SPECIAL_QUERY: [&str; 2] = ["format", "from_cursor"];

/// The op a request runs: its row's, except that an event stream is WATCH_INSTANCE when it
/// names an instance (`?instance=`) and WATCH_ALL otherwise, and that `GET /instances` with a
/// `where.` parameter is FIND_INSTANCES, with `scan=true` SCAN_INSTANCES (`queries`).
pub fn op_for(op: Op, route: &HttpRoute, target: &Target) -> Op {
    match (route.reply, target.get("instance")) {
        (HttpReply::Stream, Some(_)) => Op::WatchInstance,
        (HttpReply::Stream, None) => Op::WatchAll,
        _ if op == Op::ListInstances => queries::op_of(target),
        _ => op,
    }
}

/// Builds the call for `op` on `route` (`path` are the path's `{name}` segments).
pub fn build(
    op: Op,
    route: &HttpRoute,
    path: &[(&'static str, String)],
    target: &Target,
    body: Option<&[u8]>,
    head: &Head,
    shards: Layout,
) -> Result<Call, Rejection> {
    let op = op_for(op, route, target);
    let mut obj = Obj::new();
    for (name, value) in path {
        match *name {
            "version" => obj.num(name, parse_u64("version", value)?),
            _ => obj.str(route.member(name), value),
        }
    }
    match op {
        Op::FindInstances | Op::ScanInstances => queries::params(&mut obj, target)?,
        _ => query(&mut obj, route, target)?,
    }
    let mut call = Call {
        op,
        params: Vec::new(),
        version: Version::Untagged,
        if_match: false,
        diagram: diagram_format(route.reply, target)?,
    };
    headers(&mut obj, &mut call, route, head)?;
    if route.reply == HttpReply::Stream {
        stream_start(&mut obj, op, target, head, shards)?;
    }
    call.params = with_body(obj, route.body, body)?;
    Ok(call)
}

/// Copies the query parameters `route` takes into params; refuses any other.
fn query(obj: &mut Obj, route: &HttpRoute, target: &Target) -> Result<(), Rejection> {
    for (name, value) in &target.query {
        if SPECIAL_QUERY.contains(&name.as_str()) {
            continue;
        }
        let Some(q) = route.query.iter().find(|q| q.name == name) else {
            return Err(bad(format!(
                "query parameter {:?} is not taken by this path",
                quote(name)
            )));
        };
        match q.kind {
            QueryKind::Str => obj.str(q.member, value),
            QueryKind::U64 => obj.num(q.member, parse_u64(name, value)?),
            QueryKind::Bool => obj.raw(q.member, parse_bool(name, value)?.as_bytes()),
            QueryKind::List => obj.list(q.member, value.split(',').filter(|v| !v.is_empty())),
        }
    }
    Ok(())
}

/// `?format=` of a diagram path (svg by default); refused elsewhere.
fn diagram_format(reply: HttpReply, target: &Target) -> Result<Option<Format>, Rejection> {
    let asked = target.get("format");
    match (reply, asked) {
        (HttpReply::Diagram, None) => Ok(Some(Format::Svg)),
        (HttpReply::Diagram, Some(f)) => Format::parse(f).map(Some).ok_or_else(|| {
            bad(format!(
                "format {:?} is not one of svg, dot, mermaid",
                quote(f)
            ))
        }),
        (_, Some(_)) => Err(bad(
            "query parameter \"format\" is not taken by this path".into()
        )),
        (_, None) => Ok(None),
    }
}

/// The version a path's reply carries (`ETag`), and the headers that are params members:
/// `Idempotency-Key` (an op that takes an idempotency key, `Resend::WithKey`) and `If-Match`
/// (a path that takes it, as the op's `expected_wal_offset`).
fn headers(
    obj: &mut Obj,
    call: &mut Call,
    route: &HttpRoute,
    head: &Head,
) -> Result<(), Rejection> {
    if route.etag {
        call.version = Version::Tagged { if_match: None };
    }
    if let Some(key) = &head.idempotency_key {
        if !takes_key(call.op) {
            let paths = paths_where(|op, _| takes_key(op));
            return Err(bad(format!("Idempotency-Key is taken by {paths}")));
        }
        obj.str("idempotency_key", key);
    }
    let Some(tag) = &head.if_match else {
        return Ok(());
    };
    if !route.if_match {
        let paths = paths_where(|_, r| r.if_match);
        return Err(bad(format!("If-Match is taken by {paths}")));
    }
    call.if_match = true;
    if tag == "*" {
        return Ok(());
    }
    let (epoch, offset) = parse_etag(tag).ok_or_else(|| {
        Rejection::new(
            ErrorCode::Conflict,
            format!(
                "If-Match {:?} is not a version of this instance",
                quote(tag)
            ),
        )
        .with("if_match", quote(tag))
    })?;
    obj.num("expected_wal_offset", offset);
    call.version = Version::Tagged {
        if_match: Some((epoch, offset)),
    };
    Ok(())
}

/// Whether `op` takes an `idempotency_key` (its resend class says a key makes it safe).
fn takes_key(op: Op) -> bool {
    op.facts().resend == Resend::WithKey
}

/// The paths `takes` picks from the op table, `"METHOD /path"` joined by `and` (for the
/// refusals that say where a header is taken).
fn paths_where(takes: impl Fn(Op, &HttpRoute) -> bool) -> String {
    let mut names: Vec<String> = Vec::new();
    for &op in Op::ALL {
        for r in op.facts().http.iter().filter(|r| takes(op, r)) {
            if !names.contains(&r.name()) {
                names.push(r.name());
            }
        }
    }
    names.join(" and ")
}

/// `"<epoch>.<wal_offset>"`, a strong ETag of ours.
pub fn parse_etag(tag: &str) -> Option<(u64, u64)> {
    let inner = tag.strip_prefix('"')?.strip_suffix('"')?;
    let (e, o) = inner.split_once('.')?;
    let num = |s: &str| match s.bytes().all(|b| b.is_ascii_digit()) {
        true => s.parse::<u64>().ok(),
        false => None,
    };
    Some((num(e)?, num(o)?))
}

/// Where a stream starts: `Last-Event-ID` (a cursor) wins over `?from_cursor=`. An instance
/// stream starts after that cursor's position in the instance's shard.
fn stream_start(
    obj: &mut Obj,
    op: Op,
    target: &Target,
    head: &Head,
    shards: Layout,
) -> Result<(), Rejection> {
    let Some(cursor) = head.last_event_id.as_deref().or(target.get("from_cursor")) else {
        return Ok(());
    };
    if op == Op::WatchAll {
        obj.str("from_cursor", cursor);
        return Ok(());
    }
    let id = target.get("instance").unwrap_or("");
    let shard = shards.shard_of(id) as usize;
    let from = match cursor::decode(cursor, shards.count)? {
        Start::Oldest => 1,
        Start::After(positions) => positions[shard].offset + 1,
    };
    obj.num("from_offset", from);
    Ok(())
}

/// The params: the members built so far, then the body's (a JSON object) as the path's
/// `Body` says. A member given twice (in the path and the body, say) is refused by the op's
/// parser, as over RCP1.
fn with_body(mut obj: Obj, takes: Body, body: Option<&[u8]>) -> Result<Vec<u8>, Rejection> {
    let raw = match (takes, body) {
        (Body::No | Body::OptionalMembers, None) => return Ok(obj.finish()),
        (Body::No, Some(_)) => return Err(bad("this path takes no request body".into())),
        (Body::Members | Body::Member(_), None) => {
            return Err(bad("this path needs a JSON object body".into()))
        }
        (_, Some(b)) => object(b)?,
    };
    match takes {
        Body::Member(member) => obj.raw(member, raw.get().as_bytes()),
        _ => obj.members(raw.get()),
    }
    Ok(obj.finish())
}

/// The body as one JSON object (syntax checked, nothing built).
fn object(body: &[u8]) -> Result<&RawValue, Rejection> {
    let raw: &RawValue =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON: {e}")))?;
    match raw.get().starts_with('{') {
        true => Ok(raw),
        false => Err(bad("the body must be a JSON object".into())),
    }
}

fn parse_u64(name: &str, v: &str) -> Result<u64, Rejection> {
    match v.bytes().all(|b| b.is_ascii_digit()) {
        true => v.parse().ok(),
        false => None,
    }
    .ok_or_else(|| {
        bad(format!(
            "{name} must be a non-negative integer, not {:?}",
            quote(v)
        ))
    })
}

fn parse_bool(name: &str, v: &str) -> Result<&'static str, Rejection> {
    match v {
        "" | "true" | "1" => Ok("true"),
        "false" | "0" => Ok("false"),
        _ => Err(bad(format!(
            "{name} must be true or false, not {:?}",
            quote(v)
        ))),
    }
}

fn bad(message: String) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, message)
}

/// A JSON object written member by member.
struct Obj(Vec<u8>);

impl Obj {
    fn new() -> Obj {
        Obj(vec![b'{'])
    }

    fn key(&mut self, k: &str) {
        if self.0.len() > 1 {
            self.0.push(b',');
        }
        self.string(k);
        self.0.push(b':');
    }

    fn string(&mut self, s: &str) {
        // Serialising a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.0, s);
    }

    fn str(&mut self, k: &str, v: &str) {
        self.key(k);
        self.string(v);
    }

    fn num(&mut self, k: &str, n: u64) {
        self.key(k);
        self.0.extend_from_slice(n.to_string().as_bytes());
    }

    fn raw(&mut self, k: &str, json: &[u8]) {
        self.key(k);
        self.0.extend_from_slice(json);
    }

    fn list<'a>(&mut self, k: &str, items: impl Iterator<Item = &'a str>) {
        self.key(k);
        self.0.push(b'[');
        for (i, item) in items.enumerate() {
            if i > 0 {
                self.0.push(b',');
            }
            self.string(item);
        }
        self.0.push(b']');
    }

    /// The members of `object` (a checked JSON object's text) after those written.
    fn members(&mut self, object: &str) {
        let inner = object[1..object.len() - 1].trim();
        if !inner.is_empty() {
            if self.0.len() > 1 {
                self.0.push(b',');
            }
            self.0.extend_from_slice(inner.as_bytes());
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.0.push(b'}');
        self.0
    }
}

mod queries;

#[cfg(test)]
mod tests;
