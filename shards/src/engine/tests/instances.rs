//! CREATE_INSTANCE, GET_INSTANCE and DELETE_INSTANCE.

use serde_json::json;

use super::*;
use crate::engine::Entry;

#[test]
fn create_instance_starts_in_the_initial_state() {
    let mut shard = Shard::with_order();
    let result = shard.ok(create("o1", 10));
    assert_eq!(
        result,
        json!({"id": "o1", "machine": "order", "version": 1, "state": "new",
               "context": {"total": 10}, "wal_offset": 2, "applied": true})
    );
    assert_eq!(shard.engine.instance_count(), 1);
    assert_eq!(shard.engine.instance("o1").unwrap().state, "new".into());
}

#[test]
fn create_for_unknown_machine_or_version_is_machine_not_found() {
    let mut shard = Shard::with_order();
    let mut cmd = create("o1", 1);
    if let Command::CreateInstance { version, .. } = &mut cmd {
        *version = 2;
    }
    assert_eq!(shard.code(cmd), ErrorCode::MachineNotFound);
    assert_eq!(
        Shard::new().code(create("o1", 1)),
        ErrorCode::MachineNotFound
    );
}

#[test]
fn create_with_an_existing_id_is_instance_exists() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let err = shard.exec(create("o1", 1)).unwrap_err();
    assert_eq!(err.code, ErrorCode::InstanceExists);
    assert_eq!(err.details["id"], json!("o1"));
}

#[test]
fn create_with_the_same_idempotency_key_replays_the_first_result() {
    let mut shard = Shard::with_order();
    let first = shard.ok(create_keyed("o1", 5, Some("k1")));
    shard.ok(event("o1", "pay", Some(json!({"amount": 5}))));
    let again = shard.ok(create_keyed("o1", 99, Some("k1")));
    let mut expected = first.clone();
    expected["applied"] = json!(false);
    assert_eq!(again, expected);
    assert_eq!(
        shard.code(create_keyed("o1", 5, Some("k2"))),
        ErrorCode::InstanceExists
    );
    assert_eq!(
        shard.code(create_keyed("o1", 5, None)),
        ErrorCode::InstanceExists
    );
    shard.ok(create("o2", 5));
    assert_eq!(
        shard.code(create_keyed("o2", 5, Some("k1"))),
        ErrorCode::InstanceExists
    );
}

#[test]
fn bad_instance_id_is_bad_request() {
    let mut shard = Shard::with_order();
    assert_eq!(shard.code(create("", 1)), ErrorCode::BadRequest);
    let err = shard.exec(create(&"i".repeat(257), 1)).unwrap_err();
    assert_eq!(
        (err.code, err.details["field"].clone()),
        (ErrorCode::BadRequest, json!("id"))
    );
    assert!(shard.exec(create(&"i".repeat(256), 1)).is_ok());
}

#[test]
fn bad_idempotency_key_is_bad_request() {
    let mut shard = Shard::with_order();
    let long = "k".repeat(257);
    assert_eq!(
        shard.code(create_keyed("o1", 1, Some(&long))),
        ErrorCode::BadRequest
    );
    assert_eq!(
        shard.code(create_keyed("o1", 1, Some(""))),
        ErrorCode::BadRequest
    );
    shard.ok(create_keyed("o1", 1, Some(&"k".repeat(256))));
    assert_eq!(
        shard.code(keyed_event("o1", "cancel", None, &long)),
        ErrorCode::BadRequest
    );
}

#[test]
fn get_instance_shows_timestamps_as_rfc3339_millis() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 3));
    shard.ok(event("o1", "pay", Some(json!({"amount": 3, "by": "card"}))));
    let got = shard.engine.instance_json("o1").unwrap();
    assert_eq!(
        got,
        json!({"id": "o1", "machine": "order", "version": 1, "state": "paid",
               "context": {"total": 3, "amount": 3, "by": "card"},
               "created_at": "2026-01-31T12:00:00.002Z", "updated_at": "2026-01-31T12:00:00.003Z",
               "event_count": 1, "wal_offset": 3})
    );
    assert_eq!(shard.engine.instance_json("nope"), None);
}

#[test]
fn delete_removes_the_instance_its_history_and_keys() {
    let mut shard = Shard::with_order();
    shard.ok(create_keyed("o1", 3, Some("c")));
    shard.ok(keyed_event("o1", "pay", Some(json!({"amount": 3})), "e"));
    let result = shard.ok(delete("o1"));
    assert_eq!(
        result,
        json!({"id": "o1", "deleted": true, "wal_offset": 4})
    );
    assert_eq!(shard.engine.instance("o1"), None);
    assert_eq!(shard.engine.instance_count(), 0);
    assert_eq!(
        shard.engine.history("o1", 1, 10).unwrap_err().code,
        ErrorCode::InstanceNotFound
    );
    // The id is free again, and the old keys are gone with the old instance.
    assert_eq!(
        shard.ok(create_keyed("o1", 7, Some("c")))["applied"],
        json!(true)
    );
    let fresh = shard.ok(keyed_event("o1", "pay", Some(json!({"amount": 1})), "e"));
    assert_eq!(
        (fresh["applied"].clone(), fresh["to_state"].clone()),
        (json!(true), json!("new"))
    );
}

#[test]
fn delete_of_unknown_instance_is_instance_not_found() {
    let mut shard = Shard::with_order();
    let err = shard.exec(delete("ghost")).unwrap_err();
    assert_eq!(err.code, ErrorCode::InstanceNotFound);
    assert_eq!(err.details["id"], json!("ghost"));
}

#[test]
fn entries_that_do_not_fit_are_skipped_on_apply() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 3));
    let before = shard.engine.instance("o1").cloned();
    let stats = shard.engine.stats().clone();
    let skipped = [
        Entry::Apply {
            instance_id: "ghost".into(),
            event: "pay".into(),
            from: "new".into(),
            to: "paid".into(),
            payload: None,
            idempotency_key: None,
            at_ms: 1,
            machine: None,
            version: None,
            timer: false,
        },
        Entry::Apply {
            instance_id: "o1".into(),
            event: "ship".into(),
            from: "paid".into(),
            to: "shipped".into(),
            payload: None,
            idempotency_key: None,
            at_ms: 1,
            machine: None,
            version: None,
            timer: false,
        },
        Entry::Create {
            id: "o1".into(),
            machine: "order".into(),
            version: 1,
            state: "paid".into(),
            context: obj(json!({})),
            idempotency_key: None,
            at_ms: 1,
        },
        Entry::Delete {
            id: "ghost".into(),
            at_ms: 1,
            machine: None,
            reason: None,
        },
    ];
    for (i, entry) in skipped.into_iter().enumerate() {
        assert_eq!(shard.engine.apply(entry, 10 + i as u64, true), None);
    }
    assert_eq!(shard.engine.instance("o1").cloned(), before);
    assert_eq!(shard.engine.stats(), &stats);
}

#[test]
fn create_entry_for_unknown_machine_still_creates_the_instance() {
    let mut engine = Engine::new();
    let entry = Entry::Create {
        id: "x".into(),
        machine: "later".into(),
        version: 1,
        state: "s".into(),
        context: obj(json!({})),
        idempotency_key: None,
        at_ms: 0,
    };
    assert_eq!(engine.apply(entry, 1, false), None);
    assert_eq!(engine.instance("x").unwrap().state, "s".into());
}
