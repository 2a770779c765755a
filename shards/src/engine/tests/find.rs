//! FIND_INSTANCES and the indexes behind it (and LIST's): each rule, and pages against a model
//! that filters the instances directly, before and after a snapshot restore.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::engine::{Condition, FindQuery};

/// Accounts: `set` merges its payload (into any open state), `hold`/`open` move between the
/// two open states, `close` ends one. Three declared indexes, one of them nested.
fn account_machine() -> Value {
    json!({
        "states": ["open", "held", "closed"],
        "initial": "open",
        "final": ["closed"],
        "transitions": [
            {"from": "*", "event": "set", "to": "open"},
            {"from": "open", "event": "hold", "to": "held"},
            {"from": "held", "event": "open", "to": "open"},
            {"from": "*", "event": "close", "to": "closed"}
        ],
        "indexes": ["ctx.customer", "ctx.total", "ctx.meta.region"]
    })
}

fn with_accounts() -> Shard {
    let mut shard = Shard::new();
    shard.ok(put("acct", 1, account_machine()));
    shard
}

fn open(id: &str, ctx: Value) -> Command {
    Command::CreateInstance {
        id: id.into(),
        machine: "acct".into(),
        version: 1,
        context: obj(ctx),
        idempotency_key: None,
    }
}

fn query(conditions: Vec<(&str, Condition)>) -> FindQuery {
    FindQuery {
        machine: "acct".into(),
        conditions: (conditions.into_iter())
            .map(|(p, c)| (p.to_owned(), c))
            .collect(),
        state: None,
        after: None,
        limit: 100,
        include_context: false,
    }
}

fn eq(v: Value) -> Condition {
    Condition::Eq(v)
}

fn found(engine: &Engine, q: &FindQuery) -> Vec<String> {
    let page = engine.find_instances(q).unwrap();
    (page.instances.iter())
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn exact_in_range_and_intersection() {
    let mut s = with_accounts();
    s.ok(open(
        "a",
        json!({"customer": "c-9", "total": 5, "meta": {"region": "eu"}}),
    ));
    s.ok(open("b", json!({"customer": "c-1", "total": 5.0})));
    s.ok(open("c", json!({"customer": "c-9", "total": 12})));
    s.ok(open(
        "d",
        json!({"customer": ["not", "scalar"], "total": "5"}),
    ));
    let e = &s.engine;
    assert_eq!(
        found(e, &query(vec![("ctx.customer", eq(json!("c-9")))])),
        ["a", "c"]
    );
    assert_eq!(
        found(e, &query(vec![("ctx.total", eq(json!(5)))])),
        ["a", "b"]
    );
    assert_eq!(found(e, &query(vec![("ctx.total", eq(json!("5")))])), ["d"]);
    let either = Condition::In(vec![json!("c-1"), json!("c-9"), json!("c-1")]);
    assert_eq!(
        found(e, &query(vec![("ctx.customer", either)])),
        ["a", "b", "c"]
    );
    let range = Condition::Range {
        low: Some((json!(5), false)),
        high: None,
    };
    assert_eq!(found(e, &query(vec![("ctx.total", range)])), ["c"]);
    let range = Condition::Range {
        low: Some((json!(1), true)),
        high: Some((json!(12), false)),
    };
    assert_eq!(
        found(e, &query(vec![("ctx.total", range.clone())])),
        ["a", "b"]
    );
    let both = vec![("ctx.total", range), ("ctx.customer", eq(json!("c-9")))];
    assert_eq!(found(e, &query(both)), ["a"]);
    assert_eq!(
        found(e, &query(vec![("ctx.meta.region", eq(json!("eu")))])),
        ["a"]
    );
    // Crossed bounds match nothing (and do not reach the B-tree, which would panic).
    let crossed = Condition::Range {
        low: Some((json!(12), true)),
        high: Some((json!(5), false)),
    };
    assert!(found(e, &query(vec![("ctx.total", crossed)])).is_empty());
}

#[test]
fn writes_move_entries_and_the_state_filters() {
    let mut s = with_accounts();
    s.ok(open("a", json!({"customer": "c-1"})));
    s.ok(open("b", json!({"customer": "c-1"})));
    s.ok(event("a", "set", Some(json!({"customer": "c-2"}))));
    s.ok(event("b", "hold", None));
    let c1 = || query(vec![("ctx.customer", eq(json!("c-1")))]);
    assert_eq!(found(&s.engine, &c1()), ["b"]);
    let mut held = c1();
    held.state = Some("open".into());
    assert!(found(&s.engine, &held).is_empty());
    held.state = Some("held".into());
    assert_eq!(found(&s.engine, &held), ["b"]);
    s.ok(delete("b"));
    assert!(found(&s.engine, &c1()).is_empty());
    let c2 = query(vec![("ctx.customer", eq(json!("c-2")))]);
    assert_eq!(found(&s.engine, &c2), ["a"]);
}

#[test]
fn pages_follow_the_cursor_and_leave_out_the_context_unless_asked() {
    let mut s = with_accounts();
    for id in ["e", "a", "d", "b", "c"] {
        s.ok(open(id, json!({"customer": "c-1"})));
    }
    let mut q = query(vec![("ctx.customer", eq(json!("c-1")))]);
    q.limit = 2;
    let page = s.engine.find_instances(&q).unwrap();
    assert_eq!((page.instances.len(), page.more), (2, true));
    assert!(page.instances[0].get("context").is_none());
    q.after = Some("b".into());
    q.include_context = true;
    let page = s.engine.find_instances(&q).unwrap();
    assert_eq!(page.instances[0]["id"], "c");
    assert_eq!(page.instances[0]["context"], json!({"customer": "c-1"}));
    q.after = Some("d".into());
    let page = s.engine.find_instances(&q).unwrap();
    assert_eq!((page.instances.len(), page.more), (1, false));
    assert_eq!(page.versions, [1]);
}

#[test]
fn an_undeclared_index_is_refused_with_the_index_to_declare() {
    let mut s = with_accounts();
    let err = (s.engine)
        .find_instances(&query(vec![("ctx.colour", eq(json!("red")))]))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert_eq!(err.details["index"], "ctx.colour");
    let mut unknown = query(vec![("ctx.customer", eq(json!("x")))]);
    unknown.machine = "nope".into();
    assert_eq!(
        s.engine.find_instances(&unknown).unwrap_err().code,
        ErrorCode::MachineNotFound
    );
    // Version 2 drops `ctx.total`: only version 1's instances are searched for it.
    let mut v2 = account_machine();
    v2["indexes"] = json!(["ctx.customer"]);
    s.ok(put("acct", 2, v2));
    s.ok(open("a", json!({"total": 1})));
    let page = (s.engine)
        .find_instances(&query(vec![("ctx.total", eq(json!(1)))]))
        .unwrap();
    assert_eq!(page.versions, [1]);
}

#[test]
fn a_definition_with_bad_indexes_is_refused() {
    let mut s = Shard::new();
    for indexes in [
        json!(["customer"]),
        json!(["ctx."]),
        json!(["ctx.a b"]),
        json!(["ctx.a", "ctx.a"]),
        json!(["ctx.a", "ctx.b", "ctx.c", "ctx.d", "ctx.e", "ctx.f", "ctx.g", "ctx.h", "ctx.i"]),
    ] {
        let mut def = account_machine();
        def["indexes"] = indexes.clone();
        assert_eq!(
            s.code(put("acct", 1, def)),
            ErrorCode::InvalidDefinition,
            "{indexes}"
        );
    }
    // No indexes: the normalised form has no `indexes` member (checksums as before).
    s.ok(put("order", 1, order_machine()));
    let stored = s.engine.machine("order", Some(1)).unwrap();
    assert!(stored["definition"].get("indexes").is_none());
}

// ---- Against a model ----

#[derive(Debug, Clone)]
enum Op {
    Open(u8, Value),
    Set(u8, Value),
    Hold(u8),
    Close(u8),
    Delete(u8),
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..4).prop_map(Value::from),
        (-3i64..4).prop_map(|n| Value::from(n as f64 + 0.5)),
        "[ab]{0,2}".prop_map(Value::from),
        Just(json!([1])),
    ]
}

fn context() -> impl Strategy<Value = Value> {
    (
        proptest::option::of(scalar()),
        proptest::option::of(scalar()),
    )
        .prop_map(|(customer, total)| {
            let mut ctx = json!({});
            if let Some(c) = customer {
                ctx["customer"] = c;
            }
            if let Some(t) = total {
                ctx["total"] = t;
            }
            ctx
        })
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..12, context()).prop_map(|(i, c)| Op::Open(i, c)),
        (0u8..12, context()).prop_map(|(i, c)| Op::Set(i, c)),
        (0u8..12).prop_map(Op::Hold),
        (0u8..12).prop_map(Op::Close),
        (0u8..12).prop_map(Op::Delete),
    ]
}

fn any_condition() -> impl Strategy<Value = Condition> {
    let bound = prop_oneof![
        (-3i64..4).prop_map(Value::from),
        "[ab]{0,2}".prop_map(Value::from)
    ];
    prop_oneof![
        scalar()
            .prop_filter("scalar", |v| !v.is_array())
            .prop_map(Condition::Eq),
        proptest::collection::vec(scalar().prop_filter("scalar", |v| !v.is_array()), 0..3)
            .prop_map(Condition::In),
        (
            proptest::option::of((bound.clone(), any::<bool>())),
            proptest::option::of((bound, any::<bool>()))
        )
            .prop_filter("one type", |(l, h)| match (l, h) {
                (Some((a, _)), Some((b, _))) => a.is_number() == b.is_number(),
                (None, None) => false,
                _ => true,
            })
            .prop_map(|(low, high)| Condition::Range { low, high }),
    ]
}

/// The condition's meaning, computed from the value itself (not through the index encoding).
fn holds(c: &Condition, v: Option<&Value>) -> bool {
    use std::cmp::Ordering;
    let Some(v) = v.filter(|v| !v.is_array() && !v.is_object()) else {
        return false;
    };
    let cmp = |a: &Value, b: &Value| -> Option<Ordering> {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
            (Value::String(x), Value::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
            (Value::Null, Value::Null) => Some(Ordering::Equal),
            (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
            _ => None,
        }
    };
    match c {
        Condition::Eq(want) => cmp(v, want) == Some(Ordering::Equal),
        Condition::In(list) => list.iter().any(|w| cmp(v, w) == Some(Ordering::Equal)),
        Condition::Range { low, high } => {
            let above = low.as_ref().is_none_or(|(b, incl)| match cmp(v, b) {
                Some(Ordering::Greater) => true,
                Some(Ordering::Equal) => *incl,
                _ => false,
            });
            let below = high.as_ref().is_none_or(|(b, incl)| match cmp(v, b) {
                Some(Ordering::Less) => true,
                Some(Ordering::Equal) => *incl,
                _ => false,
            });
            above && below
        }
    }
}

proptest! {
    /// After any writes, FIND pages (walked to the end by cursor) give exactly the instances
    /// the model's filter gives, in id order; so does an engine restored from a snapshot, and
    /// both LIST the same instances per state.
    #[test]
    fn find_follows_the_model(
        ops in proptest::collection::vec(any_op(), 0..40),
        conditions in proptest::collection::vec(
            (prop_oneof![Just("ctx.customer"), Just("ctx.total")], any_condition()), 1..3),
        state in proptest::option::of(prop_oneof![Just("open"), Just("held")]),
        limit in 1usize..4,
    ) {
        let mut s = with_accounts();
        for op in ops {
            let _ = match op {
                Op::Open(i, ctx) => s.exec(open(&format!("i{i}"), ctx)),
                Op::Set(i, ctx) => s.exec(event(&format!("i{i}"), "set", Some(ctx))),
                Op::Hold(i) => s.exec(event(&format!("i{i}"), "hold", None)),
                Op::Close(i) => s.exec(event(&format!("i{i}"), "close", None)),
                Op::Delete(i) => s.exec(delete(&format!("i{i}"))),
            };
        }
        let mut conditions = conditions;
        conditions.dedup_by_key(|(p, _)| *p);
        let mut want: Vec<String> = Vec::new();
        for page in [s.engine.list_instances(Some("acct"), None, None, None, 1000)] {
            for item in page.instances {
                let ctx = &item["context"];
                let field = |p: &str| ctx.get(p.trim_start_matches("ctx."));
                let ok = conditions.iter().all(|(p, c)| holds(c, field(p)))
                    && state.is_none_or(|st| item["state"] == st);
                if ok {
                    want.push(item["id"].as_str().unwrap().to_owned());
                }
            }
        }
        prop_assert!(s.engine.indexes_match_a_rebuild());
        let restored = Engine::restore(&s.engine.snapshot()).unwrap();
        for engine in [&s.engine, &restored] {
            let mut q = query(conditions.clone());
            q.state = state.map(str::to_owned);
            q.limit = limit;
            let mut got: Vec<String> = Vec::new();
            loop {
                let page = engine.find_instances(&q).unwrap();
                let ids: Vec<String> = (page.instances.iter())
                    .map(|i| i["id"].as_str().unwrap().to_owned())
                    .collect();
                prop_assert!(ids.len() <= limit);
                got.extend(ids);
                if !page.more {
                    break;
                }
                q.after = got.last().cloned();
            }
            prop_assert_eq!(&got, &want);
            for st in ["open", "held", "closed"] {
                let a = s.engine.list_instances(Some("acct"), Some(st), None, None, 1000);
                let b = engine.list_instances(Some("acct"), Some(st), None, None, 1000);
                prop_assert_eq!(a, b);
            }
        }
    }
}

#[test]
fn a_scan_slice_examines_at_most_its_budget_and_says_where_it_stopped() {
    use crate::engine::ScanQuery;
    let mut s = with_accounts();
    for i in 0..10 {
        s.ok(open(&format!("i{i}"), json!({"n": i})));
    }
    let q = ScanQuery {
        machine: "acct".into(),
        conditions: vec![(
            "ctx.n".into(),
            Condition::Range {
                low: Some((json!(5), true)),
                high: None,
            },
        )],
        state: None,
        after: None,
        limit: 100,
        include_context: false,
    };
    let slice = s.engine.scan_slice(&q, None, 4, 100).unwrap();
    assert_eq!((slice.examined, slice.instances.len()), (4, 0));
    assert_eq!(slice.through.as_deref(), Some("i3"));
    let slice = s.engine.scan_slice(&q, Some("i3"), 4, 100).unwrap();
    assert_eq!(slice.instances.len(), 3);
    assert_eq!(slice.through.as_deref(), Some("i7"));
    // Stopping at `want` matches leaves a cursor even at the last instance examined.
    let slice = s.engine.scan_slice(&q, Some("i7"), 4, 1).unwrap();
    assert_eq!((slice.examined, slice.through.as_deref()), (1, Some("i8")));
    let slice = s.engine.scan_slice(&q, Some("i8"), 4, 100).unwrap();
    assert_eq!(
        (slice.examined, slice.instances.len(), slice.through),
        (1, 1, None)
    );
}
