//! PUT_MACHINE, GET_MACHINE, LIST_MACHINES and copying definitions between engines.

use serde_json::json;

use super::*;
use crate::engine::definition::{canonical_json, checksum};
use crate::engine::Entry;

#[test]
fn put_machine_writes_normalised_definition_and_checksum() {
    let shard = Shard::new();
    let decision = shard
        .engine
        .decide(&put("order", 1, order_machine()), 42)
        .unwrap();
    let Decision::Write(Entry::PutMachine {
        machine,
        version,
        definition,
        checksum: sum,
        at_ms,
    }) = decision
    else {
        panic!("expected a PutMachine write, got {decision:?}");
    };
    assert_eq!((machine.as_str(), version, at_ms), ("order", 1, 42));
    assert_eq!(definition, order_machine());
    assert_eq!(sum, checksum(&canonical_json(&definition)));
    assert!(
        sum.len() == 8
            && sum
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_uppercase())
    );
}

#[test]
fn put_machine_result_says_created_with_checksum() {
    let mut shard = Shard::new();
    let result = shard.ok(put("order", 1, order_machine()));
    let sum = checksum(&canonical_json(&order_machine()));
    assert_eq!(
        result,
        json!({"machine": "order", "version": 1, "created": true, "checksum": sum})
    );
    assert_eq!(shard.engine.machine_count(), 1);
}

#[test]
fn identical_put_machine_answers_created_false_without_a_write() {
    let shard = Shard::with_order();
    let mut same = order_machine();
    same["final"] = json!(["done", "cancelled"]);
    let decision = shard.engine.decide(&put("order", 1, same), 9).unwrap();
    let Decision::Answer(result) = decision else {
        panic!("expected an answer, got {decision:?}");
    };
    assert_eq!(result["created"], json!(false));
    assert_eq!(
        result["checksum"],
        shard.engine.machine("order", Some(1)).unwrap()["checksum"]
    );
    assert_eq!(shard.next_offset, 2);
}

#[test]
fn different_definition_for_existing_version_is_machine_version_exists() {
    let mut shard = Shard::with_order();
    let mut other = order_machine();
    other["initial"] = json!("paid");
    let err = shard.exec(put("order", 1, other)).unwrap_err();
    assert_eq!(err.code, ErrorCode::MachineVersionExists);
    assert_eq!(err.details["version"], json!(1));
}

#[test]
fn bad_machine_name_or_version_is_bad_request() {
    let mut shard = Shard::new();
    assert_eq!(
        shard.code(put("", 1, order_machine())),
        ErrorCode::BadRequest
    );
    assert_eq!(
        shard.code(put(&"m".repeat(129), 1, order_machine())),
        ErrorCode::BadRequest
    );
    assert_eq!(
        shard.code(put("order", 0, order_machine())),
        ErrorCode::BadRequest
    );
    assert!(shard
        .exec(put(&"m".repeat(128), 1, order_machine()))
        .is_ok());
}

#[test]
fn invalid_definition_carries_the_reason_in_details() {
    let mut shard = Shard::new();
    let err = shard
        .exec(put("m", 1, json!({"states": ["a"], "initial": "b"})))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidDefinition);
    assert_eq!(
        err.details["reason"],
        json!("initial state `b` is not a declared state")
    );
    assert!(err.message.contains("initial state `b`"));
    assert_eq!(shard.engine.machine_count(), 0);
}

#[test]
fn get_machine_returns_latest_or_asked_version() {
    let mut shard = Shard::with_order();
    let v2 = json!({"states": ["x"], "initial": "x"});
    shard.ok(put("order", 2, v2.clone()));
    let latest = shard.engine.machine("order", None).unwrap();
    assert_eq!(latest["version"], json!(2));
    assert_eq!(
        latest["definition"],
        json!({"states": ["x"], "initial": "x", "final": [],
        "transitions": []})
    );
    let first = shard.engine.machine("order", Some(1)).unwrap();
    assert_eq!(first["definition"], order_machine());
    assert_eq!(first["created_at"], json!("2026-01-31T12:00:00.001Z"));
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["checksum", "created_at", "definition", "machine", "version"]
    );
}

#[test]
fn unknown_machine_or_version_is_machine_not_found() {
    let shard = Shard::with_order();
    assert_eq!(
        shard.engine.machine("nope", None).unwrap_err().code,
        ErrorCode::MachineNotFound
    );
    let err = shard.engine.machine("order", Some(7)).unwrap_err();
    assert_eq!(err.code, ErrorCode::MachineNotFound);
    assert_eq!(err.details["version"], json!(7));
}

#[test]
fn machines_are_listed_by_name_with_versions_ascending() {
    let mut shard = Shard::new();
    let tiny = json!({"states": ["a"], "initial": "a"});
    for (name, version) in [("b", 3), ("a", 2), ("b", 1), ("a", 10)] {
        shard.ok(put(name, version, tiny.clone()));
    }
    let expected = vec![
        ("a".to_string(), vec![2, 10]),
        ("b".to_string(), vec![1, 3]),
    ];
    assert_eq!(shard.engine.machines(), expected);
    assert_eq!(shard.engine.machine_count(), 4);
}

#[test]
fn machine_entries_reproduce_definitions_on_another_engine() {
    let mut shard = Shard::with_order();
    shard.ok(put("tiny", 4, json!({"states": ["a"], "initial": "a"})));
    let mut copy = Engine::new();
    for entry in shard.engine.machine_entries() {
        assert!(copy.apply(entry, 1, true).is_some());
    }
    assert_eq!(copy.machines(), shard.engine.machines());
    for (name, versions) in shard.engine.machines() {
        for v in versions {
            assert_eq!(
                copy.machine(&name, Some(v)),
                shard.engine.machine(&name, Some(v))
            );
        }
    }
    // Applying the same entries again changes nothing and reports created:false.
    for entry in shard.engine.machine_entries() {
        assert_eq!(copy.apply(entry, 2, true).unwrap()["created"], json!(false));
    }
    assert_eq!(copy.machine_count(), 2);
}

#[test]
fn conflicting_machine_entry_is_skipped_on_apply() {
    let mut shard = Shard::with_order();
    let entry = Entry::PutMachine {
        machine: "order".into(),
        version: 1,
        definition: json!({"states": ["z"], "initial": "z", "final": [], "transitions": []}),
        checksum: "00000000".into(),
        at_ms: 5,
    };
    assert_eq!(shard.engine.apply(entry, 2, true), None);
    assert_eq!(
        shard.engine.machine("order", Some(1)).unwrap()["definition"],
        order_machine()
    );
    let broken = Entry::PutMachine {
        machine: "broken".into(),
        version: 1,
        definition: json!({"states": []}),
        checksum: "00000000".into(),
        at_ms: 5,
    };
    assert_eq!(shard.engine.apply(broken, 3, true), None);
    assert_eq!(shard.engine.machine_count(), 1);
}
