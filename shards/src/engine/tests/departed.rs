//! Slots moved out (docs/cluster.md "Moving slots", step 6): from `Entry::SlotsMovedOut` on,
//! the slots' instances count nowhere, the purge's deletes do not take them out twice, a move
//! back counts the new copy only, and replay rebuilds what live apply built.

use serde_json::json;

use super::*;
use crate::engine::{DeleteReason, Entry};
use crate::routing::slot_of;

/// Logs `entry` at the shard's next offset and applies it; the result.
fn write(shard: &mut Shard, entry: Entry) -> Value {
    let offset = shard.next_offset;
    shard.next_offset += 1;
    shard.log.push((offset, entry.clone()));
    let result = shard.engine.apply(entry, offset, true).expect("applies");
    assert_eq!(shard.engine.divergence(), None, "{result}");
    result
}

fn moved_out(slot: u16) -> Entry {
    Entry::SlotsMovedOut {
        lo: slot,
        hi: slot,
        to: "g2".into(),
        map_epoch: 4,
        at_ms: 9,
    }
}

fn purged(id: &str) -> Entry {
    Entry::Delete {
        id: id.into(),
        at_ms: 10,
        machine: Some("order".into()),
        reason: Some(DeleteReason::Moved),
    }
}

/// `{a}1`, `{a}2` (paid) and `{a}3` in slot A; `{b}1` and `{b}2` (paid) in slot B.
fn two_slots() -> Shard {
    let mut shard = Shard::with_order();
    for id in ["{a}1", "{a}2", "{a}3", "{b}1", "{b}2"] {
        shard.ok(create(id, 5));
    }
    for id in ["{a}2", "{b}2"] {
        shard.ok(event(id, "pay", Some(json!({"amount": 5}))));
    }
    shard
}

#[test]
fn slots_moved_out_leave_the_counts_at_once_and_the_purge_takes_nothing_twice() {
    let mut shard = two_slots();
    let a = slot_of("{a}1");
    assert_ne!(a, slot_of("{b}1"));
    assert_eq!(shard.engine.instance_count(), 5);
    let result = write(&mut shard, moved_out(a));
    assert_eq!(result["departed"], 3);
    let e = &shard.engine;
    assert_eq!(
        (e.instance_count(), count(e, "new"), count(e, "paid")),
        (2, 1, 1)
    );
    assert_eq!(e.departed(), (vec![(a, a)], 3));
    assert!(e.has_departed());
    // The same slots again (a second shard turn, say) take nothing more.
    assert_eq!(write(&mut shard, moved_out(a))["departed"], 0);
    assert_eq!(shard.engine.instance_count(), 2);
    // A change to a departed instance counts nowhere (none is expected: MOVED).
    shard.ok(event("{a}1", "cancel", None));
    let e = &shard.engine;
    assert_eq!((count(e, "new"), count(e, "cancelled")), (1, 0));
    // The purge: deletes of reason `moved` lower nothing that was already taken out.
    for id in ["{a}1", "{a}2"] {
        write(&mut shard, purged(id));
    }
    let e = &shard.engine;
    assert_eq!(
        (e.instance_count(), count(e, "new"), count(e, "paid")),
        (2, 1, 1)
    );
    assert_eq!(e.departed(), (vec![(a, a)], 1));
    write(&mut shard, purged("{a}3"));
    let e = &shard.engine;
    assert_eq!(
        (e.instance_count(), count(e, "new"), count(e, "paid")),
        (2, 1, 1)
    );
    assert_eq!(e.departed(), (vec![], 0));
    assert!(!e.has_departed());
    // Nothing departed: the slot's instances count again, as any others.
    shard.ok(create("{a}9", 5));
    assert_eq!(
        (shard.engine.instance_count(), count(&shard.engine, "new")),
        (3, 2)
    );
}

#[test]
fn slots_moved_back_before_the_purge_count_the_new_copy_only() {
    let mut shard = two_slots();
    let a = slot_of("{a}1");
    // The copy that went away, as the target will send it back: `{a}2` shipped since.
    let image = shard.engine.export_image("{a}2").expect("exists");
    write(&mut shard, moved_out(a));
    write(&mut shard, purged("{a}1"));
    let import = |id: &str, image: Option<String>| Entry::Import {
        move_id: 7,
        lo: a,
        hi: a,
        id: id.into(),
        image,
        at_ms: 11,
    };
    write(&mut shard, import("{a}2", Some(image)));
    // Staged: still nothing of slot A counts.
    assert_eq!(shard.engine.instance_count(), 2);
    let switch = Entry::MoveIn {
        move_id: 7,
        lo: a,
        hi: a,
        map_epoch: 5,
        at_ms: 12,
    };
    assert_eq!(write(&mut shard, switch)["moved_in"], 1);
    let e = &shard.engine;
    // `{a}3` of the old copy (not in the new one: deleted on the target) is gone, not back.
    assert!(e.instance("{a}3").is_none());
    assert_eq!(e.instance("{a}2").map(|i| &*i.state), Some("paid"));
    assert_eq!(
        (e.instance_count(), count(e, "new"), count(e, "paid")),
        (3, 1, 2)
    );
    assert_eq!(e.departed(), (vec![], 0));
    // The new copy counts as usual from now on.
    shard.ok(event("{a}2", "ship", None));
    let e = &shard.engine;
    assert_eq!((count(e, "paid"), count(e, "shipped")), (1, 1));
}

#[test]
fn replay_of_slots_moved_out_rebuilds_the_counts() {
    let mut shard = two_slots();
    let a = slot_of("{a}1");
    write(&mut shard, moved_out(a));
    write(&mut shard, purged("{a}1"));
    shard.ok(event("{b}1", "cancel", None));
    let engine = replay_log(&shard.log);
    assert_eq!(engine.stats(), shard.engine.stats());
    assert_eq!(engine.instance_count(), shard.engine.instance_count());
    assert_eq!(engine.departed(), (vec![(a, a)], 2));
}

/// The shard's stall for `Entry::SlotsMovedOut` at 1M instances with a third departing
/// (`cargo test -p smdb-shards --release departed_walk -- --ignored --nocapture`).
#[test]
#[ignore]
fn departed_walk_at_a_million_instances() {
    let mut engine = Shard::with_order().engine;
    let n = 1_000_000u64;

    for i in 0..n {
        let create = Entry::Create {
            id: format!("order-{i:08}"),
            machine: "order".into(),
            version: 1,
            state: "new".into(),
            context: obj(json!({"total": 5})),
            idempotency_key: None,
            at_ms: 2,
        };
        engine.apply(create, 10 + i, false);
    }
    let out = Entry::SlotsMovedOut {
        lo: 0,
        hi: 5460,
        to: "g2".into(),
        map_epoch: 2,
        at_ms: 3,
    };
    // The same walk without the counters: what `ids_in_slots` (a move's `Begin`, each purge
    // call) already costs.
    let started = std::time::Instant::now();
    let ids = engine.ids_in_slots(0, 5460).len();
    println!("ids_in_slots: {ids} in {:?}", started.elapsed());
    // A purge slice (`shard::moves` purge): the first 512 ids outside the kept slots.
    let started = std::time::Instant::now();
    let slice = engine.ids_outside(&[(5461, 16383)], 512).len();
    println!("ids_outside, a slice: {slice} in {:?}", started.elapsed());
    let mut times = Vec::new();
    let mut engine2 = engine.clone();
    for e in [&mut engine, &mut engine2] {
        let started = std::time::Instant::now();
        let r = e.apply(out.clone(), 10 + n, true).unwrap();
        times.push(started.elapsed());
        println!("departed {}", r["departed"]);
    }
    println!("SlotsMovedOut apply at {n} instances (as built, then a clone): {times:?}");
    assert!(engine.instance_count() < n as usize * 7 / 10);
}
