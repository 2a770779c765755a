//! Atomic batches at the engine level: `decide_batch` against its overlay must agree, op for
//! op, with running the same ops one at a time; an abort changes nothing; the logged record
//! replays to the same state.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::{create_keyed, delete, event, keyed_event, Shard};
use crate::engine::{BatchOp, DecidedBatch, Decision, Engine, Entry, Replay};
use crate::Rejection;

/// One op of a decided batch, read back from the batch's record.
#[derive(Debug)]
enum Step {
    Write(Entry),
    Answer(Value),
}

/// The decided batch op by op: each answer, or the entry its record holds for the op. Also
/// checks the record is byte for byte the encoding of those entries as one `Entry::Batch`.
fn steps(decided: DecidedBatch) -> Vec<Step> {
    let bytes = decided.record.finish();
    let Ok(Entry::Batch { entries }) = Entry::decode(&bytes) else {
        panic!("not a batch record: {bytes:?}");
    };
    assert_eq!(
        Entry::Batch {
            entries: entries.clone()
        }
        .to_bytes(),
        bytes
    );
    let mut entries = entries.into_iter();
    let steps: Vec<Step> = (decided.answers.into_iter())
        .map(|a| match a {
            Some(v) => Step::Answer(v),
            None => Step::Write(entries.next().expect("an entry per write")),
        })
        .collect();
    assert!(entries.next().is_none(), "entries beyond the writes");
    steps
}

const IDS: [&str; 3] = ["{t}:a", "{t}:b", "{t}:c"];
const EVENTS: [&str; 5] = ["pay", "ship", "deliver", "note", "cancel"];
const KEYS: [Option<&str>; 3] = [None, Some("k1"), Some("k2")];

fn arb_op() -> impl Strategy<Value = BatchOp<'static>> {
    let id = proptest::sample::select(IDS.to_vec());
    let key = proptest::sample::select(KEYS.to_vec());
    prop_oneof![
        (id.clone(), key.clone(), 0i64..20)
            .prop_map(|(id, key, total)| BatchOp::Write(create_keyed(id, total, key))),
        (
            id.clone(),
            proptest::sample::select(EVENTS.to_vec()),
            key,
            0i64..20,
            any::<bool>()
        )
            .prop_map(|(id, ev, key, amount, borrowed)| {
                let payload = Some(json!({ "amount": amount }));
                let cmd = match key {
                    Some(k) => keyed_event(id, ev, payload, k),
                    None => event(id, ev, payload),
                };
                // Both forms the engine takes: the server's borrowed one, and the owned one.
                match cmd.event() {
                    Some(ev) if borrowed => BatchOp::Event(ev.into_owned()),
                    _ => BatchOp::Write(cmd),
                }
            }),
        id.clone().prop_map(|id| BatchOp::Write(delete(id))),
        id.prop_map(|id| BatchOp::Get { id: id.into() }),
    ]
}

/// The reference: the ops one at a time on a copy of the engine, all at `offset`. Returns
/// the results, or the index and error of the first failure.
fn one_at_a_time(
    engine: &mut Engine,
    ops: &[BatchOp<'_>],
    now: u64,
    offset: u64,
) -> Result<Vec<Value>, (usize, Rejection)> {
    let mut results = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let result = match op {
            BatchOp::Get { id } => engine.instance_json(id).ok_or_else(|| {
                Rejection::new(
                    crate::ErrorCode::InstanceNotFound,
                    format!("no instance with id {id:?}"),
                )
                .with("id", id.as_str())
            }),
            BatchOp::Event(ev) => {
                let view = engine.view(&ev.instance_id);
                match engine.decide_apply_event(view, ev, now) {
                    Ok(Decision::Answer(v)) => Ok(v),
                    Ok(Decision::Write(e)) => Ok(engine.apply(e, offset, true).unwrap()),
                    Err(rej) => Err(rej),
                }
            }
            BatchOp::Write(cmd) => match engine.decide(cmd, now) {
                Ok(Decision::Answer(v)) => Ok(v),
                Ok(Decision::Write(e)) => Ok(engine.apply(e, offset, true).unwrap()),
                Err(rej) => Err(rej),
            },
        };
        results.push(result.map_err(|rej| (i, rej))?);
    }
    Ok(results)
}

/// Everything observable about the engine's instances.
fn observable(engine: &Engine) -> Vec<Value> {
    IDS.iter()
        .map(|id| match engine.instance_json(id) {
            Some(v) => json!([v, engine.history(id, 0, 100).unwrap()]),
            None => Value::Null,
        })
        .collect()
}

/// A shard with the order machine and some instances in various states.
fn seeded() -> Shard {
    let mut s = Shard::with_order();
    s.ok(create_keyed("{t}:a", 10, Some("k1")));
    s.ok(create_keyed("{t}:b", 5, None));
    s.ok(keyed_event(
        "{t}:b",
        "pay",
        Some(json!({"amount": 5})),
        "k2",
    ));
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_batch_is_its_ops_one_at_a_time_or_nothing(
        ops in proptest::collection::vec(arb_op(), 1..8)
    ) {
        let shard = seeded();
        let (now, offset) = (shard.now_ms + 1, shard.next_offset);
        let before = observable(&shard.engine);
        let mut reference = shard.engine.clone();
        let expected = one_at_a_time(&mut reference, &ops, now, offset);
        let decided = shard.engine.decide_batch(&ops, now, offset);
        // Deciding never changes the engine.
        prop_assert_eq!(&observable(&shard.engine), &before);
        match (expected, decided) {
            (Err((index, rej)), Err(abort)) => {
                prop_assert_eq!(abort.index, index);
                prop_assert_eq!(abort.error, rej);
            }
            (Ok(results), Ok(decided)) => {
                let steps = steps(decided);
                let mut engine = shard.engine.clone();
                let mut answers = Vec::new();
                let mut entries = Vec::new();
                for step in steps {
                    match step {
                        Step::Answer(v) => answers.push(Some(v)),
                        Step::Write(e) => {
                            answers.push(None);
                            entries.push(e);
                        }
                    }
                }
                let record = Entry::Batch { entries };
                // Through the codec, as the log holds it.
                let logged = Entry::decode(&record.to_bytes()).unwrap();
                prop_assert_eq!(&logged, &record);
                let applied = engine.apply(logged, offset, true).unwrap();
                let mut applied = applied.as_array().unwrap().iter().cloned();
                let got: Vec<Value> = answers
                    .into_iter()
                    .map(|a| a.or_else(|| applied.next()).unwrap())
                    .collect();
                prop_assert_eq!(&got, &results);
                prop_assert_eq!(observable(&engine), observable(&reference));
                prop_assert_eq!(engine.stats(), reference.stats());
                // Recovery: the same log, replayed (the batch record is a barrier).
                let mut replayed = Engine::new();
                let mut replay = Replay::new();
                for (at, e) in &shard.log {
                    replay.push(&mut replayed, *at, &e.to_bytes()).unwrap();
                }
                replay.push(&mut replayed, offset, &record.to_bytes()).unwrap();
                replay.flush(&mut replayed).unwrap();
                prop_assert_eq!(observable(&replayed), observable(&reference));
            }
            (expected, decided) => {
                prop_assert!(false, "reference {:?}, batch {:?}", expected, decided);
            }
        }
    }
}

#[test]
fn later_ops_see_earlier_ones_and_keys_repeat_inside_a_batch() {
    let shard = seeded();
    let ops = vec![
        BatchOp::Write(create_keyed("{t}:n", 3, Some("c"))),
        BatchOp::Write(keyed_event("{t}:n", "pay", Some(json!({"amount": 3})), "p")),
        BatchOp::Write(keyed_event("{t}:n", "pay", Some(json!({"amount": 3})), "p")),
        BatchOp::Write(create_keyed("{t}:n", 3, Some("c"))),
        BatchOp::Get { id: "{t}:n".into() },
    ];
    let steps = steps(shard.engine.decide_batch(&ops, 7, 42).unwrap());
    assert!(matches!(steps[0], Step::Write(Entry::Create { .. })));
    assert!(matches!(steps[1], Step::Write(Entry::Apply { .. })));
    let Step::Answer(replay) = &steps[2] else {
        panic!("{:?}", steps[2])
    };
    assert_eq!(replay["applied"], false);
    assert_eq!(replay["to_state"], "paid");
    assert_eq!(replay["wal_offset"], 42);
    let Step::Answer(created) = &steps[3] else {
        panic!("{:?}", steps[3])
    };
    assert_eq!(created["applied"], false);
    assert_eq!(created["state"], "new");
    let Step::Answer(got) = &steps[4] else {
        panic!("{:?}", steps[4])
    };
    assert_eq!(got["state"], "paid");
    assert_eq!(got["event_count"], 1);
}

#[test]
fn a_delete_then_a_use_fails_at_the_use() {
    let shard = seeded();
    let ops = vec![
        BatchOp::Write(delete("{t}:a")),
        BatchOp::Write(keyed_event("{t}:a", "pay", None, "k1")),
    ];
    let abort = shard.engine.decide_batch(&ops, 7, 42).unwrap_err();
    assert_eq!(abort.index, 1);
    assert_eq!(abort.error.code, crate::ErrorCode::InstanceNotFound);
    // Recreated after the delete: the old creation key no longer answers.
    let ops = vec![
        BatchOp::Write(delete("{t}:a")),
        BatchOp::Write(create_keyed("{t}:a", 1, Some("k1"))),
    ];
    let steps = steps(shard.engine.decide_batch(&ops, 7, 42).unwrap());
    assert!(matches!(steps[1], Step::Write(Entry::Create { .. })));
}
