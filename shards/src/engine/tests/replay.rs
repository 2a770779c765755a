//! Replay (start-up recovery) rebuilds exactly the engine that applying live produced, from
//! records in either entry format, across batch boundaries.

use serde_json::json;

use super::*;
use crate::engine::Replay;

/// A deterministic mix of every write: creates, events with and without payloads and keys,
/// failed guards (nothing logged), deletes and re-creates of the same ids.
fn busy_shard() -> Shard {
    let mut shard = Shard::with_order();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for step in 0..2000 {
        let id = format!("order-{}", next(40));
        let cmd = match next(10) {
            0 => create(&id, next(100) as i64),
            1 => delete(&id),
            2 => keyed_event(
                &id,
                "pay",
                Some(json!({"amount": 500})),
                &format!("k{step}"),
            ),
            3 | 4 => event(&id, "pay", Some(json!({"amount": next(100), "step": step}))),
            5 => event(&id, "ship", None),
            6 => event(
                &id,
                "note",
                Some(json!({"note": format!("n{step}"), "nested": {"a": [1, 2]}})),
            ),
            7 => event(&id, "deliver", None),
            8 => event(&id, "cancel", Some(json!({}))),
            _ => create_keyed(&id, 10, Some("c")),
        };
        let _ = shard.exec(cmd);
    }
    shard
}

fn replayed(shard: &Shard, json_every: usize) -> Engine {
    let mut engine = Engine::new();
    let mut replay = Replay::new();
    for (i, (offset, entry)) in shard.log.iter().enumerate() {
        let bytes = if json_every > 0 && i % json_every == 0 {
            serde_json::to_vec(entry).unwrap()
        } else {
            entry.to_bytes()
        };
        replay.push(&mut engine, *offset, &bytes).unwrap();
    }
    replay.flush(&mut engine).unwrap();
    assert_eq!(replay.applied(), shard.log.len() as u64);
    engine
}

#[test]
fn replay_rebuilds_the_live_engine_exactly() {
    let shard = busy_shard();
    assert!(shard.log.len() > 400, "only {} entries", shard.log.len());
    assert!(shard.engine.instance_count() > 10);
    let live = shard.engine.snapshot();
    for json_every in [0, 1, 3] {
        let engine = replayed(&shard, json_every);
        assert_eq!(
            String::from_utf8(engine.snapshot()).unwrap(),
            String::from_utf8(live.clone()).unwrap(),
            "json_every={json_every}"
        );
        assert_eq!(engine.stats(), shard.engine.stats());
    }
}

#[test]
fn a_bad_record_names_its_offset() {
    let mut engine = Engine::new();
    let mut replay = Replay::new();
    replay.push(&mut engine, 7, &[3, 0, 1]).unwrap();
    let err = replay.flush(&mut engine).unwrap_err();
    assert!(err.contains("offset 7"), "{err}");
}
