//! GET_HISTORY, LIST_INSTANCES, stats and snapshots.

use serde_json::json;

use super::*;
use crate::engine::limits::HISTORY_PER_INSTANCE_MAX;

fn ids(page: &crate::engine::ListPage) -> Vec<&str> {
    page.instances
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect()
}

fn seqs(history: &Value) -> Vec<u64> {
    history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

/// A paid order with `notes` extra self-loop events.
fn paid_with_notes(shard: &mut Shard, id: &str, notes: usize) {
    shard.ok(create(id, 1));
    shard.ok(event(id, "pay", Some(json!({"amount": 1}))));
    for _ in 0..notes {
        shard.ok(event(id, "note", None));
    }
}

#[test]
fn history_items_have_the_documented_shape() {
    let mut shard = Shard::with_order();
    paid_with_notes(&mut shard, "o1", 1);
    let history = shard.engine.history("o1", 1, 10).unwrap();
    assert_eq!(
        history,
        json!({"id": "o1", "next": null, "oldest_seq": 1, "events": [
            {"seq": 1, "event": "pay", "from_state": "new", "to_state": "paid",
             "payload": {"amount": 1}, "at": "2026-01-31T12:00:00.003Z", "wal_offset": 3},
            {"seq": 2, "event": "note", "from_state": "paid", "to_state": "paid",
             "payload": {}, "at": "2026-01-31T12:00:00.004Z", "wal_offset": 4}
        ]})
    );
}

#[test]
fn history_pages_with_from_limit_and_next() {
    let mut shard = Shard::with_order();
    paid_with_notes(&mut shard, "o1", 4);
    let page = shard.engine.history("o1", 1, 2).unwrap();
    assert_eq!((seqs(&page), page["next"].clone()), (vec![1, 2], json!(3)));
    let page = shard.engine.history("o1", 3, 2).unwrap();
    assert_eq!((seqs(&page), page["next"].clone()), (vec![3, 4], json!(5)));
    let page = shard.engine.history("o1", 5, 2).unwrap();
    assert_eq!((seqs(&page), page["next"].clone()), (vec![5], json!(null)));
    let page = shard.engine.history("o1", 0, 100).unwrap();
    assert_eq!(seqs(&page), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        seqs(&shard.engine.history("o1", 9, 5).unwrap()),
        Vec::<u64>::new()
    );
}

#[test]
fn new_instance_has_empty_history() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let history = shard.engine.history("o1", 1, 10).unwrap();
    assert_eq!(
        history,
        json!({"id": "o1", "events": [], "next": null, "oldest_seq": 1})
    );
}

#[test]
fn history_of_unknown_instance_is_instance_not_found() {
    let shard = Shard::with_order();
    assert_eq!(
        shard.engine.history("nope", 1, 1).unwrap_err().code,
        ErrorCode::InstanceNotFound
    );
}

#[test]
fn history_keeps_only_the_most_recent_items() {
    let mut shard = Shard::with_order();
    paid_with_notes(&mut shard, "o1", HISTORY_PER_INSTANCE_MAX + 4);
    let history = shard.engine.history("o1", 1, 3).unwrap();
    assert_eq!(history["oldest_seq"], json!(6));
    assert_eq!(seqs(&history), vec![6, 7, 8]);
    assert_eq!(history["next"], json!(9));
    let count = shard.engine.instance("o1").unwrap().event_count;
    assert_eq!(count, HISTORY_PER_INSTANCE_MAX as u64 + 5);
}

#[test]
fn list_instances_pages_by_id_after_a_cursor() {
    let mut shard = Shard::with_order();
    for id in ["d", "b", "e", "a", "c"] {
        shard.ok(create(id, 1));
    }
    let page = shard.engine.list_instances(None, None, None, None, 2);
    assert_eq!((ids(&page), page.more), (vec!["a", "b"], true));
    let page = shard.engine.list_instances(None, None, Some("b"), None, 2);
    assert_eq!((ids(&page), page.more), (vec!["c", "d"], true));
    let page = shard.engine.list_instances(None, None, Some("d"), None, 2);
    assert_eq!((ids(&page), page.more), (vec!["e"], false));
    let page = shard
        .engine
        .list_instances(None, None, Some("bb"), None, 10);
    assert_eq!((ids(&page), page.more), (vec!["c", "d", "e"], false));
    let page = shard
        .engine
        .list_instances(None, None, None, None, usize::MAX);
    assert_eq!(ids(&page), vec!["a", "b", "c", "d", "e"]);
    assert_eq!(page.instances[0], shard.engine.instance_json("a").unwrap());
}

#[test]
fn list_instances_with_limit_zero_only_says_whether_more_exist() {
    let mut shard = Shard::with_order();
    let page = shard.engine.list_instances(None, None, None, None, 0);
    assert_eq!((page.instances.len(), page.more), (0, false));
    shard.ok(create("a", 1));
    let page = shard.engine.list_instances(None, None, None, None, 0);
    assert_eq!((page.instances.len(), page.more), (0, true));
}

#[test]
fn list_instances_filters_by_machine_and_state() {
    let mut shard = Shard::with_order();
    shard.ok(put(
        "other",
        1,
        json!({"states": ["new"], "initial": "new"}),
    ));
    for id in ["o1", "o2", "o3"] {
        shard.ok(create(id, 1));
    }
    shard.ok(Command::CreateInstance {
        id: "x1".into(),
        machine: "other".into(),
        version: 1,
        context: obj(json!({})),
        idempotency_key: None,
    });
    shard.ok(event("o2", "cancel", None));
    let all_new = shard
        .engine
        .list_instances(None, Some("new"), None, None, 10);
    assert_eq!(ids(&all_new), vec!["o1", "o3", "x1"]);
    let orders_new = shard
        .engine
        .list_instances(Some("order"), Some("new"), None, None, 10);
    assert_eq!(ids(&orders_new), vec!["o1", "o3"]);
    let cancelled = shard
        .engine
        .list_instances(Some("order"), Some("cancelled"), None, None, 10);
    assert_eq!(ids(&cancelled), vec!["o2"]);
    assert!(shard
        .engine
        .list_instances(Some("none"), None, None, None, 10)
        .instances
        .is_empty());
}

fn by_state(engine: &Engine, state: &str) -> Option<u64> {
    engine
        .stats()
        .by_state
        .get(&("order".into(), state.into()))
        .copied()
}

#[test]
fn stats_follow_create_apply_and_delete() {
    let mut shard = Shard::with_order();
    shard.ok(create("a", 1));
    shard.ok(create("b", 1));
    assert_eq!(by_state(&shard.engine, "new"), Some(2));
    shard.ok(event("a", "pay", Some(json!({"amount": 0})))); // partial: new -> new
    shard.ok(event("a", "pay", Some(json!({"amount": 1})))); // new -> paid
    shard.ok(event("a", "note", None)); // paid -> paid
    let stats = shard.engine.stats();
    assert_eq!(stats.events_applied.get("order"), Some(&3));
    assert_eq!(stats.transitions.len(), 1);
    let key = ("order".into(), "new".into(), "paid".into());
    assert_eq!(stats.transitions.get(&key), Some(&1));
    assert_eq!(
        (
            by_state(&shard.engine, "new"),
            by_state(&shard.engine, "paid")
        ),
        (Some(1), Some(1))
    );
    shard.ok(delete("a"));
    assert_eq!(by_state(&shard.engine, "paid"), Some(0));
    assert_eq!(shard.engine.stats().events_applied.get("order"), Some(&3));
    // Rejections count nothing.
    let before = shard.engine.stats().clone();
    let _ = shard.exec(event("b", "ship", None));
    assert_eq!(shard.engine.stats(), &before);
}

#[test]
fn snapshot_restore_keeps_everything() {
    let mut shard = Shard::with_order();
    shard.ok(create_keyed("a", 1, Some("c")));
    shard.ok(keyed_event("a", "pay", Some(json!({"amount": 1})), "k"));
    shard.ok(create("b", 2));
    let restored = Engine::restore(&shard.engine.snapshot()).unwrap();
    assert_eq!(restored.snapshot(), shard.engine.snapshot());
    assert_eq!(restored.stats(), shard.engine.stats());
    assert_eq!(restored.machines(), shard.engine.machines());
    assert_eq!(restored.instance("a"), shard.engine.instance("a"));
    assert_eq!(restored.history("a", 1, 9), shard.engine.history("a", 1, 9));
    let retry = keyed_event("a", "pay", Some(json!({"amount": 1})), "k");
    assert_eq!(restored.decide(&retry, 1), shard.engine.decide(&retry, 1));
    assert_eq!(
        restored.decide(&create_keyed("a", 1, Some("c")), 1),
        shard.engine.decide(&create_keyed("a", 1, Some("c")), 1)
    );
}

#[test]
fn restore_refuses_damaged_snapshots() {
    assert!(Engine::restore(b"not json").is_err());
    assert!(Engine::restore(br#"{"v":2,"machines":[],"instances":[],"stats":{}}"#).is_err());
    let empty = Engine::new().snapshot();
    assert!(Engine::restore(&empty).is_ok());
    let mut text = String::from_utf8(Shard::with_order().engine.snapshot()).unwrap();
    text = text.replace("\"initial\":\"new\"", "\"initial\":\"nowhere\"");
    assert!(Engine::restore(text.as_bytes())
        .unwrap_err()
        .contains("does not compile"));
}

/// MACHINE_STATS: every state of every version, counted from the counters.
#[test]
fn state_counts_list_every_state_and_count_instances_where_they_are() {
    let mut shard = Shard::with_order();
    paid_with_notes(&mut shard, "o1", 0);
    shard.ok(create("o2", 1));
    shard.ok(create("o3", 1));
    let counts = shard.engine.state_counts("order").unwrap();
    let get = |s: &str| counts.iter().find(|(n, _)| n == s).map(|(_, c)| *c);
    assert_eq!((get("new"), get("paid")), (Some(2), Some(1)));
    let states = shard.engine.machine("order", None).unwrap()["definition"]["states"].clone();
    assert_eq!(counts.len(), states.as_array().unwrap().len(), "{counts:?}");
    let e = shard.engine.state_counts("nope").unwrap_err();
    assert_eq!(e.code, crate::ErrorCode::MachineNotFound);
}
