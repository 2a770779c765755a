//! BATCH params (docs/protocol.md, "Instances and events"): `{mode, ops:[{op, params}]}`, parsed once, on the front, into a
//! typed list (`parse_batch`); the shard turns each op's params into an engine op
//! (`engine_op`) exactly as it would for the op sent alone.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use shards::engine::BatchOp;
use shards::{ErrorCode, Rejection};

use super::events::{self, EventSpans};
use super::instances;
use super::route::route_key;
use super::scan::Scanner;
use crate::protocol::{routes, Op, Routed};

/// Most ops in one BATCH. A larger batch is `BAD_REQUEST` (nothing runs). The frame size
/// limit bounds the bytes; this bounds the work one request holds a shard for.
pub const BATCH_OPS_MAX: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// All or nothing, on one shard, in one log record.
    Atomic,
    /// Each op on its own shard, on its own; results in request order.
    BestEffort,
}

/// One op of a batch: what it would be if sent alone. Every batchable op is an instance op
/// (the op table's test), so the item holds it as one.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchItem {
    pub op: routes::Instance,
    /// Where the op's raw `params` JSON is in `BatchOps::text` (None when absent or null).
    params: Option<Range<usize>>,
    /// An APPLY_EVENT of an atomic batch with the usual params: where its members are in the
    /// params, found by the front's one scan of them (`EventSpans`).
    event: Option<EventSpans>,
}

/// A batch's ops with their params, all in one buffer (one allocation per batch, not one per
/// op, and one free on the shard that runs it).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOps {
    text: Vec<u8>,
    items: Vec<BatchItem>,
}

impl BatchOps {
    pub fn iter(&self) -> std::slice::Iter<'_, BatchItem> {
        self.items.iter()
    }

    /// The raw `params` JSON of `item` (one of `items()`).
    pub fn params(&self, item: &BatchItem) -> Option<&[u8]> {
        item.params.clone().and_then(|range| self.text.get(range))
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// The id `item` routes by (`route_key` of its params), taken from its spans when the
    /// front scanned them.
    pub fn route_key(&self, item: &BatchItem) -> Result<Cow<'_, str>, Rejection> {
        let params = self.params(item);
        let scanned = (item.event.as_ref())
            .zip(params)
            .and_then(|(e, p)| e.instance_id(p));
        match scanned {
            Some(id) => Ok(Cow::Borrowed(id)),
            None => route_key(params),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    pub mode: BatchMode,
    pub ops: BatchOps,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchParams<'a> {
    #[serde(borrow)]
    mode: Cow<'a, str>,
    #[serde(borrow)]
    ops: Vec<OpParams<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpParams<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// The op a batch may hold by this name: the op table's `batch` fact, as its instance op.
pub fn batchable(name: &str) -> Option<routes::Instance> {
    match Op::parse(name)?.route() {
        Routed::Instance(op) if op.op().facts().batch => Some(op),
        _ => None,
    }
}

/// Parses BATCH params into the mode and the typed op list: the one place that knows which
/// ops a request runs (a per-op check, e.g. authorization, belongs right after this). Each
/// op's params are kept as their raw text, parsed on the shard. `raw` is valid JSON (the
/// envelope parse checked it), so the usual batch is read by a byte scan; serde reads the rest.
/// Errors are `BAD_REQUEST` for the whole request: a bad mode, no ops, more than
/// `BATCH_OPS_MAX`, or an op that cannot be batched (details name its `index` and `op`).
pub fn parse_batch(raw: Option<&[u8]>) -> Result<BatchRequest, Rejection> {
    let raw = raw.unwrap_or(b"{}");
    let (mode, mut read) = match scan_batch(raw) {
        Some(scanned) => scanned,
        None => serde_batch(raw)?,
    };
    let mode = match &*mode {
        "atomic" => BatchMode::Atomic,
        "best_effort" => BatchMode::BestEffort,
        other => {
            return Err(bad(format!(
                "mode must be \"atomic\" or \"best_effort\", not {other:?}"
            )))
        }
    };
    if read.count == 0 {
        return Err(bad("ops must not be empty".into()));
    }
    if read.count > BATCH_OPS_MAX {
        return Err(
            bad(format!("a batch holds at most {BATCH_OPS_MAX} ops")).with("limit", BATCH_OPS_MAX)
        );
    }
    if let Some((index, name)) = read.unbatchable {
        return Err(bad(format!(
            "op {name:?} cannot be batched (CREATE_INSTANCE, APPLY_EVENT, DELETE_INSTANCE, \
             GET_INSTANCE can)"
        ))
        .with("index", index)
        .with("op", &*name));
    }
    for item in &mut read.items {
        // An atomic batch's ops are all routed on the front: an APPLY_EVENT's spans, found in
        // the batch's one scan, also give its shard the command (best-effort ops go out as if
        // sent alone). Params the scan did not reach (serde's reading) are scanned here.
        item.event = match (mode, item.op) {
            (BatchMode::Atomic, routes::Instance::ApplyEvent) => item.event.take().or_else(|| {
                let r = item.params.clone()?;
                EventSpans::scan(raw.get(r)?)
            }),
            _ => None,
        };
    }
    let ops = BatchOps {
        text: raw.to_vec(),
        items: read.items,
    };
    Ok(BatchRequest { mode, ops })
}

/// The ops as both readings below give them: each op whose name is a batchable op, as its
/// `BatchItem` (with spans from the scan only; serde's reading gives none), how many ops there
/// were, and the first op whose name is not batchable (its index and name). The items are
/// built as the ops are read, straight into the list the request keeps.
#[derive(Debug, Default, PartialEq)]
struct ReadOps<'a> {
    items: Vec<BatchItem>,
    count: usize,
    unbatchable: Option<(usize, Cow<'a, str>)>,
}

impl<'a> ReadOps<'a> {
    fn with_capacity(ops: usize) -> Self {
        ReadOps {
            items: Vec::with_capacity(ops),
            ..ReadOps::default()
        }
    }

    /// The next op: its name, where its params are in the batch (None when absent or null)
    /// and its spans.
    fn push(
        &mut self,
        name: Cow<'a, str>,
        params: Option<Range<usize>>,
        event: Option<EventSpans>,
    ) {
        match batchable(&name) {
            Some(op) => self.items.push(BatchItem { op, params, event }),
            None => {
                self.unbatchable.get_or_insert((self.count, name));
            }
        }
        self.count += 1;
    }
}

/// The mode and the ops, as both readings below give them.
type ReadBatch<'a> = (Cow<'a, str>, ReadOps<'a>);

/// Ops to reserve room for, from the params' length (a usual op is over 100 bytes).
fn ops_hint(raw: &[u8]) -> usize {
    (raw.len() / 96 + 1).min(BATCH_OPS_MAX + 1)
}

/// The usual batch read by a byte scan (`scan`): `mode` and `ops` once each, every op an
/// object of `op` (escape-free) and optional `params`, nothing else. None for anything else;
/// `serde_batch` then gives the same reading or the error.
fn scan_batch(raw: &[u8]) -> Option<ReadBatch<'_>> {
    let mut s = Scanner::new(raw);
    let (mut mode, mut ops) = (None, None);
    s.object(|key, s| match key {
        b"mode" if mode.is_none() => {
            mode = Some(s.plain_string()?);
            Some(())
        }
        b"ops" if ops.is_none() => {
            let mut read = ReadOps::with_capacity(ops_hint(raw));
            s.array(|s| scan_op(s, &mut read))?;
            ops = Some(read);
            Some(())
        }
        _ => None,
    })?;
    if !s.at_end() {
        return None;
    }
    let mode = shards::engine::utf8(mode?).ok()?;
    Some((Cow::Borrowed(mode), ops?))
}

/// One op of `scan_batch`, read into `read`: its name, its params' range in the scanned text
/// and, for the usual APPLY_EVENT params, their spans, read in the same pass.
fn scan_op<'a>(s: &mut Scanner<'a>, read: &mut ReadOps<'a>) -> Option<()> {
    let (mut op, mut params, mut spans) = (None, None, None);
    s.object(|key, s| match key {
        b"op" if op.is_none() => {
            op = Some(s.plain_string()?);
            Some(())
        }
        b"params" if params.is_none() => {
            let start = s.pos();
            if op == Some(b"APPLY_EVENT".as_slice()) {
                spans = event_spans(s);
            }
            if spans.is_none() {
                s.skip_value()?;
            }
            params = Some(start..s.pos());
            Some(())
        }
        _ => None,
    })?;
    let op = shards::engine::utf8(op?).ok()?;
    let params = params.filter(|r| s.text(r.clone()) != b"null");
    read.push(Cow::Borrowed(op), params, spans);
    Some(())
}

/// Usual APPLY_EVENT params at the scanner's position (`events::scan_event`): steps over them
/// and gives their spans, relative to the params' own text; else leaves `s` where it was.
fn event_spans(s: &mut Scanner<'_>) -> Option<EventSpans> {
    let start = s.pos();
    let mut ahead = *s;
    let cmd = events::scan_event(&mut ahead)?;
    let spans = EventSpans::of(&cmd, s.text(start..ahead.pos()))?;
    *s = ahead;
    Some(spans)
}

/// The batch read by serde: the same as `scan_batch` where that answers, and the error
/// (`BAD_REQUEST`, naming the field) where the params do not have the batch's shape.
fn serde_batch(raw: &[u8]) -> Result<ReadBatch<'_>, Rejection> {
    let p: BatchParams<'_> =
        serde_json::from_slice(raw).map_err(|e| bad(format!("invalid params: {e}")))?;
    let mut read = ReadOps::with_capacity(p.ops.len());
    for item in p.ops {
        let params = (item.params)
            .map(RawValue::get)
            .filter(|text| *text != "null")
            .map(|text| {
                // A borrowed RawValue is a slice of `raw` itself.
                let start = text.as_ptr() as usize - raw.as_ptr() as usize;
                start..start + text.len()
            });
        read.push(item.op, params, None);
    }
    Ok((p.mode, read))
}

/// The engine op for one batched op, parsed as the op alone would be (same errors).
pub fn engine_op<'o>(ops: &'o BatchOps, item: &BatchItem) -> Result<BatchOp<'o>, Rejection> {
    let params = ops.params(item);
    use routes::Instance as I;
    match item.op {
        I::CreateInstance => instances::create_command(params).map(BatchOp::Write),
        I::ApplyEvent => match (item.event.as_ref())
            .zip(params)
            .and_then(|(e, p)| e.command(p))
        {
            Some(cmd) => Ok(BatchOp::Event(cmd)),
            None => events::apply_event_params(params).map(BatchOp::Event),
        },
        I::DeleteInstance => instances::delete_command(params).map(BatchOp::Write),
        I::GetInstance => instances::id_param(params).map(|id| BatchOp::Get { id }),
        // Refused by `batchable` when the batch was parsed.
        I::GetHistory => Err(bad("op GET_HISTORY cannot be batched".into())),
    }
}

/// `BATCH_ABORTED`: op `index` failed with `error`; nothing was applied.
pub fn aborted(index: usize, error: &Rejection) -> Rejection {
    Rejection::new(
        ErrorCode::BatchAborted,
        format!(
            "op {index} failed ({}): {}",
            error.code.as_str(),
            error.message
        ),
    )
    .with("index", index)
    .with("error", error_object(error))
}

/// An error as it appears in a response's `error` member.
pub fn error_object(error: &Rejection) -> Value {
    json!({
        "code": error.code.as_str(),
        "message": error.message,
        "retryable": error.code.retryable(),
        "details": Value::Object(error.details.clone()),
    })
}

fn bad(message: String) -> Rejection {
    Rejection::new(ErrorCode::BadRequest, message)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parsed(v: serde_json::Value) -> Result<BatchRequest, Rejection> {
        parse_batch(Some(v.to_string().as_bytes()))
    }

    #[test]
    fn parses_mode_and_ops_in_order() {
        let b = parsed(json!({"mode": "atomic", "ops": [
            {"op": "CREATE_INSTANCE", "params": {"id": "a"}},
            {"op": "GET_INSTANCE", "params": null},
            {"op": "DELETE_INSTANCE"},
        ]}))
        .unwrap();
        assert_eq!(b.mode, BatchMode::Atomic);
        let ops: Vec<Op> = b.ops.iter().map(|i| i.op.op()).collect();
        assert_eq!(
            ops,
            [Op::CreateInstance, Op::GetInstance, Op::DeleteInstance]
        );
        let items: Vec<&BatchItem> = b.ops.iter().collect();
        assert_eq!(b.ops.params(items[0]), Some(&br#"{"id":"a"}"#[..]));
        assert_eq!(b.ops.params(items[1]), None);
        assert_eq!(b.ops.params(items[2]), None);
    }

    /// An op's params that are not an object get the `BAD_REQUEST` they get alone, from its
    /// routing and from its parse alike. serde reads an array into a struct by position, so
    /// `["x","go"]` once routed by `go` (as `{id, instance_id}`) and applied `go` to `x`.
    #[test]
    fn an_op_whose_params_are_not_an_object_is_refused_as_alone() {
        for mode in ["atomic", "best_effort"] {
            let b = parsed(json!({"mode": mode, "ops": [
                {"op": "APPLY_EVENT", "params": ["x", "go"]},
                {"op": "GET_INSTANCE", "params": ["x"]},
                {"op": "CREATE_INSTANCE", "params": "x"},
            ]}))
            .unwrap();
            for item in b.ops.iter() {
                let route = b.ops.route_key(item).unwrap_err();
                let op = engine_op(&b.ops, item).unwrap_err();
                assert_eq!(
                    (route.code, op.code),
                    (ErrorCode::BadRequest, ErrorCode::BadRequest)
                );
                assert_eq!(op.message, "field `params` must be an object");
                let alone = route_key(b.ops.params(item)).unwrap_err();
                assert_eq!(alone.message, route.message);
            }
        }
    }

    #[test]
    fn bad_batches_are_bad_requests() {
        let code = |v| parsed(v).unwrap_err();
        let e = code(json!({"mode": "all", "ops": [{"op": "GET_INSTANCE"}]}));
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(code(json!({"mode": "atomic", "ops": []}))
            .message
            .contains("empty"));
        let e = code(json!({"mode": "atomic", "ops": [{"op": "GET_INSTANCE"}, {"op": "PING"}]}));
        assert_eq!(e.details["index"], 1);
        assert_eq!(e.details["op"], "PING");
        let e = code(json!({"mode": "atomic", "ops": [{"op": "GET_INSTANCE", "x": 1}]}));
        assert!(e.message.contains("unknown field"), "{}", e.message);
        let many: Vec<_> = (0..=BATCH_OPS_MAX)
            .map(|_| json!({"op": "GET_INSTANCE"}))
            .collect();
        let e = code(json!({"mode": "best_effort", "ops": many}));
        assert_eq!(e.details["limit"], BATCH_OPS_MAX);
    }

    /// The reading without the scan's spans, which serde's reading never has.
    fn without_spans(mut b: ReadBatch<'_>) -> ReadBatch<'_> {
        for item in &mut b.1.items {
            item.event = None;
        }
        b
    }

    /// Spans the scan found are those `EventSpans::scan` finds in the op's params alone, and
    /// only an APPLY_EVENT has them.
    fn assert_spans_are_the_params_own(raw: &[u8], b: &ReadBatch<'_>) {
        for item in &b.1.items {
            if let Some(spans) = &item.event {
                assert_eq!(item.op, routes::Instance::ApplyEvent);
                let text = &raw[item.params.clone().expect("spans come with params")];
                assert_eq!(Some(spans), EventSpans::scan(text).as_ref());
            }
        }
    }

    #[test]
    fn the_usual_batch_takes_the_scan_and_reads_as_serde_does() {
        let usual = [
            &br#"{"mode":"atomic","ops":[{"op":"APPLY_EVENT","params":{"instance_id":"{t}:1","event":"go","payload":{"p":"}]\"x"}}},{"op":"GET_INSTANCE","params":null},{"op":"DELETE_INSTANCE"}]}"#[..],
            br#" { "ops" : [ { "params" : { "id" : "a" } , "op" : "CREATE_INSTANCE" } ] , "mode" : "best_effort" } "#,
            br#"{"mode":"atomic","ops":[]}"#,
        ];
        for raw in usual {
            let scanned = scan_batch(raw).expect("the usual batch is scanned");
            assert_spans_are_the_params_own(raw, &scanned);
            assert_eq!(
                without_spans(scanned),
                serde_batch(raw).unwrap(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        let unusual = [
            &br#"{"mode":"atomic","ops":[{"op":"GET_INSTANCE"}],"x":1}"#[..],
            br#"{"mode":"atomic","mode":"atomic","ops":[]}"#,
            br#"{"mode":"atomic","ops":["GET_INSTANCE"]}"#,
            br#"{"mode":"atomic","ops":[{"op":"GET_INSTANCE","params":{},"params":{}}]}"#,
            br#"{"mode":"at\u006fmic","ops":[]}"#,
            br#"{"ops":[]}"#,
            br#"[]"#,
        ];
        for raw in unusual {
            assert_eq!(scan_batch(raw), None, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn an_atomic_batch_keeps_its_apply_spans_and_its_ops_read_as_alone() {
        let raw = br#"{"mode":"atomic","ops":[{"op":"APPLY_EVENT","params":{"instance_id":"{t}:1","event":"go","payload":{"p":"x"}}},{"op":"APPLY_EVENT","params":{"instance_id":"{t}:2","event":"go","payload":{"b": 1}}},{"op":"CREATE_INSTANCE","params":{"id":"{t}:3"}}]}"#;
        let b = parse_batch(Some(raw)).unwrap();
        let items: Vec<&BatchItem> = b.ops.iter().collect();
        // The usual params are scanned once, on the front, in the batch's one pass; a payload
        // that is not compact is not.
        let (_, scanned) = scan_batch(raw).unwrap();
        assert_eq!(scanned.items[0].event.as_ref(), items[0].event.as_ref());
        assert!(items[0].event.is_some());
        assert!(items[1].event.is_none());
        assert!(items[2].event.is_none());
        for item in &items {
            let params = b.ops.params(item);
            let alone = crate::ops::route::route_key(params).unwrap();
            assert_eq!(b.ops.route_key(item).unwrap(), alone);
        }
        for item in &items[..2] {
            let Ok(BatchOp::Event(got)) = engine_op(&b.ops, item) else {
                panic!("an APPLY_EVENT op");
            };
            let want = events::apply_event_params(b.ops.params(item)).unwrap();
            assert_eq!(got.into_owned(), want.into_owned());
        }
        // A best-effort batch's ops go out as if sent alone: no spans kept.
        let best_effort = String::from_utf8(raw.to_vec())
            .unwrap()
            .replace("atomic", "best_effort");
        let best = parse_batch(Some(best_effort.as_bytes())).unwrap();
        assert!(best.ops.iter().all(|item| item.event.is_none()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// An APPLY_EVENT op's params read in the batch's one pass: spans exactly where the
        /// params alone have them (`EventSpans::scan`), and the params' range either way.
        #[test]
        fn one_pass_spans_are_the_params_alone(params in crate::ops::scan::arb::apply_text()) {
            let raw = format!(r#"{{"mode":"atomic","ops":[{{"op":"APPLY_EVENT","params":{params}}}]}}"#);
            proptest::prop_assume!(serde_json::from_str::<serde_json::Value>(&raw).is_ok());
            let (_, ops) = scan_batch(raw.as_bytes()).expect("the batch is scanned");
            let (range, spans) = (&ops.items[0].params, &ops.items[0].event);
            let range = range.clone().expect("params are not null here");
            proptest::prop_assert_eq!(&raw[range.clone()], params.as_str());
            let alone = EventSpans::scan(params.as_bytes());
            proptest::prop_assert_eq!(spans, &alone);
        }
    }

    proptest::proptest! {
        #[test]
        fn the_batch_scan_agrees_with_serde_on_random_batches(text in crate::ops::scan::arb::batch_text()) {
            let raw = text.as_bytes();
            // The scan reads params the envelope parse already checked.
            proptest::prop_assume!(serde_json::from_slice::<serde_json::Value>(raw).is_ok());
            if let Some(scanned) = scan_batch(raw) {
                assert_spans_are_the_params_own(raw, &scanned);
                proptest::prop_assert_eq!(Ok(without_spans(scanned)), serde_batch(raw).map_err(|e| e.message), "{}", text);
            }
        }
    }

    /// The property above is not vacuous: the random texts take both readings.
    #[test]
    fn random_texts_reach_the_scan_and_serde_both() {
        let arb = crate::ops::scan::arb::batch_text();
        crate::ops::scan::arb::assert_both_readings(arb, |raw| scan_batch(raw).is_some());
    }

    /// Nor is its check of the spans: some random scanned ops have them (fewer than one in
    /// ten batches: every member of the APPLY_EVENT's random params must be a usual one).
    #[test]
    fn random_texts_reach_ops_with_spans() {
        use proptest::strategy::{Strategy, ValueTree};
        let arb = crate::ops::scan::arb::batch_text();
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let with_spans = (0..2000)
            .filter(|_| {
                let text = arb.new_tree(&mut runner).unwrap().current();
                let scanned = scan_batch(text.as_bytes());
                scanned.is_some_and(|(_, ops)| ops.items.iter().any(|op| op.event.is_some()))
            })
            .count();
        assert!(with_spans >= 5, "{with_spans} of 2000 batches had spans");
    }
}
