//! Migration and retention in the engine: indexes kept through a migration, the history item
//! it adds, a replay of the log giving the same state, retention armed in a final state and
//! fired as a logged delete.

use serde_json::json;

use super::*;
use crate::engine::{DeleteReason, Entry, Fire, MigratePlan, Selection, Selector, Step};

fn versions(s: &mut Shard) {
    let v1 = json!({"states": ["a", "b"], "initial": "a", "final": ["b"],
        "transitions": [{"from": "a", "event": "go", "to": "b"}], "indexes": ["ctx.k"]});
    let v2 = json!({"states": ["a2", "b"], "initial": "a2", "final": ["b"],
        "transitions": [{"from": "a2", "event": "go", "to": "b"}],
        "indexes": ["ctx.k", "ctx.j"], "retention": {"final_after_ms": 50}});
    s.ok(put("m", 1, v1));
    s.ok(put("m", 2, v2));
}

fn create_m(s: &mut Shard, id: &str, k: i64) {
    s.ok(Command::CreateInstance {
        id: id.into(),
        machine: "m".into(),
        version: 1,
        context: obj(json!({"k": k, "j": "x"})),
        idempotency_key: None,
    });
}

/// Decides and applies what the migration does to `id` (as the shard runtime would).
fn migrate(s: &mut Shard, id: &str, plan: &MigratePlan) -> Step {
    let sel = Selector::new(&plan.selection).unwrap();
    s.now_ms += 1;
    let step = s.engine.decide_migrate(id, plan, &sel, s.now_ms);
    if let Step::Write(entry) = &step {
        let offset = s.next_offset;
        s.next_offset += 1;
        s.log.push((offset, entry.clone()));
        s.engine
            .apply(entry.clone(), offset, true)
            .expect("applies");
        s.engine.arm_timer(id, offset);
    }
    step
}

fn plan() -> MigratePlan {
    MigratePlan {
        selection: Selection {
            machine: "m".into(),
            ..Selection::default()
        },
        from_version: 1,
        to_version: 2,
        states: vec![("a".into(), "a2".into())],
    }
}

#[test]
fn a_migration_keeps_indexes_history_and_replays_alike() {
    let mut s = Shard::new();
    versions(&mut s);
    create_m(&mut s, "i1", 1);
    create_m(&mut s, "i2", 2);
    s.ok(event("i2", "go", None));
    let plan = plan();
    s.engine.check_migration(&plan).unwrap();
    assert!(matches!(migrate(&mut s, "i1", &plan), Step::Write(_)));
    assert!(matches!(migrate(&mut s, "i2", &plan), Step::Write(_)));
    assert_eq!(migrate(&mut s, "i1", &plan), Step::Unselected, "moved once");
    let i1 = s.engine.instance("i1").unwrap();
    assert_eq!((i1.version, &*i1.state), (2, "a2"));
    assert!(s.engine.indexes_match_a_rebuild());
    let h = s.engine.history("i1", 1, 10).unwrap();
    assert_eq!(h["events"][0]["type"], "migrated", "{h}");
    assert_eq!(h["events"][0]["to_state"], "a2");
    assert_eq!(s.engine.stats().migrated.get("m"), Some(&2));
    // i2 is in final state `b`, which v2's retention expires: armed by the migration.
    assert_eq!(
        s.engine.instance_json("i2").unwrap()["timer"]["reason"],
        "retention"
    );

    let mut replayed = Engine::new();
    for (offset, entry) in s.log.clone() {
        replayed.apply(entry, offset, false);
    }
    assert_eq!(replayed.divergence(), None);
    assert_eq!(
        replayed.instance_json("i1"),
        s.engine.instance_json("i1").map(|mut v| {
            v.as_object_mut().unwrap().remove("timer");
            v
        })
    );
    assert_eq!(replayed.history("i1", 1, 10), s.engine.history("i1", 1, 10));
}

#[test]
fn plans_that_cannot_work_are_refused_and_missing_states_skip() {
    let mut s = Shard::new();
    versions(&mut s);
    create_m(&mut s, "i1", 1);
    let mut bad = plan();
    bad.states = vec![("a".into(), "nope".into())];
    assert_eq!(
        s.engine.check_migration(&bad).unwrap_err().code,
        ErrorCode::BadRequest
    );
    bad.states.clear();
    bad.to_version = 1;
    assert_eq!(
        s.engine.check_migration(&bad).unwrap_err().code,
        ErrorCode::BadRequest
    );
    bad.to_version = 3;
    assert_eq!(
        s.engine.check_migration(&bad).unwrap_err().code,
        ErrorCode::MachineNotFound
    );
    let mut unmapped = plan();
    unmapped.states.clear();
    assert_eq!(migrate(&mut s, "i1", &unmapped), Step::Skipped("no_state"));
}

#[test]
fn retention_fires_a_logged_delete_in_a_final_state_only() {
    let mut s = Shard::new();
    versions(&mut s);
    let r = s.ok(Command::CreateInstance {
        id: "r".into(),
        machine: "m".into(),
        version: 2,
        context: obj(json!({})),
        idempotency_key: None,
    });
    let at = r["wal_offset"].as_u64().unwrap();
    assert_eq!(s.engine.arm_timer("r", at), None, "not final: no retention");
    let done = s.ok(event("r", "go", None));
    let at = done["wal_offset"].as_u64().unwrap();
    let due = s
        .engine
        .arm_timer("r", at)
        .expect("armed in the final state");
    assert_eq!(due, s.now_ms + 50);
    let Fire::Write(entry) = s.engine.decide_timer("r", at, due) else {
        panic!("a retention timer deletes");
    };
    let Entry::Delete {
        reason, machine, ..
    } = &entry
    else {
        panic!("{entry:?}");
    };
    assert_eq!(
        (reason, machine.as_deref()),
        (&Some(DeleteReason::Retention), Some("m"))
    );
    s.engine.apply(entry, 99, false);
    assert!(s.engine.instance("r").is_none());
    assert_eq!(s.engine.timers_armed(), 0);
    assert_eq!(s.engine.stats().expired.get("m"), Some(&1));
    assert!(s.engine.indexes_match_a_rebuild());
}
