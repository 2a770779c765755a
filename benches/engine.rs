//! Micro benches of a shard's CPU work per request (divan): guard evaluation, engine decide and
//! apply for APPLY_EVENT and CREATE_INSTANCE, log entry encoding and decoding, GET_INSTANCE's
//! JSON.
//!
//! `cargo bench --bench engine`; results and method in benches/RESULTS.md.

use std::cell::Cell;

use divan::{black_box, Bencher};
use serde_json::{json, Map, Value};
use shards::engine::guard::Guard;
use shards::engine::{
    batch_records, BatchOp, BatchRecord, Command, Decision, Engine, Entry, EventCommand, JsonText,
    Record, SNAPSHOT_FORMAT,
};

fn main() {
    divan::main();
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

const GUARDS: [(&str, &str); 3] = [
    ("simple", "payload.amount >= ctx.total"),
    (
        "typical",
        "ctx.status == 'open' && payload.amount >= ctx.total && has(ctx.customer)",
    ),
    (
        "list",
        "ctx.region in ['eu', 'us', 'apac', 'latam'] || (payload.priority > 3 && !ctx.frozen)",
    ),
];

#[divan::bench(args = ["simple", "typical", "list"])]
fn guard_eval(bencher: Bencher, name: &str) {
    let src = GUARDS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("true", |g| g.1);
    let Ok(guard) = Guard::compile(src) else {
        panic!("bench guard {src:?} must compile");
    };
    let ctx = obj(json!({"status": "open", "total": 30, "customer": {"id": 7},
                        "region": "latam", "frozen": false}));
    let payload = obj(json!({"amount": 30, "priority": 5}));
    bencher.bench(|| guard.holds(black_box(&ctx), black_box(&payload)));
}

/// An engine with the `order` machine (one guarded transition, one self-loop) and `n`
/// instances `o0..o{n-1}`.
fn engine_with(n: usize) -> Engine {
    let mut e = Engine::new();
    let def = json!({
        "states": ["new", "paid"], "initial": "new",
        "transitions": [
            {"from": "new", "event": "pay", "to": "paid", "guard": "payload.amount >= ctx.total"},
            {"from": "paid", "event": "touch", "to": "paid"}
        ]
    });
    let put = Command::PutMachine {
        machine: "order".into(),
        version: 1,
        definition: def,
    };
    write(&mut e, &put, 1);
    for i in 0..n {
        let create = Command::CreateInstance {
            id: format!("o{i}"),
            machine: "order".into(),
            version: 1,
            context: obj(json!({"total": 30})),
            idempotency_key: None,
        };
        write(&mut e, &create, i as u64 + 2);
    }
    e
}

/// decide + apply, as the shard does (panics: set-up commands are valid by construction).
fn write(e: &mut Engine, cmd: &Command, offset: u64) -> Option<Value> {
    match e.decide(cmd, 1_700_000_000_000) {
        Ok(Decision::Write(entry)) => e.apply(entry, offset, true),
        other => panic!("bench set-up command refused: {other:?}"),
    }
}

fn touch(id: &str) -> Command {
    Command::ApplyEvent {
        instance_id: id.into(),
        event: "touch".into(),
        payload: Some(obj(json!({"note": "x".repeat(64)}))),
        expected_state: None,
        expected_wal_offset: None,
        idempotency_key: None,
    }
}

/// APPLY_EVENT decide only: lookup, expectations, transition resolution, entry construction.
#[divan::bench]
fn apply_event_decide(bencher: Bencher) {
    let mut e = engine_with(1);
    write(&mut e, &pay("o0"), 100);
    let cmd = touch("o0");
    bencher.bench_local(|| e.decide(black_box(&cmd), 1_700_000_000_000).is_ok());
}

fn pay(id: &str) -> Command {
    Command::ApplyEvent {
        instance_id: id.into(),
        event: "pay".into(),
        payload: Some(obj(json!({"amount": 30}))),
        expected_state: None,
        expected_wal_offset: None,
        idempotency_key: None,
    }
}

/// APPLY_EVENT apply only (context merge, history push with its cap, result JSON), on one of
/// 10,000 instances in turn.
#[divan::bench]
fn apply_event_apply(bencher: Bencher) {
    let mut e = engine_with(10_000);
    for i in 0..10_000 {
        write(&mut e, &pay(&format!("o{i}")), 20_000 + i);
    }
    let entries: Vec<Entry> = (0..10_000)
        .map(
            |i| match e.decide(&touch(&format!("o{i}")), 1_700_000_000_000) {
                Ok(Decision::Write(entry)) => entry,
                other => panic!("touch refused: {other:?}"),
            },
        )
        .collect();
    let next = Cell::new(0usize);
    let offset = Cell::new(100_000u64);
    bencher
        .with_inputs(|| {
            let i = next.get();
            next.set((i + 1) % entries.len());
            entries[i].clone()
        })
        .bench_local_values(|entry| {
            offset.set(offset.get() + 1);
            e.apply(entry, offset.get(), true)
        });
}

/// The shard's whole CPU path for one APPLY_EVENT: decide, serialise the entry for the log,
/// apply, serialise the result.
#[divan::bench]
fn apply_event_full(bencher: Bencher) {
    let mut e = engine_with(1);
    write(&mut e, &pay("o0"), 100);
    let cmd = touch("o0");
    let mut offset = 1_000u64;
    bencher.bench_local(|| {
        offset += 1;
        let Ok(Decision::Write(entry)) = e.decide(&cmd, 1_700_000_000_000) else {
            return 0;
        };
        let log = serde_json::to_vec(&entry).map_or(0, |v| v.len());
        let result = e.apply(entry, offset, true);
        log + result
            .and_then(|r| serde_json::to_vec(&r).ok())
            .map_or(0, |v| v.len())
    });
}

/// One APPLY_EVENT op per id, `event` with `payload`, borrowed as the shard borrows its ops.
fn event_ops<'a>(ids: &'a [String], event: &'a str, payload: &'a JsonText) -> Vec<BatchOp<'a>> {
    (ids.iter())
        .map(|id| {
            BatchOp::Event(EventCommand {
                instance_id: id.as_str().into(),
                event: event.into(),
                payload: Some(payload.as_str().into()),
                expected_state: None,
                expected_wal_offset: None,
                idempotency_key: None,
            })
        })
        .collect()
}

/// An atomic batch of 10 APPLY_EVENTs on 10 of 10,000 instances, decided (scratch view,
/// prefetch, the batch record encoded), as the shard does before logging it; nothing applied.
#[divan::bench]
fn batch_decide(bencher: Bencher) {
    let mut e = engine_with(10_000);
    for i in 0..10_000 {
        write(&mut e, &pay(&format!("o{i}")), 20_000 + i);
    }
    let payload = JsonText::from_map(&obj(json!({"note": "x".repeat(64)})));
    let ids: Vec<String> = (0..10_000)
        .map(|i| format!("o{}", (i * 7919) % 10_000))
        .collect();
    let mut next = 0usize;
    bencher.bench_local(|| {
        let ops = event_ops(&ids[next..next + 10], "touch", &payload);
        next = (next + 10) % (ids.len() - 10);
        e.decide_batch(black_box(&ops), 1_700_000_000_000, 100_000)
            .map_or(0, |d| d.record.len())
    });
}

/// The shard's whole CPU path for an atomic batch of 10 APPLY_EVENTs (smdb-bench's `batch`
/// workload: payload `{"p":"x" * 64}`, one hash tag per group of 10 among 10,000 instances):
/// decide into the batch record (kept between batches, as the shard keeps it), read the
/// record back entry by entry and apply each, its result written into the reply's bytes. No
/// log I/O. `self_loop`: smdb-bench's event, which stays in its state; `toggle`: every event
/// changes state (a transition: the transition and per-state counters move too).
#[divan::bench(args = ["self_loop", "toggle"])]
fn batch_full(bencher: Bencher, shape: &str) {
    let mut e = Engine::new();
    let def = match shape {
        "toggle" => json!({"states": ["on", "off"], "initial": "on", "transitions": [
            {"from": "on", "event": "inc", "to": "off"},
            {"from": "off", "event": "inc", "to": "on"}]}),
        _ => json!({"states": ["on"], "initial": "on",
            "transitions": [{"from": "on", "event": "inc", "to": "on"}]}),
    };
    let put = Command::PutMachine {
        machine: "counter".into(),
        version: 1,
        definition: def,
    };
    write(&mut e, &put, 1);
    let ids: Vec<String> = (0..10_000)
        .map(|i| format!("{{b1a2b3c4-{}}}:{}", i / 10, i % 10))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let create = Command::CreateInstance {
            id: id.clone(),
            machine: "counter".into(),
            version: 1,
            context: obj(json!({"p": "x".repeat(64)})),
            idempotency_key: None,
        };
        write(&mut e, &create, i as u64 + 2);
    }
    let payload = JsonText::from_map(&obj(json!({"p": "x".repeat(64)})));
    let mut group = 0usize;
    let mut offset = 100_000u64;
    let mut reply = Vec::with_capacity(4096);
    let mut kept = BatchRecord::default();
    let mut record = Vec::new();
    bencher.bench_local(|| {
        let ops = event_ops(&ids[group * 10..group * 10 + 10], "inc", &payload);
        group = (group * 7919 + 13) % 1000;
        offset += 1;
        let scratch = std::mem::take(&mut kept);
        let decided = (e.decide_batch_into(black_box(&ops), 1_700_000_000_000, offset, scratch))
            .unwrap_or_else(|abort| panic!("batch refused: {abort:?}"));
        record.clear();
        decided.record.finish_into(&mut record);
        kept = decided.record;
        reply.clear();
        for entry in batch_records(&record).into_iter().flatten() {
            if let Record::Event(ev) = entry {
                assert!(e.apply_event_into(ev, offset, &mut reply), "not applied");
            }
        }
        assert!(reply.len() > 1000, "reply {}", reply.len());
        reply.len()
    });
}

/// CREATE_INSTANCE decide + apply with a new id each time.
#[divan::bench]
fn create_instance(bencher: Bencher) {
    let mut e = engine_with(0);
    let mut n = 0u64;
    bencher.bench_local(|| {
        n += 1;
        let cmd = Command::CreateInstance {
            id: format!("new-{n}"),
            machine: "order".into(),
            version: 1,
            context: obj(json!({"total": 30})),
            idempotency_key: None,
        };
        match e.decide(&cmd, 1_700_000_000_000) {
            Ok(Decision::Write(entry)) => e.apply(entry, n + 10, true).is_some(),
            _ => false,
        }
    });
}

/// Log entry encoding (binary entry format 2), done once per write before the WAL append.
#[divan::bench]
fn entry_encode(bencher: Bencher) {
    let e = engine_with(1);
    let Ok(Decision::Write(entry)) = e.decide(&pay("o0"), 1_700_000_000_000) else {
        panic!("pay refused");
    };
    let mut out = Vec::with_capacity(256);
    bencher.bench_local(|| {
        out.clear();
        black_box(&entry).encode(&mut out);
        out.len()
    });
}

/// Decoding one logged APPLY_EVENT (recovery and replication read every record this way),
/// shaped like smdb-bench's: a 12-byte id and a 64-byte string in the payload.
#[divan::bench]
fn record_decode(bencher: Bencher) {
    let entry = Entry::Apply {
        instance_id: "b1a2b3c4-777".into(),
        event: "touch".into(),
        from: "live".into(),
        to: "live".into(),
        payload: Some(JsonText::from_map(&obj(json!({"p": "x".repeat(64)})))),
        idempotency_key: None,
        at_ms: 1_700_000_000_000,
        machine: Some("smdb_bench".into()),
        version: Some(1),
        timer: false,
    };
    let bytes = entry.to_bytes();
    bencher.bench(|| match Record::decode(black_box(&bytes)) {
        Ok(Record::Event(ev)) => ev.payload.map_or(0, str::len),
        _ => 0,
    });
}

/// GET_INSTANCE's result: lookup and JSON of one instance (of 10,000).
#[divan::bench]
fn get_instance_json(bencher: Bencher) {
    let e = engine_with(10_000);
    bencher.bench(|| {
        e.instance_json(black_box("o4242"))
            .and_then(|v| serde_json::to_vec(&v).ok())
            .map_or(0, |v| v.len())
    });
}

/// The shard's pause for a snapshot (`Engine::snapshot`, the state serialised while the shard
/// serves nothing): 1,000 instances with a full history of 1,000 events each, the state an
/// `smdb-bench --workload apply --instances 1000` run reaches at the first snapshot (1M
/// entries).
#[divan::bench(sample_count = 5, sample_size = 1)]
fn snapshot_1m_history(bencher: Bencher) {
    let mut e = engine_with(1_000);
    let ids: Vec<String> = (0..1_000).map(|i| format!("o{i}")).collect();
    let mut offset = 10_000u64;
    for id in &ids {
        offset += 1;
        write(&mut e, &pay(id), offset);
    }
    for _ in 0..1_000 {
        for id in &ids {
            offset += 1;
            write(&mut e, &touch(id), offset);
        }
    }
    bencher.bench_local(|| e.snapshot().len());
}

/// 1M instances shaped like `smdb-bench --workload apply` leaves them before a snapshot: each
/// created, paid, then touched twice in rounds over all instances (so each history ring grew
/// while every other instance's did: the heap is interleaved as on a live shard).
fn engine_1m_history() -> Engine {
    const N: usize = 1_000_000;
    let mut e = engine_with(N);
    let mut offset = N as u64 + 10;
    for round in 0..3 {
        for i in 0..N {
            offset += 1;
            let id = format!("o{i}");
            let cmd = if round == 0 { pay(&id) } else { touch(&id) };
            write(&mut e, &cmd, offset);
        }
    }
    e
}

/// A whole snapshot walk of `engine_1m_history` (the shard's CPU for one snapshot, without the
/// disk): `snapshot_begin`, then slices of 4,096 instances taken into one buffer.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn snapshot_walk_1m(bencher: Bencher) {
    let mut e = engine_1m_history();
    let mut out = Vec::with_capacity(1 << 20);
    let mut total = 0usize;
    let budget = shards::engine::SliceBudget {
        records: 4096,
        bytes: 1 << 20,
    };
    bencher.bench_local(|| {
        let walk = e.snapshot_begin(u64::MAX - 1, usize::MAX);
        loop {
            let progress = e.snapshot_step(walk, budget, usize::MAX);
            e.snapshot_take(walk, &mut out);
            total += out.len();
            out.clear();
            if progress != shards::engine::WalkProgress::Walking {
                break;
            }
        }
        e.snapshot_end();
        total
    });
}

/// Loading `engine_1m_history`'s snapshot payload (the restart's first half, without the disk):
/// fed in 1 MiB chunks as recovery reads them.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn snapshot_load_1m(bencher: Bencher) {
    let mut e = engine_1m_history();
    let walk = e.snapshot_begin(u64::MAX - 1, usize::MAX);
    let budget = shards::engine::SliceBudget {
        records: usize::MAX,
        bytes: usize::MAX,
    };
    while e.snapshot_step(walk, budget, usize::MAX) == shards::engine::WalkProgress::Walking {}
    let mut payload = Vec::new();
    e.snapshot_take(walk, &mut payload);
    e.snapshot_end();
    drop(e);
    bencher.bench_local(|| {
        let Ok(mut loader) =
            shards::engine::SnapshotLoader::new(SNAPSHOT_FORMAT, payload.len() as u64)
        else {
            panic!("loader refused the format");
        };
        for chunk in payload.chunks(1 << 20) {
            if let Err(err) = loader.feed(chunk) {
                panic!("snapshot does not load: {err}");
            }
        }
        loader.finish().ok()
    });
}

/// Instances at which a table of 2^22 buckets is full (hashbrown keeps 1/8 of its buckets free).
const FULL_AT_2_22: usize = (1 << 22) / 8 * 7;

/// The one CREATE_INSTANCE that finds the instance table full (3,670,016 instances, 2^22
/// buckets): what the request that grows the table costs the shard. Before issue 36's
/// incremental growth this insert rehashed every entry at once; now it starts a new table and
/// moves a few entries.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn create_that_grows_the_table(bencher: Bencher) {
    let create = Command::CreateInstance {
        id: "grows".into(),
        machine: "order".into(),
        version: 1,
        context: obj(json!({"total": 30})),
        idempotency_key: None,
    };
    bencher
        .with_inputs(|| engine_with(FULL_AT_2_22))
        .bench_local_values(|mut e| {
            write(&mut e, &create, FULL_AT_2_22 as u64 + 2);
            e
        });
}
