use proptest::prelude::*;

use super::*;

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("g{i}")).collect()
}

#[test]
fn three_groups_get_redis_split_at_epoch_1() {
    let m = ClusterMap::create(&names(3)).unwrap();
    assert_eq!(m.map_epoch, 1);
    let want = vec![
        (0, 5460, "g0".to_string()),
        (5461, 10922, "g1".to_string()),
        (10923, 16383, "g2".to_string()),
    ];
    assert_eq!(m.slots, want);
    m.validate().unwrap();
    assert_eq!(m.owner(0), Some("g0"));
    assert_eq!(m.owner(5461), Some("g1"));
    assert_eq!(m.owner(16383), Some("g2"));
    assert_eq!(m.owner(16384), None);
    assert_eq!(m.ranges_of("g1"), vec![(5461, 10922)]);
    assert_eq!(m.slots_owned("g2"), 5461);
}

#[test]
fn the_value_is_the_documented_json() {
    let m = ClusterMap::create(&names(2)).unwrap();
    let text = String::from_utf8(m.to_bytes()).unwrap();
    assert_eq!(
        text,
        r#"{"map_epoch":1,"groups":["g0","g1"],"slots":[[0,8191,"g0"],[8192,16383,"g1"]],"migrations":[]}"#
    );
    assert_eq!(ClusterMap::parse(text.as_bytes()).unwrap(), m);
    let record = MigrationRecord {
        id: "0123456789abcdef".into(),
        lo: 1,
        hi: 2,
        from: "g0".into(),
        to: "g1".into(),
        state: MigrationState::Aborted,
        reason: Some("cancelled".into()),
        started_at_ms: 5,
        finished_at_ms: Some(6),
        instances: 0,
        entries: 0,
        freeze_ms: 0,
        attempts: 0,
        bytes: 0,
    };
    let v = serde_json::to_value(&record).unwrap();
    assert_eq!(v["state"], "aborted");
}

#[test]
fn a_map_that_breaks_a_rule_is_refused_naming_it() {
    let parse = |s: &str| ClusterMap::parse(s.as_bytes()).unwrap_err();
    let base = |slots: &str| format!(r#"{{"map_epoch":3,"groups":["a","b"],"slots":{slots}}}"#);
    assert_eq!(
        parse(&base(r#"[[0,100,"a"]]"#)),
        MapError::Gap { slot: 101 }
    );
    assert_eq!(
        parse(&base(r#"[[1,16383,"a"]]"#)),
        MapError::Gap { slot: 0 }
    );
    assert_eq!(
        parse(&base(r#"[[0,10,"a"],[5,16383,"b"]]"#)),
        MapError::Overlap { lo: 5, hi: 16383 }
    );
    assert_eq!(
        parse(&base(r#"[[0,10,"a"],[11,16383,"a"]]"#)),
        MapError::NotMerged {
            group: "a".into(),
            at: 11
        }
    );
    assert_eq!(
        parse(&base(r#"[[0,10,"a"],[11,16383,"c"]]"#)),
        MapError::UnknownGroup("c".into())
    );
    assert_eq!(
        parse(&base(r#"[[0,16383,"a"],[16384,16384,"b"]]"#)),
        MapError::Overlap {
            lo: 16384,
            hi: 16384
        }
    );
    assert!(matches!(parse("{}"), MapError::Decode(_)));
    let dup = r#"{"map_epoch":1,"groups":["a","a"],"slots":[[0,16383,"a"]]}"#;
    assert_eq!(parse(dup), MapError::DuplicateGroup("a".into()));
    assert!(ClusterMap::parse(base(r#"[[0,9,"b"],[10,16383,"a"]]"#).as_bytes()).is_ok());
}

#[test]
fn adding_a_group_bumps_the_epoch_once() {
    let m = ClusterMap::create(&names(2)).unwrap();
    let (added, yes) = m.with_group_added("g9").unwrap();
    assert!(yes);
    assert_eq!(added.map_epoch, 2);
    assert_eq!(added.groups, vec!["g0", "g1", "g9"]);
    assert!(added.ranges_of("g9").is_empty());
    added.validate().unwrap();
    let (again, yes) = added.with_group_added("g9").unwrap();
    assert!(!yes);
    assert_eq!(again, added);
    assert!(m.with_group_added("no way").is_err());
}

#[test]
fn moving_a_range_splits_and_merges() {
    let m = ClusterMap::create(&names(2)).unwrap();
    let moved = m.with_range_moved(100, 199, "g1").unwrap();
    assert_eq!(moved.map_epoch, 2);
    assert_eq!(
        moved.slots,
        vec![
            (0, 99, "g0".into()),
            (100, 199, "g1".into()),
            (200, 8191, "g0".into()),
            (8192, 16383, "g1".into())
        ]
    );
    let back = moved.with_range_moved(100, 199, "g0").unwrap();
    assert_eq!(back.slots, m.slots, "merged again");
    let edge = m.with_range_moved(8000, 8191, "g1").unwrap();
    assert_eq!(
        edge.slots,
        vec![(0, 7999, "g0".into()), (8000, 16383, "g1".into())]
    );
    assert!(m.with_range_moved(5, 4, "g1").is_err());
    assert!(m.with_range_moved(0, 16384, "g1").is_err());
    assert_eq!(
        m.with_range_moved(0, 1, "zz"),
        Err(MapError::UnknownGroup("zz".into()))
    );
}

#[test]
fn rebalance_moves_the_highest_slots_to_the_first_groups_short_of_their_share() {
    let m = ClusterMap::create(&names(2)).unwrap();
    let (m, _) = m.with_group_added("g2").unwrap();
    let plan = m.rebalance_plan();
    // Shares: g0 5462, g1 5461, g2 5461 (the extra one to the first name).
    assert_eq!(
        plan,
        vec![
            Move {
                lo: 5462,
                hi: 8191,
                from: "g0".into(),
                to: "g2".into()
            },
            Move {
                lo: 13653,
                hi: 16383,
                from: "g1".into(),
                to: "g2".into()
            },
        ]
    );
    let done = apply(&m, &plan);
    assert!(
        done.rebalance_plan().is_empty(),
        "balanced: nothing to move"
    );
    let three = ClusterMap::create(&names(3)).unwrap();
    assert_eq!(
        three.slots_owned("g1"),
        5462,
        "Redis's split gives the middle the extra"
    );
    assert!(
        three.rebalance_plan().is_empty(),
        "a created map is balanced"
    );
}

fn apply(m: &ClusterMap, plan: &[Move]) -> ClusterMap {
    let mut m = m.clone();
    for step in plan {
        assert!(
            (step.lo..=step.hi).all(|s| m.owner(s) == Some(step.from.as_str())),
            "each move is one range its source owns when it runs: {step:?}"
        );
        m = m.with_range_moved(step.lo, step.hi, &step.to).unwrap();
    }
    m
}

/// A valid map of `n` groups built by moving random ranges about.
fn arbitrary_map() -> impl Strategy<Value = ClusterMap> {
    (
        1usize..7,
        prop::collection::vec((0u16..=SLOT_MAX, 0u16..=SLOT_MAX, 0usize..10), 0..12),
    )
        .prop_map(|(n, moves)| {
            let mut m = ClusterMap::create(&names(n)).unwrap();
            for (a, b, g) in moves {
                let g = format!("g{}", g % (n + 1));
                m = m.with_group_added(&g).unwrap().0;
                m = m.with_range_moved(a.min(b), a.max(b), &g).unwrap();
            }
            m
        })
}

proptest! {
    #[test]
    fn moves_keep_the_map_covering_and_merged(m in arbitrary_map()) {
        prop_assert_eq!(m.validate(), Ok(()));
        let total: u32 = m.groups.iter().map(|g| m.slots_owned(g)).sum();
        prop_assert_eq!(total, SLOTS);
        let round = ClusterMap::parse(&m.to_bytes()).unwrap();
        prop_assert_eq!(round, m);
    }

    #[test]
    fn a_rebalance_ends_at_every_share(m in arbitrary_map()) {
        let plan = m.rebalance_plan();
        let done = apply(&m, &plan);
        prop_assert_eq!(done.validate(), Ok(()));
        prop_assert!(done.is_balanced());
        prop_assert_eq!(plan.is_empty(), m.is_balanced());
        for (g, share) in done.shares().into_iter().filter(|_| !plan.is_empty()) {
            prop_assert_eq!(done.slots_owned(&g), share, "group {}", g);
        }
        prop_assert_eq!(done.map_epoch, m.map_epoch + plan.len() as u64);
    }

    #[test]
    fn create_splits_evenly(n in 1usize..40) {
        let m = ClusterMap::create(&names(n)).unwrap();
        prop_assert_eq!(m.validate(), Ok(()));
        for g in &m.groups {
            let k = m.slots_owned(g);
            prop_assert!(k == SLOTS / n as u32 || k == SLOTS / n as u32 + 1);
        }
    }
}
