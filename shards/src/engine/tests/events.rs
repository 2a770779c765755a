//! APPLY_EVENT: transitions, guards, expectations, idempotency and final states.

use serde_json::json;

use super::*;
use crate::engine::limits::IDEMPOTENCY_KEYS_PER_INSTANCE_MAX;
use crate::engine::Entry;

fn expect(id: &str, name: &str, state: Option<&str>, offset: Option<u64>) -> Command {
    Command::ApplyEvent {
        instance_id: id.into(),
        event: name.into(),
        payload: None,
        expected_state: state.map(str::to_string),
        expected_wal_offset: offset,
        idempotency_key: None,
    }
}

#[test]
fn apply_event_moves_state_and_merges_payload() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 10));
    let result = shard.ok(event("o1", "pay", Some(json!({"amount": 10, "total": 12}))));
    assert_eq!(
        result,
        json!({"instance_id": "o1", "from_state": "new", "to_state": "paid",
               "context": {"total": 12, "amount": 10}, "wal_offset": 3, "applied": true})
    );
    let instance = shard.engine.instance("o1").unwrap();
    assert_eq!((instance.event_count, instance.wal_offset), (1, 3));
}

#[test]
fn apply_entry_carries_from_to_and_payload() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    // A time after the shard's entries (an earlier one would be raised to the last entry's).
    let at = shard.now_ms + 77;
    let decision = shard
        .engine
        .decide(&event("o1", "pay", Some(json!({"amount": 1}))), at);
    let expected = Entry::Apply {
        instance_id: "o1".into(),
        event: "pay".into(),
        from: "new".into(),
        to: "paid".into(),
        payload: Some(crate::engine::JsonText::from_map(&obj(
            json!({"amount": 1}),
        ))),
        idempotency_key: None,
        at_ms: at,
        machine: Some("order".into()),
        version: Some(1),
        timer: false,
    };
    assert_eq!(decision, Ok(Decision::Write(expected)));
}

#[test]
fn guards_see_the_context_before_the_merge() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 10));
    // `total` in the payload would make the first guard hold after a merge; before it, the
    // partial-payment guard (5 < 10) wins.
    let result = shard.ok(event("o1", "pay", Some(json!({"amount": 5, "total": 1}))));
    assert_eq!(result["to_state"], json!("new"));
    assert_eq!(result["context"]["total"], json!(1));
}

#[test]
fn first_holding_guard_in_definition_order_wins() {
    let mut shard = Shard::new();
    shard.ok(put(
        "m",
        1,
        json!({"states": ["a", "b", "c"], "initial": "a", "transitions": [
            {"from": "a", "event": "go", "to": "b", "guard": "payload.n > 1"},
            {"from": "a", "event": "go", "to": "c", "guard": "payload.n > 0"},
            {"from": "a", "event": "go", "to": "a"}
        ]}),
    ));
    let mk = |id: &str| Command::CreateInstance {
        id: id.into(),
        machine: "m".into(),
        version: 1,
        context: obj(json!({})),
        idempotency_key: None,
    };
    for (id, n, to) in [("x", 2, "b"), ("y", 1, "c"), ("z", 0, "a")] {
        shard.ok(mk(id));
        let result = shard.ok(event(id, "go", Some(json!({"n": n}))));
        assert_eq!(result["to_state"], json!(to), "n = {n}");
    }
}

#[test]
fn apply_event_to_unknown_instance_is_instance_not_found() {
    let mut shard = Shard::with_order();
    assert_eq!(
        shard.code(event("ghost", "pay", None)),
        ErrorCode::InstanceNotFound
    );
}

#[test]
fn event_with_no_transition_is_invalid_transition() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let err = shard.exec(event("o1", "ship", None)).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidTransition);
    assert_eq!(err.details["state"], json!("new"));
    assert_eq!(err.details["event"], json!("ship"));
    assert_eq!(
        shard.code(event("o1", "unheard-of", None)),
        ErrorCode::InvalidTransition
    );
}

#[test]
fn event_whose_guards_all_fail_is_guard_failed() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    // No amount: both `pay` guards compare null with a number, which is false.
    let err = shard.exec(event("o1", "pay", None)).unwrap_err();
    assert_eq!(err.code, ErrorCode::GuardFailed);
    assert_eq!(err.details["state"], json!("new"));
    assert_eq!(err.details["event"], json!("pay"));
    assert_eq!(shard.engine.instance("o1").unwrap().event_count, 0);
}

#[test]
fn event_in_a_final_state_is_invalid_transition() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    shard.ok(event("o1", "cancel", None));
    for name in ["cancel", "pay", "ship"] {
        let err = shard.exec(event("o1", name, None)).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidTransition);
        assert!(err.message.contains("final"), "{}", err.message);
    }
}

#[test]
fn self_loop_counts_as_an_event_and_keeps_the_state() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    shard.ok(event("o1", "pay", Some(json!({"amount": 1}))));
    let result = shard.ok(event("o1", "note", Some(json!({"note": "hi"}))));
    assert_eq!(
        (result["from_state"].clone(), result["to_state"].clone()),
        (json!("paid"), json!("paid"))
    );
    assert_eq!(shard.engine.instance("o1").unwrap().event_count, 2);
}

#[test]
fn expected_state_mismatch_is_conflict_with_details() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let err = shard
        .exec(expect("o1", "cancel", Some("paid"), None))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert_eq!(err.details["expected_state"], json!("paid"));
    assert_eq!(err.details["actual_state"], json!("new"));
}

#[test]
fn expected_wal_offset_mismatch_is_conflict_with_details() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let err = shard
        .exec(expect("o1", "cancel", None, Some(1)))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict);
    assert_eq!(err.details["expected_wal_offset"], json!(1));
    assert_eq!(err.details["actual_wal_offset"], json!(2));
}

#[test]
fn met_expectations_let_the_event_through() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let result = shard.ok(expect("o1", "cancel", Some("new"), Some(2)));
    assert_eq!(result["to_state"], json!("cancelled"));
}

#[test]
fn repeated_idempotency_key_replays_the_first_result_before_expectations() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let first = shard.ok(keyed_event("o1", "pay", Some(json!({"amount": 1})), "k"));
    shard.ok(event("o1", "note", Some(json!({"more": true}))));
    let mut retry = keyed_event("o1", "pay", Some(json!({"amount": 1})), "k");
    if let Command::ApplyEvent { expected_state, .. } = &mut retry {
        *expected_state = Some("new".into());
    }
    let replay = shard.ok(retry);
    let mut expected = first;
    expected["applied"] = json!(false);
    assert_eq!(replay, expected);
    assert_eq!(shard.engine.instance("o1").unwrap().event_count, 2);
    // Even a different event with the same key gets the first answer.
    assert_eq!(shard.ok(keyed_event("o1", "ship", None, "k")), expected);
}

#[test]
fn idempotency_keys_are_per_instance() {
    let mut shard = Shard::with_order();
    shard.ok(create("a", 1));
    shard.ok(create("b", 1));
    shard.ok(keyed_event("a", "cancel", None, "k"));
    let other = shard.ok(keyed_event("b", "cancel", None, "k"));
    assert_eq!(other["applied"], json!(true));
}

#[test]
fn oldest_idempotency_key_is_forgotten_beyond_the_cap() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    shard.ok(event("o1", "pay", Some(json!({"amount": 1}))));
    for i in 0..=IDEMPOTENCY_KEYS_PER_INSTANCE_MAX {
        shard.ok(keyed_event("o1", "note", None, &format!("k{i}")));
    }
    assert_eq!(
        shard.ok(keyed_event("o1", "note", None, "k1"))["applied"],
        json!(false)
    );
    assert_eq!(
        shard.ok(keyed_event("o1", "note", None, "k0"))["applied"],
        json!(true)
    );
}

#[test]
fn replayed_log_without_results_still_records_keys() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 1));
    let cmd = keyed_event("o1", "pay", Some(json!({"amount": 1})), "k");
    let Ok(Decision::Write(entry)) = shard.engine.decide(&cmd, 5) else {
        panic!("expected a write");
    };
    assert_eq!(shard.engine.apply(entry, 3, false), None);
    let replay = shard.ok(cmd);
    assert_eq!(replay["applied"], json!(false));
    assert_eq!(replay["to_state"], json!("paid"));
    assert_eq!(replay["wal_offset"], json!(3));
}

#[test]
fn apply_entries_written_before_machine_and_version_still_decode() {
    let old =
        br#"{"k":"apply","instance_id":"o1","event":"pay","from":"new","to":"paid","at_ms":5}"#;
    let entry: Entry = serde_json::from_slice(old).unwrap();
    let Entry::Apply {
        machine, version, ..
    } = &entry
    else {
        panic!("not an apply entry: {entry:?}");
    };
    assert_eq!((machine, version), (&None, &None));
    let text = serde_json::to_string(&entry).unwrap();
    assert!(
        !text.contains("machine"),
        "absent fields are not written: {text}"
    );
}

/// `apply_into` writes exactly the bytes of `apply`'s result serialised: for events with and
/// without an idempotency key, a context with nested, escaped and non-ASCII members, and for
/// entries that are not events (create). The bytes come from the compact `Context`, the
/// `Value` from its members copied into a `Map`: members added before and after the existing
/// one (the slice's sorted inserts), names and ids past `SmallStr`'s inline 22 bytes.
#[test]
fn apply_into_writes_the_bytes_of_the_applied_result() {
    let long_id = "an-order-id-longer-than-22-bytes";
    let commands = [
        create("o1", 10),
        event(
            "o1",
            "pay",
            Some(json!({"amount": 10, "note": "a \"quoted\" \\ line\n", "ü": [1, {"z": null}]})),
        ),
        create("o2", 1),
        keyed_event("o2", "pay", Some(json!({"amount": 2})), "k1"),
        event("o1", "ship", None),
        create(long_id, 3),
        event(
            long_id,
            "pay",
            Some(
                json!({"a_member_name_longer_than_22_bytes": "x", "amount": 5, "zz": {"b": 1, "a": 2}}),
            ),
        ),
    ];
    let mut by_value = Shard::with_order();
    let mut by_bytes = Shard::with_order();
    for cmd in commands {
        let want = serde_json::to_vec(&by_value.ok(cmd.clone())).unwrap();
        let Decision::Write(entry) = by_bytes.engine.decide(&cmd, 1).unwrap() else {
            panic!("{cmd:?} is a write");
        };
        let offset = by_bytes.next_offset;
        by_bytes.next_offset += 1;
        let mut got = Vec::new();
        assert!(by_bytes.engine.apply_into(entry, offset, &mut got));
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }
    // A retry of the keyed event is answered from the key with the same result.
    let retry = keyed_event("o2", "pay", Some(json!({"amount": 2})), "k1");
    assert_eq!(by_value.ok(retry.clone()), by_bytes.ok(retry));
}

/// The live path's record (`decide_event_record`) is byte for byte the encoding of the entry
/// `decide` returns, for events with and without payload, key or escapes; its answers and
/// rejections are `decide`'s too.
#[test]
fn decide_event_record_writes_the_bytes_of_the_decided_entry() {
    let mut shard = Shard::with_order();
    shard.ok(create("o1", 10));
    shard.ok(create("o2", 1));
    let commands = [
        event(
            "o1",
            "pay",
            Some(json!({"amount": 10, "note": "a \"quoted\" \\ line\n", "ü": [1, {"z": null}]})),
        ),
        keyed_event("o2", "pay", Some(json!({"amount": 2})), "k1"),
        event("o1", "ship", None),
    ];
    for cmd in commands {
        let Decision::Write(entry) = shard.engine.decide(&cmd, 7).unwrap() else {
            panic!("{cmd:?} is a write");
        };
        let mut record = b"kept".to_vec();
        let ev = cmd.event().unwrap();
        assert_eq!(
            shard.engine.decide_event_record(&ev, 7, &mut record),
            Ok(None)
        );
        assert_eq!(&record[..4], b"kept", "appends after what is there");
        assert_eq!(record[4..], entry.to_bytes()[..]);
        shard.ok(cmd);
    }
    // A retry under the key is an answer, the same as decide's; a refused event is refused.
    let retry = keyed_event("o2", "pay", Some(json!({"amount": 2})), "k1");
    let Decision::Answer(want) = shard.engine.decide(&retry, 8).unwrap() else {
        panic!("a retry is answered from its key");
    };
    let mut record = Vec::new();
    assert_eq!(
        shard
            .engine
            .decide_event_record(&retry.event().unwrap(), 8, &mut record),
        Ok(Some(want))
    );
    let wrong = event("o1", "pay", None);
    let refused = (shard.engine).decide_event_record(&wrong.event().unwrap(), 8, &mut record);
    assert_eq!(refused.unwrap_err().code, ErrorCode::InvalidTransition);
    assert!(
        record.is_empty(),
        "nothing is written for an answer or a refusal"
    );
}
