//! Replay (start-up recovery) rebuilds exactly the engine that applying live produced, from
//! records in either entry format, across batch boundaries.

use serde_json::json;

use super::*;
use crate::engine::{Entry, Replay};

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

/// Pushes `records` (offset, bytes) and flushes; the first error from either.
fn replay_raw(records: &[(u64, Vec<u8>)]) -> Result<Engine, String> {
    let mut engine = Engine::new();
    let mut replay = Replay::new();
    for (offset, bytes) in records {
        replay.push(&mut engine, *offset, bytes)?;
    }
    replay.flush(&mut engine)?;
    Ok(engine)
}

#[test]
fn a_bad_record_names_its_offset() {
    let err = replay_raw(&[(7, vec![3, 0, 1])]).unwrap_err();
    assert!(err.contains("offset 7"), "{err}");
}

#[test]
fn the_first_bad_record_in_log_order_is_named_though_windows_are_grouped() {
    // Valid APPLY heads (so each joins the window under its instance) with broken tails, for
    // ids whose groups sort in some order other than the log's.
    let broken = |id: &str| {
        let mut b = vec![3, 0, id.len() as u8];
        b.extend_from_slice(id.as_bytes());
        b.push(200); // the event name's length runs past the end
        b
    };
    let ids = ["q", "b", "zz", "a", "m", "k", "x", "c"];
    let records: Vec<(u64, Vec<u8>)> = (ids.iter().enumerate())
        .map(|(i, id)| (100 + i as u64, broken(id)))
        .collect();
    for skip in 0..ids.len() {
        let err = replay_raw(&records[skip..]).unwrap_err();
        let first = 100 + skip as u64;
        assert!(err.contains(&format!("offset {first}:")), "{err}");
    }
}

#[test]
fn grouping_keeps_each_instances_log_order_across_barriers_and_re_creates() {
    // The busy shard's log, with its machine entry repeated in the middle as a barrier (an
    // identical PUT_MACHINE applies as a no-op), must still rebuild the same engine.
    let shard = busy_shard();
    let machine = shard.log[0].1.clone();
    assert!(matches!(machine, Entry::PutMachine { .. }));
    let mut engine = Engine::new();
    let mut replay = Replay::new();
    for (i, (offset, entry)) in shard.log.iter().enumerate() {
        replay
            .push(&mut engine, *offset, &entry.to_bytes())
            .unwrap();
        if i % 97 == 50 {
            replay
                .push(&mut engine, *offset, &machine.to_bytes())
                .unwrap();
        }
    }
    replay.flush(&mut engine).unwrap();
    assert_eq!(engine.snapshot(), shard.engine.snapshot());
    assert_eq!(engine.stats(), shard.engine.stats());
}

/// `snapshot()` sizes its buffer from an estimate: it should be near the real size, so that the
/// buffer neither doubles at the end (a copy while the shard is paused) nor reserves far more.
#[test]
fn snapshot_size_estimate_is_near_the_snapshot() {
    let shard = busy_shard();
    let real = shard.engine.snapshot().len();
    let estimate = shard.engine.snapshot_bytes_estimate();
    assert!(
        estimate >= real && estimate <= 2 * real,
        "estimate {estimate}, snapshot {real}"
    );
}
