//! Slot moves (docs/cluster.md "Moving slots"): an exported image, imported and moved in on
//! another engine, is the source's instance; staged instances are invisible until the move
//! switches; a drop or a tombstone forgets them; replay rebuilds what live apply built.

use serde_json::json;

use super::*;
use crate::engine::{Condition, DeleteReason, Entry, FindQuery, StagedMove};
use crate::routing::slot_of;

/// The order machine with `ctx.total` indexed (so FIND sees what the indexes hold).
fn indexed_order() -> Value {
    let mut def = order_machine();
    def["indexes"] = json!(["ctx.total"]);
    def
}

fn with_indexed_order() -> Shard {
    let mut shard = Shard::new();
    shard.ok(put("order", 1, indexed_order()));
    shard
}

/// Logs `entry` at the shard's next offset and applies it; the offset and the result.
fn write(shard: &mut Shard, entry: Entry) -> (u64, Value) {
    let offset = shard.next_offset;
    shard.next_offset += 1;
    shard.log.push((offset, entry.clone()));
    let result = shard.engine.apply(entry, offset, true).expect("applies");
    assert_eq!(shard.engine.divergence(), None, "{result}");
    (offset, result)
}

fn import(move_id: u64, id: &str, image: Option<String>) -> Entry {
    Entry::Import {
        move_id,
        lo: 0,
        hi: 16383,
        id: id.into(),
        image,
        at_ms: 5,
    }
}

fn move_in(move_id: u64) -> Entry {
    Entry::MoveIn {
        move_id,
        lo: 0,
        hi: 16383,
        map_epoch: 3,
        at_ms: 6,
    }
}

/// A source with `o-1` created under a key, paid under a key, noted; and `o-2` plain.
fn source() -> Shard {
    let mut src = with_indexed_order();
    src.ok(create_keyed("o-1", 100, Some("c-1")));
    src.ok(keyed_event(
        "o-1",
        "pay",
        Some(json!({"amount": 100})),
        "k-1",
    ));
    src.ok(event("o-1", "note", Some(json!({"note": "hi"}))));
    src.ok(create("o-2", 7));
    src
}

fn total_is(total: i64) -> FindQuery {
    FindQuery {
        machine: "order".into(),
        conditions: vec![("ctx.total".into(), Condition::Eq(json!(total)))],
        state: None,
        after: None,
        limit: 10,
        include_context: false,
    }
}

fn listed(engine: &Engine) -> usize {
    engine
        .list_instances(None, None, None, None, 100)
        .instances
        .len()
}

#[test]
fn an_image_moved_in_is_the_source_instance() {
    let mut src = source();
    let mut dst = with_indexed_order();
    let image = src.engine.export_image("o-1").expect("o-1 exists");
    assert_eq!(src.engine.export_image("nope"), None);
    let (at, _) = write(&mut dst, import(7, "o-1", Some(image)));
    assert_eq!(dst.engine.staged_ids(7), vec!["o-1".to_string()]);
    write(&mut dst, move_in(7));
    assert!(!dst.engine.has_staged());

    let mut want = src.engine.instance_json("o-1").unwrap();
    want["wal_offset"] = json!(at);
    assert_eq!(dst.engine.instance_json("o-1").unwrap(), want);
    let (a, b) = (src.engine.instance("o-1"), dst.engine.instance("o-1"));
    assert_eq!(a.unwrap().event_count, 2);
    assert_eq!(b.unwrap().event_count, 2);
    assert_eq!(a.unwrap().created_at_ms, b.unwrap().created_at_ms);
    assert_eq!(
        dst.engine.history("o-1", 1, 10).unwrap(),
        src.engine.history("o-1", 1, 10).unwrap()
    );
    // The keys came along: a repeated event key and a repeated create key answer the first
    // results, on both engines alike.
    let again = keyed_event("o-1", "pay", Some(json!({"amount": 100})), "k-1");
    let (first, moved) = (src.ok(again.clone()), dst.ok(again));
    assert_eq!(first, moved);
    assert_eq!(first["to_state"], "paid");
    let recreate = create_keyed("o-1", 100, Some("c-1"));
    assert_eq!(src.ok(recreate.clone()), dst.ok(recreate));
    assert_eq!(dst.engine.instance("o-1").unwrap().event_count, 2);
    // Counted and indexed as a create.
    assert_eq!(count(&dst.engine, "paid"), 1);
    assert_eq!(count(&dst.engine, "new"), 0);
    assert_eq!(
        dst.engine
            .find_instances(&total_is(100))
            .unwrap()
            .instances
            .len(),
        1
    );
    // It lives on: the next event is applied on top of the imported history.
    dst.ok(event("o-1", "ship", None));
    assert_eq!(dst.engine.instance("o-1").unwrap().event_count, 3);
}

#[test]
fn staged_instances_are_invisible_until_the_move_switches() {
    let src = source();
    let mut dst = with_indexed_order();
    for id in ["o-1", "o-2"] {
        write(&mut dst, import(9, id, src.engine.export_image(id)));
    }
    assert!(dst.engine.has_staged());
    assert_eq!(dst.engine.instance("o-1"), None);
    assert_eq!(dst.engine.instance_count(), 0);
    assert_eq!(listed(&dst.engine), 0);
    assert!(dst
        .engine
        .find_instances(&total_is(7))
        .unwrap()
        .instances
        .is_empty());
    assert_eq!(count(&dst.engine, "new") + count(&dst.engine, "paid"), 0);
    assert_eq!(
        dst.code(event("o-2", "pay", None)),
        ErrorCode::InstanceNotFound
    );
    assert_eq!(
        dst.engine.staged_moves(),
        vec![StagedMove {
            move_id: 9,
            lo: 0,
            hi: 16383,
            instances: 2
        }]
    );
    assert_eq!(dst.engine.staged_covers(123), Some(9));
    write(&mut dst, move_in(9));
    assert_eq!(dst.engine.instance_count(), 2);
    assert_eq!(listed(&dst.engine), 2);
    assert_eq!(
        dst.engine
            .find_instances(&total_is(7))
            .unwrap()
            .instances
            .len(),
        1
    );
    assert_eq!(dst.engine.staged_covers(123), None);
    assert_eq!(dst.engine.staged_moves(), vec![]);
}

#[test]
fn a_drop_forgets_the_move_and_a_tombstone_its_instance() {
    let src = source();
    let mut dst = with_indexed_order();
    write(&mut dst, import(1, "o-1", src.engine.export_image("o-1")));
    write(&mut dst, import(1, "o-2", src.engine.export_image("o-2")));
    write(&mut dst, import(1, "o-2", None));
    assert_eq!(dst.engine.staged_ids(1), vec!["o-1".to_string()]);
    write(
        &mut dst,
        Entry::DropStaged {
            move_id: 1,
            at_ms: 9,
        },
    );
    assert!(!dst.engine.has_staged());
    assert_eq!(dst.engine.staged_ids(1), Vec::<String>::new());
    // Moving in a dropped (unknown) move changes nothing.
    write(&mut dst, move_in(1));
    assert_eq!(dst.engine.instance_count(), 0);

    write(&mut dst, import(2, "o-1", src.engine.export_image("o-1")));
    write(&mut dst, import(2, "o-2", src.engine.export_image("o-2")));
    write(&mut dst, import(2, "o-1", None));
    write(&mut dst, move_in(2));
    assert_eq!(dst.engine.instance("o-1"), None);
    assert!(dst.engine.instance("o-2").is_some());
}

#[test]
fn a_moved_in_instance_replaces_a_live_one_and_an_unknown_machine_is_skipped() {
    let src = source();
    let mut dst = with_indexed_order();
    dst.ok(create("o-2", 99));
    write(&mut dst, import(4, "o-2", src.engine.export_image("o-2")));
    let mut other = Shard::new();
    other.ok(put("invoice", 1, order_machine()));
    other.ok(Command::CreateInstance {
        id: "i-1".into(),
        machine: "invoice".into(),
        version: 1,
        context: obj(json!({"total": 1})),
        idempotency_key: None,
    });
    write(&mut dst, import(4, "i-1", other.engine.export_image("i-1")));
    write(&mut dst, move_in(4));
    assert_eq!(
        dst.engine.instance("o-2").unwrap().context,
        src.engine.instance("o-2").unwrap().context
    );
    assert_eq!(
        dst.engine.instance("i-1"),
        None,
        "its machine is not stored here"
    );
    assert_eq!(
        count(&dst.engine, "new"),
        1,
        "the replaced one left its state"
    );
    assert_eq!(dst.engine.instance_count(), 1);
    assert!(dst
        .engine
        .find_instances(&total_is(99))
        .unwrap()
        .instances
        .is_empty());
}

#[test]
fn a_moved_delete_removes_the_instance_as_a_delete_does() {
    let mut src = source();
    let before = src.engine.stats().clone();
    write(
        &mut src,
        Entry::Delete {
            id: "o-1".into(),
            at_ms: 9,
            machine: Some("order".into()),
            reason: Some(DeleteReason::Moved),
        },
    );
    assert_eq!(src.engine.instance("o-1"), None);
    assert!(src
        .engine
        .find_instances(&total_is(100))
        .unwrap()
        .instances
        .is_empty());
    assert_eq!(
        src.engine.stats().expired,
        before.expired,
        "not a retention deletion"
    );
    assert_eq!(count(&src.engine, "paid"), 0);
    assert_eq!(count(&src.engine, "new"), 1);
}

#[test]
fn replay_of_imports_and_the_switch_rebuilds_the_live_engine() {
    let src = source();
    let mut dst = with_indexed_order();
    dst.ok(create("x-1", 3));
    write(&mut dst, import(5, "o-1", src.engine.export_image("o-1")));
    dst.ok(event("x-1", "pay", Some(json!({"amount": 3}))));
    write(&mut dst, import(5, "o-2", src.engine.export_image("o-2")));
    write(&mut dst, import(6, "o-2", src.engine.export_image("o-2")));
    write(&mut dst, move_in(5));
    dst.ok(event("o-1", "ship", None));
    let replay = |upto: usize| replay_log(&dst.log[..upto]);
    let engine = replay(dst.log.len());
    assert_eq!(engine.snapshot(), dst.engine.snapshot());
    assert_eq!(engine.stats(), dst.engine.stats());
    assert_eq!(engine.staged_moves(), dst.engine.staged_moves());
    assert_eq!(engine.staged_ids(6), vec!["o-2".to_string()]);
    assert_eq!(
        engine.history("o-1", 1, 10),
        dst.engine.history("o-1", 1, 10)
    );
    // Before the switch, replay stages without showing.
    let staged = replay(dst.log.len() - 2);
    assert_eq!(staged.instance_count(), 1);
    assert_eq!(
        staged.staged_ids(5),
        vec!["o-1".to_string(), "o-2".to_string()]
    );
}

#[test]
fn ids_in_slots_are_the_live_ids_whose_slot_is_in_range() {
    let mut shard = Shard::with_order();
    let ids: Vec<String> = (0..200).map(|i| format!("o-{i}")).collect();
    for id in &ids {
        shard.ok(create(id, 1));
    }
    shard.ok(delete("o-5"));
    for (lo, hi) in [(0, 16383), (0, 8191), (8192, 16383), (100, 4000), (7, 7)] {
        let mut want: Vec<String> = (ids.iter())
            .filter(|id| *id != "o-5" && (lo..=hi).contains(&slot_of(id)))
            .cloned()
            .collect();
        want.sort();
        assert_eq!(shard.engine.ids_in_slots(lo, hi), want, "{lo}..={hi}");
    }
    assert_eq!(shard.engine.ids_in_slots(0, 16383).len(), 199);
}

#[test]
fn a_bad_image_is_a_divergence_and_stages_nothing() {
    let mut dst = with_indexed_order();
    let offset = dst.next_offset;
    assert_eq!(
        dst.engine
            .apply(import(1, "o-1", Some("{".into())), offset, true),
        None
    );
    assert!(dst.engine.divergence().is_some());
    let src = source();
    let mut dst = with_indexed_order();
    let wrong = import(1, "o-9", src.engine.export_image("o-1"));
    assert_eq!(dst.engine.apply(wrong, offset, true), None);
    assert!(dst.engine.divergence().is_some());
    assert_eq!(dst.engine.staged_ids(1), Vec::<String>::new());
}

fn move_in_of(move_id: u64, lo: u16, hi: u16) -> Entry {
    Entry::MoveIn {
        move_id,
        lo,
        hi,
        map_epoch: 3,
        at_ms: 6,
    }
}

fn import_of(move_id: u64, (lo, hi): (u16, u16), id: &str, image: Option<String>) -> Entry {
    Entry::Import {
        move_id,
        lo,
        hi,
        id: id.into(),
        image,
        at_ms: 5,
    }
}

/// A slot that left and came back: its entries from before the latest move-in are "before"
/// (a replay leaves them out), those after it and those of other slots are not; the marks
/// survive both snapshot formats and a replay of the log.
#[test]
fn entries_before_a_slots_latest_move_in_are_before_it() {
    let mut dst = with_indexed_order();
    // slot("o-1") differs from slot("x-1"), so x-1 is untouched by the move.
    let (s1, sx) = (slot_of("o-1"), slot_of("x-1"));
    assert_ne!(s1, sx);
    let old = dst.next_offset;
    dst.ok(create("o-1", 3));
    dst.ok(create("x-1", 4));
    assert!(
        !dst.engine.before_move_in("o-1", old),
        "nothing moved in yet"
    );
    // o-1 leaves (deleted as moved) and comes back by an import.
    let image = dst.engine.export_image("o-1");
    dst.ok(delete("o-1"));
    write(&mut dst, import_of(9, (s1, s1), "o-1", image));
    let (m1, _) = write(&mut dst, move_in_of(9, s1, s1));
    assert!(dst.engine.before_move_in("o-1", old));
    assert!(dst.engine.before_move_in("o-1", m1 - 1));
    assert!(!dst.engine.before_move_in("o-1", m1 + 1));
    assert!(!dst.engine.before_move_in("x-1", old), "another slot");
    // A later move-in of the slot moves the mark; a move-in of a range around it keeps the
    // rest of the range's marks.
    let image = dst.engine.export_image("o-1");
    write(&mut dst, import_of(10, (0, 16383), "o-1", image));
    let (m2, _) = write(&mut dst, move_in_of(10, 0, 16383));
    assert!(dst.engine.before_move_in("o-1", m2 - 1));
    assert!(
        dst.engine.before_move_in("x-1", old),
        "x-1's slot was in the range"
    );
    // An unknown move (nothing staged here) marks nothing.
    let (m3, _) = write(&mut dst, move_in_of(11, 0, 16383));
    assert!(!dst.engine.before_move_in("o-1", m3 - 1));

    let json = Engine::restore(&dst.engine.snapshot()).unwrap();
    let items = Engine::load_snapshot(
        crate::engine::SNAPSHOT_FORMAT,
        &dst.engine.snapshot_items(dst.next_offset),
    )
    .unwrap();
    let replayed = replay_log(&dst.log);
    for engine in [json, items, replayed] {
        assert_eq!(engine.snapshot(), dst.engine.snapshot());
        assert!(engine.before_move_in("o-1", m2 - 1));
        assert!(!engine.before_move_in("o-1", m2 + 1));
    }
}

#[test]
fn ids_outside_the_owned_slots_stop_at_max() {
    let mut shard = with_indexed_order();
    let ids: Vec<String> = (0..200).map(|i| format!("o-{i}")).collect();
    for id in &ids {
        shard.ok(create(id, 1));
    }
    // Owned: slots 0-8191 and 12000-12999; the rest is foreign.
    let owned = [(0, 8191), (12000, 12999)];
    let foreign = |id: &String| {
        let s = slot_of(id);
        !((0..=8191).contains(&s) || (12000..=12999).contains(&s))
    };
    let mut want: Vec<String> = ids.iter().filter(|id| foreign(id)).cloned().collect();
    want.sort();
    assert!(want.len() > 20 && want.len() < 200, "{}", want.len());
    let mut all = shard.engine.ids_outside(&owned, 1000);
    all.sort();
    assert_eq!(all, want);
    let some = shard.engine.ids_outside(&owned, 7);
    assert_eq!(some.len(), 7);
    assert!(some.iter().all(|id| want.contains(id)));
    assert!(shard.engine.ids_outside(&[(0, 16383)], 1000).is_empty());
    assert_eq!(shard.engine.ids_outside(&[], 1000).len(), 200);
}
