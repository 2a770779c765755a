//! The engine's side of durable timers: arming on entry, lazy cancel on leaving, no re-arm on
//! a self-loop, deciding a fire (timer flag, false guard), spending, and recovery (snapshot
//! and replay) arming the same timers.

use serde_json::json;

use super::*;
use crate::engine::{Entry, Fire};
use crate::timers::TimerQueue;

/// pending --pay--> paid --refund--> pending; touch loops on pending; expire after 100 ms
/// when ctx.ok is not false.
fn payment() -> Value {
    json!({
        "states": ["pending", "paid", "expired"],
        "initial": "pending",
        "final": ["expired"],
        "transitions": [
            {"from": "pending", "event": "pay", "to": "paid"},
            {"from": "paid", "event": "refund", "to": "pending"},
            {"from": "pending", "event": "touch", "to": "pending"},
            {"from": "pending", "event": "expire", "to": "expired", "after_ms": 100,
             "guard": "ctx.ok != false"}
        ]
    })
}

fn shard() -> Shard {
    let mut s = Shard::new();
    s.ok(put("payment", 1, payment()));
    s
}

fn create_payment(s: &mut Shard, id: &str, ok: bool) -> u64 {
    let r = s.ok(Command::CreateInstance {
        id: id.into(),
        machine: "payment".into(),
        version: 1,
        context: obj(json!({"ok": ok})),
        idempotency_key: None,
    });
    r["wal_offset"].as_u64().unwrap()
}

/// What the shard runtime does after a write at `offset`.
fn arm(s: &mut Shard, id: &str, offset: u64) -> Option<u64> {
    s.engine.arm_timer(id, offset)
}

#[test]
fn armed_on_entry_cancelled_on_leaving_rearmed_on_reentry() {
    let mut s = shard();
    let at = create_payment(&mut s, "p", true);
    let due = arm(&mut s, "p", at).expect("armed at creation");
    assert_eq!(due, s.now_ms + 100);
    assert_eq!(arm(&mut s, "p", at), None, "arming twice queues once");
    assert_eq!(s.engine.timers_armed(), 1);
    assert_eq!(
        s.engine.instance_json("p").unwrap()["timer"]["event"],
        "expire"
    );

    let touched = s.ok(event("p", "touch", None))["wal_offset"]
        .as_u64()
        .unwrap();
    assert_eq!(
        arm(&mut s, "p", touched),
        None,
        "a self-loop does not re-arm"
    );
    assert_eq!(s.engine.timer_generation("p"), Some(at));

    let paid = s.ok(event("p", "pay", None))["wal_offset"]
        .as_u64()
        .unwrap();
    assert_eq!(s.engine.timers_armed(), 0, "leaving cancels");
    assert_eq!(arm(&mut s, "p", paid), None, "paid has no timer");
    assert!(s.engine.instance_json("p").unwrap().get("timer").is_none());
    assert_eq!(s.engine.decide_timer("p", at, u64::MAX), Fire::Stale);

    let back = s.ok(event("p", "refund", None))["wal_offset"]
        .as_u64()
        .unwrap();
    assert_eq!(arm(&mut s, "p", back), Some(s.now_ms + 100));
    assert_eq!(s.engine.timer_generation("p"), Some(back));
    assert_eq!(
        s.engine.decide_timer("p", at, u64::MAX),
        Fire::Stale,
        "old generation"
    );
}

#[test]
fn a_fire_is_an_apply_entry_marked_as_a_timers_and_counted() {
    let mut s = shard();
    let at = create_payment(&mut s, "p", true);
    arm(&mut s, "p", at);
    let Fire::Write(entry) = s.engine.decide_timer("p", at, s.now_ms + 100) else {
        panic!("due timer does not fire");
    };
    let Entry::Apply {
        event, to, timer, ..
    } = &entry
    else {
        panic!("{entry:?}");
    };
    assert_eq!(
        (event.as_str(), to.as_str(), *timer),
        ("expire", "expired", true)
    );
    s.engine.apply(entry, 10, false);
    s.engine.spend_timer("p", at);
    assert_eq!(s.engine.instance("p").unwrap().state, "expired".into());
    assert_eq!(s.engine.timers_armed(), 0);
    assert_eq!(s.engine.stats().timers_fired.get("payment"), Some(&1));
    assert_eq!(s.engine.stats().events_applied.get("payment"), Some(&1));
}

#[test]
fn a_false_guard_refuses_and_spending_disarms() {
    let mut s = shard();
    let at = create_payment(&mut s, "p", false);
    arm(&mut s, "p", at);
    assert!(s.engine.indexes_match_a_rebuild());
    let fire = s.engine.decide_timer("p", at, s.now_ms + 100);
    assert!(
        matches!(&fire, Fire::Refused(r) if r.code == ErrorCode::GuardFailed),
        "{fire:?}"
    );
    s.engine.spend_timer("p", at);
    assert_eq!(s.engine.timers_armed(), 0);
    assert_eq!(s.engine.decide_timer("p", at, u64::MAX), Fire::Stale);
    assert_eq!(
        s.engine
            .list_instances(None, None, None, Some(true), 10)
            .instances
            .len(),
        0
    );
    assert_eq!(
        s.engine
            .list_instances(None, None, None, Some(false), 10)
            .instances
            .len(),
        1
    );
    assert!(s.engine.indexes_match_a_rebuild());
}

#[test]
fn deleting_an_instance_cancels_its_timer() {
    let mut s = shard();
    let at = create_payment(&mut s, "p", true);
    arm(&mut s, "p", at);
    s.ok(delete("p"));
    assert_eq!(s.engine.timers_armed(), 0);
    assert_eq!(s.engine.decide_timer("p", at, u64::MAX), Fire::Stale);
}

#[test]
fn recovery_arms_the_same_timers_from_snapshot_or_replay() {
    let mut s = shard();
    for i in 0..20 {
        let id = format!("p{i}");
        let at = create_payment(&mut s, &id, true);
        arm(&mut s, &id, at);
        if i % 3 == 0 {
            s.ok(event(&id, "pay", None));
        }
        if i % 6 == 0 {
            let back = s.ok(event(&id, "refund", None))["wal_offset"]
                .as_u64()
                .unwrap();
            arm(&mut s, &id, back);
        }
        if i % 4 == 1 {
            let _ = s.exec(event(&id, "touch", None)); // refused in `paid`
        }
    }
    let mut live: Vec<_> = s.engine.arm_all_timers();
    live.sort();
    assert_eq!(live.len() as u64, s.engine.timers_armed());

    let mut restored = Engine::restore(&s.engine.snapshot()).unwrap();
    let mut from_snapshot = restored.arm_all_timers();
    from_snapshot.sort();
    assert_eq!(from_snapshot, live);

    let mut replayed = Engine::new();
    for (offset, entry) in s.log.clone() {
        replayed.apply(entry, offset, false);
    }
    let mut from_log = replayed.arm_all_timers();
    from_log.sort();
    assert_eq!(from_log, live);
    assert_eq!(replayed.timers_armed(), live.len() as u64);

    let mut q = TimerQueue::from_armed(from_log);
    let first = q.pop_due(u64::MAX).unwrap();
    assert_eq!(first, live[0]);
}

/// `write_instance_json` writes exactly the bytes of `instance_json` serialised, with and
/// without an armed timer, and returns the instance's offset; None for an unknown id.
#[test]
fn write_instance_json_matches_instance_json() {
    let mut s = shard();
    let at = create_payment(&mut s, "p", true);
    create_payment(&mut s, "q", false);
    arm(&mut s, "p", at).expect("armed");
    for id in ["p", "q"] {
        let want = serde_json::to_vec(&s.engine.instance_json(id).unwrap()).unwrap();
        let mut got = Vec::new();
        let wal_offset = s.engine.instance(id).unwrap().wal_offset;
        assert_eq!(s.engine.write_instance_json(id, &mut got), Some(wal_offset));
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }
    assert!(s.engine.instance_json("p").unwrap().get("timer").is_some());
    assert_eq!(
        s.engine.write_instance_json("nobody", &mut Vec::new()),
        None
    );
}
