//! Replication epochs: the epoch entry's codec (kind 6), the engine's epoch history and
//! `epoch_end`, snapshots with and without it, and replay treating it as a barrier.

use serde_json::json;

use super::*;
use crate::engine::Entry;

fn epoch(epoch: u64) -> Entry {
    Entry::Epoch { epoch }
}

#[test]
fn epoch_entry_is_kind_6_with_a_leb128_epoch_and_has_a_json_form() {
    assert_eq!(epoch(5).to_bytes(), vec![6, 5]);
    assert_eq!(epoch(300).to_bytes(), vec![6, 0xAC, 0x02]);
    for e in [epoch(1), epoch(300), epoch(u64::MAX)] {
        assert_eq!(Entry::decode(&e.to_bytes()).unwrap(), e);
        let text = serde_json::to_vec(&e).unwrap();
        assert_eq!(Entry::decode(&text).unwrap(), e);
    }
    assert_eq!(
        serde_json::to_value(epoch(2)).unwrap(),
        json!({"k": "epoch", "epoch": 2})
    );
    // Truncated, trailing bytes, and inside a batch are all refused.
    assert!(Entry::decode(&[6]).is_err());
    assert!(Entry::decode(&[6, 1, 0]).is_err());
    let nested = Entry::Batch {
        entries: vec![epoch(1)],
    };
    assert!(Entry::decode(&nested.to_bytes()).is_err());
    assert_eq!(epoch(1).instance_id(), None);
}

#[test]
fn apply_keeps_an_ascending_history_and_epoch_end_finds_where_logs_agree() {
    let mut shard = Shard::with_order();
    let mut engine = shard.engine.clone();
    assert_eq!(engine.last_epoch(), 0);
    assert_eq!(engine.epoch_end(0, 7), 7);
    // Epoch 1 at offset 2, epoch 3 at offset 10, epoch 4 at offset 11.
    assert_eq!(engine.apply(epoch(1), 2, true), Some(json!({})));
    assert_eq!(engine.apply(epoch(3), 10, false), None);
    engine.apply(epoch(4), 11, false);
    assert_eq!(engine.epochs(), &[(1, 2), (3, 10), (4, 11)]);
    assert_eq!(engine.last_epoch(), 4);
    // The epoch that wrote an offset (an HTTP ETag's first half).
    let of: Vec<u64> = [1, 2, 9, 10, 11, 50].map(|o| engine.epoch_of(o)).to_vec();
    assert_eq!(of, vec![0, 1, 1, 3, 4, 4]);
    let head = 20;
    assert_eq!(engine.epoch_end(0, head), 1);
    assert_eq!(engine.epoch_end(1, head), 9);
    assert_eq!(engine.epoch_end(2, head), 9);
    assert_eq!(engine.epoch_end(3, head), 10);
    assert_eq!(engine.epoch_end(4, head), head);
    assert_eq!(engine.epoch_end(99, head), head);
    // An epoch that does not grow (or an offset that goes back) is skipped.
    engine.apply(epoch(4), 12, false);
    engine.apply(epoch(2), 13, false);
    engine.apply(epoch(9), 11, false);
    assert_eq!(engine.epochs(), &[(1, 2), (3, 10), (4, 11)]);
    // Epochs change no instance, counter or machine.
    shard.engine.apply(epoch(1), 2, false);
    assert_eq!(shard.engine.stats(), engine.stats());
    assert_eq!(shard.engine.instance_count(), engine.instance_count());
}

#[test]
fn snapshots_keep_the_history_and_old_snapshots_read_as_empty() {
    let mut shard = Shard::with_order();
    shard.ok(create("o-1", 10));
    let plain = shard.engine.snapshot();
    assert!(
        !String::from_utf8_lossy(&plain).contains("epochs"),
        "no history, no key: older snapshots keep their bytes"
    );
    assert!(Engine::restore(&plain).unwrap().epochs().is_empty());
    shard.engine.apply(epoch(1), 3, false);
    shard.engine.apply(epoch(2), 5, false);
    let bytes = shard.engine.snapshot();
    let restored = Engine::restore(&bytes).unwrap();
    assert_eq!(restored.epochs(), &[(1, 3), (2, 5)]);
    assert_eq!(restored.snapshot(), bytes);
    // A history that is not ascending is damage.
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["epochs"] = json!([[2, 5], [1, 3]]);
    let err = Engine::restore(&serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(err.contains("epoch"), "{err}");
}

#[test]
fn replay_applies_epoch_entries_in_log_order_between_events() {
    let mut shard = Shard::with_order();
    for i in 0..50 {
        if i % 10 == 5 {
            let offset = shard.next_offset;
            shard.next_offset += 1;
            shard.engine.apply(epoch(1 + i / 10), offset, false);
            shard.log.push((offset, epoch(1 + i / 10)));
        }
        let id = format!("o-{}", i % 7);
        let _ = shard.exec(create(&id, 10));
        let _ = shard.exec(event(&id, "pay", Some(json!({"amount": 10}))));
    }
    let engine = replay_log(&shard.log);
    assert_eq!(engine.epochs().len(), 5);
    assert_eq!(engine.epochs(), shard.engine.epochs());
    assert_eq!(engine.snapshot(), shard.engine.snapshot());
}
