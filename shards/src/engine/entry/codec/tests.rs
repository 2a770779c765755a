use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::engine::{Entry, JsonText};

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn samples() -> Vec<Entry> {
    vec![
        Entry::PutMachine {
            machine: "order".into(),
            version: 3,
            definition: json!({"initial": "new", "states": ["new", "paid"]}),
            checksum: "00ff00ff".into(),
            at_ms: 1_700_000_000_000,
        },
        Entry::Create {
            id: "o-1".into(),
            machine: "order".into(),
            version: 3,
            state: "new".into(),
            context: obj(json!({"total": 10, "who": "é"})),
            idempotency_key: Some("k1".into()),
            at_ms: 5,
        },
        Entry::Apply {
            instance_id: "o-1".into(),
            event: "pay".into(),
            from: "new".into(),
            to: "paid".into(),
            payload: Some(JsonText::from_map(&obj(json!({"amount": 10})))),
            idempotency_key: None,
            at_ms: u64::MAX,
            machine: Some("order".into()),
            version: Some(u32::MAX),
            timer: false,
        },
        Entry::Apply {
            instance_id: String::new(),
            event: "e".into(),
            from: "a".into(),
            to: "a".into(),
            payload: None,
            idempotency_key: Some("k".into()),
            at_ms: 0,
            machine: None,
            version: None,
            timer: false,
        },
        Entry::Delete {
            id: "o-1".into(),
            at_ms: 128,
            machine: None,
            reason: None,
        },
        Entry::Delete {
            id: "o-2".into(),
            at_ms: 129,
            machine: Some("order".into()),
            reason: Some(crate::engine::DeleteReason::Retention),
        },
        Entry::Delete {
            id: "o-3".into(),
            at_ms: 130,
            machine: Some("order".into()),
            reason: Some(crate::engine::DeleteReason::Delete),
        },
        Entry::Migrate {
            id: "o-1".into(),
            machine: "order".into(),
            from_version: 1,
            to_version: u32::MAX,
            from_state: "new".into(),
            to_state: "paid".into(),
            at_ms: 131,
        },
        Entry::Delete {
            id: "o-4".into(),
            at_ms: 132,
            machine: Some("order".into()),
            reason: Some(crate::engine::DeleteReason::Moved),
        },
        Entry::Import {
            move_id: u64::MAX,
            lo: 0,
            hi: 16383,
            id: "{o-1}:pay".into(),
            image: Some(r#"{"instance":{"id":"{o-1}:pay"}}"#.into()),
            at_ms: 133,
        },
        Entry::Import {
            move_id: 1,
            lo: 340,
            hi: 340,
            id: "o-2".into(),
            image: None,
            at_ms: 134,
        },
        Entry::MoveIn {
            move_id: 1,
            lo: 128,
            hi: 16383,
            map_epoch: u64::MAX,
            at_ms: 135,
        },
        Entry::DropStaged {
            move_id: 300,
            at_ms: 136,
        },
    ]
}

#[test]
fn every_kind_round_trips_in_binary() {
    for e in samples() {
        let bytes = e.to_bytes();
        assert_ne!(bytes[0], b'{');
        assert_eq!(Entry::decode(&bytes), Ok(e.clone()), "{bytes:?}");
    }
}

#[test]
fn format_1_json_entries_still_decode() {
    for e in samples() {
        let json = serde_json::to_vec(&e).unwrap();
        assert_eq!(Entry::decode(&json), Ok(e));
    }
    // A record as a format-1 server wrote it.
    let old = br#"{"k":"apply","instance_id":"o","event":"pay","from":"new","to":"paid","payload":{"amount":3},"at_ms":9}"#;
    let Ok(Entry::Apply { payload, .. }) = Entry::decode(old) else {
        panic!("old apply entry does not decode");
    };
    assert_eq!(
        payload.map(|p| p.as_str().to_string()),
        Some(r#"{"amount":3}"#.into())
    );
}

#[test]
fn every_truncation_and_trailing_byte_is_an_error() {
    for e in samples() {
        let bytes = e.to_bytes();
        for cut in 0..bytes.len() {
            match Entry::decode(&bytes[..cut]) {
                Err(_) => {}
                // A delete cut where its optional machine and reason begin is a whole delete
                // without them (as DELETE_INSTANCE writes it).
                Ok(Entry::Delete { machine: None, .. })
                    if matches!(
                        e,
                        Entry::Delete {
                            machine: Some(_),
                            ..
                        }
                    ) => {}
                Ok(other) => panic!("{e:?} cut at {cut} decodes as {other:?}"),
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let err = Entry::decode(&longer).unwrap_err();
        assert_eq!(err.at, bytes.len());
    }
}

#[test]
fn bad_fields_name_their_position() {
    assert_eq!(Entry::decode(&[12]).unwrap_err().at, 0);
    // A slot out of 16 bits.
    assert!((Entry::decode(&[9, 1, 1, 0x80, 0x80, 0x04, 0, 0])
        .unwrap_err()
        .what)
        .contains("16 bits"));
    // Delete with a presence-free layout but a length running past the end.
    let err = Entry::decode(&[4, 1, 50, b'x']).unwrap_err();
    assert_eq!(err.at, 3);
    // A string that is not UTF-8.
    assert!(Entry::decode(&[4, 1, 1, 0xFF]).is_err());
    // An integer of 11 bytes.
    let mut long = vec![4];
    long.extend_from_slice(&[0xFF; 10]);
    long.push(0);
    assert!(Entry::decode(&long).is_err());
    // A bad presence byte in an Apply.
    let mut apply = vec![3, 0];
    for s in ["i", "e", "a", "b"] {
        apply.push(1);
        apply.extend_from_slice(s.as_bytes());
    }
    apply.push(2);
    assert!(Entry::decode(&apply)
        .unwrap_err()
        .what
        .contains("presence byte"));
}

#[test]
fn event_records_are_told_apart_without_decoding() {
    for e in samples() {
        let is_event = matches!(e, Entry::Apply { .. });
        assert_eq!(Entry::record_is_event(&e.to_bytes()), is_event);
        assert_eq!(
            Entry::record_is_event(&serde_json::to_vec(&e).unwrap()),
            is_event
        );
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = Entry::decode(&bytes);
    }

    #[test]
    fn apply_entries_round_trip(
        id in ".{0,40}", event in "[a-z]{1,8}", from in "[a-z]{1,8}", to in "[a-z]{1,8}",
        at_ms in any::<u64>(), version in proptest::option::of(any::<u32>()),
        key in proptest::option::of(".{0,20}"), n in proptest::option::of(any::<i64>()),
    ) {
        let e = Entry::Apply {
            instance_id: id,
            event,
            from,
            to,
            payload: n.map(|n| JsonText::from_map(&obj(json!({"n": n, "s": "x\"y"})))),
            idempotency_key: key,
            at_ms,
            machine: version.map(|v| format!("m{v}")),
            version,
            timer: false,
        };
        prop_assert_eq!(Entry::decode(&e.to_bytes()), Ok(e));
    }
}

/// The example in docs/wal.md, byte for byte: the format is pinned, not just self-consistent.
#[test]
fn the_documented_example_encodes_exactly() {
    let e = Entry::Apply {
        instance_id: "o-1".into(),
        event: "pay".into(),
        from: "new".into(),
        to: "paid".into(),
        payload: Some(JsonText::from_map(&obj(json!({"amount": 10})))),
        idempotency_key: None,
        at_ms: 5,
        machine: Some("order".into()),
        version: Some(3),
        timer: false,
    };
    let mut want = vec![3, 5, 3];
    want.extend_from_slice(b"o-1\x03pay\x03new\x04paid\x00\x01\x05order\x01\x03\x01\x0d");
    want.extend_from_slice(br#"{"amount":10}"#);
    assert_eq!(e.to_bytes(), want);
}

/// An atomic batch: the create, apply and delete samples in one record.
fn batch_sample() -> Entry {
    Entry::Batch {
        entries: samples()
            .into_iter()
            .filter(|e| {
                matches!(
                    e,
                    Entry::Create { .. }
                        | Entry::Apply { .. }
                        | Entry::Delete { machine: None, .. }
                )
            })
            .collect(),
    }
}

#[test]
fn a_batch_round_trips_and_is_one_barrier_record() {
    let b = batch_sample();
    let bytes = b.to_bytes();
    assert_eq!(bytes[0], 5);
    assert_eq!(bytes[1], 4, "entry count");
    assert_eq!(Entry::decode(&bytes), Ok(b.clone()));
    assert_eq!(
        crate::engine::Record::decode(&bytes),
        Ok(crate::engine::Record::Entry(b.clone()))
    );
    assert!(Entry::record_is_batch(&bytes));
    assert!(!Entry::record_is_event(&bytes));
    // No instance id: replay treats the record as a barrier and keeps log order around it.
    assert_eq!(super::record_instance_id(&bytes), None);
    assert_eq!(b.instance_id(), None);
    // The JSON form (format 1 style) decodes too.
    let json = serde_json::to_vec(&b).unwrap();
    assert!(Entry::record_is_batch(&json));
    assert_eq!(Entry::decode(&json), Ok(b));
    let empty = Entry::Batch { entries: vec![] };
    assert_eq!(Entry::decode(&empty.to_bytes()), Ok(empty));
}

/// The layout of docs/wal.md: kind 5, count, then each entry as a length and its own bytes.
#[test]
fn the_documented_batch_example_encodes_exactly() {
    let b = Entry::Batch {
        entries: vec![
            Entry::Delete {
                id: "a".into(),
                at_ms: 5,
                machine: None,
                reason: None,
            },
            Entry::Delete {
                id: "b".into(),
                at_ms: 5,
                machine: None,
                reason: None,
            },
        ],
    };
    assert_eq!(b.to_bytes(), vec![5, 2, 4, 4, 5, 1, b'a', 4, 4, 5, 1, b'b']);
}

#[test]
fn damaged_batches_are_errors_not_panics() {
    let bytes = batch_sample().to_bytes();
    for cut in 1..bytes.len() {
        assert!(Entry::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    // A count far beyond the bytes present fails before allocating.
    assert!(Entry::decode(&[5, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]).is_err());
    // Nested batches and machine entries are refused inside a batch.
    let nested = Entry::Batch {
        entries: vec![Entry::Batch { entries: vec![] }],
    };
    let err = Entry::decode(&nested.to_bytes()).unwrap_err();
    assert!(err.what.contains("only create, apply and delete"), "{err}");
    let machine = Entry::Batch {
        entries: samples().into_iter().take(1).collect(),
    };
    assert!(Entry::decode(&machine.to_bytes()).is_err());
    // Bytes after the last entry of the batch.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(Entry::decode(&longer).is_err());
}

/// The timer flag: a trailing flags integer, written only when set, read back; entries without
/// it keep their old bytes; unknown flags are damage.
#[test]
fn timer_flag_is_a_trailing_integer_only_when_set() {
    let plain = Entry::Apply {
        instance_id: "p-1".into(),
        event: "expire".into(),
        from: "pending".into(),
        to: "expired".into(),
        payload: None,
        idempotency_key: None,
        at_ms: 7,
        machine: Some("payment".into()),
        version: Some(1),
        timer: false,
    };
    let mut fired = plain.clone();
    if let Entry::Apply { timer, .. } = &mut fired {
        *timer = true;
    }
    let (a, b) = (plain.to_bytes(), fired.to_bytes());
    assert_eq!(&b[..a.len()], &a[..]);
    assert_eq!(&b[a.len()..], &[1]);
    assert_eq!(Entry::decode(&b), Ok(fired.clone()));
    assert_eq!(Entry::decode(&a), Ok(plain.clone()));
    match crate::engine::Record::decode(&b) {
        Ok(crate::engine::Record::Event(ev)) => assert!(ev.timer),
        other => panic!("{other:?}"),
    }
    let mut unknown = a.clone();
    unknown.push(2);
    assert_eq!(Entry::decode(&unknown).unwrap_err().at, a.len());
    let json = serde_json::to_string(&fired).unwrap();
    assert!(json.contains(r#""timer":true"#), "{json}");
    assert!(!serde_json::to_string(&plain).unwrap().contains("timer"));
    assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), fired);
}

#[test]
fn utf8_takes_ascii_and_other_utf8_and_refuses_the_rest() {
    use super::utf8;
    assert_eq!(utf8(b""), Ok(""));
    assert_eq!(utf8(b"order-7"), Ok("order-7"));
    assert_eq!(utf8("é{t}".as_bytes()), Ok("é{t}"));
    assert!(utf8(b"a\xff").is_err());
    assert!(utf8(b"\xc3").is_err()); // a sequence cut short
}

#[test]
fn move_kinds_and_the_moved_reason_have_their_bytes() {
    use crate::engine::DeleteReason;
    let drop = Entry::DropStaged {
        move_id: 2,
        at_ms: 3,
    };
    assert_eq!(drop.to_bytes(), [10, 3, 2]);
    let tomb = Entry::Import {
        move_id: 2,
        lo: 1,
        hi: 5,
        id: "a".into(),
        image: None,
        at_ms: 3,
    };
    assert_eq!(tomb.to_bytes(), [8, 3, 2, 1, 5, 1, b'a', 0]);
    let switch = Entry::MoveIn {
        move_id: 2,
        lo: 1,
        hi: 5,
        map_epoch: 7,
        at_ms: 3,
    };
    assert_eq!(switch.to_bytes(), [9, 3, 2, 1, 5, 7]);
    let json = serde_json::to_string(&switch).unwrap();
    assert!(json.starts_with(r#"{"k":"move_in""#), "{json}");
    assert!(serde_json::to_string(&tomb)
        .unwrap()
        .starts_with(r#"{"k":"import""#));
    assert!(serde_json::to_string(&drop)
        .unwrap()
        .starts_with(r#"{"k":"drop_staged""#));
    assert!(drop.is_move() && tomb.is_move() && switch.is_move());
    let moved = |machine: Option<&str>| Entry::Delete {
        id: "a".into(),
        at_ms: 3,
        machine: machine.map(str::to_owned),
        reason: Some(DeleteReason::Moved),
    };
    assert_eq!(moved(Some("m")).to_bytes(), [4, 3, 1, b'a', 1, b'm', 3]);
    assert!(serde_json::to_string(&moved(Some("m")))
        .unwrap()
        .contains(r#""reason":"moved""#));
    // A reason without a machine keeps its reason (with an empty machine, read as none).
    assert_eq!(moved(None).to_bytes(), [4, 3, 1, b'a', 0, 3]);
    assert_eq!(Entry::decode(&moved(None).to_bytes()), Ok(moved(None)));
    // The move kinds are not instance records: replay applies each as a barrier.
    for e in [drop, tomb, switch] {
        assert_eq!(super::record_instance_id(&e.to_bytes()), None);
        assert!(!Entry::record_may_push(&e.to_bytes()));
    }
}

#[test]
fn slots_moved_out_has_its_bytes_and_reads_back_in_either_format() {
    let out = Entry::SlotsMovedOut {
        lo: 1,
        hi: 300,
        to: "g2".into(),
        map_epoch: 7,
        at_ms: 3,
    };
    let bytes = out.to_bytes();
    assert_eq!(bytes, [11, 3, 7, 1, 0xAC, 0x02, 2, b'g', b'2']);
    assert_eq!(Entry::decode(&bytes), Ok(out.clone()));
    let json = serde_json::to_vec(&out).unwrap();
    assert!(json.starts_with(br#"{"k":"slots_moved_out""#));
    assert_eq!(Entry::decode(&json), Ok(out.clone()));
    // Not an instance record (a barrier in replay), but a subscription reader looks at it.
    assert_eq!(super::record_instance_id(&bytes), None);
    assert!(Entry::record_may_push(&bytes) && Entry::record_may_push(&json));
    assert!(out.is_move() && out.instance_id().is_none());
    // Cut short: an error, not a different entry.
    assert!(Entry::decode(&bytes[..bytes.len() - 1]).is_err());
}
