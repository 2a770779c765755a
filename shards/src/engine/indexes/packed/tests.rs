//! The packed set against a model: `BTreeSet<Vec<u8>>` under random inserts, removes and
//! ranges, over keys that share long prefixes, may be empty and hold 0x00 and 0xFF.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>),
    Remove(Vec<u8>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
}

/// Keys that share long prefixes, may be empty and hold 0x00 and 0xFF.
fn key() -> impl Strategy<Value = Vec<u8>> {
    let prefix = prop::sample::select(vec![
        vec![],
        vec![0x05, b'c', b'-', b'1', 0x00],
        vec![0x05, b'c', b'-', b'1', 0x00, b'f', b'1', b'-', b'0', b'0'],
        vec![0x04, 0x80, 0, 0, 0, 0, 0, 0, 0],
        vec![0xFF; 12],
    ]);
    let tail = prop::collection::vec(
        prop::sample::select(vec![0x00, 0x01, b'a', b'b', 0xFF]),
        0..40,
    );
    (prefix, tail).prop_map(|(p, t)| [p, t].concat())
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => key().prop_map(Op::Insert),
        3 => key().prop_map(Op::Remove),
        1 => (bound(), bound()).prop_map(|(l, h)| Op::Range(l, h)),
    ]
}

fn collect(mut range: Range<'_>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(key) = range.next_key() {
        out.push(key.to_vec());
    }
    out
}

fn crossed(low: &Bound<Vec<u8>>, high: &Bound<Vec<u8>>) -> bool {
    use Bound::{Excluded, Included};
    match (low, high) {
        (Excluded(a), Excluded(b)) => a >= b,
        (Included(a) | Excluded(a), Included(b) | Excluded(b)) => a > b,
        _ => false,
    }
}

fn check(set: &PackedSet, model: &BTreeSet<Vec<u8>>, low: &Bound<Vec<u8>>, high: &Bound<Vec<u8>>) {
    if crossed(low, high) {
        return;
    }
    let bounds = (
        low.as_ref().map(Vec::as_slice),
        high.as_ref().map(Vec::as_slice),
    );
    let want: Vec<Vec<u8>> = model.range::<[u8], _>(bounds).cloned().collect();
    assert_eq!(collect(set.range(bounds.0, bounds.1)), want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn behaves_as_a_btreeset(ops in prop::collection::vec(op(), 0..400)) {
        let (mut set, mut model) = (PackedSet::default(), BTreeSet::new());
        for op in &ops {
            match op {
                Op::Insert(k) => prop_assert_eq!(set.insert(k), model.insert(k.clone())),
                Op::Remove(k) => prop_assert_eq!(set.remove(k), model.remove(k)),
                Op::Range(low, high) => check(&set, &model, low, high),
            }
            prop_assert_eq!(set.len(), model.len());
        }
        let all: Vec<Vec<u8>> = model.iter().cloned().collect();
        prop_assert_eq!(collect(set.range(Bound::Unbounded, Bound::Unbounded)), all.clone());
        let built = PackedSet::from_sorted(all.iter().map(Vec::as_slice));
        prop_assert_eq!(built.len(), model.len());
        prop_assert!(built == set);
        for k in &all {
            check(&built, &model, &Bound::Included(k.clone()), &Bound::Unbounded);
            check(&set, &model, &Bound::Excluded(k.clone()), &Bound::Included(k.clone()));
        }
    }
}

#[test]
fn pages_split_merge_and_drop() {
    let keys: Vec<Vec<u8>> = (0..2000u32)
        .map(|i| format!("c-{}\0f1-{i:07}", i % 7).into_bytes())
        .collect();
    let mut set = PackedSet::default();
    for k in &keys {
        assert!(set.insert(k));
    }
    assert!(set.pages.len() > 10);
    assert!(set.pages.values().all(|rest| rest.len() <= PAGE_BYTES + 64));
    for k in &keys {
        assert!(set.remove(k));
    }
    assert!(set.is_empty() && set.pages.is_empty());
}
