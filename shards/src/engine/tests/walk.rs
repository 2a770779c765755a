//! The snapshot walk (`engine::snapshot::walk`): whatever writes land between its slices, the
//! snapshot it writes loads as exactly the state at its offset, and that state plus the log
//! after the offset is the engine's state at the end.

use proptest::prelude::*;
use serde_json::json;

use super::{create, delete, event, order_machine, put, Shard};
use crate::engine::{BatchOp, Engine, Entry, SliceBudget, WalkProgress, SNAPSHOT_FORMAT};

/// Ids that writes create, delete and re-create, so the walk meets all three.
const IDS: [&str; 5] = ["a", "b", "c", "d", "e"];
const EVENTS: [&str; 5] = ["pay", "ship", "deliver", "note", "cancel"];

#[derive(Debug, Clone)]
enum Write {
    Create(usize, i64),
    Event(usize, usize, i64),
    Delete(usize),
    /// An atomic batch: (create?, id, amount) per op, decided together.
    Batch(Vec<(bool, usize, i64)>),
    /// A new version of the machine.
    Machine,
    /// A replication epoch entry.
    Epoch,
    /// Creates this many fresh instances: the table grows (into a new table, entries moving
    /// into it only while no walk runs).
    Grow(usize),
}

#[derive(Debug, Clone)]
enum Step {
    Write(Write),
    /// A slice of at most this many instances.
    Slice(usize),
}

fn write() -> impl Strategy<Value = Write> {
    let id = 0..IDS.len();
    prop_oneof![
        3 => (id.clone(), 0i64..20).prop_map(|(i, t)| Write::Create(i, t)),
        6 => (id.clone(), 0..EVENTS.len(), 0i64..30).prop_map(|(i, e, a)| Write::Event(i, e, a)),
        2 => id.clone().prop_map(Write::Delete),
        2 => prop::collection::vec((any::<bool>(), id, 0i64..30), 1..5).prop_map(Write::Batch),
        1 => Just(Write::Machine),
        1 => Just(Write::Epoch),
        1 => (1usize..40).prop_map(Write::Grow),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => write().prop_map(Step::Write),
        2 => (1usize..6).prop_map(Step::Slice),
    ]
}

struct Run {
    shard: Shard,
    machines: u32,
    epochs: u64,
    grown: usize,
}

impl Run {
    fn new() -> Run {
        Run {
            shard: Shard::with_order(),
            machines: 1,
            epochs: 0,
            grown: 0,
        }
    }

    /// Applies `w`; refusals (an unknown id, a wrong state) change nothing, as on a shard.
    fn write(&mut self, w: &Write) {
        let s = &mut self.shard;
        match w {
            Write::Create(i, total) => drop(s.exec(create(IDS[*i], *total))),
            Write::Event(i, e, amount) => {
                drop(s.exec(event(IDS[*i], EVENTS[*e], Some(json!({"amount": amount})))))
            }
            Write::Delete(i) => drop(s.exec(delete(IDS[*i]))),
            Write::Batch(ops) => self.batch(ops),
            Write::Machine => {
                self.machines += 1;
                s.ok(put("order", self.machines, order_machine()));
            }
            Write::Epoch => {
                self.epochs += 1;
                self.log_apply(Entry::Epoch { epoch: self.epochs });
            }
            Write::Grow(n) => {
                for _ in 0..*n {
                    self.grown += 1;
                    let id = format!("g{}", self.grown);
                    self.shard.ok(create(&id, 1));
                }
            }
        }
    }

    fn batch(&mut self, ops: &[(bool, usize, i64)]) {
        let ops: Vec<BatchOp> = (ops.iter())
            .map(|&(new, i, n)| match new {
                true => BatchOp::Write(create(IDS[i], n)),
                false => BatchOp::Write(event(IDS[i], "pay", Some(json!({"amount": n})))),
            })
            .collect();
        let s = &mut self.shard;
        s.now_ms += 1;
        if let Ok(decided) = s.engine.decide_batch(&ops, s.now_ms, s.next_offset) {
            if let Ok(entry) = Entry::decode(&decided.record.finish()) {
                self.log_apply(entry);
            }
        }
    }

    fn log_apply(&mut self, entry: Entry) {
        let s = &mut self.shard;
        let offset = s.next_offset;
        s.next_offset += 1;
        s.log.push((offset, entry.clone()));
        s.engine.apply(entry, offset, false);
    }

    fn head(&self) -> u64 {
        self.shard.next_offset - 1
    }
}

/// Feeds `payload` to a loader in chunks of `chunk` bytes.
fn load(payload: &[u8], chunk: usize) -> Result<Engine, String> {
    let mut loader = crate::engine::SnapshotLoader::new(SNAPSHOT_FORMAT, payload.len() as u64)?;
    for part in payload.chunks(chunk.max(1)) {
        loader.feed(part)?;
    }
    loader.finish()
}

fn slice(records: usize) -> SliceBudget {
    SliceBudget {
        records,
        bytes: usize::MAX,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn writes_between_slices_leave_the_snapshot_at_its_offset(
        before in prop::collection::vec(write(), 0..40),
        steps in prop::collection::vec(step(), 0..80),
        chunk in 1usize..300,
    ) {
        let mut run = Run::new();
        for w in &before {
            run.write(w);
        }
        let offset = run.head();
        let at_offset = run.shard.engine.snapshot();
        let walk = run.shard.engine.snapshot_begin(offset, usize::MAX);
        let mut payload = Vec::new();
        for step in &steps {
            match step {
                Step::Write(w) => run.write(w),
                Step::Slice(n) => {
                    let progress = run.shard.engine.snapshot_step(walk, slice(*n), usize::MAX);
                    prop_assert!(!matches!(progress, WalkProgress::Abandoned(_) | WalkProgress::Gone));
                }
            }
            prop_assert!(run.shard.engine.snapshot_take(walk, &mut payload));
        }
        while let WalkProgress::Walking = run.shard.engine.snapshot_step(walk, slice(3), usize::MAX) {}
        prop_assert!(run.shard.engine.snapshot_take(walk, &mut payload));
        run.shard.engine.snapshot_end();

        let mut loaded = load(&payload, chunk).map_err(TestCaseError::fail)?;
        let got = String::from_utf8(loaded.snapshot()).unwrap_or_default();
        prop_assert_eq!(got, String::from_utf8(at_offset).unwrap_or_default());
        // The snapshot and the log after its offset give the state at the end.
        for (o, entry) in run.shard.log.iter().filter(|(o, _)| *o > offset) {
            loaded.apply(entry.clone(), *o, false);
        }
        prop_assert_eq!(loaded.snapshot(), run.shard.engine.snapshot());
        prop_assert_eq!(loaded.stats(), run.shard.engine.stats());
        prop_assert_eq!(loaded.epochs(), run.shard.engine.epochs());
    }
}

#[test]
fn a_walk_over_the_pending_limit_is_abandoned_and_writes_go_on() {
    let mut run = Run::new();
    run.write(&Write::Grow(50));
    let walk = run.shard.engine.snapshot_begin(run.head(), 600);
    // Every event reaches an instance the walk has not: each is written before it changes.
    let mut abandoned = None;
    for k in 1..=50 {
        let id = format!("g{k}");
        run.shard.ok(event(&id, "cancel", None));
        if let WalkProgress::Abandoned(why) = run.shard.engine.snapshot_step(walk, slice(0), 0) {
            abandoned = Some((k, why));
            break;
        }
    }
    let (k, why) = abandoned.expect("the walk gave up");
    assert!(
        k < 50 && why.contains("over the limit of 600"),
        "{k}: {why}"
    );
    assert_eq!(
        run.shard.engine.snapshot_pending(),
        0,
        "its bytes are freed"
    );
    run.shard.engine.snapshot_end();
    assert_eq!(run.shard.engine.snapshot_walking(), None);
    // A fresh walk of the same engine completes.
    let payload = run.shard.engine.snapshot_items(run.head());
    let loaded = load(&payload, 1 << 20).unwrap();
    assert_eq!(loaded.snapshot(), run.shard.engine.snapshot());
}

#[test]
fn a_walk_sized_from_the_projection_holds_a_hot_set_written_ahead_of_it_and_completes() {
    let mut run = Run::new();
    run.write(&Write::Grow(50));
    let offset = run.head();
    let at_offset = run.shard.engine.snapshot();
    let whole = run.shard.engine.snapshot_items(offset).len() as u64;
    // A first walk with a small limit: every instance changes before the walk reaches it.
    let walk = run.shard.engine.snapshot_begin(offset, 600);
    let mut projected = 0;
    for k in 1..=50 {
        run.shard.ok(event(&format!("g{k}"), "cancel", None));
        if let WalkProgress::Abandoned(_) = run.shard.engine.snapshot_step(walk, slice(0), 0) {
            projected = run.shard.engine.snapshot_projected();
            break;
        }
    }
    run.shard.engine.snapshot_end();
    assert!(
        projected >= whole * 9 / 10 && projected <= whole * 11 / 10,
        "projected {projected} for a snapshot of {whole} bytes"
    );
    // Sized from it, the same burst is held whole, taken a chunk at a time, and loads as the
    // state at its offset.
    let mut run = Run::new();
    run.write(&Write::Grow(50));
    let offset = run.head();
    let limit = (projected + projected / 4) as usize;
    let walk = run.shard.engine.snapshot_begin(offset, limit);
    for k in 1..=50 {
        run.shard.ok(event(&format!("g{k}"), "cancel", None));
    }
    assert_eq!(
        run.shard.engine.snapshot_walking(),
        Some(offset),
        "not abandoned"
    );
    let mut progress = WalkProgress::Walking;
    while progress == WalkProgress::Walking {
        progress = run.shard.engine.snapshot_step(walk, slice(7), usize::MAX);
    }
    assert_eq!(
        progress,
        WalkProgress::Done {
            instances: 50,
            by_writes: 50
        }
    );
    let mut payload = Vec::new();
    while run.shard.engine.snapshot_pending() > 0 {
        assert!(run.shard.engine.snapshot_take_chunk(walk, &mut payload));
    }
    run.shard.engine.snapshot_end();
    assert_eq!(load(&payload, 1 << 20).unwrap().snapshot(), at_offset);
}

#[test]
fn the_table_grows_under_a_walk_without_moving_what_the_walk_visits() {
    let mut run = Run::new();
    run.write(&Write::Grow(3));
    let before = run.shard.engine.snapshot();
    let offset = run.head();
    let walk = run.shard.engine.snapshot_begin(offset, usize::MAX);
    let buckets = run.shard.engine.instances.buckets();
    let map = &run.shard.engine.instances;
    let pinned: Vec<(String, Option<usize>)> = map
        .records()
        .map(|r| r.instance.id.to_string())
        .map(|id| (id.clone(), map.bucket_of(&id)))
        .collect();
    assert_eq!(pinned.len(), 3);
    run.write(&Write::Grow(500));
    for (id, bucket) in &pinned {
        assert_eq!(
            run.shard.engine.instances.bucket_of(id),
            *bucket,
            "{id}: the layout held"
        );
    }
    assert!(
        run.shard.engine.instances.buckets() > buckets,
        "new tables numbered past the walk's"
    );
    assert_eq!(run.shard.engine.instance_count(), 503);
    assert!(run.shard.engine.instance("g400").is_some());
    run.shard.ok(delete("g450"));
    let mut payload = Vec::new();
    while let WalkProgress::Walking = run.shard.engine.snapshot_step(walk, slice(1), usize::MAX) {}
    run.shard.engine.snapshot_take(walk, &mut payload);
    run.shard.engine.snapshot_end();
    assert!(
        run.shard.engine.instances.growing(),
        "nothing moved during the walk"
    );
    run.write(&Write::Grow(200));
    assert!(
        !run.shard.engine.instances.growing(),
        "the writes after the walk moved everything into the newest table"
    );
    assert_eq!(run.shard.engine.instance_count(), 702);
    assert!(run.shard.engine.instance("g400").is_some());
    assert!(run.shard.engine.instance("g1").is_some());
    assert_eq!(load(&payload, 7).unwrap().snapshot(), before);
}

#[test]
fn an_ended_or_replaced_walk_is_gone() {
    let mut run = Run::new();
    let walk = run.shard.engine.snapshot_begin(run.head(), usize::MAX);
    let again = run.shard.engine.snapshot_begin(run.head(), usize::MAX);
    assert_ne!(walk, again);
    assert_eq!(
        run.shard.engine.snapshot_step(walk, slice(1), usize::MAX),
        WalkProgress::Gone
    );
    assert!(!run.shard.engine.snapshot_take(walk, &mut Vec::new()));
    run.shard.engine = Engine::new();
    assert_eq!(
        run.shard.engine.snapshot_step(again, slice(1), usize::MAX),
        WalkProgress::Gone
    );
}

#[test]
fn damaged_payloads_are_refused_with_a_reason() {
    let mut run = Run::new();
    for (i, w) in [Write::Create(0, 5), Write::Event(0, 0, 9), Write::Epoch]
        .iter()
        .enumerate()
    {
        run.write(w);
        assert!(i < 3);
    }
    let payload = run.shard.engine.snapshot_items(run.head());
    assert!(load(&payload, 5).is_ok());
    assert!(load(&payload[..payload.len() - 1], 5)
        .unwrap_err()
        .contains("inside an item"));
    let mut cut_end = payload.clone();
    cut_end.truncate(payload.len() - 3);
    assert!(load(&cut_end, 5).is_err());
    // The meta item announces one instance; a second meta-less payload is refused.
    assert!(load(&payload[2..], 64).is_err());
}

#[test]
fn a_format_1_payload_still_loads_through_the_loader() {
    let mut run = Run::new();
    for w in [
        Write::Create(0, 5),
        Write::Event(0, 0, 9),
        Write::Epoch,
        Write::Grow(3),
    ] {
        run.write(&w);
    }
    let json = run.shard.engine.snapshot();
    let mut loader = crate::engine::SnapshotLoader::new(1, json.len() as u64).unwrap();
    for part in json.chunks(10) {
        loader.feed(part).unwrap();
    }
    let loaded = loader.finish().unwrap();
    assert_eq!(loaded.snapshot(), json);
    assert!(crate::engine::SnapshotLoader::new(3, 0).is_err());
}

/// Speeds of the walk and the loader on 1M instances with one event each (prints; run with
/// `cargo test --release -p smdb-shards -- --ignored snapshot_speed --nocapture`).
#[test]
#[ignore]
fn snapshot_speed() {
    use std::time::Instant;
    let n: u64 = std::env::var("SNAP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut run = Run::new();
    let t = Instant::now();
    for k in 0..n {
        let id = format!("b12bbadf9-{k}");
        run.log_apply(Entry::Create {
            id: id.clone(),
            machine: "order".into(),
            version: 1,
            state: "new".into(),
            context: super::obj(json!({"n": 0})),
            idempotency_key: None,
            at_ms: 1_769_860_800_000 + k,
        });
        let ev = crate::engine::EventRef {
            instance_id: &id,
            event: "note",
            from: "new",
            to: "new",
            payload: Some(r#"{"n":1}"#),
            idempotency_key: None,
            at_ms: 1_769_860_800_000 + k,
            machine: Some("order"),
            version: Some(1),
            timer: false,
        };
        run.log_apply(ev.to_entry());
    }
    run.shard.log.clear();
    eprintln!("built {n} in {:?}", t.elapsed());
    let e = &mut run.shard.engine;
    let repeat: usize = std::env::var("SNAP_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for _ in 1..repeat {
        let walk = e.snapshot_begin(2 * n + 1, usize::MAX);
        let mut out = Vec::new();
        while e.snapshot_step(walk, slice(256), usize::MAX) == WalkProgress::Walking {
            e.snapshot_take(walk, &mut out);
            out.clear();
        }
        e.snapshot_end();
    }
    let t = Instant::now();
    let walk = e.snapshot_begin(2 * n + 1, usize::MAX);
    let (mut longest, mut slices) = (std::time::Duration::ZERO, 0);
    let mut payload = Vec::new();
    loop {
        let s = Instant::now();
        let p = e.snapshot_step(walk, slice(256), usize::MAX);
        e.snapshot_take(walk, &mut payload);
        longest = longest.max(s.elapsed());
        slices += 1;
        if p != WalkProgress::Walking {
            break;
        }
    }
    e.snapshot_end();
    eprintln!(
        "walk: {:?}, {} bytes ({:.1} per instance), {slices} slices of 256, longest {:?}",
        t.elapsed(),
        payload.len(),
        payload.len() as f64 / n as f64,
        longest
    );
    let mut kept = Vec::new();
    for _ in 1..repeat {
        let t = Instant::now();
        kept.push(load(&payload, 512 << 10).unwrap());
        eprintln!("load v2 (repeat): {:?}", t.elapsed());
    }
    let t = Instant::now();
    let loaded = load(&payload, 512 << 10).unwrap();
    eprintln!("load v2: {:?}", t.elapsed());
    if std::env::var("SNAP_SKIP_JSON").is_ok() {
        std::process::exit(0);
    }
    assert_eq!(loaded.instance_count(), n as usize);
    drop(loaded);
    let t = Instant::now();
    let json = run.shard.engine.snapshot();
    eprintln!("v1 json: {:?}, {} bytes", t.elapsed(), json.len());
    let t = Instant::now();
    let back = Engine::restore(&json).unwrap();
    eprintln!("restore v1: {:?}", t.elapsed());
    assert_eq!(back.instance_count(), n as usize);
}
