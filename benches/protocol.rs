//! Micro benches of the front's per-frame work and the shard's params parsing (divan):
//! frame encode/decode (CRC32C included), request envelope parse, response encode, APPLY_EVENT
//! params parse, and the load generator's own request builder (so its cost per op is known).
//!
//! `cargo bench --bench protocol`; results and method in benches/RESULTS.md.

use divan::counter::BytesCount;
use divan::{black_box, Bencher};
use shards::{ErrorCode, Rejection};
use smdb::protocol::frame::{decode_frame, encode_frame, FRAME_PAYLOAD_BYTES_DEFAULT};
use smdb::protocol::{encode_error, encode_ok, parse_request};
use smdb_bench::workload::{Mix, OpKind, Plan, RequestWriter};

fn main() {
    divan::main();
}

/// A typical APPLY_EVENT request payload (~150 B, like docs/glommio.md §5's prototype load).
const APPLY_REQUEST: &str = r#"{"type":"request","id":12345,"op":"APPLY_EVENT","params":{"instance_id":"order-000123","event":"pay","payload":{"amount":30,"note":"xxxxxxxxxxxxxxxxxxxx"}}}"#;

/// A typical APPLY_EVENT result (~200 B).
const APPLY_RESULT: &str = r#"{"instance_id":"order-000123","from_state":"new","to_state":"paid","context":{"total":30,"amount":30,"note":"xxxxxxxxxxxxxxxxxxxx"},"wal_offset":987654,"applied":true}"#;

fn payload(len: usize) -> Vec<u8> {
    let mut p = APPLY_REQUEST.as_bytes().to_vec();
    p.resize(len, b' ');
    p
}

#[divan::bench(args = [150, 4096])]
fn frame_encode(bencher: Bencher, len: usize) {
    let p = payload(len);
    let mut out = Vec::with_capacity(len + 16);
    bencher.counter(BytesCount::new(len)).bench_local(|| {
        out.clear();
        encode_frame(black_box(&p), &mut out);
        black_box(out.len())
    });
}

#[divan::bench(args = [150, 4096])]
fn frame_decode(bencher: Bencher, len: usize) {
    let mut frame = Vec::new();
    encode_frame(&payload(len), &mut frame);
    bencher.counter(BytesCount::new(len)).bench(|| {
        decode_frame(black_box(&frame), FRAME_PAYLOAD_BYTES_DEFAULT)
            .ok()
            .flatten()
    });
}

#[divan::bench]
fn request_parse(bencher: Bencher) {
    let p = APPLY_REQUEST.as_bytes();
    bencher.bench(|| parse_request(black_box(p)).map(|r| r.op.len()).ok());
}

/// The raw params of `APPLY_REQUEST`.
fn apply_params() -> Option<Vec<u8>> {
    let req = parse_request(APPLY_REQUEST.as_bytes()).ok();
    req.and_then(|r| r.params)
        .map(|p| p.get().as_bytes().to_vec())
}

/// The front's routing read of the typical APPLY_EVENT params (every routed request pays it).
#[divan::bench]
fn route_key(bencher: Bencher) {
    let params = apply_params();
    bencher.bench(|| smdb::ops::route::route_key(black_box(params.as_deref())).is_ok());
}

/// A BATCH of 10 APPLY_EVENTs on one hash tag, as `smdb-bench --workload batch` sends it.
fn batch_request() -> String {
    let ops: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"op":"APPLY_EVENT","params":{{"instance_id":"{{b7-42}}:{i}","event":"inc","payload":{{"p":"{}"}}}}}}"#,
                "x".repeat(64)
            )
        })
        .collect();
    format!(
        r#"{{"type":"request","id":77,"op":"BATCH","params":{{"mode":"atomic","ops":[{}]}}}}"#,
        ops.join(",")
    )
}

/// The front's own parsing of an atomic BATCH of 10: the envelope, the op list, and each op's
/// routing id (what it needs to pick the shard; the shard parses each op's params).
#[divan::bench]
fn batch_front_parse(bencher: Bencher) {
    let text = batch_request();
    bencher.bench(|| {
        let req = parse_request(black_box(text.as_bytes())).ok()?;
        let params = req.params.map(|p| p.get().as_bytes());
        let batch = smdb::ops::batch::parse_batch(params).ok()?;
        let mut n = 0;
        for item in batch.ops.iter() {
            n += batch.ops.route_key(item).ok()?.len();
        }
        Some(n)
    });
}

/// The shard's read of the typical APPLY_EVENT params into the command it decides on
/// (borrowed where the params allow).
#[divan::bench]
fn apply_event_params(bencher: Bencher) {
    let params = apply_params();
    bencher.bench(|| smdb::ops::events::apply_event_params(black_box(params.as_deref())).is_ok());
}

/// The owned read (`apply_command`): what params that cannot be borrowed cost.
#[divan::bench]
fn apply_params_parse(bencher: Bencher) {
    let params = apply_params();
    bencher.bench(|| smdb::ops::events::apply_command(black_box(params.as_deref())).is_ok());
}

#[divan::bench]
fn response_encode_ok(bencher: Bencher) {
    let mut out = Vec::with_capacity(512);
    bencher.bench_local(|| {
        out.clear();
        encode_ok(
            &mut out,
            black_box("12345"),
            black_box(APPLY_RESULT.as_bytes()),
        );
        black_box(out.len())
    });
}

#[divan::bench]
fn response_encode_error(bencher: Bencher) {
    let rej = Rejection::new(ErrorCode::GuardFailed, "guard of transition pay failed")
        .with("event", "pay");
    let mut out = Vec::with_capacity(512);
    bencher.bench_local(|| {
        out.clear();
        encode_error(&mut out, Some("12345"), black_box(&rej));
        black_box(out.len())
    });
}

/// What smdb-bench spends building one request frame.
#[divan::bench(args = ["get", "apply", "create"])]
fn bench_request_build(bencher: Bencher, op: &str) {
    let kind = match op {
        "get" => OpKind::Get,
        "apply" => OpKind::Apply,
        _ => OpKind::Create,
    };
    let plan = Plan::new(Mix::only(kind), 10_000, 64, "0badcafe");
    let mut w = RequestWriter::new(1, 0);
    let mut out = Vec::with_capacity(512);
    let mut id = 0u64;
    bencher.bench_local(|| {
        out.clear();
        id += 1;
        w.write(&plan, id, &mut out);
        black_box(out.len())
    });
}
