//! Divergence: every kind of entry that does not fit the state is skipped and recorded with
//! its offset (none is legitimate: `engine::divergence`), and a log written by `decide` never
//! diverges (`Shard::exec` checks that for every test of this module tree).

use serde_json::{json, Map};

use super::*;
use crate::engine::Entry;

fn apply_entry(id: &str, event: &str, from: &str, to: &str) -> Entry {
    Entry::Apply {
        instance_id: id.into(),
        event: event.into(),
        from: from.into(),
        to: to.into(),
        payload: None,
        idempotency_key: None,
        at_ms: 1,
        machine: None,
        version: None,
        timer: false,
    }
}

fn create_entry(id: &str, machine: &str) -> Entry {
    Entry::Create {
        id: id.into(),
        machine: machine.into(),
        version: 1,
        state: "new".into(),
        context: Map::new(),
        idempotency_key: None,
        at_ms: 1,
    }
}

/// A shard with `o-1` in `new`, and the entry at the next offset applied out of place.
fn diverged_by(entry: Entry) -> (u64, String) {
    let mut shard = Shard::with_order();
    shard.ok(create("o-1", 10));
    assert_eq!(shard.engine.divergence(), None);
    let offset = shard.next_offset;
    shard.engine.apply(entry, offset, true);
    let d = shard
        .engine
        .divergence()
        .expect("a divergence is recorded")
        .clone();
    assert_eq!(d.offset, offset);
    (d.offset, d.reason)
}

#[test]
fn every_entry_that_does_not_fit_is_a_divergence_naming_it() {
    let other_definition = json!({"states": ["a"], "initial": "a", "transitions": []});
    let cases: Vec<(Entry, &str)> = vec![
        (
            apply_entry("ghost", "pay", "new", "paid"),
            "unknown instance `ghost`",
        ),
        (
            apply_entry("o-1", "ship", "paid", "shipped"),
            "the instance is in `new`",
        ),
        (
            create_entry("o-1", "order"),
            "create of existing instance `o-1`",
        ),
        (create_entry("o-2", "nope"), "unknown machine `nope`"),
        (
            Entry::Delete {
                id: "ghost".into(),
                at_ms: 1,
                machine: None,
                reason: None,
            },
            "delete of unknown instance",
        ),
        (
            Entry::PutMachine {
                machine: "order".into(),
                version: 1,
                definition: other_definition,
                checksum: "0".into(),
                at_ms: 1,
            },
            "stored with another definition",
        ),
        (
            Entry::PutMachine {
                machine: "broken".into(),
                version: 1,
                definition: json!({"states": [], "initial": "x"}),
                checksum: "0".into(),
                at_ms: 1,
            },
            "does not compile",
        ),
        (Entry::Epoch { epoch: 0 }, "does not rise"),
        (
            Entry::Batch {
                entries: vec![Entry::Epoch { epoch: 9 }],
            },
            "nested",
        ),
    ];
    for (entry, want) in cases {
        let (_, reason) = diverged_by(entry);
        assert!(reason.contains(want), "{reason:?} should name {want:?}");
    }
}

#[test]
fn the_first_divergence_is_kept() {
    let mut shard = Shard::with_order();
    shard
        .engine
        .apply(apply_entry("a", "pay", "new", "paid"), 7, false);
    shard
        .engine
        .apply(apply_entry("b", "pay", "new", "paid"), 8, false);
    assert_eq!(shard.engine.divergence().map(|d| d.offset), Some(7));
}
