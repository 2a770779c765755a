use serde_json::{json, Value};

use super::*;
use crate::front::http::target::parse_target;

/// Two shards routed by hash (a server without `[cluster]`).
const HASH_2: Layout = Layout {
    routing: shards::routing::Routing::Hash,
    count: 2,
};

fn head() -> Head {
    Head {
        method: "GET".into(),
        host: Some("h".into()),
        http11: true,
        ..Head::default()
    }
}

fn call(
    op: Op,
    reply: HttpReply,
    path: &[(&'static str, &str)],
    target: &str,
    body: Option<&str>,
    head: &Head,
) -> Result<Call, Rejection> {
    let path: Vec<(&'static str, String)> = path.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let target = parse_target(target).unwrap();
    let route = op.facts().http.iter().find(|r| r.reply == reply).unwrap();
    build(
        op,
        route,
        &path,
        &target,
        body.map(str::as_bytes),
        head,
        HASH_2,
    )
}

fn params(c: &Call) -> Value {
    serde_json::from_slice(&c.params).unwrap()
}

#[test]
fn apply_event_takes_the_path_id_body_and_headers() {
    let mut h = head();
    h.idempotency_key = Some("k-1".into());
    h.if_match = Some("\"3.17\"".into());
    let body = r#" {"event":"pay","payload":{"amount":30}} "#;
    let c = call(
        Op::ApplyEvent,
        HttpReply::Result,
        &[("id", "a/b")],
        "/x",
        Some(body),
        &h,
    )
    .unwrap();
    assert_eq!(
        params(&c),
        json!({"instance_id": "a/b", "idempotency_key": "k-1", "expected_wal_offset": 17,
               "event": "pay", "payload": {"amount": 30}})
    );
    assert_eq!(
        c.version,
        Version::Tagged {
            if_match: Some((3, 17))
        }
    );
    assert!(c.if_match);
    let empty = call(
        Op::ApplyEvent,
        HttpReply::Result,
        &[("id", "a")],
        "/x",
        Some("{ }"),
        &head(),
    )
    .unwrap();
    assert_eq!(params(&empty), json!({"instance_id": "a"}));
}

#[test]
fn if_match_that_is_not_ours_conflicts_and_star_matches_anything() {
    let mut h = head();
    for tag in ["W/\"1.2\"", "\"x\"", "\"1.2.3\"", "\"-1.2\""] {
        h.if_match = Some(tag.into());
        let e = call(
            Op::ApplyEvent,
            HttpReply::Result,
            &[("id", "a")],
            "/x",
            Some("{}"),
            &h,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict, "{tag}");
    }
    h.if_match = Some("*".into());
    let c = call(
        Op::ApplyEvent,
        HttpReply::Result,
        &[("id", "a")],
        "/x",
        Some("{}"),
        &h,
    )
    .unwrap();
    assert!(c.if_match);
    assert_eq!(params(&c), json!({"instance_id": "a"}));
    let e = call(
        Op::GetInstance,
        HttpReply::Result,
        &[("id", "a")],
        "/x",
        None,
        &h,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
}

#[test]
fn queries_are_typed_and_unknown_ones_refused() {
    let c = call(
        Op::ListInstances,
        HttpReply::Result,
        &[],
        "/i?machine=m&state=s%20x&limit=5",
        None,
        &head(),
    )
    .unwrap();
    assert_eq!(
        params(&c),
        json!({"machine": "m", "state": "s x", "limit": 5})
    );
    for bad in [
        "/i?limit=-1",
        "/i?limit=x",
        "/i?access_token=t",
        "/i?format=svg",
    ] {
        let e = call(
            Op::ListInstances,
            HttpReply::Result,
            &[],
            bad,
            None,
            &head(),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{bad}");
    }
    let c = call(
        Op::GetMachine,
        HttpReply::Result,
        &[("machine", "m"), ("version", "2")],
        "/",
        None,
        &head(),
    )
    .unwrap();
    assert_eq!(params(&c), json!({"machine": "m", "version": 2}));
    let e = call(
        Op::GetMachine,
        HttpReply::Result,
        &[("machine", "m"), ("version", "v2")],
        "/",
        None,
        &head(),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
}

#[test]
fn streams_pick_the_op_and_start_from_last_event_id() {
    let c = call(
        Op::WatchAll,
        HttpReply::Stream,
        &[],
        "/s?machines=a,b&include_context=true&from_cursor=c1-1-2",
        None,
        &head(),
    )
    .unwrap();
    assert_eq!(c.op, Op::WatchAll);
    assert_eq!(
        params(&c),
        json!({"machines": ["a", "b"], "include_context": true, "from_cursor": "c1-1-2"})
    );
    let mut h = head();
    h.last_event_id = Some("c1-5-9".into());
    let c = call(
        Op::WatchAll,
        HttpReply::Stream,
        &[],
        "/s?from_cursor=c1-1-2",
        None,
        &h,
    )
    .unwrap();
    assert_eq!(params(&c)["from_cursor"], "c1-5-9", "Last-Event-ID wins");
    let c = call(
        Op::WatchAll,
        HttpReply::Stream,
        &[],
        "/s?instance=o1",
        None,
        &h,
    )
    .unwrap();
    assert_eq!(c.op, Op::WatchInstance);
    let shard = HASH_2.shard_of("o1") as usize;
    let from = [6, 10][shard];
    assert_eq!(
        params(&c),
        json!({"instance_id": "o1", "from_offset": from})
    );
}

#[test]
fn bodies_must_be_json_objects_where_taken_and_absent_elsewhere() {
    let e = call(
        Op::CreateInstance,
        HttpReply::Result,
        &[],
        "/",
        Some("[1]"),
        &head(),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    let e = call(
        Op::CreateInstance,
        HttpReply::Result,
        &[],
        "/",
        Some("{\"a\":"),
        &head(),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    let e = call(
        Op::CreateInstance,
        HttpReply::Result,
        &[],
        "/",
        None,
        &head(),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    let e = call(
        Op::GetInstance,
        HttpReply::Result,
        &[("id", "a")],
        "/",
        Some("{}"),
        &head(),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    let def = r#"{"states":["a"],"initial":"a","transitions":[]}"#;
    let c = call(
        Op::PutMachine,
        HttpReply::Result,
        &[("machine", "m"), ("version", "1")],
        "/",
        Some(def),
        &head(),
    )
    .unwrap();
    assert_eq!(params(&c)["definition"]["initial"], "a");
}

#[test]
fn diagram_formats() {
    let path = [("machine", "m"), ("version", "1")];
    let c = call(
        Op::GetMachine,
        HttpReply::Diagram,
        &path,
        "/d",
        None,
        &head(),
    )
    .unwrap();
    assert_eq!(c.diagram, Some(Format::Svg));
    let c = call(
        Op::GetMachine,
        HttpReply::Diagram,
        &path,
        "/d?format=mermaid",
        None,
        &head(),
    )
    .unwrap();
    assert_eq!(c.diagram, Some(Format::Mermaid));
    assert!(call(
        Op::GetMachine,
        HttpReply::Diagram,
        &path,
        "/d?format=png",
        None,
        &head()
    )
    .is_err());
}

/// What each path takes comes from its `HttpRoute`; the refusals' texts are the ones the HTTP
/// layer gave when it matched ops by hand (a client may show them).
#[test]
fn what_a_path_takes_comes_from_its_route_with_the_same_refusals() {
    let refused = |op, path: &[(&'static str, &str)], body, h: &Head| {
        call(op, HttpReply::Result, path, "/", body, h)
            .unwrap_err()
            .message
    };
    let id = [("id", "a")];
    let mut keyed = head();
    keyed.idempotency_key = Some("k".into());
    assert_eq!(
        refused(Op::GetInstance, &id, None, &keyed),
        "Idempotency-Key is taken by POST /instances and POST /instances/{id}/events"
    );
    let mut tagged = head();
    tagged.if_match = Some("*".into());
    assert_eq!(
        refused(Op::CreateInstance, &[], Some("{}"), &tagged),
        "If-Match is taken by POST /instances/{id}/events"
    );
    assert_eq!(
        refused(Op::TimersResume, &[], Some("{}"), &head()),
        "this path takes no request body"
    );
    assert_eq!(
        refused(Op::Batch, &[], None, &head()),
        "this path needs a JSON object body"
    );
    let e = call(Op::Info, HttpReply::Result, &[], "/?x=1", None, &head()).unwrap_err();
    assert_eq!(e.message, "query parameter \"x\" is not taken by this path");
    // SWITCHOVER's body is optional; given, its members are the params.
    let none = call(Op::Switchover, HttpReply::Result, &[], "/", None, &head()).unwrap();
    assert_eq!(params(&none), json!({}));
    let to = Some(r#"{"to":"n2"}"#);
    let some = call(Op::Switchover, HttpReply::Result, &[], "/", to, &head()).unwrap();
    assert_eq!(params(&some), json!({"to": "n2"}));
    // The instance paths answer a version (`ETag`); no other path does.
    for op in Op::ALL.iter().filter(|op| !op.facts().http.is_empty()) {
        let tagged = [Op::GetInstance, Op::CreateInstance, Op::ApplyEvent].contains(op);
        for r in op.facts().http {
            let target = parse_target("/").unwrap();
            let path = [("id", "a".to_string())];
            let body = (r.body != Body::No).then_some(&b"{}"[..]);
            let c = build(*op, r, &path, &target, body, &head(), HASH_2);
            let version = c.unwrap_or_else(|e| panic!("{op:?}: {e:?}")).version;
            let want = match tagged {
                true => Version::Tagged { if_match: None },
                false => Version::Untagged,
            };
            assert_eq!(version, want, "{op:?} {}", r.path);
        }
    }
}
