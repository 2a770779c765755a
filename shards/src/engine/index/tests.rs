//! The instance index: lookups, growth, and freezes against a model.

use super::*;

#[test]
fn one_key_gives_one_hash_in_every_table() {
    let a = InstanceMap::with_capacity(4);
    let b = InstanceMap::with_capacity(1000);
    assert_eq!(a.hash("order-1"), b.hash("order-1"));
    assert_ne!(a.hash("order-1"), a.hash("order-2"));
    // A second key is refused once tables use the first.
    assert!(!set_index_key(1, 2) || a.hash("x") == InstanceMap::default().hash("x"));
    assert!(b.home_bucket(a.hash("order-1")) < b.buckets() as u64);
}

fn record(id: &str, offset: u64) -> Box<InstanceRecord> {
    let machine: crate::engine::names::Name = "m".into();
    Box::new(InstanceRecord::new(crate::engine::Instance {
        id: id.into(),
        machine: machine.clone(),
        version: 1,
        state: machine,
        context: Default::default(),
        created_at_ms: 0,
        updated_at_ms: 0,
        event_count: 0,
        wal_offset: offset,
    }))
}

/// A map filled to its table's last free bucket.
fn full_map() -> (InstanceMap, usize) {
    let mut m = InstanceMap::with_capacity(1000);
    let cap = m.newest().capacity();
    for i in 0..cap {
        assert!(m.insert(record(&format!("i{i}"), 1)).is_ok());
    }
    assert!(!m.growing());
    (m, cap)
}

#[test]
fn a_full_table_grows_a_few_entries_per_write_and_every_entry_stays_found() {
    let (mut m, cap) = full_map();
    let buckets = m.buckets();
    assert!(m.insert(record("new-0", 2)).is_ok());
    assert!(
        m.growing(),
        "the insert started a new table instead of rehashing"
    );
    assert_eq!(m.len(), cap + 1);
    for i in 0..cap {
        assert!(m.get(&format!("i{i}")).is_some(), "i{i} lost while growing");
    }
    // Each write moves at most MOVE_PER_OP entries: the old table empties gradually.
    let mut writes = 1;
    while m.growing() {
        assert!(m.get_mut(&format!("i{}", writes % cap)).is_some());
        writes += 1;
        assert!(writes <= cap, "growth never finished");
    }
    assert!(
        writes >= cap / MOVE_PER_OP,
        "moved more than a few per write"
    );
    assert!(m.buckets() >= 2 * buckets, "the new table doubled");
    assert_eq!(m.len(), cap + 1);
    for i in 0..cap {
        assert_eq!(
            m.get(&format!("i{i}")).map(|r| r.instance.wal_offset),
            Some(1)
        );
    }
    assert!(m.insert(record("i0", 3)).is_err(), "a duplicate refused");
}

#[test]
fn a_frozen_map_moves_nothing_and_keeps_every_bucket_number() {
    let (mut m, cap) = full_map();
    assert!(m.insert(record("new-0", 2)).is_ok());
    let before: Vec<(String, Option<usize>)> = (0..cap)
        .map(|i| format!("i{i}"))
        .map(|id| (id.clone(), m.bucket_of(&id)))
        .collect();
    m.freeze();
    // Enough inserts to fill the new table too: a third one starts, nothing moves.
    for i in 0..3 * cap {
        assert!(m.insert(record(&format!("f{i}"), 5)).is_ok());
        if i < cap / 2 {
            assert!(m.remove(&format!("i{}", cap - 1 - i)).is_some());
        }
        assert!(m.get_mut("new-0").is_some());
    }
    for (id, bucket) in &before[..cap / 2] {
        let now = m.bucket_of(id);
        assert_eq!(now, *bucket, "{id} moved under a freeze");
        let at = now
            .and_then(|b| m.bucket(b))
            .map(|r| r.instance.id.to_string());
        assert_eq!(at.as_deref(), Some(id.as_str()));
    }
    let len = 1 + cap + 3 * cap - cap / 2;
    assert_eq!(m.len(), len);
    m.thaw();
    while m.growing() {
        assert!(m.get_mut("new-0").is_some());
    }
    assert_eq!(m.len(), len);
    assert!((0..cap - cap / 2).all(|i| m.get(&format!("i{i}")).is_some()));
    assert!((0..3 * cap).all(|i| m.get(&format!("f{i}")).is_some()));
    assert_eq!(m.records().count(), m.len());
}

proptest::proptest! {
    /// Random inserts, removes, lookups, freezes and thaws against a model: the map always
    /// holds exactly the model's ids, and a frozen map never moves one that was present.
    #[test]
    fn the_map_matches_a_model_through_growth_and_freezes(
        ops in proptest::collection::vec((0u8..6, 0u16..400), 1..3000)
    ) {
        let mut m = InstanceMap::with_capacity(0);
        let mut model = std::collections::BTreeMap::new();
        let mut pinned: Vec<(String, usize)> = Vec::new();
        for (n, (op, key)) in ops.into_iter().enumerate() {
            let id = format!("k{key}");
            match op {
                0 | 1 => {
                    let ok = m.insert(record(&id, n as u64)).is_ok();
                    proptest::prop_assert_eq!(ok, !model.contains_key(&id));
                    model.entry(id).or_insert(n as u64);
                }
                2 => {
                    let got = m.remove(&id).map(|r| r.instance.wal_offset);
                    proptest::prop_assert_eq!(got, model.remove(&id));
                    pinned.retain(|(p, _)| *p != id);
                }
                3 => {
                    let got = m.get_mut(&id).map(|r| r.instance.wal_offset);
                    proptest::prop_assert_eq!(got, model.get(&id).copied());
                }
                4 if !m.frozen => {
                    m.freeze();
                    pinned = model.keys().filter_map(|k| Some((k.clone(), m.bucket_of(k)?))).collect();
                    proptest::prop_assert_eq!(pinned.len(), model.len());
                }
                _ => {
                    m.thaw();
                    pinned.clear();
                }
            }
            for (p, bucket) in &pinned {
                proptest::prop_assert_eq!(m.bucket_of(p), Some(*bucket));
            }
        }
        proptest::prop_assert_eq!(m.len(), model.len());
        for (id, offset) in &model {
            proptest::prop_assert_eq!(m.get(id).map(|r| r.instance.wal_offset), Some(*offset));
        }
        proptest::prop_assert_eq!(m.records().count(), model.len());
    }
}

#[test]
fn prefetch_of_any_address_is_harmless() {
    prefetch(std::ptr::null::<u8>());
    prefetch(usize::MAX as *const u64);
}
