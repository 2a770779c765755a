//! One test per validation rule, plus normalisation, canonical form and resolution.

use serde_json::{json, Map, Value};

use super::TIMER_DELAY_MS_MAX;
use super::*;
use crate::engine::limits::{GUARD_SOURCE_BYTES_MAX, NAME_BYTES_MAX, STATES_MAX, TRANSITIONS_MAX};

fn reason(raw: Value) -> String {
    match prepare(&raw) {
        Ok(_) => panic!("definition was accepted: {raw}"),
        Err(e) => e.reason,
    }
}

fn compiled(raw: Value) -> CompiledMachine {
    prepare(&raw).unwrap().compiled
}

fn door() -> Value {
    json!({
        "states": ["closed", "open", "locked", "gone"],
        "initial": "closed",
        "final": ["gone"],
        "transitions": [
            {"from": "closed", "event": "open", "to": "open", "guard": "ctx.locked != true"},
            {"from": "closed", "event": "open", "to": "closed", "guard": "payload.force == true"},
            {"from": "open", "event": "close", "to": "closed"},
            {"from": ["closed", "open"], "event": "lock", "to": "locked"},
            {"from": "*", "event": "destroy", "to": "gone"}
        ]
    })
}

#[test]
fn valid_definition_compiles() {
    let m = compiled(door());
    assert_eq!(m.initial(), "closed");
    assert!(m.is_final("gone"));
    assert!(!m.is_final("open"));
    assert_eq!(m.states().len(), 4);
}

#[test]
fn empty_states_is_invalid_definition() {
    assert!(reason(json!({"states": [], "initial": "a"})).contains("empty"));
    assert!(reason(json!({"initial": "a"})).contains("empty"));
}

#[test]
fn duplicate_state_is_invalid_definition() {
    let r = reason(json!({"states": ["a", "b", "a"], "initial": "a"}));
    assert_eq!(r, "duplicate state `a`");
}

#[test]
fn bad_state_names_are_invalid_definition() {
    assert!(reason(json!({"states": ["a", ""], "initial": "a"})).contains("empty"));
    let long = "s".repeat(NAME_BYTES_MAX + 1);
    assert!(reason(json!({"states": [long], "initial": "a"})).contains("longer"));
    assert!(reason(json!({"states": ["*"], "initial": "*"})).contains("reserved"));
    let max = "s".repeat(NAME_BYTES_MAX);
    assert!(prepare(&json!({"states": [max.clone()], "initial": max})).is_ok());
}

#[test]
fn missing_initial_is_invalid_definition() {
    assert_eq!(reason(json!({"states": ["a"]})), "missing initial state");
}

#[test]
fn unknown_initial_is_invalid_definition() {
    let r = reason(json!({"states": ["a"], "initial": "b"}));
    assert_eq!(r, "initial state `b` is not a declared state");
}

#[test]
fn unknown_final_state_is_invalid_definition() {
    let r = reason(json!({"states": ["a"], "initial": "a", "final": ["z"]}));
    assert!(r.contains("final state `z`"), "{r}");
    let r = reason(json!({"states": ["a"], "initial": "a", "final": ["a", "a"]}));
    assert!(r.contains("duplicate final"), "{r}");
}

#[test]
fn unknown_state_in_transition_is_invalid_definition() {
    let base = |t: Value| json!({"states": ["a", "b"], "initial": "a", "transitions": [t]});
    let r = reason(base(json!({"from": "a", "event": "e", "to": "x"})));
    assert_eq!(r, "transitions[0]: `to` state `x` is not a declared state");
    let r = reason(base(json!({"from": "x", "event": "e", "to": "a"})));
    assert!(r.contains("`from` state `x`"), "{r}");
    let r = reason(base(json!({"from": ["a", "x"], "event": "e", "to": "a"})));
    assert!(r.contains("`from` state `x`"), "{r}");
    let r = reason(base(json!({"from": ["a", "*"], "event": "e", "to": "a"})));
    assert!(
        r.contains("`*`"),
        "a wildcard inside a list is not a state: {r}"
    );
    let r = reason(base(json!({"from": [], "event": "e", "to": "a"})));
    assert!(r.contains("empty"), "{r}");
}

#[test]
fn bad_event_name_is_invalid_definition() {
    let base = |e: &str| {
        let transition = json!({"from": "a", "event": e, "to": "a"});
        json!({"states": ["a"], "initial": "a", "transitions": [transition]})
    };
    assert!(reason(base("")).contains("event name must not be empty"));
    assert!(reason(base(&"e".repeat(NAME_BYTES_MAX + 1))).contains("longer"));
}

#[test]
fn duplicate_unguarded_pair_is_invalid_definition() {
    let r = reason(
        json!({"states": ["a", "b"], "initial": "a", "transitions": [
            {"from": "a", "event": "e", "to": "b"},
            {"from": "a", "event": "e", "to": "a"}
        ]}),
    );
    assert_eq!(
        r,
        "transitions[1]: duplicate unguarded transition from `a` on `e`"
    );
}

#[test]
fn duplicate_unguarded_pair_after_expansion_is_invalid_definition() {
    let r = reason(
        json!({"states": ["a", "b", "c"], "initial": "a", "transitions": [
            {"from": ["b", "c"], "event": "e", "to": "a"},
            {"from": "*", "event": "e", "to": "a"}
        ]}),
    );
    assert!(r.contains("from `b` on `e`"), "{r}");
}

#[test]
fn guarded_duplicates_and_distinct_events_are_valid() {
    let ok = json!({"states": ["a", "b"], "initial": "a", "transitions": [
        {"from": "a", "event": "e", "to": "b", "guard": "ctx.x == 1"},
        {"from": "a", "event": "e", "to": "a"},
        {"from": "a", "event": "e", "to": "b", "guard": "ctx.x == 2"},
        {"from": "a", "event": "f", "to": "b"},
        {"from": "b", "event": "e", "to": "a"}
    ]});
    assert!(prepare(&ok).is_ok());
}

#[test]
fn unparsable_guard_is_invalid_definition() {
    let r = reason(json!({"states": ["a"], "initial": "a", "transitions": [
        {"from": "a", "event": "e", "to": "a", "guard": "ctx.x =="}
    ]}));
    assert_eq!(
        r,
        "transitions[0]: guard does not parse at byte 8: expected an expression, found the end"
    );
}

#[test]
fn overlong_guard_is_invalid_definition() {
    let guard = format!("ctx.x == '{}'", "y".repeat(GUARD_SOURCE_BYTES_MAX));
    let r = reason(json!({"states": ["a"], "initial": "a", "transitions": [
        {"from": "a", "event": "e", "to": "a", "guard": guard}
    ]}));
    assert!(r.contains("longer than"), "{r}");
}

#[test]
fn transition_out_of_final_state_is_invalid_definition() {
    let r = reason(
        json!({"states": ["a", "z"], "initial": "a", "final": ["z"], "transitions": [
            {"from": "z", "event": "e", "to": "a"}
        ]}),
    );
    assert_eq!(r, "transitions[0]: transition out of final state `z`");
    let r = reason(
        json!({"states": ["a", "z"], "initial": "a", "final": ["z"], "transitions": [
            {"from": ["a", "z"], "event": "e", "to": "a"}
        ]}),
    );
    assert!(r.contains("out of final state `z`"), "{r}");
}

#[test]
fn wildcard_from_expands_to_non_final_states_only() {
    let m = compiled(door());
    let none = Map::new();
    assert_eq!(
        m.resolve("open", "destroy", &none, &none),
        Resolution::Move("gone")
    );
    assert_eq!(
        m.resolve("locked", "destroy", &none, &none),
        Resolution::Move("gone")
    );
    assert_eq!(
        m.resolve("gone", "destroy", &none, &none),
        Resolution::NoTransition
    );
}

#[test]
fn unknown_fields_are_invalid_definition() {
    let r = reason(json!({"states": ["a"], "initial": "a", "colour": "red"}));
    assert!(r.contains("unknown field `colour`"), "{r}");
    let r = reason(json!({"states": ["a"], "initial": "a", "transitions": [
        {"from": "a", "event": "e", "to": "a", "when": "x"}
    ]}));
    assert!(r.contains("unknown field `when`"), "{r}");
}

#[test]
fn wrong_types_are_invalid_definition() {
    assert!(reason(json!(["a"])).contains("invalid type"));
    assert!(reason(json!({"states": [1], "initial": "a"})).contains("invalid type"));
    let r = reason(json!({"states": ["a"], "initial": "a", "transitions": [
        {"from": 3, "event": "e", "to": "a"}
    ]}));
    assert!(r.contains("`from` must be"), "{r}");
}

#[test]
fn too_many_states_is_invalid_definition() {
    let states: Vec<String> = (0..=STATES_MAX).map(|i| format!("s{i}")).collect();
    let r = reason(json!({"states": states, "initial": "s0"}));
    assert!(r.contains("more than"), "{r}");
    let states: Vec<String> = (0..STATES_MAX).map(|i| format!("s{i}")).collect();
    let transitions = vec![json!({"from": "*", "event": "e", "to": "s0"})];
    assert!(
        prepare(&json!({"states": states, "initial": "s0", "transitions": transitions})).is_ok()
    );
}

#[test]
fn too_many_transitions_is_invalid_definition() {
    let t = |i: usize| json!({"from": "a", "event": format!("e{i}"), "to": "a"});
    let ts: Vec<Value> = (0..=TRANSITIONS_MAX).map(t).collect();
    let r = reason(json!({"states": ["a"], "initial": "a", "transitions": ts}));
    assert!(r.contains("more than"), "{r}");
}

#[test]
fn resolve_takes_first_holding_guard_in_order() {
    let m = compiled(door());
    let ctx = json!({"locked": true}).as_object().cloned().unwrap();
    let force = json!({"force": true}).as_object().cloned().unwrap();
    let none = Map::new();
    assert_eq!(
        m.resolve("closed", "open", &none, &none),
        Resolution::Move("open")
    );
    assert_eq!(
        m.resolve("closed", "open", &ctx, &force),
        Resolution::Move("closed")
    );
    assert_eq!(
        m.resolve("closed", "open", &ctx, &none),
        Resolution::GuardFailed
    );
    assert_eq!(
        m.resolve("open", "open", &none, &none),
        Resolution::NoTransition
    );
    assert_eq!(
        m.resolve("closed", "nope", &none, &none),
        Resolution::NoTransition
    );
    assert_eq!(
        m.resolve("open", "lock", &none, &none),
        Resolution::Move("locked")
    );
}

#[test]
fn normalisation_adds_final_and_drops_null_guard() {
    let a = prepare(&json!({"states": ["a"], "initial": "a", "transitions": [
        {"from": "a", "event": "e", "to": "a", "guard": null}
    ]}))
    .unwrap();
    let b = prepare(
        &json!({"transitions": [{"to": "a", "event": "e", "from": "a"}],
        "final": [], "initial": "a", "states": ["a"]}),
    )
    .unwrap();
    assert_eq!(a.normalised, b.normalised);
    assert_eq!(a.checksum, b.checksum);
    assert_eq!(a.normalised["final"], json!([]));
    assert!(a.normalised["transitions"][0].get("guard").is_none());
}

#[test]
fn canonical_json_sorts_keys_and_checksum_is_crc32c_hex() {
    let v = json!({"b": [1, {"z": null, "a": "x\"y"}], "a": true});
    let canonical = canonical_json(&v);
    assert_eq!(canonical, r#"{"a":true,"b":[1,{"a":"x\"y","z":null}]}"#);
    assert_eq!(canonical, serde_json::to_string(&v).unwrap());
    // CRC32C check value from RFC 3720: "123456789" -> e3069283.
    assert_eq!(checksum("123456789"), "e3069283");
    let p = prepare(&door()).unwrap();
    assert_eq!(p.checksum, checksum(&canonical_json(&p.normalised)));
    assert_eq!(p.checksum.len(), 8);
}

#[test]
fn normalised_definition_prepares_to_itself() {
    let p = prepare(&door()).unwrap();
    let again = prepare(&p.normalised).unwrap();
    assert_eq!(again.normalised, p.normalised);
    assert_eq!(again.checksum, p.checksum);
}

fn timed(t: Value) -> Value {
    json!({"states": ["a", "b", "z"], "initial": "a", "final": ["z"], "transitions": [t]})
}

#[test]
fn timed_transitions_are_validated() {
    let r = |t: Value| reason(timed(t));
    assert!(r(json!({"from": "a", "event": "e", "to": "b", "after_ms": 0})).contains("positive"));
    assert!(r(json!({"from": "a", "event": "e", "to": "b", "after_ms": -1})).contains("after_ms"));
    assert!(r(json!({"from": "a", "event": "e", "to": "b", "after_ms": "5"})).contains("after_ms"));
    let huge = TIMER_DELAY_MS_MAX + 1;
    assert!(
        r(json!({"from": "a", "event": "e", "to": "b", "after_ms": huge})).contains("100 years")
    );
    let both = json!({"from": "a", "event": "e", "to": "b", "after_ms": 5, "at": "ctx.t"});
    assert!(r(both).contains("both"));
    for bad in ["t", "ctx", "ctx.", "ctx..t", "ctx.a b", "payload.t"] {
        let t = json!({"from": "a", "event": "e", "to": "b", "at": bad});
        assert!(r(t).contains("ctx.<path>"), "{bad}");
    }
    let from_final = json!({"from": "z", "event": "e", "to": "b", "after_ms": 5});
    assert!(r(from_final).contains("final"));
    let no_event = json!({"from": "a", "event": "", "to": "b", "after_ms": 5});
    assert!(r(no_event).contains("event name"));
}

#[test]
fn timed_transitions_normalise_and_compute_the_earliest_deadline() {
    let def = json!({
        "states": ["a", "b", "z"], "initial": "a", "final": ["z"],
        "transitions": [
            {"from": "a", "event": "slow", "to": "b", "after_ms": 500},
            {"from": ["a", "b"], "event": "fast", "to": "z", "after_ms": 200},
            {"from": "*", "event": "due", "to": "z", "at": "ctx.when.at"},
            {"from": "a", "event": "manual", "to": "b"}
        ]
    });
    let p = prepare(&def).unwrap();
    assert_eq!(p.normalised["transitions"][0]["after_ms"], 500);
    assert_eq!(p.normalised["transitions"][2]["at"], "ctx.when.at");
    assert!(p.normalised["transitions"][3].get("after_ms").is_none());
    let m = p.compiled;
    assert!(m.has_timers());
    let ctx = |v: Value| v.as_object().unwrap().clone();
    assert_eq!(m.timer("a", 1000, &Map::new()), Some(("fast", 1200)));
    let early = ctx(json!({"when": {"at": 1100}}));
    assert_eq!(m.timer("a", 1000, &early), Some(("due", 1100)));
    let text = ctx(json!({"when": {"at": "1970-01-01T00:00:01.050Z"}}));
    assert_eq!(m.timer("b", 1000, &text), Some(("due", 1050)));
    let junk = ctx(json!({"when": {"at": "later"}}));
    assert_eq!(m.timer("b", 0, &junk), Some(("fast", 200)));
    assert_eq!(m.timer("z", 0, &early), None, "final states have no timers");
    assert!(!compiled(door()).has_timers());
}
