//! Entry times never run backwards (`engine::clock`): a clock that steps back still stamps
//! new entries at or above the last applied one, on the engine that decided them, on one that
//! replayed them (a restart, a replica) and on one loaded from a snapshot.

use super::*;
use crate::engine::{entry_time_of, Entry};

fn stamped(entry: &Entry) -> u64 {
    entry_time_of(entry).expect("a timed entry")
}

#[test]
fn entry_times_never_go_back_when_the_clock_does() {
    let mut shard = Shard::with_order();
    shard.ok(create("a", 10));
    let high = shard.now_ms;
    // The wall clock steps back a minute.
    shard.now_ms -= 60_000;
    shard.ok(create("b", 10));
    shard.ok(event("a", "cancel", None));
    let times: Vec<u64> = shard.log.iter().map(|(_, e)| stamped(e)).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(*times.last().unwrap(), high);
    assert_eq!(shard.engine.last_entry_time(), high);
    // Once the clock passes the last time again, it is used as it is.
    assert_eq!(shard.engine.entry_time(high + 5), high + 5);

    // A replica (or a restart) that applied the same log stamps no earlier either.
    let mut replica = Engine::new();
    for (offset, entry) in shard.log.clone() {
        replica.apply(entry, offset, false);
    }
    assert_eq!(replica.last_entry_time(), high);
    assert_eq!(replica.entry_time(1), high);
    let decided = replica.decide(&create("c", 1), 1).unwrap();
    let Decision::Write(entry) = decided else {
        panic!("a create writes")
    };
    assert_eq!(stamped(&entry), high);

    // An engine loaded from a snapshot knows the highest time its instances hold.
    let head = shard.next_offset - 1;
    let bytes = shard.engine.snapshot_items(head);
    let loaded = Engine::load_snapshot(crate::engine::SNAPSHOT_FORMAT, &bytes).unwrap();
    assert_eq!(loaded.last_entry_time(), high);
}
